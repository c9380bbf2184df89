#!/usr/bin/env python3
"""popen: start+wait cost and streaming throughput, each against its baseline in
the same run.

    python3 bench/python/bench_popen.py [-n 300] [--mb 256] [--rounds 5]

1. ``sb.popen(["/bin/true"]).wait()`` vs ``sb.run(["/bin/true"])`` on one sandbox
   (interleaved; medians and p90s).
2. MB/s of ``cat`` fed from this process and read back by it through the program's
   pipes: ``sb.popen(["cat"], stdin=PIPED, stdout=PIPED)`` vs
   ``subprocess.Popen(["cat"], stdin=PIPE, stdout=PIPE)`` unconfined; a writer
   thread and a reader (readinto of 256 KiB chunks), rounds interleaved, the median
   round each. Goal: sandtrap >= 0.8x unconfined.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import threading
import time

POLICY = {"fs_readable": ["/usr", "/lib", "/bin", "/etc"]}
CHUNK = 256 << 10


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def stream(stdin, stdout, total: int) -> float:
    """Push total bytes through (stdin -> program -> stdout); returns seconds."""
    block = b"x" * CHUNK

    def writer() -> None:
        left = total
        while left > 0:
            n = min(left, CHUNK)
            stdin.write(block[:n])
            left -= n
        stdin.close()

    buf = bytearray(CHUNK)
    got = 0
    t = time.perf_counter()
    w = threading.Thread(target=writer)
    w.start()
    while True:
        k = stdout.readinto(buf)
        if not k:
            break
        got += k
    w.join()
    dt = time.perf_counter() - t
    assert got == total, (got, total)
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--mb", type=int, default=256, help="MiB per streaming round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import sandtrap
    from sandtrap import PIPED

    sb = sandtrap.Sandbox(**POLICY)
    for _ in range(20):
        assert sb.run(["/bin/true"]).success
        assert sb.popen(["/bin/true"]).wait().success

    t_run: list[float] = []
    t_popen: list[float] = []
    for _ in range(args.n):
        t = time.perf_counter()
        assert sb.run(["/bin/true"]).success
        t_run.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert sb.popen(["/bin/true"]).wait().success
        t_popen.append(time.perf_counter() - t)
    mr, mp = statistics.median(t_run), statistics.median(t_popen)
    print(f"/bin/true, {args.n} each (median / p90):")
    print(f"  sb.run                 {mr * 1e3:7.3f} / {pct(t_run, 0.9) * 1e3:7.3f} ms")
    print(f"  sb.popen(...).wait()   {mp * 1e3:7.3f} / {pct(t_popen, 0.9) * 1e3:7.3f} ms   ratio {mp / mr:.2f}")

    total = args.mb << 20
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mbs_st: list[float] = []
    mbs_sub: list[float] = []
    for _ in range(args.rounds):
        p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        mbs_sub.append(total / stream(p.stdin, p.stdout, total) / 1e6)
        p.stdout.close()
        p.wait()
        q = sb.popen(["cat"], stdin=PIPED, stdout=PIPED, bufsize=0)
        mbs_st.append(total / stream(q.stdin, q.stdout, total) / 1e6)
        q.stdout.close()
        assert q.wait().success
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    a, b = statistics.median(mbs_st), statistics.median(mbs_sub)
    print(f"cat, {args.mb} MiB x {args.rounds} rounds through stdin and stdout (median round):")
    print(f"  subprocess.Popen (unconfined)  {b:8.0f} MB/s   rounds {[round(x) for x in mbs_sub]}")
    print(
        f"  sb.popen                       {a:8.0f} MB/s   rounds {[round(x) for x in mbs_st]}   ratio {a / b:.2f} (goal >= 0.8)"
    )
    print(f"  host peak RSS {rss1} KiB (before streaming {rss0} KiB)")
    if args.json:
        print(
            json.dumps({"run_ms": mr * 1e3, "popen_ms": mp * 1e3, "st_mbs": a, "sub_mbs": b, "rss_kib": [rss0, rss1]})
        )
    sb.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
