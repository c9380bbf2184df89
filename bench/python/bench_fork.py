"""COW-fork map-reduce benchmark: ``fork(N)`` with trivial work, from a ready template
to every clone reaped and its output collected, against a plain single-process
``os.fork()`` loop of the same count in the same run. Reports clones per second and
the host's peak fds and memory.

    python3 bench/python/bench_fork.py [N]
"""
import os
import resource
import sys
import threading
import time

from sandtrap import Sandbox

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


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
