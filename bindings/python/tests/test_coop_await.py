"""aexec's top-level await, async for and async with, and exec(keep=), at every level."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandtrap import InvalidArgument, Policy, sandbox
from sandtrap_guest import StCancelled, StTimeout

LEVELS = ["none", "process", "kernel"]

ASYNC_CODE = """\
import asyncio
async def double(x):
    await asyncio.sleep(0.01)
    return x * 2
y = await double(21)
async def count(n):
    for i in range(n):
        yield i
out = [i async for i in count(3)]
async for i in count(2):
    out.append(i)
class Ctx:
    async def __aenter__(self):
        return 'in'
    async def __aexit__(self, *exc):
        return False
async with Ctx() as state:
    pass
"""


def policy(timeout=3.0):
    p = Policy(timeout=timeout)
    p.module(asyncio)
    return p


@pytest.mark.parametrize("level", LEVELS)
def test_top_level_await_async_for_and_async_with(level):
    async def main():
        with sandbox(policy(), isolation=level) as sb:
            r = await sb.aexec(ASYNC_CODE)
            assert r.error is None, (r.error, r.traceback)
            assert r.namespace["y"] == 42 and r.namespace["out"] == [0, 1, 2, 0, 1] and r.namespace["state"] == "in"
            # the functions survive into the next exec (the namespace is the sandbox's)
            r = await sb.aexec("z = await double(5)", echo="last")
            assert r.namespace["z"] == 10
            # exec (not aexec) refuses top-level await, as Python does
            r = sb.exec("w = await double(1)")
            assert isinstance(r.error, SyntaxError) and "outside function" in str(r.error), r.error
            # the caller's loop keeps running while the code awaits
            ticks = []

            async def beat():
                while True:
                    ticks.append(1)
                    await asyncio.sleep(0.01)

            t = asyncio.ensure_future(beat())
            r = await sb.aexec("await asyncio.sleep(0.3)")
            t.cancel()
            assert r.error is None and len(ticks) >= 5, (r.error, len(ticks))

    asyncio.run(main())


@pytest.mark.parametrize("level", LEVELS)
def test_the_timeout_stops_an_await(level):
    """A long await is stopped at the deadline, even where the code catches the
    cancellation and awaits again (the limit wins)."""

    async def main():
        with sandbox(policy(timeout=1.0), isolation=level) as sb:
            await sb.aexec("import asyncio")  # the worker's start is not measured
            for code in [
                "import asyncio\nawait asyncio.sleep(30)",
                "import asyncio\ntry:\n    await asyncio.sleep(30)\nexcept asyncio.CancelledError:\n    await asyncio.sleep(30)",
            ]:
                start = time.monotonic()
                r = await sb.aexec(code)
                took = time.monotonic() - start
                assert isinstance(r.error, StTimeout), (code, r.error)
                assert took < 2.5, took

    asyncio.run(main())


def test_cancel_stops_an_await_in_process():
    async def main():
        with sandbox(policy(timeout=30), isolation="none") as sb:
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, sb.cancel)
            start = time.monotonic()
            r = await sb.aexec("import asyncio\nawait asyncio.sleep(30)")
            assert isinstance(r.error, StCancelled), r.error
            assert time.monotonic() - start < 2

    asyncio.run(main())


@pytest.mark.parametrize("level", LEVELS)
def test_a_task_the_code_leaves_running_does_not_outlive_the_exec(level):
    async def main():
        with sandbox(policy(), isolation=level) as sb:
            code = (
                "import asyncio\nhits = []\nasync def later():\n    await asyncio.sleep(0.2)\n    hits.append(1)\n"
                "asyncio.ensure_future(later())\nawait asyncio.sleep(0)"
            )
            r = await sb.aexec(code)
            assert r.error is None, r.error
            await asyncio.sleep(0.4)
            r = await sb.aexec("n = len(hits)")
            assert r.namespace["n"] == 0  # cancelled when the exec's loop closed

    asyncio.run(main())


@pytest.mark.parametrize("level", LEVELS)
def test_keep_narrows_the_result_namespace(level):
    with sandbox(Policy(), isolation=level) as sb:
        r = sb.exec("a = 1\nb = [2]\nc = 'x'", keep=("a", "c", "missing"))
        assert r.error is None and r.namespace == {"a": 1, "c": "x"}
        r = sb.exec("d = a + b[0]", keep=[])
        assert r.namespace == {}  # the names stay in the sandbox: b was there
        assert sb.exec("e = d").namespace["e"] == 3
        with pytest.raises(InvalidArgument, match="keep=\\('ui',\\)"):
            sb.exec("x = 1", keep="ui")
        with pytest.raises(InvalidArgument, match="keep names must be strings"):
            sb.exec("x = 1", keep=[1])


# ------------------------------------------------------------------ host time
def host_time_policy():
    from sandtrap import host_time

    p = Policy(timeout=1.0)

    @p.fn(host_time=True)
    def slow():
        time.sleep(1.4)
        return "slow"

    @p.fn
    def partly():
        with host_time():
            time.sleep(1.4)
        return "partly"

    @p.fn
    def plain():
        time.sleep(1.4)
        return "plain"

    return p


AFTER = "\nfor i in range(3):\n    pass"  # a checkpoint after the call


@pytest.mark.parametrize("level", LEVELS)
def test_host_time_is_not_counted_against_the_timeout(level):
    from sandtrap import RpcProxyMarker

    def handler(method, args, kwargs):
        time.sleep(1.4)
        return method

    with sandbox(host_time_policy(), isolation=level, rpc_handlers={"h": handler}) as sb:
        sb.exec("warm = 1")  # the worker's start is not the code's time either way
        for code, want in [("x = slow()", "slow"), ("x = partly()", "partly"), ("x = c.go()", "go")]:
            r = sb.exec(code + AFTER, namespace={"c": RpcProxyMarker("h")})
            assert r.error is None and r.namespace["x"] == want, (code, r.error)
        # without it, the same call overruns (what the protection is measured against)
        r = sb.exec("x = plain()" + AFTER)
        assert isinstance(r.error, StTimeout), r.error
        # host time does not stop the clock for the code itself
        r = sb.exec("x = slow()\nwhile True:\n    pass")
        assert isinstance(r.error, StTimeout), r.error


def test_host_time_outside_an_exec_is_a_no_op():
    from sandtrap import host_time

    with host_time():
        pass
