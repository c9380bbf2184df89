"""The worker's seccomp installs, each in a child process (a filter cannot be removed).

* ``install_seccomp`` with a hand-built program (getppid answers EPERM), as a fork of
  the template installs the program the engine sends in its fork frame;
* ``_adopt`` (the fork's set-up) installs the frame's program, makes the fork
  non-dumpable, and refuses a malformed program.

(The engine's layer itself — what a fork refuses, process creation with spawn false —
is attacked end to end in bindings/python/tests/test_coop_hardening.py.)
"""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

GUEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GETPPID = {"x86_64": 110, "aarch64": 173}
pytestmark = pytest.mark.skipif(
    platform.machine() not in GETPPID or sys.platform != "linux",
    reason="seccomp programs here are built for x86_64/aarch64 Linux",
)


def child(code):
    p = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=GUEST),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


PRELUDE = f"""
import ctypes, errno, os, platform, struct
from sandtrap_guest import worker
libc = ctypes.CDLL(None, use_errno=True)
GETPPID = {GETPPID}[platform.machine()]

def raw_getppid():
    r = libc.syscall(ctypes.c_long(GETPPID))
    return r, ctypes.get_errno()

def getppid_eperm_program():
    # ld [0] (the syscall number); jeq GETPPID ? 1 : 0; ret ALLOW; ret ERRNO|EPERM
    ins = [(0x20, 0, 0, 0), (0x15, 1, 0, GETPPID), (0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x00050000 | errno.EPERM)]
    return b"".join(struct.pack("=HBBI", *i) for i in ins)
"""


def test_install_a_hand_built_program():
    out = child("""
    before = raw_getppid()
    n = worker.install_seccomp(getppid_eperm_program())
    after = raw_getppid()
    print(before[0] > 0, n, after, os.getpid() > 0)
    """)
    assert out.split() == ["True", "4", "(-1,", f"{__import__('errno').EPERM})", "True"]


def test_adopt_installs_the_frames_program_and_is_not_dumpable():
    out = child("""
    import socket
    a, b = socket.socketpair()
    out = os.fdopen(os.dup(1), "w")   # _adopt makes the channel its stdin and stdout
    worker._adopt({"op": "fork", "landlock": False, "stage": 0, "cwd": None, "env": None,
                   "seccomp": getppid_eperm_program()}, [os.dup(a.fileno())])
    PR_GET_DUMPABLE = 3
    print(raw_getppid(), libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), worker._INSTALLED["engine"], file=out)
    """)
    assert out.split() == ["(-1,", f"{__import__('errno').EPERM})", "0", "4"]


def test_adopt_refuses_a_malformed_program():
    out = child("""
    import socket, sys
    a, b = socket.socketpair()
    sys.stdout = os.fdopen(os.dup(1), "w")   # _adopt makes the channel its stdin and stdout
    for prog in (b"", b"1234567", b"x" * 8 * 5000, "text"):
        try:
            worker._adopt({"op": "fork", "landlock": False, "stage": 0, "seccomp": prog}, [os.dup(a.fileno())])
            print("installed")
        except (ValueError, OSError) as e:
            print(type(e).__name__)
    # a well-formed program the kernel rejects (jump past the end)
    try:
        worker.install_seccomp(struct.pack("=HBBI", 0x15, 5, 5, 0))
        print("installed")
    except OSError as e:
        print(errno.errorcode[e.errno])
    """)
    assert out.split() == ["ValueError", "ValueError", "ValueError", "ValueError", "EINVAL"]


def test_a_waiting_fork_starts_no_thread_before_it_is_confined():
    # Landlock's restrict_self is per thread: a watchdog thread started by the warm-up
    # exec would stay outside the fork's domain
    out = child("""
    import threading
    from sandtrap_guest.policy import Policy
    worker._warm(Policy(timeout=30, memory_limit=1024))
    print(threading.active_count(), len(os.listdir("/proc/self/task")))
    """)
    assert out.split() == ["1", "1"]


def test_the_filter_covers_every_thread():
    out = child("""
    import threading
    results = []
    ready, go = threading.Event(), threading.Event()
    def waiting():
        ready.set()
        go.wait()
        results.append(errno.errorcode.get(raw_getppid()[1], "OK"))
    t = threading.Thread(target=waiting)
    t.start()
    ready.wait()
    worker.install_seccomp(getppid_eperm_program())   # another thread already exists
    go.set()
    t.join()
    print(*results)
    """)
    assert out.split() == ["EPERM"]
