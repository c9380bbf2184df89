#!/usr/bin/env python3
"""Spawn cost: sandtrap vs subprocess, measured in the same run.

    python3 bench/python/bench_run.py [-n 300] [--sandlock-python /path/to/venv/bin/python]

Times, interleaved so both see the same machine state:
  * subprocess.run(["/bin/true"])
  * sb.run(["/bin/true"]) on a Sandbox built once (the steady state)
  * Sandbox(...).run(["/bin/true"]) building (and closing) the sandbox every time
and prints medians, p90s and the ratio to subprocess. With --sandlock-python, the
same loop runs through the `sandlock` package in that interpreter (a throwaway venv
where `pip install sandlock` worked) and its ratio is reported beside ours.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

POLICY = {"fs_readable": ["/usr", "/lib", "/bin", "/etc"]}

SANDLOCK_SNIPPET = r"""
import json, subprocess, sys, time
from sandlock import Sandbox
n = int(sys.argv[1])
sb = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"])
for _ in range(10):
    sb.run(["/bin/true"]); subprocess.run(["/bin/true"])
a, b = [], []
for _ in range(n):
    t = time.perf_counter(); r = sb.run(["/bin/true"]); a.append(time.perf_counter() - t)
    assert r.success, r
    t = time.perf_counter(); subprocess.run(["/bin/true"]); b.append(time.perf_counter() - t)
print(json.dumps({"sandlock": a, "subprocess": b}))
"""


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def ms(x: float) -> str:
    return f"{x * 1000:7.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="iterations (default 300)")
    ap.add_argument("--sandlock-python", help="interpreter that has the sandlock package")
    ap.add_argument("--json", action="store_true", help="also print the numbers as JSON")
    args = ap.parse_args()

    import sandtrap

    sb = sandtrap.Sandbox(**POLICY)
    for _ in range(20):  # warm up: library load, engine fds, page cache
        assert sb.run(["/bin/true"]).success
        subprocess.run(["/bin/true"])

    t_sub: list[float] = []
    t_run: list[float] = []
    t_new: list[float] = []
    spawn_us: list[float] = []
    for _ in range(args.n):
        t = time.perf_counter()
        subprocess.run(["/bin/true"])
        t_sub.append(time.perf_counter() - t)

        t = time.perf_counter()
        r = sb.run(["/bin/true"])
        t_run.append(time.perf_counter() - t)
        assert r.success, r
        spawn_us.append(float(r.usage.get("spawn_us", 0)))

        t = time.perf_counter()
        with sandtrap.Sandbox(**POLICY) as fresh:
            fresh.run(["/bin/true"])
        t_new.append(time.perf_counter() - t)

    base = statistics.median(t_sub)
    print(
        f"sandtrap {sandtrap.__version__}, Python {sys.version.split()[0]}, n={args.n}, "
        f"isolation: tree_kill={r.isolation.get('tree_kill')} cgroup={r.isolation.get('cgroup') or '-'}"
    )
    print(f"{'':38} {'median':>10} {'p90':>10}  ratio")
    rows = [
        ("subprocess.run(['/bin/true'])", t_sub),
        ("sb.run(['/bin/true'])  (sandbox reused)", t_run),
        ("Sandbox(...).run(['/bin/true'])", t_new),
    ]
    for label, xs in rows:
        print(f"{label:38} {ms(statistics.median(xs))} {ms(pct(xs, 0.9))}  {statistics.median(xs) / base:5.2f}x")
    print(f"engine-reported spawn (median): {statistics.median(spawn_us):.0f} us")
    out = {
        "subprocess_ms": base * 1e3,
        "run_ms": statistics.median(t_run) * 1e3,
        "new_and_run_ms": statistics.median(t_new) * 1e3,
        "ratio_run": statistics.median(t_run) / base,
        "ratio_new_and_run": statistics.median(t_new) / base,
    }

    if args.sandlock_python:
        p = subprocess.run([args.sandlock_python, "-c", SANDLOCK_SNIPPET, str(args.n)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"sandlock: failed to run: {p.stderr.strip()[-500:]}")
        else:
            d = json.loads(p.stdout)
            sl, sp = statistics.median(d["sandlock"]), statistics.median(d["subprocess"])
            print(
                f"{'sandlock sb.run([/bin/true])':38} {ms(sl)} {ms(pct(d['sandlock'], 0.9))}  "
                f"{sl / sp:5.2f}x (vs subprocess in its own run: {ms(sp)})"
            )
            out.update(sandlock_ms=sl * 1e3, ratio_sandlock=sl / sp)
    if args.json:
        print(json.dumps(out))
    sb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
