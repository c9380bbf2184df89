"""asyncio: arun never blocks the loop; cancellation kills the whole tree."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import SYS_RO, unique_sleep, wait_no_survivor

from sandtrap import Sandbox


def test_arun_concurrent_while_loop_ticks() -> None:
    sb = Sandbox(fs_readable=SYS_RO)

    async def main() -> tuple[list[bool], int, float]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        t0 = time.monotonic()
        results = await asyncio.gather(*(sb.arun(["sleep", "1"]) for _ in range(32)))
        wall = time.monotonic() - t0
        stop.set()
        await t
        return [r.success for r in results], ticks, wall

    ok, ticks, wall = asyncio.run(main())
    assert all(ok) and len(ok) == 32
    assert wall < 8, f"32 concurrent `sleep 1` took {wall:.1f}s"
    assert ticks >= 0.5 * wall / 0.01 * 0.5, f"the loop ticked only {ticks} times in {wall:.1f}s"
    sb.close()


def test_arun_result_and_pipeline() -> None:
    sb = Sandbox(fs_readable=SYS_RO)

    async def main() -> None:
        r = await sb.arun(["tr", "a-z", "A-Z"], stdin=b"async")
        assert r.stdout == b"ASYNC"
        p = await (sb.cmd(["echo", "x"]) | sb.cmd(["tr", "x", "y"])).arun()
        assert p.stdout == b"y\n" and len(p.stages) == 2
        c = await sb.cmd(["echo", "c"]).arun()
        assert c.stdout == b"c\n"

    asyncio.run(main())
    sb.close()


def test_task_cancel_kills_the_whole_tree() -> None:
    arg, cmdline = unique_sleep()
    sb = Sandbox(fs_readable=SYS_RO)

    async def main() -> float:
        task = asyncio.create_task(sb.arun(["sh", "-c", f"sleep {arg} & sleep {arg}"]))
        # wait until both sleeps exist
        deadline = time.monotonic() + 10
        from conftest import processes_with_cmdline

        while len(processes_with_cmdline(cmdline)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert len(processes_with_cmdline(cmdline)) == 2
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - t0

    took = asyncio.run(main())
    assert took < 5
    assert wait_no_survivor(cmdline) == []
    sb.close()


def test_cancel_right_after_start_still_kills() -> None:
    """Cancel before the engine registered the run (or before a worker picked it up)."""
    arg, cmdline = unique_sleep()
    sb = Sandbox(fs_readable=SYS_RO)

    async def main() -> None:
        for delay in (0, 0.001, 0.005, 0.02):
            task = asyncio.create_task(sb.arun(["sh", "-c", f"sleep {arg} & sleep {arg}"]))
            await asyncio.sleep(delay)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert wait_no_survivor(cmdline) == []
    sb.close()


def test_wait_for_timeout_kills_pipeline() -> None:
    arg, cmdline = unique_sleep()
    a = Sandbox(fs_readable=SYS_RO)
    b = Sandbox(fs_readable=SYS_RO)

    async def main() -> None:
        pipe = a.cmd(["sh", "-c", f"sleep {arg} & sleep {arg}"]) | b.cmd(["sh", "-c", f"cat; sleep {arg}"])
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(pipe.arun(), timeout=0.5)

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 5
    assert wait_no_survivor(cmdline) == []
    a.close()
    b.close()


def test_sync_run_interrupted_by_signal_kills_tree() -> None:
    """Ctrl-C (any exception from a signal handler) during a blocking run() in the
    main thread kills the run's tree before propagating."""
    import signal

    arg, cmdline = unique_sleep()
    sb = Sandbox(fs_readable=SYS_RO)

    def boom(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, boom)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sb.run(["sh", "-c", f"sleep {arg} & sleep {arg}"])
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert wait_no_survivor(cmdline) == []
    sb.close()
