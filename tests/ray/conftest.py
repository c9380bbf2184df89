"""A two-node Ray cluster of this test run's own, on loopback.

``make test-ray`` runs pytest inside a network and pid namespace of its own
(``unshare --net --pid --fork --mount-proc``, loopback up): Ray outside one picks the
machine's interface address even when told 127.0.0.1; inside, every address is
127.0.0.1, and every process the cluster starts is in the namespace. The cluster is
stopped by the pids it started (the processes of this namespace that are not the test
run's own), never by a name; the namespace's end kills whatever is left.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HEAD_PORT = 6399
WORKER_NM_PORT = 6411  # the worker node's raylet, found by it to kill it


def _in_own_namespace() -> bool:
    return os.environ.get("SANDTRAP_RAY_NETNS") == "1" and os.getpid() < 100


def _ours() -> set[int]:
    """This process and its ancestors (the namespace's init included)."""
    me, out = os.getpid(), set()
    while me > 0:
        out.add(me)
        with open(f"/proc/{me}/stat") as f:
            me = int(f.read().rsplit(")", 1)[1].split()[1])
    return out


def namespace_pids() -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in namespace_pids():
        try:
            with open(f"/proc/{p}/stat") as f:
                pp = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(pp, []).append(p)
    out, todo = set(), [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


@pytest.fixture(scope="session")
def cluster():
    if not _in_own_namespace():
        pytest.fail("run these tests through `make test-ray` (a network and pid namespace of their own)")
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    tmp = tempfile.mkdtemp(prefix="rayt", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=2", "--object-store-memory=80000000", "--disable-usage-stats"]
    before = namespace_pids()
    subprocess.run(
        [ray_bin, "start", "--head", f"--port={HEAD_PORT}", "--include-dashboard=false", f"--temp-dir={tmp}", *common],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [
            ray_bin,
            "start",
            f"--address=127.0.0.1:{HEAD_PORT}",
            f"--node-manager-port={WORKER_NM_PORT}",
            f"--temp-dir={tmp}",
            *common,
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    import ray

    ray.init(address=f"127.0.0.1:{HEAD_PORT}", log_to_driver=False)
    deadline = time.time() + 60
    while sum(n["Alive"] for n in ray.nodes()) < 2:
        assert time.time() < deadline, "the worker node did not join"
        time.sleep(0.2)
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n.get("Resources", {}).get("node:__internal_head__"))
    worker = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
    started = namespace_pids() - before - _ours()
    try:
        yield {"head": head, "worker": worker, "ray": ray, "tmp": tmp}
    finally:
        ray.shutdown()
        mine = _ours()
        procs = (started | (namespace_pids() - before)) - mine
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in procs:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            time.sleep(1)
        shutil.rmtree(tmp, ignore_errors=True)
