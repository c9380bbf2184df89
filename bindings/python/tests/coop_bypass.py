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
