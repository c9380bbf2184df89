"""Cancelling aexec stops the code (issue 16)."""

from __future__ import annotations

import asyncio
import time

import pytest

from sandtrap._coop import IsolatedFS, Policy, sandbox


@pytest.mark.parametrize("level", ["none", "process"])
def test_cancelling_aexec_stops_the_code(level, tmp_path):
    # issue 16: cancelling aexec stops the code; the next aexec does not wait for it
    async def main() -> tuple[float, float]:
        with sandbox(Policy(timeout=30), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
            await sb.aexec("x = 1")
            task = asyncio.create_task(sb.aexec("while True:\n    pass"))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stopped = time.monotonic() - t0
            t1 = time.monotonic()
            r = await sb.aexec("y = 2")
            assert r.error is None and r.namespace.get("y") == 2
            return stopped, time.monotonic() - t1

    stopped, nxt = asyncio.run(main())
    print(f"cancel took {stopped:.3f}s, the next aexec {nxt:.3f}s")
    assert stopped < 2 and nxt < 2
