"""result.denials and Sandbox.learn (issue 14): refusals per run, learned policies."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from conftest import SYS_RO, SYSTEM_PYTHON

from sandtrap import Denial, LearnResult, Result, Sandbox

CONNECT = "import socket,sys\ns=socket.socket()\nsys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))))"


@pytest.fixture
def net_sandbox():
    with Sandbox(fs_readable=SYS_RO, net_allow=["127.0.0.1:9"], timeout=30) as sb:
        yield sb


def test_connect_denial_is_typed(net_sandbox: Sandbox) -> None:
    r = net_sandbox.run([SYSTEM_PYTHON, "-S", "-c", CONNECT, "10.1.2.3", "80"])
    assert isinstance(r, Result) and r.exit_code == 13
    assert len(r.denials) == 1
    d = r.denials[0]
    assert isinstance(d, Denial)
    assert (d.syscall, d.errno, d.errno_nr, d.count, d.source) == ("connect", "EACCES", 13, 1, "supervisor")
    assert d.address is not None and "10.1.2.3:80" in d.address and d.path is None
    assert r.denials_dropped == 0
    assert r.denials_sources["supervisor"] == "reported"
    assert r.denials_sources["landlock"].startswith("not reported")
    assert r.denials_sources["seccomp"].startswith("not reported")


def test_inotify_and_flock_denials(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    ro = tmp_path / "ro.txt"
    ro.write_text("x")
    script = (
        "import ctypes, fcntl, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.inotify_add_watch(libc.inotify_init1(0), b'/etc', 0xfff), ctypes.get_errno())\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try: fcntl.flock(fd, fcntl.LOCK_SH)\n"
        "except OSError as e: print(e.errno)\n"
    )
    with Sandbox(fs_readable=["/usr", "/lib", "/bin", str(tmp_path)], timeout=30) as sb:
        r = sb.run([SYSTEM_PYTHON, "-S", "-c", script, str(ro)])
    assert r.stdout.split() == [b"-1", b"13", b"13"], r.stderr
    got = {(d.syscall, d.path, d.errno) for d in r.denials}
    assert got == {("inotify_add_watch", "/etc", "EACCES"), ("flock", str(ro), "EACCES")}, r.denials


def test_concurrent_runs_keep_their_own(net_sandbox: Sandbox) -> None:
    results: dict[int, Result] = {}

    def go(i: int) -> None:
        script = f"import socket\ns=socket.socket()\nfor _ in range({10 * i}): s.connect_ex(('10.8.0.{i}', 80))\n"
        results[i] = net_sandbox.run([SYSTEM_PYTHON, "-S", "-c", script])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, r in results.items():
        assert [(d.count, d.address is not None and f"10.8.0.{i}:80" in d.address) for d in r.denials] == [
            (10 * i, True)
        ], r.denials


def test_learn_then_run(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    data = tmp_path / "data.txt"
    data.write_text("42\n")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    script = (
        "import socket, sys\n"
        f"v = open({str(data)!r}).read()\n"
        f"open({str(out / 'r.txt')!r}, 'w').write(v)\n"
        f"s = socket.socket(); s.connect(('127.0.0.1', {port})); print('ok')\n"
    )
    argv = [SYSTEM_PYTHON, "-S", "-c", script]
    try:
        with Sandbox(fs_readable=["/usr"], fs_writable=[str(tmp_path)], timeout=30) as sb:
            lr = sb.learn(argv)
        assert isinstance(lr, LearnResult)
        # the learning run was refused the connect (and learned it)
        assert not lr.result.success and any(d.syscall == "connect" for d in lr.result.denials)
        assert str(data) in lr.policy["fs_readable"]
        assert lr.policy["fs_writable"] == [str(out)]
        assert lr.policy["net_allow"] == [f"127.0.0.1:{port}"]
        assert 'fs_writable = [\n  "%s",\n]' % out in lr.profile
        assert str(data) in lr.observed["read"]
        os.unlink(out / "r.txt")
        with Sandbox(**lr.policy, timeout=30) as good:
            r = good.run(argv)
        assert r.success and r.stdout == b"ok\n", r.stderr
        assert (out / "r.txt").read_text() == "42\n"
        for drop_field, drop in (
            ("fs_readable", str(data)),
            ("fs_writable", str(out)),
            ("net_allow", f"127.0.0.1:{port}"),
        ):
            pol = {k: [p for p in v if p != drop] for k, v in lr.policy.items()}
            with Sandbox(**pol, timeout=30) as bad:
                assert not bad.run(argv).success, f"ran without {drop_field} {drop}"
    finally:
        srv.close()


# clone i is refused i connects and i inotify watches (the supervisor's), half of them
# by a child it forks, and i opens outside the policy (Landlock's: not reported); the
# child then tries to leave the clone's session and process group
FORK_WORK = """
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
i = CLONE_ID
def refuse(k):
    s = socket.socket(); s.settimeout(1)
    assert s.connect_ex(("10.78.%d.%d" % (i, k), 80)) == 13
    s.close()
    fd = libc.inotify_init1(0)
    assert libc.inotify_add_watch(fd, b"/etc", 0xfff) == -1 and ctypes.get_errno() == 13
    os.close(fd)
    try:
        open("/etc/hostname").close(); raise SystemExit("the open outside the policy worked")
    except PermissionError:
        pass
for k in range(i // 2):
    refuse(k)
pid = os.fork()
if pid == 0:
    for k in range(i // 2, i):
        refuse(k)
    for f in (os.setsid, lambda: os.setpgid(0, 0)):
        try:
            f(); print("left")
        except PermissionError:
            print("EPERM")
    sys.stdout.flush()
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
"""


def test_fork_denials_per_clone() -> None:
    ro = ["/usr", "/lib", "/bin"] + (["/lib64"] if "/lib64" in SYS_RO else [])
    with Sandbox(fs_readable=ro, net_allow=["127.0.0.1:9"], timeout=60, work_fn=FORK_WORK) as sb:
        clones = sb.fork(16)
        res = clones.results()
    assert clones.denials_sources["supervisor"] == "reported", clones.denials_sources
    assert clones.denials_sources["landlock"].startswith("not reported")
    for c in res:
        assert c.success and c.stdout == b"EPERM\nEPERM\n", (c.id, c.stdout, c.stderr)
        counts: dict[str, int] = {}
        for d in c.denials:
            assert isinstance(d, Denial) and d.source == "supervisor"
            if d.syscall == "connect":
                assert d.address is not None and f"10.78.{c.id}." in d.address, (c.id, d)
            counts[d.syscall] = counts.get(d.syscall, 0) + d.count
        want = {"connect": c.id, "inotify_add_watch": c.id} if c.id else {}
        assert counts == want and c.denials_dropped == 0, (c.id, c.denials)
