"""A flood of output is truncated, in bounded time and memory."""

from __future__ import annotations

import resource
import time

from conftest import SYS_RO

from sandtrap import Sandbox

MB = 1 << 20


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_100mb_stdout_flood_default_cap() -> None:
    sb = Sandbox(fs_readable=SYS_RO)
    peak0 = _rss_peak_mb()
    t0 = time.monotonic()
    r = sb.run(["sh", "-c", "head -c 104857600 /dev/zero; head -c 104857600 /dev/zero >&2"])
    wall = time.monotonic() - t0
    assert r.success
    assert r.stdout_truncated and r.stderr_truncated
    assert len(r.stdout) == 16 * MB and len(r.stderr) == 16 * MB  # the default max_output
    assert wall < 20, f"took {wall:.1f}s"
    # 32 MiB kept: the engine's buffers, the response and its decoding stay well
    # below the 200 MiB that went through the pipes
    grew = _rss_peak_mb() - peak0
    assert grew < 400, f"peak RSS grew by {grew:.0f} MiB"
    del r

    # bounded: four times the flood does not raise the high-water mark much further
    peak1 = _rss_peak_mb()
    r = sb.run(["sh", "-c", "head -c 419430400 /dev/zero; head -c 419430400 /dev/zero >&2"])
    assert r.success and len(r.stdout) == 16 * MB and len(r.stderr) == 16 * MB
    assert _rss_peak_mb() - peak1 < 100, f"peak RSS grew by {_rss_peak_mb() - peak1:.0f} MiB more"
    sb.close()


def test_100mb_flood_small_cap_is_fast() -> None:
    sb = Sandbox(fs_readable=SYS_RO, max_output="64K")
    t0 = time.monotonic()
    r = sb.run(["head", "-c", "104857600", "/dev/zero"])
    assert time.monotonic() - t0 < 20
    assert r.success and r.stdout_truncated and len(r.stdout) == 64 * 1024
    sb.close()


def test_endless_output_with_timeout() -> None:
    sb = Sandbox(fs_readable=SYS_RO, max_output="1M")
    t0 = time.monotonic()
    r = sb.run(["cat", "/dev/zero"], timeout=1)
    assert time.monotonic() - t0 < 10
    assert r.timed_out and r.stdout_truncated and len(r.stdout) == MB
    sb.close()
