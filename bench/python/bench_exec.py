"""A judged execve: sandtrap against the peer (PyPI sandlock), interleaved in one run.

  PYTHONPATH=bindings/python/src SANDTRAP_LIB=build/libsandtrap.so \\
      /path/to/venv-with-sandlock/bin/python bench/python/bench_exec.py

A C program forks and execs /bin/true N times, without a policy_fn and with one that
allows every event (each execve is then copied, judged by a Python callback and, in
sandtrap, continued with the caller's memory held: docs/security.md, "Calls judged
by the host"; sandlock freezes the sandbox's threads for it). Medians of the rounds;
the per-exec cost of the judge is (judged - plain) / N.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

N = int(os.environ.get("BENCH_N", "200"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
# the same readable trees for both systems (sandlock needs /lib64 and /etc to exec):
# a longer list costs the kernel more per path walk, which is not the judge's cost
RO = ["/usr", "/lib", "/bin", "/lib64", "/etc"]

LOOP_C = r"""
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
	long n = atol(argv[1]), i;
	char *av[] = {"/bin/true", 0};
	for (i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0) { execve(av[0], av, environ); _exit(127); }
		int st; waitpid(p, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
	}
	return 0;
}
"""


def timed(f) -> float:
    t = time.perf_counter()
    r = f()
    assert r.success, r
    return time.perf_counter() - t


def main() -> None:
    import sandtrap

    d = tempfile.mkdtemp(prefix="bench-x-")
    os.chmod(d, 0o755)
    src, loop = os.path.join(d, "loop.c"), os.path.join(d, "loop")
    open(src, "w").write(LOOP_C)  # noqa: SIM115
    subprocess.run(["gcc", "-O2", "-o", loop, src], check=True)
    allow = lambda e, c: 0  # noqa: E731
    plain = sandtrap.Sandbox(fs_readable=RO + [d])
    judged = sandtrap.Sandbox(fs_readable=RO + [d], policy_fn=allow)
    cases = {
        "sandtrap plain": lambda: plain.run([loop, str(N)]),
        "sandtrap judged": lambda: judged.run([loop, str(N)]),
    }
    try:
        import sandlock

        slp = sandlock.Sandbox(fs_readable=RO + [d])
        slj = sandlock.Sandbox(fs_readable=RO + [d], policy_fn=allow)
        cases["sandlock plain"] = lambda: slp.run([loop, str(N)])
        cases["sandlock judged"] = lambda: slj.run([loop, str(N)])
    except Exception as e:
        print(f"sandlock: skipped ({e})", file=sys.stderr)
    for f in cases.values():
        timed(f)  # warm
    res: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(ROUNDS):
        for k, f in cases.items():
            res[k].append(timed(f))
    med = {k: statistics.median(v) for k, v in res.items()}
    for k, v in med.items():
        print(f"{k:20s} {v * 1e3:9.1f} ms for {N} fork+exec")
    per = {}
    for who in ["sandtrap", "sandlock"]:
        if f"{who} judged" in med:
            per[who] = (med[f"{who} judged"] - med[f"{who} plain"]) / N
            print(f"{who}: per judged execve {per[who] * 1e6:.0f} µs")
    if len(per) == 2:
        print(f"ratio sandtrap/sandlock: {per['sandtrap'] / per['sandlock']:.2f}")


if __name__ == "__main__":
    main()
