"""Handlers: sandtrap against the peer (PyPI sandlock), interleaved in one run.

  PYTHONPATH=bindings/python/src SANDTRAP_LIB=build/libsandtrap.so \
      /path/to/venv-with-sandlock/bin/python bench/python/bench_handlers.py

Measures (medians): /bin/true without handlers; /bin/true under a handler on a call
it never makes (the handler zygote: nothing trapped); a C loop of N getppid() with
a Python handler answering continue on each, against the same loop untrapped: the
per-call cost of a host-judged call; the same with N stat() calls and the handler on
newfstatat (sandtrap performs an allowed stat on the path it judged and writes the
result back — docs/security.md, "Calls judged by the host"; sandlock lets the kernel
redo it, raceable). sandlock is skipped when not importable.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

N = int(os.environ.get("BENCH_N", "10000"))
NS = N // 5  # stat calls
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
RO = ["/usr", "/lib", "/bin"]

LOOP_C = r"""
#include <unistd.h>
#include <stdlib.h>
#include <sys/stat.h>
int main(int argc, char **argv) {
	long n = atol(argv[1]), i;
	struct stat st;
	if (argc > 2) {  /* stat(path) n times: newfstatat */
		for (i = 0; i < n; i++) if (stat(argv[2], &st) != 0) return 1;
		return 0;
	}
	for (i = 0; i < n; i++) getppid();
	return 0;
}
"""


def timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main() -> None:
    import sandtrap
    from sandtrap import Handler, NotifAction

    d = tempfile.mkdtemp(prefix="bench-h-")
    os.chmod(d, 0o755)
    src, loop = os.path.join(d, "loop.c"), os.path.join(d, "loop")
    open(src, "w").write(LOOP_C)  # noqa: SIM115
    subprocess.run(["gcc", "-O2", "-o", loop, src], check=True)
    target = src

    class Cont(Handler):
        def handle(self, ctx):
            return NotifAction.continue_()

    st = sandtrap.Sandbox(fs_readable=RO + [d])
    peers = {}
    try:
        import sandlock

        class PCont(sandlock.Handler):
            def handle(self, ctx):
                return sandlock.NotifAction.continue_()

        sl = sandlock.Sandbox(fs_readable=RO + [d, "/lib64", "/etc"])
        assert sl.run(["/bin/true"]).success
        peers = {
            "sandlock true": lambda: sl.run(["/bin/true"]),
            "sandlock true, handler (not called)": lambda: sl.run_with_handlers(["/bin/true"], [("mknodat", PCont())]),
            "sandlock loop untrapped": lambda: sl.run([loop, str(N)]),
            "sandlock loop, handler on getppid": lambda: sl.run_with_handlers([loop, str(N)], [(110, PCont())]),
            "sandlock stat untrapped": lambda: sl.run([loop, str(NS), target]),
            "sandlock stat, handler on newfstatat": lambda: sl.run_with_handlers(
                [loop, str(NS), target], [(262, PCont())]
            ),
        }
    except Exception as e:
        print(f"sandlock: skipped ({e})", file=sys.stderr)

    ours = {
        "sandtrap true": lambda: st.run(["/bin/true"]),
        "sandtrap true, handler (not called)": lambda: st.run_with_handlers(["/bin/true"], [("mknodat", Cont())]),
        "sandtrap loop untrapped": lambda: st.run([loop, str(N)]),
        "sandtrap loop, handler on getppid": lambda: st.run_with_handlers([loop, str(N)], [("getppid", Cont())]),
        "sandtrap stat untrapped": lambda: st.run([loop, str(NS), target]),
        "sandtrap stat, handler on newfstatat": lambda: st.run_with_handlers(
            [loop, str(NS), target], [("newfstatat", Cont())]
        ),
    }
    r = st.run_with_handlers([loop, "3"], [("getppid", Cont())])
    assert r.success, r
    r = st.run_with_handlers([loop, "3", target], [("newfstatat", Cont())])
    assert r.success, r
    cases = {**ours, **peers}
    spawn_reps = 50
    res: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(ROUNDS):
        for k, f in cases.items():
            reps = 3 if "loop" in k or "stat" in k else spawn_reps
            for _ in range(reps):
                res[k].append(timed(f))
    med = {k: statistics.median(v) for k, v in res.items()}
    for k, v in med.items():
        print(f"{k:45s} {v * 1e3:9.3f} ms")
    for who in ["sandtrap"] + (["sandlock"] if peers else []):
        per = (med[f"{who} loop, handler on getppid"] - med[f"{who} loop untrapped"]) / N
        print(
            f"{who}: per host-judged call {per * 1e6:.1f} µs; "
            f"handler zygote / plain /bin/true {med[f'{who} true, handler (not called)'] / med[f'{who} true']:.2f}"
        )
    if peers:
        a = med["sandtrap loop, handler on getppid"] - med["sandtrap loop untrapped"]
        b = med["sandlock loop, handler on getppid"] - med["sandlock loop untrapped"]
        print(f"per-call ratio sandtrap/sandlock: {a / b:.2f}")
        a = med["sandtrap stat, handler on newfstatat"] - med["sandtrap stat untrapped"]
        b = med["sandlock stat, handler on newfstatat"] - med["sandlock stat untrapped"]
        print(f"judged stat: sandtrap {a / NS * 1e6:.1f} µs, sandlock {b / NS * 1e6:.1f} µs, ratio {a / b:.2f}")
        # the marginal cost above leaves out that sandlock supervises every stat even
        # without a handler (its "untrapped" loop is trapped): per stat in all, too
        a, b = med["sandtrap stat, handler on newfstatat"], med["sandlock stat, handler on newfstatat"]
        print(
            f"judged stat, all of it: sandtrap {a / NS * 1e6:.1f} µs, sandlock {b / NS * 1e6:.1f} µs, ratio {a / b:.2f}"
        )
        print(f"/bin/true ratio sandtrap/sandlock: {med['sandtrap true'] / med['sandlock true']:.2f}")


if __name__ == "__main__":
    main()
