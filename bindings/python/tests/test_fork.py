"""A host that calls os.fork() after loading the library: the child must not hang,
and any call it makes raises ForkedChildError with a clear message."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from conftest import SYS_RO

import sandtrap
from sandtrap import ForkedChildError, Sandbox

# forking a multi-threaded process is the very situation under test
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


def _in_child(fn) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """Run fn in a forked child; return (exit status, what it wrote)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            msg = fn()
        except BaseException as e:
            msg, code = f"{type(e).__name__}: {e}", 1
        try:
            os.write(w, str(msg).encode()[:4000])
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    return os.waitstatus_to_exitcode(status), out.decode()


@pytest.fixture
def loaded_sandbox() -> Sandbox:
    sb = Sandbox(fs_readable=SYS_RO)
    assert sb.run(["true"]).success  # the library and its threads are live
    return sb


def test_run_in_forked_child_raises(loaded_sandbox: Sandbox) -> None:
    def child() -> str:
        try:
            loaded_sandbox.run(["echo", "should not run"])
        except ForkedChildError as e:
            assert e.kind == "forked_child" and e.code == -7
            return "RAISED " + str(e)
        return "RAN"

    code, out = _in_child(child)
    assert code == 0, out
    assert out.startswith("RAISED sandtrap cannot be used in a child created by os.fork()")


def test_other_calls_in_forked_child_raise(loaded_sandbox: Sandbox) -> None:
    def child() -> str:
        seen = []
        for call in (
            lambda: Sandbox(fs_readable=SYS_RO),
            lambda: (loaded_sandbox.cmd(["true"]) | loaded_sandbox.cmd(["true"])).run(),
            lambda: loaded_sandbox.isolation(),
            lambda: asyncio.run(loaded_sandbox.arun(["true"])),
            lambda: sandtrap.probe(),
        ):
            try:
                call()
                seen.append("ran")
            except ForkedChildError:
                seen.append("forked")
        loaded_sandbox.close()  # freeing in the child must not touch the engine
        return ",".join(seen)

    code, out = _in_child(child)
    assert code == 0, out
    assert out == "forked,forked,forked,forked,forked"


def test_parent_still_works_after_fork(loaded_sandbox: Sandbox) -> None:
    _in_child(lambda: "noop")
    assert loaded_sandbox.run(["echo", "parent"]).stdout == b"parent\n"
