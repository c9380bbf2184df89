"""Granted to sandboxed code by test_coop.py to model a bypassed Python layer: plain
functions that make the raw system calls the guest runtime would refuse."""

import os
import signal


def kill(pid: int) -> object:
    try:
        os.kill(pid, signal.SIGKILL)
        return "killed"
    except OSError as e:
        return e.errno


def getpid() -> int:
    return os.getpid()


def getppid() -> int:
    return os.getppid()


def fork() -> object:
    """os.fork without the Python layer's refusal: the errno, or 'forked'."""
    try:
        pid = os.fork()
    except OSError as e:
        return e.errno
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "forked"


def execv() -> object:
    """execve of /usr/bin/true in a thread-free way: only returns on failure."""
    try:
        os.execv("/usr/bin/true", ["true"])
    except OSError as e:
        return e.errno
