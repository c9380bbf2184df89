#!/usr/bin/env python3
"""The chroot: its cost on a spawn.

    python3 bench/python/bench_chroot.py [-n 300] [--rounds 3]

Measured in the same run, interleaved: sb.run(["/bin/true"]) without and with
``chroot`` (a Sandbox built once each; the chroot's view is laid out once per
sandbox, when its zygote starts: a root with the host's /usr mounted read-only,
the merged-/usr links, sandtrap's /dev and a hidden /proc). Also the build of
each sandbox (its zygote's start, where the chroot's mounts are made). Prints
medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from sandtrap import Sandbox


def rootfs(top: str) -> str:
    root = os.path.join(top, "root")
    for d in ("usr", "etc", "dev", "proc", "tmp"):
        os.makedirs(os.path.join(root, d))
    for name in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{name}", os.path.join(root, name))
    return root


def per_run(sb: Sandbox, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        r = sb.run(["/bin/true"])
        assert r.success, r
    return (time.perf_counter() - t) / n


def build(kw: dict) -> float:
    t = time.perf_counter()
    sb = Sandbox(**kw)
    r = sb.run(["/bin/true"])  # the zygote starts with the first run
    assert r.success, r
    dt = time.perf_counter() - t
    sb.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        root = rootfs(top)
        plain = {"fs_readable": ["/usr", "/lib", "/bin", "/etc"]}
        chrooted = {"chroot": root, "fs_mount_ro": {"/usr": "/usr"}, "fs_readable": ["/usr", "/lib", "/bin", "/etc"]}
        sbs = {"no chroot": Sandbox(**plain), "chroot": Sandbox(**chrooted)}
        for sb in sbs.values():
            per_run(sb, 20)  # warm up
        runs: dict[str, list[float]] = {k: [] for k in sbs}
        builds: dict[str, list[float]] = {k: [] for k in sbs}
        for _ in range(a.rounds):
            for k, sb in sbs.items():
                runs[k].append(per_run(sb, a.n))
            for k, kw in (("no chroot", plain), ("chroot", chrooted)):
                builds[k].append(statistics.median(build(kw) for _ in range(10)))
        for sb in sbs.values():
            sb.close()
    for k in sbs:
        print(
            f"{k:10} run /bin/true {statistics.median(runs[k]) * 1e3:7.2f} ms   build + first run {statistics.median(builds[k]) * 1e3:7.2f} ms"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
