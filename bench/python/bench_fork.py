"""COW-fork map-reduce benchmark: ``fork(N)`` with trivial work, from a ready template
to every clone reaped and its output collected, against a plain single-process
``os.fork()`` loop of the same count in the same run. Reports clones per second and
the host's peak fds and memory.

    python3 bench/python/bench_fork.py [N] [--sandlock-python VENV/bin/python]

With --sandlock-python, fork(N) + reduce through the ``sandlock`` package (the system
the seed page describes, installed into its own venv) is timed in the same run,
beside the same fork + reduce through sandtrap.
"""
import os
import resource
import sys
import threading
import time

from sandtrap import Sandbox

args = [a for a in sys.argv[1:] if not a.startswith("--")]
N = int(args[0]) if args else 1000
SANDLOCK = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--sandlock-python=")), None)
if "--sandlock-python" in sys.argv:
    SANDLOCK = sys.argv[sys.argv.index("--sandlock-python") + 1]

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
print(f"sandtrap fork({N}) (template ready -> all collected): {fork_time * 1e3:8.1f} ms  "
      f"({fork_time / loop:.2f}x the loop; target <= 1.5x), {N / fork_time:.0f} clones/s")
print(f"template start + init: {(ready - t) * 1e3:.1f} ms")
print(f"host peak fds {peak_fds}, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")

t = time.perf_counter()
clones = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"], work_fn="print(CLONE_ID)").fork(N)
r = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"]).reduce(["wc", "-l"], clones)
ours = time.perf_counter() - t
assert r.stdout.strip() == str(N).encode()
print(f"sandtrap fork({N}) + reduce, from construction: {ours * 1e3:8.1f} ms")
if SANDLOCK:
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(SANDLOCK_SCRIPT)
    out = subprocess.run([SANDLOCK, f.name, str(N)], capture_output=True, text=True, timeout=600)
    if out.returncode == 0:
        theirs = float(out.stdout.strip().splitlines()[-1])
        print(f"sandlock fork({N}) + reduce, from construction: {theirs * 1e3:8.1f} ms "
              f"(sandtrap / sandlock = {ours / theirs:.2f}; target <= 0.5)")
    else:
        print(f"sandlock did not run: {out.stderr.strip()[-500:]}")
