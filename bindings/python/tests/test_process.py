"""Processes you can talk to: popen, streams, wait/kill/poll/pause, exit reasons,
the sandbox's one-process lifecycle (issue 16)."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import threading
import time

import pytest
from conftest import SYS_RO, SYSTEM_PYTHON, processes_with_cmdline, unique_sleep

import sandtrap
from sandtrap import CAPTURE, NULL, PIPED, ExitReason, InvalidState, NotFound, ProcessFailed, Sandbox, StdioMode


@pytest.fixture
def sb():
    with Sandbox(fs_readable=SYS_RO, timeout=60) as s:
        yield s


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_cat_round_trip(sb: Sandbox) -> None:
    with sb.popen(["cat"], stdin=PIPED, stdout=PIPED) as p:
        assert p.pid > 0 and p.init_pid > 0 and p.pid != p.init_pid
        with open(f"/proc/{p.pid}/cmdline", "rb") as f:
            assert f.read() == b"cat\0"
        for line in (b"one\n", b"two\n"):
            p.stdin.write(line)
            p.stdin.flush()
            assert p.stdout.readline() == line
        p.stdin.close()
        assert p.stdout.read() == b""
    r = p.result
    assert r is not None and r.success and r.reason is ExitReason.EXITED and p.returncode == 0


def test_repl_driven_line_by_line(sb: Sandbox) -> None:
    # python3 -i: a prompt on stderr, each answer on stdout as the line is sent
    p = sb.popen([SYSTEM_PYTHON, "-i", "-q", "-u"], stdin=PIPED, stdout=PIPED, stderr=NULL, text=True, bufsize=1)
    with p:
        p.stdin.write("x = 6 * 7\n")
        p.stdin.write("print(x)\n")
        assert p.stdout.readline() == "42\n"
        p.stdin.write("print(x + 1)\n")
        assert p.stdout.readline() == "43\n"
        p.stdin.write("import sys; sys.exit(5)\n")
        p.stdin.flush()
    assert p.result is not None and p.result.exit_code == 5 and p.result.reason is ExitReason.EXITED


def test_stream_100mb_bounded_memory(sb: Sandbox) -> None:
    total = 100 << 20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    p = sb.popen(["head", "-c", str(total), "/dev/zero"], stdout=PIPED, bufsize=0)
    n = 0
    t0 = time.monotonic()
    buf = bytearray(1 << 16)
    while True:
        k = p.stdout.readinto(buf)
        if not k:
            break
        n += k
    dt = time.monotonic() - t0
    assert p.wait(timeout=30).success
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"100 MiB in {dt:.3f}s ({total / dt / 1e6:.0f} MB/s); host peak RSS {peak} KiB (before {before} KiB)")
    assert n == total
    assert peak - before < 32 * 1024, f"host RSS grew by {peak - before} KiB while streaming"


def test_interleaved_stdout_stderr_cannot_deadlock(sb: Sandbox) -> None:
    # 4 MiB on each stream, interleaved in 64 KiB writes: both pipes fill up unless
    # both are read at once, which communicate() does
    script = "import os\nfor i in range(64):\n os.write(1, b'o' * 65536)\n os.write(2, b'e' * 65536)\n"
    p = sb.popen([SYSTEM_PYTHON, "-c", script], stdout=PIPED, stderr=PIPED)
    out, err = p.communicate(timeout=30)
    assert len(out) == 4 << 20 and len(err) == 4 << 20 and set(out) == {ord("o")} and set(err) == {ord("e")}
    assert p.returncode == 0


def test_kill_unblocks_a_blocked_read_and_kills_setsid_daemons(sb: Sandbox) -> None:
    arg, cmdline = unique_sleep()
    p = sb.popen(["sh", "-c", f"(setsid sleep {arg} &); sleep {arg}"], stdout=PIPED)
    assert wait_for(lambda: len(processes_with_cmdline(cmdline)) == 2)
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(p.stdout.read()))
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # blocked in read
    p.kill()
    p.kill()  # idempotent
    t.join(3)
    assert not t.is_alive() and got == [b""]
    r = p.wait(timeout=5)
    assert r.reason is ExitReason.KILLED and not r.success and r.error is not None and r.error.kind == "killed"
    assert p.returncode == -9 or p.returncode is None
    assert processes_with_cmdline(cmdline) == []
    p.kill()  # after the end: still a no-op


def test_tree_dies_on_close() -> None:
    arg, cmdline = unique_sleep()
    sb = Sandbox(fs_readable=SYS_RO)
    p = sb.popen(["sh", "-c", f"(setsid sleep {arg} &); sleep {arg}"])
    assert wait_for(lambda: len(processes_with_cmdline(cmdline)) == 2)
    sb.close()
    assert wait_for(lambda: processes_with_cmdline(cmdline) == [])
    r = p.wait(timeout=5)
    assert r.reason in (ExitReason.CLOSED, ExitReason.KILLED) and not r.success


def test_tree_dies_when_the_process_is_dropped(sb: Sandbox) -> None:
    arg, cmdline = unique_sleep()
    p = sb.popen(["sh", "-c", f"(setsid sleep {arg} &); sleep {arg}"])
    assert wait_for(lambda: len(processes_with_cmdline(cmdline)) == 2)
    del p
    import gc

    gc.collect()
    assert wait_for(lambda: processes_with_cmdline(cmdline) == [])


HOST_EXIT = r"""
import os, sys
sys.path[:0] = {path!r}
from sandtrap import Sandbox
sb = Sandbox(fs_readable={ro!r})
p = sb.popen(["sh", "-c", "(setsid sleep {arg} &); sleep {arg}"])
print(p.pid, flush=True)
os._exit(0)  # no cleanup at all: the kernel must end the tree
"""


def test_tree_dies_on_host_exit() -> None:
    arg, cmdline = unique_sleep()
    code = HOST_EXIT.format(path=[p for p in sys.path if p], ro=SYS_RO, arg=arg)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert wait_for(lambda: processes_with_cmdline(cmdline) == []), processes_with_cmdline(cmdline)


def test_wait_timeout_and_poll(sb: Sandbox) -> None:
    p = sb.popen(["sleep", "30"])
    assert p.poll() is None
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.2)
    assert 0.15 < time.monotonic() - t0 < 2
    p.kill()
    assert p.wait().reason is ExitReason.KILLED
    assert p.poll() is p.result


def tree_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def test_pause_stops_cpu_and_resume_continues(sb: Sandbox) -> None:
    marker = f"spin{os.getpid()}{time.monotonic_ns()}"
    p = sb.popen(["sh", "-c", "(setsid sh -c 'while :; do :; done' x &); while :; do :; done", marker])
    assert wait_for(lambda: len(_tree(p.init_pid)) >= 3)
    pids = _tree(p.init_pid)
    p.pause()
    t0 = tree_ticks(pids)
    time.sleep(0.5)
    paused = tree_ticks(pids) - t0
    p.resume()
    t0 = tree_ticks(pids)
    time.sleep(0.5)
    resumed = tree_ticks(pids) - t0
    print(f"CPU ticks (1/100 s) in 0.5 s: paused {paused}, resumed {resumed}")
    assert paused <= 1 and resumed >= 3  # a loaded machine gives it little CPU; stopped, none
    p.kill()
    assert p.wait().reason is ExitReason.KILLED


def _tree(root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{t}/children") as f:
                    stack.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return out


def test_stdio_modes(sb: Sandbox, tmp_path) -> None:
    out = tmp_path / "out"
    with open(out, "wb") as f:
        p = sb.popen(["sh", "-c", "cat; echo e >&2"], stdin=b"fed\n", stdout=f, stderr=CAPTURE)
        r = p.wait()
    assert out.read_bytes() == b"fed\n" and r.stderr == b"e\n" and r.stdout == b""
    r = sb.popen(["sh", "-c", "echo o; echo e >&2"], stdout=CAPTURE, stderr=subprocess.DEVNULL).wait()
    assert r.stdout == b"o\n" and r.stderr == b""
    assert StdioMode("piped") is PIPED


def test_bad_modes_list_every_problem(sb: Sandbox) -> None:
    with pytest.raises(sandtrap.InvalidRequest) as e:
        sb.popen(["true"], stdin=CAPTURE, stdout="bogus", stderr=3.5)  # type: ignore[arg-type]
    assert {p.field for p in e.value.problems} == {"stdin", "stdout", "stderr"}


def test_start_failure_raises(sb: Sandbox) -> None:
    with pytest.raises(NotFound):
        sb.popen(["no-such-program-xyz"])


def test_result_reason_and_check(sb: Sandbox) -> None:
    ok = sb.run(["true"])
    assert ok.reason is ExitReason.EXITED and ok.check() is ok
    r = sb.run(["sh", "-c", "echo boom >&2; exit 3"])
    assert r.reason is ExitReason.EXITED and r.exit_code == 3
    with pytest.raises(ProcessFailed) as e:
        r.check()
    assert e.value.result is r and "exited with status 3" in str(e.value) and "boom" in str(e.value)
    s = sb.run(["sh", "-c", "kill -TERM $$"])
    assert s.reason is ExitReason.SIGNALED and s.signal == 15 and s.returncode == -15
    t = sb.run(["sleep", "5"], timeout=0.2)
    assert t.reason is ExitReason.TIMEOUT
    with pytest.raises(ProcessFailed, match="timed out"):
        t.check()
    assert sb.run(["no-such-program-xyz"]).reason is ExitReason.NOT_FOUND
    with Sandbox(fs_readable=SYS_RO, max_cpu_time=0.3) as c:
        assert c.run(["sh", "-c", "while :; do :; done"]).reason is ExitReason.CPU_LIMIT


def test_lifecycle_on_the_sandbox(sb: Sandbox) -> None:
    assert sb.pid is None
    with pytest.raises(InvalidState):
        sb.wait()
    p = sb.spawn(["sleep", "30"])
    assert sb.pid == p.pid
    with pytest.raises(InvalidState, match="still running"):
        sb.spawn(["true"])
    sb.pause()
    sb.resume()
    sb.kill()
    assert sb.wait().reason is ExitReason.KILLED
    assert sb.spawn(["true"]) is not p
    assert sb.wait().success


def test_asyncio_popen(sb: Sandbox) -> None:
    async def main() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        t = asyncio.create_task(ticker())
        async with await sb.apopen(["cat"], stdin=PIPED, stdout=PIPED) as p:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(b"hello\n")
            await p.stdin.drain()
            assert await p.stdout.readline() == b"hello\n"
            p.stdin.close()
            assert await p.stdout.read() == b""
        assert p.result is not None and p.result.success
        p2 = await sb.apopen(["sh", "-c", "for i in 1 2 3 4; do echo $i; sleep 0.25; done"], stdout=PIPED)
        lines = []
        assert p2.stdout is not None
        async for line in p2.stdout:
            lines.append(line)
        r = await p2.wait(timeout=10)
        t.cancel()
        assert lines == [b"1\n", b"2\n", b"3\n", b"4\n"] and r.success
        assert ticks > 50, ticks  # the loop kept running through a 1 s streamed run
        p3 = await sb.apopen(["sleep", "30"])
        with pytest.raises(asyncio.TimeoutError):
            await p3.wait(timeout=0.1)
        p3.kill()
        assert (await p3.wait()).reason is ExitReason.KILLED

    asyncio.run(main())


def test_create_parks_until_start(tmp_path) -> None:
    mark = tmp_path / "ran"
    with Sandbox(fs_readable=SYS_RO, fs_writable=[str(tmp_path)]) as sb:
        with pytest.raises(InvalidState, match="without create"):
            sb.start()
        p = sb.create(["sh", "-c", f"echo x > {mark}"])
        assert sb.pid == p.pid and p.pid != p.init_pid
        time.sleep(0.2)
        assert not mark.exists() and p.poll() is None
        with pytest.raises(InvalidState, match="still running"):
            sb.spawn(["true"])
        sb.start()
        assert sb.wait(timeout=10).success and mark.read_text() == "x\n"
        with pytest.raises(InvalidState):
            sb.start()
        q = sb.popen(["sleep", "30"])
        with pytest.raises(InvalidState, match="not parked"):
            q.start()
        q.kill()


def test_gather_named_inputs(tmp_path) -> None:
    planner = Sandbox(fs_readable=SYS_RO)
    searcher = Sandbox(fs_readable=SYS_RO)
    consumer = Sandbox(fs_readable=SYS_RO)
    script = (
        "import os\n"
        "fds = dict(p.rsplit(':', 1) for p in os.environ['SANDTRAP_GATHER'].split(','))\n"
        "got = {k: os.read(int(v), 100).decode().strip() for k, v in fds.items()}\n"
        "print(sorted(got.items()))\n"
    )
    g = planner.cmd(["echo", "print(1)"]).as_("code") + searcher.cmd(["echo", "1 2 3"]).as_("data") | consumer.cmd(
        [SYSTEM_PYTHON, "-c", script]
    )
    assert isinstance(g, sandtrap.GatherPipeline)
    r = g.run(timeout=30)
    assert r.success, r
    assert r.stdout == b"[('code', 'print(1)'), ('data', '1 2 3')]\n"
    assert len(r.stages) == 3
    # Pipeline.run(stdout=fd), and a gather's output to an fd
    out = tmp_path / "out"
    with open(out, "wb") as f:
        r = (planner.cmd(["echo", "hi"]) | consumer.cmd(["tr", "a-z", "A-Z"])).run(stdout=f)
    assert r.success and r.stdout == b"" and out.read_bytes() == b"HI\n"
    with open(out, "wb") as f:
        r = (planner.cmd(["echo", "a"]).as_("a") + planner.cmd(["echo", "b"]).as_("b") | consumer.cmd(["cat"])).run(
            stdout=f.fileno()
        )
    assert r.success and out.read_bytes() == b"b\n"
    # a pipeline needs two stages, a gather two named commands
    with pytest.raises(sandtrap.InvalidRequest, match="at least two stages"):
        sandtrap.Pipeline(planner.cmd(["true"])).run()
    with pytest.raises(sandtrap.InvalidRequest, match="at least two"):
        (sandtrap.Gather([planner.cmd(["true"]).as_("x")]) | consumer.cmd(["cat"])).run()
    for s in (planner, searcher, consumer):
        s.close()


def test_inputs_reads_named_fds(monkeypatch) -> None:
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    os.write(w1, b"print(1)\n")
    os.write(w2, b"1 2 3\n")
    os.close(w1)
    os.close(w2)
    monkeypatch.setenv("SANDTRAP_GATHER", f"code:{r1},data:{r2}")
    from sandtrap._gather import _Inputs

    inputs = _Inputs()
    assert "code" in inputs and inputs.keys() == ["code", "data"]
    assert inputs["code"] == "print(1)\n" and inputs["code"] == "print(1)\n" and inputs["data"] == "1 2 3\n"
    with pytest.raises(KeyError, match="no gather input named 'x'"):
        inputs["x"]
