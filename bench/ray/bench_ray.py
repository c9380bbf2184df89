"""sandtrap.ray's cost: ``pool.run`` over a local ``sb.run`` of the same command, and
``fork(N)`` through Ray on one node against the same fork locally, in the same run.

    make bench-ray        (a one-node Ray cluster in a network and pid namespace of
                           its own, as tests/ray runs; Ray in build/ray-venv)

Prints medians of K alternating repetitions (the machine may be shared).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from sandtrap import Sandbox

RUNS, N, K = 200, 1000, 5
SYSTEM = [p for p in ("/usr", "/lib", "/lib64", "/bin", "/etc") if os.path.exists(p)]


def main() -> None:
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    tmp = tempfile.mkdtemp(prefix="rayb", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            "--port=6399",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={tmp}",
            "--object-store-memory=80000000",
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    import ray

    from sandtrap.ray import SandboxPool

    ray.init(address="127.0.0.1:6399", log_to_driver=False)
    sb = Sandbox(fs_readable=SYSTEM)
    pool = SandboxPool(sb, per_node=1)
    mapper = Sandbox(fs_readable=SYSTEM, work_fn="print(CLONE_ID)")
    pool.run(["/bin/true"])  # the node's sandbox is built
    sb.run(["/bin/true"])

    def per_run(f) -> float:
        t = time.perf_counter()
        for _ in range(RUNS):
            assert f(["/bin/true"]).success
        return (time.perf_counter() - t) / RUNS

    def fork_time(**kw) -> float:
        t = time.perf_counter()
        got = mapper.fork(N, **kw).results()
        assert len(got) == N
        return time.perf_counter() - t

    local, remote, flocal, fray = [], [], [], []
    for _ in range(K):
        local.append(per_run(sb.run))
        remote.append(per_run(pool.run))
        flocal.append(fork_time())
        fray.append(fork_time(cluster=pool))
    lo, re_ = statistics.median(local), statistics.median(remote)
    fl, fr = statistics.median(flocal), statistics.median(fray)
    print(
        f"/bin/true, {RUNS} runs x {K}: local sb.run {lo * 1e3:.2f} ms, pool.run (1 node, 1 slot) {re_ * 1e3:.2f} ms: "
        f"+{(re_ - lo) * 1e3:.2f} ms per call ({re_ / lo:.2f}x)"
    )
    print(f"fork({N}) x {K}: local {fl * 1e3:.0f} ms, through Ray on one node {fr * 1e3:.0f} ms ({fr / fl:.2f}x)")
    pool.close()
    ray.shutdown()


if __name__ == "__main__":
    main()
