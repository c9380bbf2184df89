"""COW-fork map-reduce benchmark: ``fork(N)`` with trivial work, from a ready template
to every clone reaped and its output collected, against a plain single-process
``os.fork()`` loop of the same count in the same run. Reports clones per second and
the host's peak fds and memory.

    python3 bench/python/bench_fork.py [N] [--sandlock-python VENV/bin/python] [--repeat K]

With --sandlock-python, fork(N) + reduce through the ``sandlock`` package (the system
the seed page describes, installed into its own venv) is timed in the same run,
beside the same fork + reduce through sandtrap. --repeat K times both K times,
alternating, and reports the medians (for a machine that others share).
"""

import os
import resource
import sys
import threading
import time

from sandtrap import Sandbox

N, SANDLOCK, REPEAT = 1000, None, 1
_argv = sys.argv[1:]
while _argv:
    a = _argv.pop(0)
    if a.startswith("--") and "=" in a:
        a, v = a.split("=", 1)
    elif a in ("--sandlock-python", "--repeat"):
        v = _argv.pop(0)
    if a == "--sandlock-python":
        SANDLOCK = v
    elif a == "--repeat":
        REPEAT = int(v)
    else:
        N = int(a)

SANDLOCK_SCRIPT = """
import sys, time
from sandlock import Sandbox
def init(): pass
def work(clone_id): print(clone_id)
if __name__ == "__main__":
    n = int(sys.argv[1])
    t = time.perf_counter()
    clones = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"], init_fn=init, work_fn=work).fork(n)
    r = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"]).reduce(["wc", "-l"], clones)
    assert r.stdout.strip() == str(n).encode(), r.stdout
    print(time.perf_counter() - t)
"""


def plain_loop(n):
    t = time.perf_counter()
    for i in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"%d\n" % i)
            os._exit(0)
        os.close(w)
        os.read(r, 64)
        os.close(r)
        os.waitpid(pid, 0)
    return time.perf_counter() - t


peak_fds = 0
stop = False


def watch():
    global peak_fds
    while not stop:
        peak_fds = max(peak_fds, len(os.listdir("/proc/self/fd")))
        time.sleep(0.005)


loop = plain_loop(N)
mapper = Sandbox(fs_readable=["/usr", "/lib", "/bin"], work_fn="print(CLONE_ID)")
threading.Thread(target=watch, daemon=True).start()
t = time.perf_counter()
clones = mapper.fork(N)
ready = time.perf_counter()
results = clones.results()
done = time.perf_counter()
stop = True
assert len(results) == N and all(c.success for c in results)
fork_time = done - ready
print(f"plain os.fork() loop of {N}:              {loop * 1e3:8.1f} ms")
print(
    f"sandtrap fork({N}) (template ready -> all collected): {fork_time * 1e3:8.1f} ms  "
    f"({fork_time / loop:.2f}x the loop; target <= 1.5x), {N / fork_time:.0f} clones/s"
)
print(f"template start + init: {(ready - t) * 1e3:.1f} ms")
print(f"host peak fds {peak_fds}, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")


def ours_once():
    t = time.perf_counter()
    clones = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"], work_fn="print(CLONE_ID)").fork(N)
    r = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"]).reduce(["wc", "-l"], clones)
    took = time.perf_counter() - t
    assert r.stdout.strip() == str(N).encode()
    return took


def theirs_once(script):
    import subprocess

    out = subprocess.run([SANDLOCK, script, str(N)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print(f"sandlock did not run: {out.stderr.strip()[-500:]}")
        return None
    return float(out.stdout.strip().splitlines()[-1])


script = None
if SANDLOCK:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SANDLOCK_SCRIPT)
    script = f.name
ours_all, theirs_all = [], []
for _ in range(REPEAT):
    ours_all.append(ours_once())
    if script:
        theirs_all.append(theirs_once(script))
        if theirs_all[-1] is None:
            break
ours = sorted(ours_all)[len(ours_all) // 2]
each = f" (median of {', '.join(f'{x * 1e3:.0f}' for x in ours_all)})" if REPEAT > 1 else ""
print(f"sandtrap fork({N}) + reduce, from construction: {ours * 1e3:8.1f} ms{each}")
if script and None not in theirs_all:
    theirs = sorted(theirs_all)[len(theirs_all) // 2]
    each = f" (median of {', '.join(f'{x * 1e3:.0f}' for x in theirs_all)})" if REPEAT > 1 else ""
    print(
        f"sandlock fork({N}) + reduce, from construction: {theirs * 1e3:8.1f} ms{each} "
        f"(sandtrap / sandlock = {ours / theirs:.2f}; target <= 0.5)"
    )
    if REPEAT > 1:
        ratios = sorted(a / b for a, b in zip(ours_all, theirs_all, strict=True))
        print(f"per-round ratios {', '.join(f'{x:.2f}' for x in ratios)}; median {ratios[len(ratios) // 2]:.2f}")
if script:
    os.unlink(script)
