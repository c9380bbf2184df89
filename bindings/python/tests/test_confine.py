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
def test_confine_with_proc_readable(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    p = run_py(f"""
        import sys
        from sandtrap import Sandbox, confine
        confine(Sandbox(fs_readable=["/usr", "/lib", "/bin", "/proc", sys.prefix, sys.base_prefix],
                        fs_writable=[{str(tmp_path)!r}]))
        try:
            open("/etc/hostname").read()
            print("READ")
        except PermissionError:
            print("DENIED")
        r = Sandbox(fs_readable=["/"]).run(["cat", "/etc/hostname"])
        print("SANDBOX", r.success, r.exit_code)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["DENIED", "SANDBOX False 1"], p.stdout


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
