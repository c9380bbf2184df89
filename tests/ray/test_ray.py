"""sandtrap.ray on a two-node local cluster (conftest.py): pools, distributed fork and
reduce, containment on the remote node, and a node that dies mid-run."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import work
from conftest import HEAD_PORT, WORKER_NM_PORT, cmdline, descendants, namespace_pids

from sandtrap import Sandbox
from sandtrap.errors import StImportDenied
from sandtrap.ray import SandboxPool

SYSTEM = [p for p in ("/usr", "/lib", "/lib64", "/bin", "/etc") if os.path.exists(p)]


@pytest.fixture(scope="module")
def pool(cluster):
    p = SandboxPool(Sandbox(fs_readable=SYSTEM), per_node=2, nodes=[cluster["head"], cluster["worker"]])
    yield p
    p.close()


def test_pool_runs_on_every_node(pool, cluster):
    seen = {}
    for node in pool.nodes:
        r = pool.submit(["/bin/sh", "-c", "echo $$; cat /proc/self/cgroup >/dev/null; echo ok"], node=node).result()
        assert r.success, r
        assert r.stdout.split()[-1] == b"ok"
        seen[node] = r
    assert set(seen) == {cluster["head"], cluster["worker"]}
    # map: every result comes back, no more in flight than the pool has slots
    outs = sorted(int(r.stdout) for r in pool.map([["/bin/echo", str(i)] for i in range(20)]))
    assert outs == list(range(20))


@pytest.mark.parametrize(
    "argv, want",
    [
        # a file outside the policy
        (["/bin/cat", "/root/.bashrc"], b"Permission denied"),
        # the Ray cluster's own control port: a sandbox on a node must not reach it
        (
            ["/usr/bin/python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {HEAD_PORT}), 2)"],
            b"PermissionError",
        ),
        # writing where the policy grants nothing
        (["/bin/sh", "-c", "echo x > /tmp/sandtrap-ray-escape"], b"Read-only file system"),
    ],
)
def test_attacks_fail_on_the_remote_node(pool, cluster, argv, want):
    r = pool.submit(argv, node=cluster["worker"]).result()
    assert not r.success
    assert want in r.stderr, r.stderr
    assert not os.path.exists("/tmp/sandtrap-ray-escape")


def test_signal_to_the_engine_fails_on_the_remote_node(pool, cluster, ray_actor_pid):
    pid = ray_actor_pid(pool, cluster["worker"])
    r = pool.submit(["/bin/kill", "-9", str(pid)], node=cluster["worker"]).result()
    assert not r.success
    assert os.path.exists(f"/proc/{pid}"), "the sandbox killed its node's engine"


@pytest.fixture
def ray_actor_pid(cluster):
    def get(pool, node):
        return cluster["ray"].get(pool._actors[node].pid.remote())

    return get


def test_cancel_kills_the_tree_on_its_node(pool, cluster, ray_actor_pid):
    engine = ray_actor_pid(pool, cluster["worker"])
    t = pool.submit(["/bin/sh", "-c", "sleep 300 & sleep 300"], node=cluster["worker"])
    deadline = time.time() + 30
    while not any("sleep 300" in cmdline(p) for p in descendants(engine)):
        assert time.time() < deadline, "the run did not start"
        time.sleep(0.1)
    t.cancel()
    r = t.result()
    assert r.cancelled
    deadline = time.time() + 10
    while any("sleep 300" in cmdline(p) for p in namespace_pids()):
        assert time.time() < deadline, "a process of the cancelled run outlived it"
        time.sleep(0.1)


def _mapper(**kw):
    return Sandbox(fs_readable=SYSTEM, init_fn=work.init, work_fn=work.work, **kw)


def test_distributed_fork_and_reduce_match_local(pool, cluster):
    reducer = Sandbox(fs_readable=SYSTEM)
    local = _mapper().fork(200).results()
    want = reducer.reduce(["/bin/cat"], local)
    assert want.success and len(want.stdout.splitlines()) == 200
    clones = _mapper().fork(200, cluster=pool)
    got = clones.results()
    assert [c.id for c in got] == list(range(200))
    assert clones.lost == []
    assert set(clones.isolation) == {cluster["head"], cluster["worker"]}
    assert reducer.reduce(["/bin/cat"], got).stdout == want.stdout
    assert reducer.reduce(["/bin/cat"], _mapper().fork(200, cluster=pool)).stdout == want.stdout
    # the reducer on a node of the caller's choosing
    assert pool.reduce(reducer, ["/bin/cat"], got, node=cluster["worker"]).stdout == want.stdout


def test_the_reducer_reads_clones_as_they_come(pool, cluster):
    # ids 0..9 (head) finish at once, 10..19 (worker) after 4 s: the reducer has read
    # the first ones long before the last exist
    src = "import time\nif CLONE_ID >= 10: time.sleep(4)\nprint(CLONE_ID)"
    mapper = Sandbox(fs_readable=SYSTEM, work_fn=src)
    reducer = Sandbox(fs_readable=SYSTEM)
    script = "read first; date +%s.%N; echo $first; cat"
    t0 = time.time()
    r = reducer.reduce(["/bin/sh", "-c", script], mapper.fork(20, cluster=pool, parallel=10))
    t1 = time.time()
    assert r.success, r.stderr
    lines = r.stdout.decode().split()
    first_read = float(lines[0])
    assert lines[1:] == [str(i) for i in range(20)]
    assert first_read < t1 - 2.5, (first_read - t0, t1 - t0)


def test_init_fn_runs_once_per_node(pool, cluster):
    # every clone of a node sees its node's template (one init_fn there); two nodes,
    # two templates, and the ids split between them in two contiguous ranges
    mapper = Sandbox(fs_readable=SYSTEM, init_fn=work.init_pid, work_fn=work.work_pid)
    got = [c.stdout.split() for c in mapper.fork(40, cluster=pool).results()]
    by_template: dict[bytes, list[int]] = {}
    for cid, tpl in got:
        by_template.setdefault(tpl, []).append(int(cid))
    assert sorted(sorted(v) for v in by_template.values()) == [list(range(20)), list(range(20, 40))]
    local = {c.stdout.split()[1] for c in mapper.fork(10).results()}
    assert len(local) == 1


def test_clone_ids_are_global(pool):
    out = Sandbox(fs_readable=SYSTEM, work_fn="import os\nprint(CLONE_ID, os.environ['CLONE_ID'])").fork(
        7, cluster=pool
    )
    got = {c.id: c.stdout.split() for c in out}
    assert sorted(got) == list(range(7))
    for i, (a, b) in got.items():
        assert int(a) == int(b) == i


def test_cooperative_exec_on_a_node(pool, cluster):
    r = pool.exec("import math\nx = math.sqrt(16)\nprint(x)", work.coop_policy, node=cluster["worker"])
    assert r.error is None, r.traceback
    assert r.stdout == "4.0\n" and r.namespace["x"] == 4.0
    assert r.isolation["level"] == "kernel"
    # state stays with that node's sandbox across calls
    assert pool.exec("print(x + 1)", work.coop_policy, node=cluster["worker"]).stdout == "5.0\n"
    # what the policy does not grant stays refused there
    bad = pool.exec("import os\nos.listdir('/')", work.coop_policy, node=cluster["worker"])
    assert isinstance(bad.error, StImportDenied) and "'os'" in str(bad.error), bad.traceback


def test_a_dead_node_reports_its_lost_clones_and_leaves_nothing(cluster, tmp_path):
    ray = cluster["ray"]
    pool = SandboxPool(Sandbox(fs_readable=SYSTEM), per_node=2, nodes=[cluster["head"], cluster["worker"]])
    engine = ray.get(pool._actors[cluster["worker"]].pid.remote())
    # ids 0..9 on the head finish at once; 10..19 on the worker sleep while the mark is there
    mark = tmp_path / "mark"
    mark.write_text("")
    src = f"import os, time\nif CLONE_ID >= 10 and os.path.exists({str(mark)!r}): time.sleep(300)\nprint(CLONE_ID)"
    mapper = Sandbox(fs_readable=[*SYSTEM, str(tmp_path)], work_fn=src)
    clones = mapper.fork(20, cluster=pool, parallel=10)
    deadline = time.time() + 60
    while len([p for p in descendants(engine) if "sandtrap_guest" in cmdline(p)]) < 5:
        assert time.time() < deadline, "the worker's clones did not start"
        time.sleep(0.2)
    sandboxed = descendants(engine)
    raylet = [
        p for p in namespace_pids() if "raylet" in cmdline(p) and f"--node_manager_port={WORKER_NM_PORT}" in cmdline(p)
    ]
    assert len(raylet) == 1, [cmdline(p) for p in namespace_pids()]
    os.kill(raylet[0], signal.SIGKILL)
    got = clones.results()
    assert [c.id for c in got] == list(range(10))
    assert clones.lost == list(range(10, 20))
    assert cluster["worker"] in clones.lost_nodes
    deadline = time.time() + 60
    while True:
        left = [p for p in sandboxed if os.path.exists(f"/proc/{p}") and not _zombie(p)]
        if not left:
            break
        alive = os.path.exists(f"/proc/{engine}") and not _zombie(engine)
        assert time.time() < deadline, f"left behind (engine alive: {alive}): {[cmdline(p) for p in left]}"
        time.sleep(0.5)
    # the lost clones, retried (their own ids) on the node that is left
    mark.unlink()
    again = clones.retry()
    assert [(c.id, c.stdout) for c in again.results()] == [(i, b"%d\n" % i) for i in range(10, 20)]
    assert again.lost == [] and set(again.isolation) == {cluster["head"]}


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
