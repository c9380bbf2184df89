"""Shared helpers for the sandtrap Python tests.

Run after ``pip install ./bindings/python``::

    python3 -m pytest -q bindings/python/tests

The suite passes as root and as an unprivileged user (features the kernel or user
lacks are skipped with the reason, by probing, never by luck).
"""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

# The seed examples run `python3` by name with the host's environment. They assume the
# system interpreter (/usr/bin/python3, inside the sandboxes' fs_readable); a pyenv or
# venv python3 earlier on PATH lives outside every sandbox. Put the system directories
# first, before the library loads (the engine copies the environment when it starts).
os.environ["PATH"] = "/usr/local/bin:/usr/bin:/bin:" + os.environ.get("PATH", "")

import sandtrap

# The system directories every test sandbox may read.
SYS_RO = ["/usr", "/lib", "/bin", "/etc"]
if os.path.isdir("/lib64") and not os.path.islink("/lib64"):
    SYS_RO.append("/lib64")

SYSTEM_PYTHON = "/usr/bin/python3"  # lives under /usr: runs in every test sandbox

IS_ROOT = os.geteuid() == 0
PROBE = sandtrap.probe()


def landlock_abi() -> int:
    return int(PROBE.get("landlock_abi") or 0)


def needs_landlock(abi: int = 1):
    return pytest.mark.skipif(landlock_abi() < abi, reason=f"needs Landlock ABI >= {abi}, kernel has {landlock_abi()}")


def unique_sleep() -> tuple[str, str]:
    """A sleep duration that no other process on the machine uses: (arg, cmdline)."""
    arg = f"{30 + random.randint(1, 999999) / 1e6:.6f}"
    return arg, f"sleep {arg}"


def processes_with_cmdline(cmdline: str) -> list[int]:
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            raw = Path(f"/proc/{e}/cmdline").read_bytes()
        except OSError:
            continue
        if raw.replace(b"\0", b" ").decode(errors="replace").strip() == cmdline:
            out.append(int(e))
    return out


def wait_no_survivor(cmdline: str, within: float = 2.0) -> list[int]:
    """Processes still running with this command line after a short grace period
    (a SIGKILLed process can take a moment to disappear from /proc)."""
    deadline = time.monotonic() + within
    while True:
        pids = processes_with_cmdline(cmdline)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.02)


def children_of_self() -> list[int]:
    me = os.getpid()
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            stat = Path(f"/proc/{e}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may contain spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == me:
            out.append(int(e))
    return out


def open_fds() -> set[int]:
    return {int(x) for x in os.listdir("/proc/self/fd")}


@pytest.fixture
def world_tmp(tmp_path: Path) -> Path:
    """A temporary directory readable by everyone (the sandboxed program may run as
    another user when the tests run as root with uid/gid)."""
    os.chmod(tmp_path, 0o755)
    return tmp_path


@pytest.fixture
def ro_sandbox():
    sb = sandtrap.Sandbox(fs_readable=SYS_RO)
    yield sb
    sb.close()


def have_python_in_sandbox() -> bool:
    return shutil.which(SYSTEM_PYTHON) is not None
