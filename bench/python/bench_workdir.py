#!/usr/bin/env python3
"""The copy-on-write workdir: its cost on a spawn, and a dry run against sandlock.

    python3 bench/python/bench_workdir.py [-n 300] [-m 15] [--rounds 3] [--sandlock-python /path/to/venv/bin/python]

Measured in the same run, interleaved:
  * sb.run(["/bin/true"]) without and with ``workdir`` (a Sandbox built once each;
    with a workdir every run gets a tmpfs and an overlay of its own, made ahead by
    the next run's pid 1, and its (empty) upper layer is read afterwards)
  * a dry run of a command writing 1,000 small files in the workdir (one Python
    process: ``open(f"f{i}", "w").write("x")``): sandtrap's ``dry_run``, which lists
    the 1,000 changes and drops them; with --sandlock-python, the same command
    through sandlock (``workdir`` and ``on_exit=ABORT``: it runs, lists
    ``result.changes`` and discards them), each round in that interpreter.
Prints medians and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SYS = ["/usr", "/lib", "/bin", "/etc"]
WRITE_1000 = "for i in range(1000):\n    open(f'f{i}', 'w').write('x')\n"

SANDLOCK_SNIPPET = r"""
import json, sys, time
from sandlock import Sandbox, BranchAction
wd, n, code = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sb = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"], fs_writable=[wd], workdir=wd, cwd=wd,
             on_exit=BranchAction.ABORT, on_error=BranchAction.ABORT)
r = sb.run(["/usr/bin/python3", "-c", code])  # warm up
assert r.success, r
out = []
for _ in range(n):
    t = time.perf_counter()
    r = sb.run(["/usr/bin/python3", "-c", code])
    out.append(time.perf_counter() - t)
    assert r.success and len(r.changes) == 1000, (r, len(r.changes))
print(json.dumps(out))
"""


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def ms(x: float) -> str:
    return f"{x * 1000:8.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=300, help="/bin/true runs per contender (default 300)")
    ap.add_argument("-m", type=int, default=15, help="dry runs per contender per round (default 15)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sandlock-python", help="interpreter that has the sandlock package")
    args = ap.parse_args()

    import sandtrap

    base = tempfile.mkdtemp(prefix="bench-workdir-")
    os.chmod(base, 0o755)
    try:
        wd = os.path.join(base, "w")
        os.mkdir(wd)
        with open(os.path.join(wd, "README"), "w") as f:
            f.write("a checkout\n")

        plain = sandtrap.Sandbox(fs_readable=SYS)
        cow = sandtrap.Sandbox(fs_readable=SYS, fs_writable=[wd], workdir=wd)
        for _ in range(20):
            assert plain.run(["/bin/true"]).success and cow.run(["/bin/true"]).success
        t_plain: list[float] = []
        t_cow: list[float] = []
        for _ in range(args.n):
            t = time.perf_counter()
            r = plain.run(["/bin/true"])
            t_plain.append(time.perf_counter() - t)
            assert r.success
            t = time.perf_counter()
            r = cow.run(["/bin/true"])
            t_cow.append(time.perf_counter() - t)
            assert r.success and r.changes == [] and r.branch == "committed"
        print(f"/bin/true, no workdir    median {ms(med(t_plain))}")
        print(f"/bin/true, COW workdir   median {ms(med(t_cow))}   (+{(med(t_cow) - med(t_plain)) * 1e6:.0f} us)")

        dry = sandtrap.Sandbox(fs_readable=SYS, fs_writable=[wd], workdir=wd, cwd=wd)
        r = dry.dry_run(["/usr/bin/python3", "-c", WRITE_1000])
        assert r.success and len(r.changes) == 1000, r
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.rounds):
            for _ in range(args.m):
                t = time.perf_counter()
                r = dry.dry_run(["/usr/bin/python3", "-c", WRITE_1000])
                ours.append(time.perf_counter() - t)
                assert r.success and len(r.changes) == 1000, r
            if args.sandlock_python:
                out = subprocess.run(
                    [args.sandlock_python, "-c", SANDLOCK_SNIPPET, wd, str(args.m), WRITE_1000],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                theirs.extend(json.loads(out.stdout.strip().splitlines()[-1]))
        assert os.listdir(wd) == ["README"], os.listdir(wd)
        print(f"dry run, 1,000 files     sandtrap median {ms(med(ours))}")
        if theirs:
            print(
                f"                         sandlock median {ms(med(theirs))}   sandtrap/sandlock = {med(ours) / med(theirs):.2f}"
            )
        for sb in (plain, cow, dry):
            sb.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
