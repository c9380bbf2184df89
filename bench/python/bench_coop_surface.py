"""Issue 19's benchmarks: a VirtualFS read/write loop and a snapshot/restore of a
namespace holding 1,000 objects, ours against the PyPI ``sandtrap`` package in the
same run.

    python3 bench/python/bench_coop_surface.py [--peer-python VENV/bin/python] [--reps N]
        [--baseline-src TREE] [--cases vfs,state]

Ours runs in this interpreter (``PYTHONPATH=bindings/python/src``); the peer runs
this same file with ``--peer`` in its own venv (``pip install 'sandtrap[kernel]'``),
so each package sees only itself. ``--baseline-src TREE`` also measures another
checkout's Python sources (``TREE/bindings/python/src``, e.g. ``mkdir /tmp/base && git archive REV
bindings/python/src core/guest/python/sandtrap_guest | tar -x -C /tmp/base``) in its own interpreter, in the same rounds: a before/after of a
change against the same peer run. Each case is timed ``--reps`` times, interleaved
ours/peer, and the median is reported (seconds), for ``isolation="none"`` and
``"process"``.

- ``vfs``: one exec that writes and reads back 200 files of 1 KiB in a VirtualFS
  (``open(..., "w").write``, ``open(...).read()``), the sandbox made beforehand.
- ``state``: an exec defines a class and binds 1,000 instances in a list; then the
  namespace is snapshotted and restored into a new sandbox, and an exec there reads
  it. Ours: ``sb.snapshot()`` / ``sandbox(policy, state=...)`` (source plus data).
  The peer offers no snapshot call: its documented way (serialization: pickling
  functions, classes and state across turns) is ``pickle.dumps(result.namespace)``
  and ``exec(..., namespace=pickle.loads(blob))`` in the new sandbox — pickle, which
  ours never does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VFS_CODE = """
data = 'x' * 1024
total = 0
for i in range(200):
    with open(f'/f{i % 20}.txt', 'w') as f:
        f.write(data)
    with open(f'/f{i % 20}.txt') as f:
        total += len(f.read())
"""
STATE_CODE = """
class Item:
    def __init__(self, i):
        self.i = i
        self.name = 'item' + str(i)
        self.tags = [i, i + 1]
    def double(self):
        return 2 * self.i
items = [Item(i) for i in range(1000)]
"""
READ_CODE = "s = sum(o.double() for o in items)"
LEVELS = ("none", "process")


def _median(fn, reps):
    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs), xs


# ----------------------------------------------------------------------- ours
def ours_cases():
    import sandtrap
    from sandtrap import Policy, VirtualFS, sandbox

    def vfs(level):
        sb = sandbox(Policy(timeout=60), isolation=level, filesystem=VirtualFS())
        sb.exec("x = 1")  # the worker started

        def run():
            r = sb.exec(VFS_CODE)
            assert r.error is None and r.namespace["total"] == 200 * 1024, r.error

        return run, sb.close

    def state(level):
        sb = sandbox(Policy(timeout=60), isolation=level)
        assert sb.exec(STATE_CODE).error is None

        def run():
            snap = sb.snapshot()
            with sandbox(Policy(timeout=60), isolation=level, state=snap) as sb2:
                r = sb2.exec(READ_CODE)
            assert r.error is None and r.namespace["s"] == 999000, r.error

        return run, sb.close

    return sandtrap.__file__, {"vfs": vfs, "state": state}


# ----------------------------------------------------------------------- peer
def peer_cases():
    import concurrent.futures.thread  # noqa: F401
    import pickle

    import landlock  # noqa: F401
    import pyseccomp  # noqa: F401 - its kernel worker needs these imported first here

    import sandtrap
    from sandtrap import Policy, VirtualFS, sandbox

    def vfs(level):
        sb = sandbox(Policy(timeout=60), isolation=level, filesystem=VirtualFS({}))
        sb.__enter__()
        sb.exec("x = 1")

        def run():
            r = sb.exec(VFS_CODE)
            assert r.error is None and r.namespace["total"] == 200 * 1024, r.error

        return run, lambda: sb.__exit__(None, None, None)

    def state(level):
        sb = sandbox(Policy(timeout=60), isolation=level)
        sb.__enter__()
        r0 = sb.exec(STATE_CODE)  # its namespace: what the code bound
        assert r0.error is None

        def run():
            blob = pickle.dumps(dict(r0.namespace))
            sb2 = sandbox(Policy(timeout=60), isolation=level)
            sb2.__enter__()
            try:
                r = sb2.exec(READ_CODE, namespace=pickle.loads(blob))
            finally:
                sb2.__exit__(None, None, None)
            assert r.error is None and r.namespace["s"] == 999000, r.error

        return run, lambda: sb.__exit__(None, None, None)

    return sandtrap.__file__, {"vfs": vfs, "state": state}


def measure(cases, reps) -> dict:
    out = {}
    for name, make in cases.items():
        for level in LEVELS:
            key = f"{name}/{level}"
            try:
                run, close = make(level)
                try:
                    run()  # warm
                    med, xs = _median(run, reps)
                finally:
                    close()
                out[key] = {"s": med, "all": xs}
            except Exception as e:
                out[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", action="store_true", help="(internal) measure the PyPI package here")
    ap.add_argument("--ours", action="store_true", help="(internal) measure this PYTHONPATH's package here")
    ap.add_argument("--baseline-src", help="a checkout whose bindings/python/src is measured too")
    ap.add_argument("--cases", default="vfs,state", help="which cases, comma-separated")
    ap.add_argument("--peer-python", default="/work/venv-coopsurface-peer/bin/python")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="ours/peer alternations")
    a = ap.parse_args()
    wanted = set(a.cases.split(","))
    if a.peer or a.ours:
        where, cases = peer_cases() if a.peer else ours_cases()
        cases = {k: v for k, v in cases.items() if k in wanted}
        print(json.dumps({"module": where, "results": measure(cases, a.reps)}))
        return 0

    def child(python, flag, env=None):
        p = subprocess.run(
            [python, os.path.abspath(__file__), flag, "--reps", str(a.reps), "--cases", a.cases],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd="/tmp",
            env=env,
        )
        try:
            return json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {"module": None, "results": {}, "error": p.stderr[-2000:]}

    base_env = None
    if a.baseline_src:
        base_env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(a.baseline_src), "bindings/python/src")}
    rounds = []
    for _ in range(a.rounds):
        where, cases = ours_cases()
        ours = measure({k: v for k, v in cases.items() if k in wanted}, a.reps)
        base = child(sys.executable, "--ours", base_env) if base_env else None
        peer = child(a.peer_python, "--peer")
        rounds.append((ours, peer["results"], base["results"] if base else {}))
        peer_where = peer.get("module")
        base_where = base.get("module") if base else None
    print(f"ours: {where}\npeer: {peer_where}" + (f"\nbaseline: {base_where}" if base_env else ""))
    head = f"{'case':<16}{'ours (s)':>12}{'peer (s)':>12}{'ours/peer':>11}"
    print(head + (f"{'base (s)':>12}{'base/peer':>11}" if base_env else ""))
    summary = {}

    def med(i, key):
        xs = [r[i][key]["s"] for r in rounds if "s" in r[i].get(key, {})]
        return statistics.median(xs) if xs else None

    for key in rounds[0][0]:
        om, pm, bm = med(0, key), med(1, key), med(2, key)
        if om is None or pm is None:
            err = rounds[0][0].get(key, {}).get("error") or rounds[0][1].get(key, {}).get("error")
            print(f"{key:<16} {err}")
            continue
        summary[key] = {"ours_s": om, "peer_s": pm, "ratio": om / pm}
        line = f"{key:<16}{om:>12.4f}{pm:>12.4f}{om / pm:>11.2f}"
        if bm is not None:
            summary[key].update(base_s=bm, base_ratio=bm / pm)
            line += f"{bm:>12.4f}{bm / pm:>11.2f}"
        print(line)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
