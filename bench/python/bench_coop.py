"""Cooperative Python sandbox benchmark, all in one run:

1. a warm ``exec("x = 1")`` at each isolation level,
2. a cold kernel sandbox (construct + first exec),
3. a CPU-bound loop under tick counting against plain CPython ``exec``,
against a plain ``subprocess.run(["/bin/true"])`` spawn measured in the same run.

    python3 bench/python/bench_coop.py [N]
"""
import statistics
import subprocess
import sys
import tempfile
import time

from sandtrap._coop import IsolatedFS, Policy, sandbox

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def median(fn, n):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


spawn = median(lambda: subprocess.run(["/bin/true"]), N)
print(f"baseline: subprocess.run(['/bin/true'])       {spawn * 1e3:8.3f} ms")
root = tempfile.mkdtemp()
for level in ("none", "process", "kernel"):
    sb = sandbox(Policy(timeout=10), isolation=level, filesystem=IsolatedFS(root))
    sb.exec("x = 1")
    warm = median(lambda: sb.exec("x = 1"), N)
    sb.close()
    print(f"warm exec('x = 1') at {level:8}              {warm * 1e3:8.3f} ms  ({warm / spawn:.2f}x the spawn)")


def cold():
    sb = sandbox(Policy(timeout=10), isolation="kernel", filesystem=IsolatedFS(root))
    sb.exec("x = 1")
    sb.close()


c = median(cold, max(5, N // 20))
print(f"cold kernel sandbox (construct + first exec) {c * 1e3:8.3f} ms  ({c / spawn:.1f}x the spawn; target <= 10x)")

LOOP = "s = 0\nfor i in range(1_000_000):\n    s += i * 2 % 7\n"
plain = min(median(lambda: exec(LOOP, {}), 3) for _ in range(3))
sb = sandbox(Policy(timeout=60), isolation="none")
guarded = min(median(lambda: sb.exec(LOOP), 3) for _ in range(3))
print(f"CPU-bound loop: plain exec {plain * 1e3:.1f} ms, sandboxed {guarded * 1e3:.1f} ms "
      f"({guarded / plain:.2f}x; target <= 1.5x)")
