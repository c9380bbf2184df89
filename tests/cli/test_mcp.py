"""sandtrap mcp through the `mcp` SDK's client: stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from contextlib import asynccontextmanager

import pytest
from conftest import CLI, sandtrap

mcp = pytest.importorskip("mcp", reason="make test-cli installs the mcp SDK in build/cli-venv")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


@asynccontextmanager
async def stdio_session(*args: str):
    params = StdioServerParameters(command=CLI, args=["mcp", *args], env=dict(os.environ))
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        yield s


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def sc(res):
    return res.structured_content or {}


def test_tools_are_listed_and_contained(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")

    async def go():
        async with stdio_session() as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert set(tools) == {"run_shell", "run_python"}
            assert "command" in tools["run_shell"].input_schema["properties"]
            assert "code" in tools["run_python"].input_schema["properties"]

            res = await s.call_tool("run_shell", {"command": "echo hello; echo oops >&2; exit 3"})
            assert res.is_error and sc(res)["exit_code"] == 3
            assert sc(res)["stdout"] == "hello\n" and sc(res)["stderr"] == "oops\n"
            text = res.content[0].text
            assert "exit code: 3" in text and "--- stdout ---\nhello" in text and "--- stderr ---\noops" in text

            # a file outside the policy: the denial comes back, the host's file stays unread
            res = await s.call_tool("run_shell", {"command": f"cat {secret}"})
            assert res.is_error and sc(res)["exit_code"] == 1
            assert "Permission denied" in sc(res)["stderr"] and "host secret" not in res.content[0].text

            # the workspace is writable and the working directory
            res = await s.call_tool("run_shell", {"command": "echo data > f && cat f && pwd"})
            assert not res.is_error and sc(res)["stdout"].startswith("data\n/tmp/sandtrap-mcp-")

            res = await s.call_tool("run_shell", {"command": "cat", "stdin": "from stdin"})
            assert sc(res)["stdout"] == "from stdin"

    run(go())


def test_the_server_survives_a_fork_bomb_and_a_loop():
    async def go():
        async with stdio_session("-t", "5") as s:
            t0 = time.monotonic()
            res = await s.call_tool("run_shell", {"command": "b() { b | b & }; b; sleep 3; echo survived-inside"})
            assert time.monotonic() - t0 < 30
            res = await s.call_tool("run_shell", {"command": "while :; do :; done", "timeout": 1})
            assert res.is_error and sc(res)["timed_out"] is True
            assert sc(res)["error"]["kind"] == "timeout"
            # a call may not lengthen the server's timeout (5 s)
            t0 = time.monotonic()
            res = await s.call_tool("run_shell", {"command": "sleep 20", "timeout": 100})
            assert sc(res)["timed_out"] is True and time.monotonic() - t0 < 15
            res = await s.call_tool("run_shell", {"command": "echo still-serving"})
            assert sc(res)["stdout"] == "still-serving\n"
            res = await s.call_tool("run_python", {"code": "while True: pass", "timeout": 1})
            assert res.is_error and sc(res)["timed_out"] is True
            res = await s.call_tool("run_python", {"code": "print('python-still-serving')"})
            assert sc(res)["stdout"] == "python-still-serving\n"

    run(go())


def test_run_python_in_the_cooperative_sandbox():
    async def go():
        async with stdio_session() as s:
            res = await s.call_tool("run_python", {"code": "x = 6 * 7\nprint(x)"})
            assert not res.is_error and sc(res)["stdout"] == "42\n"
            res = await s.call_tool("run_python", {"code": "print(x + 1)"})  # the namespace persists
            assert sc(res)["stdout"] == "43\n"
            res = await s.call_tool("run_python", {"code": "print(open('/etc/hostname').read())"})
            assert res.is_error and "No such file" in sc(res)["error"]["message"]
            res = await s.call_tool("run_python", {"code": "import subprocess\nsubprocess.run(['id'])"})
            assert res.is_error

    run(go())


def d_port(d):
    return int(d["address"].split()[1].rsplit(":", 1)[1])


def test_meta_narrows_and_never_widens(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)
    port = lst.getsockname()[1]
    connect = f"/usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""

    async def go():
        async with stdio_session("--workspace", str(ws), "--net-allow", f"127.0.0.1:{port}", "-m", "256M") as s:
            res = await s.call_tool("run_shell", {"command": connect})
            assert sc(res)["stdout"] == "connected\n", res.content[0].text
            # another port: refused by the supervisor, the denial in the result and its text
            other = connect.replace(f", {port})", f", {port + 1 if port < 65535 else port - 1})")
            res = await s.call_tool("run_shell", {"command": other})
            assert res.is_error and "PermissionError" in sc(res)["stderr"], res.content[0].text
            denials = sc(res)["denials"]
            assert [d["syscall"] for d in denials] == ["connect"] and d_port(denials[0]) != port, denials
            assert denials[0]["errno"] == "EACCES" and denials[0]["source"] == "supervisor"
            assert "--- denials ---\nconnect tcp 127.0.0.1:" in res.content[0].text, res.content[0].text
            # nothing refused: no denials section
            res = await s.call_tool("run_shell", {"command": "echo quiet"})
            assert "denials" not in res.content[0].text and sc(res)["denials"] == []
            # narrowed: no network for this call
            res = await s.call_tool("run_shell", {"command": connect}, meta={"sandtrap/net_allow": []})
            assert res.is_error and "PermissionError" in sc(res)["stderr"]
            # narrowed: only ws/sub writable; the rest of the workspace is read-only
            meta = {"sandtrap/fs_writable": [str(ws / "sub")]}
            res = await s.call_tool("run_shell", {"command": f"echo a > {ws}/sub/a && echo b > {ws}/b"}, meta=meta)
            assert res.is_error and (ws / "sub" / "a").exists() and not (ws / "b").exists()
            # widening is refused, with the ceiling named
            for meta, what in (
                ({"sandtrap/fs_writable": ["/etc"]}, "not within the server's writable paths"),
                ({"net_allow": ["1.1.1.1:443"]}, "not among the server's rules"),
                ({"max_memory": "1G"}, "more than the server's"),
            ):
                res = await s.call_tool("run_shell", {"command": "echo no"}, meta=meta)
                assert res.is_error and what in res.content[0].text, (meta, res.content[0].text)
            res = await s.call_tool("run_shell", {"command": "echo fine"}, meta={"max_memory": "64M"})
            assert sc(res)["stdout"] == "fine\n"

    try:
        run(go())
    finally:
        lst.close()


def test_streamable_http_on_loopback():
    from mcp.client import streamable_http

    # mcp 2 renamed it streamable_http_client (and yields two streams, not three)
    client = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client

    s0 = socket.socket()
    s0.bind(("127.0.0.1", 0))
    port = s0.getsockname()[1]
    s0.close()
    proc = subprocess.Popen([CLI, "mcp", "--http", f"127.0.0.1:{port}"], stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)

        async def go():
            async with client(f"http://127.0.0.1:{port}/mcp") as streams:
                r, w = streams[0], streams[1]
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    assert {t.name for t in (await s.list_tools()).tools} == {"run_shell", "run_python"}
                    res = await s.call_tool("run_shell", {"command": "echo over-http"})
                    assert sc(res)["stdout"] == "over-http\n"

        run(go())
    finally:
        proc.terminate()
        proc.wait(10)


def test_http_dns_rebinding_and_token():
    """A foreign Host header is refused; with SANDTRAP_MCP_TOKEN, a request without it too."""
    import http.client

    s0 = socket.socket()
    s0.bind(("127.0.0.1", 0))
    port = s0.getsockname()[1]
    s0.close()
    env = dict(os.environ, SANDTRAP_MCP_TOKEN="s3cret")
    proc = subprocess.Popen([CLI, "mcp", "--http", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, env=env)
    body = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def post(extra):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("POST", "/mcp", body=body, headers={**hdrs, **extra})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        assert post({}) == 401
        assert post({"Authorization": "Bearer wrong"}) == 401
        assert post({"Authorization": "Bearer s3cret", "Host": "evil.example:80"}) == 403
        assert post({"Authorization": "Bearer s3cret"}) == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_http_refuses_addresses_other_than_loopback():
    p = sandtrap("mcp", "--http", "0.0.0.0:8765", timeout=10)
    assert p.returncode == 125 and b"want a loopback address" in p.stderr


def test_requests_before_end_of_input_are_answered():
    """`printf REQUESTS | sandtrap mcp`: every request read before EOF gets its reply
    (the SDK ends the session at EOF; the server waits for its replies first)."""
    import json

    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "run_shell", "arguments": {"command": "sleep 0.5; echo batch"}},
    }
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]
    stdin = "".join(json.dumps(m) + "\n" for m in lines).encode()
    for _ in range(3):
        p = sandtrap("mcp", stdin=stdin, timeout=60)
        assert p.returncode == 0, p.stderr
        replies = {m["id"]: m for m in map(json.loads, p.stdout.decode().splitlines())}
        assert set(replies) == {1, 2}
        assert replies[2]["result"]["structuredContent"]["stdout"] == "batch\n"
