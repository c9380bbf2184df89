"""Attacks on confine() (issue 10, class 7). confine() is irreversible: every case runs
in a fresh interpreter. With its default seccomp=False, what the policy says about
sockets must hold all the same, and a process that already has children is refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import IS_ROOT, needs_landlock

PRELUDE = """
import errno, json, os, socket, sys
from sandtrap import Sandbox, confine
SYS = ["/usr", "/lib", "/bin", sys.prefix, sys.base_prefix]
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
def attempt(fn):
    try:
        fn()
        return "OK"
    except OSError as e:
        return name(e)
"""


def run_py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


class UnixListener:
    """A pathname unix stream socket in the host that counts connections."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.listen(4)
        self.sock.settimeout(0.1)
        self.conns = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns += 1
            c.close()

    def close(self) -> None:
        self._stop.set()
        self._t.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def socket_rules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One confined interpreter (no network in its policy) tries every socket kind."""
    tmp = tmp_path_factory.mktemp("confine")
    tmp.chmod(0o755)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    ux = UnixListener(tmp / "host.sock")
    try:
        p = run_py(f"""
            confine(Sandbox(fs_readable=SYS))
            out = {{}}
            def udp():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.sendto(b"UDP", ("127.0.0.1", {udp.getsockname()[1]}))
            out["udp_sendto"] = attempt(udp)
            def unix_path():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect({ux.path!r})
            out["unix_pathname"] = attempt(unix_path)
            out["netlink"] = attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
            out["packet"] = attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
            print(json.dumps(out))
        """)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.splitlines()[-1])
        try:
            out["udp_received"] = udp.recv(100).decode()
        except BlockingIOError:
            out["udp_received"] = ""
        out["unix_connections"] = ux.conns
        return out
    finally:
        udp.close()
        ux.close()


@needs_landlock()
def test_confine_refuses_udp(socket_rules: dict[str, Any]) -> None:
    assert socket_rules["udp_sendto"] == "EPERM", socket_rules
    assert socket_rules["udp_received"] == "", socket_rules


@needs_landlock()
def test_confine_refuses_pathname_unix_sockets(socket_rules: dict[str, Any]) -> None:
    assert socket_rules["unix_pathname"] == "EPERM", socket_rules
    assert socket_rules["unix_connections"] == 0, socket_rules


@needs_landlock()
def test_confine_refuses_netlink(socket_rules: dict[str, Any]) -> None:
    assert socket_rules["netlink"] == "EPERM", socket_rules


@needs_landlock()
@pytest.mark.skipif(
    not IS_ROOT, reason="packet sockets need CAP_NET_RAW: as an ordinary user the kernel refuses them anyway"
)
def test_confine_refuses_packet_sockets_as_root(socket_rules: dict[str, Any]) -> None:
    assert socket_rules["packet"] == "EPERM", socket_rules


@needs_landlock()
def test_confine_refuses_a_process_with_children() -> None:
    # a multiprocessing.Pool forked before confine() keeps reading whatever it wants
    p = run_py("""
        import multiprocessing
        pool = multiprocessing.get_context("fork").Pool(2)
        pids = sorted(c.pid for c in multiprocessing.active_children())
        from sandtrap import IsolationUnavailable
        try:
            confine(Sandbox(fs_readable=SYS))
            print(json.dumps({"pids": pids, "raised": None}))
        except IsolationUnavailable as e:
            print(json.dumps({"pids": pids, "raised": str(e)}))
        pool.terminate()
    """)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["raised"] is not None, f"confine() went ahead with live children {out['pids']}"
    for pid in out["pids"]:
        assert str(pid) in out["raised"], f"the error does not name child {pid}: {out['raised']}"


# -- beyond the list: the rest of "what the policy says holds by default" ------


@needs_landlock()
def test_confine_refuses_chmod_outside_the_policy(tmp_path: Path) -> None:
    # Landlock does not govern chmod/chown/utime/xattrs: a confined process (root or
    # not) changes the mode of any file it owns outside fs_readable/fs_writable
    victim = tmp_path / "victim"
    victim.write_text("x")
    victim.chmod(0o644)
    p = run_py(f"""
        confine(Sandbox(fs_readable=SYS))
        print(attempt(lambda: os.chmod({str(victim)!r}, 0o4777)))
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "EPERM", p.stdout
    assert victim.stat().st_mode & 0o7777 == 0o644


@needs_landlock(4)
def test_confine_holds_the_port_rules_against_msg_fastopen() -> None:
    allowed = socket.socket()
    allowed.bind(("127.0.0.1", 0))
    allowed.listen(1)
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(4)
    other.settimeout(1.5)
    try:
        p = run_py(f"""
            confine(Sandbox(fs_readable=SYS, net_allow=[{allowed.getsockname()[1]}]))
            s = socket.socket()
            print(attempt(lambda: s.sendto(b"FASTOPEN", socket.MSG_FASTOPEN, ("127.0.0.1", {other.getsockname()[1]}))))
            u = socket.socket()
            print(attempt(lambda: u.listen(1)))
        """)
        assert p.returncode == 0, p.stderr
        try:
            c, _ = other.accept()
            c.settimeout(1)
            got = c.recv(100)
            c.close()
        except OSError:
            got = b""
        lines = p.stdout.split()
        assert lines[0] == "EPERM" and got == b"", (
            f"MSG_FASTOPEN to a port outside net_allow: {lines[0]}, received {got!r}"
        )
        assert lines[1] == "EACCES", f"listen() on an unbound socket after confine(): {lines[1]}"
    finally:
        allowed.close()
        other.close()
