"""confine(): restrict the calling process for good. Every test runs in a fresh
interpreter: confinement cannot be undone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import needs_landlock


def run_py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


@needs_landlock()
def test_confine_then_sandbox_cannot_widen(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    p = run_py(f"""
        import sys
        from sandtrap import Sandbox, confine
        confine(Sandbox(fs_readable=["/usr", "/lib", "/bin", sys.prefix, sys.base_prefix], fs_writable=[{str(tmp_path)!r}]))
        open({str(tmp_path / "w.txt")!r}, "w").write("w")
        try:
            open("/etc/hostname").read()
            print("READ")
        except PermissionError:
            print("DENIED")
        # a sandbox asking for more than the process has cannot get it
        r = Sandbox(fs_readable=["/"]).run(["cat", "/etc/hostname"])
        print("SANDBOX", r.success, r.exit_code, r.error.kind if r.error else None)
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split("\n")
    assert lines[0] == "DENIED", p.stdout
    assert lines[1].startswith("SANDBOX False"), p.stdout
    assert (tmp_path / "w.txt").read_text() == "w"


@needs_landlock()
def test_what_started_before_confine_does_not_serve_after_it(tmp_path: Path) -> None:
    # a sandbox whose zygote runs, a cooperative worker (a fork of its template) and
    # the template itself all predate confine(): none may serve a later run or exec
    tmp_path.chmod(0o755)
    p = run_py(f"""
        import os, sys
        from sandtrap import Sandbox, confine
        from sandtrap._coop import IsolatedFS, Policy, sandbox
        wide = Sandbox(fs_readable=["/"])
        print("BEFORE", wide.run(["cat", "/etc/hostname"]).success)
        pol = Policy(timeout=10)
        pol.module(os)
        box = sandbox(pol, isolation="process", filesystem=IsolatedFS({str(tmp_path)!r}))
        probe = "import os\\ntry:\\n    os.open('/etc/hostname', os.O_RDONLY)\\n    r = 'READ'\\nexcept OSError as e:\\n    r = e.errno\\n"
        print("EXEC BEFORE", box.exec(probe).namespace["r"])
        from sandtrap import _native
        confine(Sandbox(fs_readable=["/usr", "/lib", "/bin", sys.prefix, sys.base_prefix, _native.guest_dir()],
                        fs_writable=[{str(tmp_path)!r}]))
        r = wide.run(["cat", "/etc/hostname"])
        print("AFTER", r.success, r.stderr.decode().strip())
        e = box.exec(probe)
        print("EXEC AFTER", e.namespace.get("r"), e.restarted, e.error)
        fresh = sandbox(pol, isolation="process", filesystem=IsolatedFS({str(tmp_path)!r}))
        print("NEW SANDBOX", fresh.exec(probe).namespace["r"])
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "BEFORE True" and lines[1] == "EXEC BEFORE READ", p.stdout
    assert lines[2].startswith("AFTER False") and "Permission denied" in lines[2], p.stdout
    assert lines[3] == "EXEC AFTER 13 True None", p.stdout  # EACCES, in a fresh worker
    assert lines[4] == "NEW SANDBOX 13", p.stdout


@needs_landlock()
def test_confine_with_proc_readable(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    p = run_py(f"""
        import sys
        from sandtrap import IsolationUnavailable, Sandbox, confine
        confine(Sandbox(fs_readable=["/usr", "/lib", "/bin", "/proc", sys.prefix, sys.base_prefix],
                        fs_writable=[{str(tmp_path)!r}]))
        try:
            open("/etc/hostname").read()
            print("READ")
        except PermissionError:
            print("DENIED")
        try:
            Sandbox(fs_readable=["/"])
        except IsolationUnavailable as e:
            print("REFUSED", "own pid namespace" in str(e))
        r = Sandbox(fs_readable=["/"], allow_degraded=True).run(["cat", "/etc/hostname"])
        print("SANDBOX", r.success, r.exit_code)
    """)
    assert p.returncode == 0, p.stderr
    # a /proc of the run's own needs a view, which a confined process cannot mount;
    # this one cannot list / either, so /proc cannot be carved out of "/": refused
    assert p.stdout.split("\n")[:3] == ["DENIED", "REFUSED True", "SANDBOX False 1"], p.stdout


@needs_landlock()
def test_confine_with_seccomp(tmp_path: Path) -> None:
    p = run_py("""
        import sys, socket
        from sandtrap import Sandbox, confine
        confine(Sandbox(fs_readable=["/usr", "/lib", "/bin", "/proc", sys.prefix, sys.base_prefix]), seccomp=True)
        try:
            socket.socket()
            print("SOCKET")
        except PermissionError:
            print("NOSOCKET")
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "NOSOCKET"


def test_confine_needs_a_sandbox() -> None:
    from sandtrap import InvalidRequest, confine

    with pytest.raises(InvalidRequest):
        confine("not a sandbox")  # type: ignore[arg-type]
