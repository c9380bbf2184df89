"""sandtrap on a Ray cluster: a pool of sandboxes across the nodes, and a map-reduce
whose clones are forked on every node (``pip install 'sandtrap[ray]'``).

sandtrap stays a local sandbox: each node's sandboxes are built and confined by that
node's engine and kernel (docs/scale.md). This module places one engine per node
(a Ray actor pinned to the node, serving ``per_node`` sandboxes at once) and moves only
data between the driver and the nodes: the policy map, argv, stdin bytes, the engine's
response maps and clone results (bytes, ints, the isolation report). Functions for
``fork`` cross as names (``"module:qualname"``) or source text, exactly as they reach a
local template; the module must be importable on every node (the same paths, or a
Ray ``runtime_env``).

>>> pool = SandboxPool(Sandbox(fs_readable=["/usr", "/lib", "/etc"]), per_node=4)
>>> pool.run(["uname", "-n"]).stdout
>>> for r in pool.map([["echo", str(i)] for i in range(100)]): ...
>>> clones = mapper.fork(1000, cluster=pool)   # init_fn once per node
>>> reducer.reduce(["sort"], clones)
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

from . import _fork
from ._errors import InvalidArgument
from ._result import Denial, Result
from ._sandbox import Argv, Sandbox, _outcome, _restore, _wait_async_with

__all__ = ["SandboxPool", "PoolTask", "ClusterClones", "NodeLost"]


def _ray() -> Any:
    try:
        import ray  # pyright: ignore[reportMissingImports]
    except ImportError as e:  # pragma: no cover - depends on the extra
        raise ImportError("sandtrap.ray needs Ray: pip install 'sandtrap[ray]'") from e
    return ray


class NodeLost(Exception):
    """The node serving a call died (its engine and every sandbox on it with it)."""


def _policy_of(sb: Sandbox) -> dict[str, Any]:
    if getattr(sb, "_policy_fn", None) is not None:
        raise InvalidArgument("a sandbox with policy_fn cannot run on a cluster: the callback would have to cross")
    return sb.policy


def _die_with_raylet() -> None:
    """End this actor's process when its node's raylet (the parent that started it)
    is gone. A Ray worker whose raylet was killed can live on (seen as an
    unprivileged user), and with it this engine and every sandbox it holds; the
    process's exit takes the zygotes with it (their parent-death signal), so a dead
    node's sandboxes never outlive it."""
    import os
    import select

    try:
        fd = os.pidfd_open(os.getppid())
    except OSError:  # no pidfds (kernel < 5.3): nothing to watch by
        return

    def watch() -> None:
        select.select([fd], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="sandtrap-raylet-watch", daemon=True).start()


class _Node:
    """The engine of one node (a Ray actor's body): sandboxes built from policy maps,
    kept per policy, and runs/forks whose results go back as data."""

    def __init__(self) -> None:
        import concurrent.futures

        self._boxes: dict[Any, Any] = {}  # policy -> Sandbox, (coop, ...) -> CoopSandbox
        # blocking calls (a template's start, a clone stream, a cooperative exec) run
        # here, off the actor's event loop, so that one never holds up the others
        self._threads = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="sandtrap-node")
        _die_with_raylet()

    def _box(self, policy: dict[str, Any]) -> Sandbox:
        import msgpack

        key = msgpack.packb(policy, use_bin_type=True)
        sb = self._boxes.get(key)
        if sb is None:
            sb = self._boxes[key] = _restore(dict(policy))
        return sb

    def node_id(self) -> str:
        return str(_ray().get_runtime_context().get_node_id())

    def pid(self) -> int:
        import os

        return os.getpid()

    async def run(self, policy: dict[str, Any], argv: list[Any], kw: dict[str, Any]) -> tuple[int, Any]:
        sb = self._box(policy)
        call, req = sb._run_request(
            argv, kw.get("timeout"), kw.get("stdin"), kw.get("env"), kw.get("cwd"), kw.get("max_output")
        )
        # cancelling this task (ray.cancel) kills the run's tree before it returns
        out: tuple[int, Any] = await _wait_async_with(call, req, lambda rc, resp: (rc, resp))
        return out

    async def reduce(
        self, policy: dict[str, Any], argv: list[Any], items: list[dict[str, Any]], timeout: Any
    ) -> tuple[int, Any]:
        sb = self._box(policy)
        call, req = sb._run_request(argv, timeout, None, None, None, None, op="reduce", clones=items)
        out: tuple[int, Any] = await _wait_async_with(call, req, lambda rc, resp: (rc, resp))
        return out

    async def coop_exec(self, factory: str, roots: list[str], level: str, code: str, namespace: Any) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        out: dict[str, Any] = await loop.run_in_executor(
            self._threads, self._coop_exec, factory, roots, level, code, namespace
        )
        return out

    def _coop_exec(self, factory: str, roots: list[str], level: str, code: str, namespace: Any) -> dict[str, Any]:
        """The cooperative sandbox on this node: ``factory`` ("module:qualname",
        imported here, from ``roots`` if not already importable) builds its Policy;
        the result goes back as data."""
        import importlib

        from sandtrap_guest.wire import error_to_wire, to_wire

        from ._coop import sandbox as coop_sandbox

        key = ("coop", factory, level)
        sb = self._boxes.get(key)
        if sb is None:
            import sys

            sys.path[:0] = [r for r in roots if r not in sys.path]
            mod, _, qual = factory.partition(":")
            obj: Any = importlib.import_module(mod)
            for part in qual.split("."):
                obj = getattr(obj, part)
            sb = self._boxes[key] = coop_sandbox(obj(), isolation=level)
        r = sb.exec(code, namespace=namespace)
        return {
            "stdout": r.stdout,
            "stderr": r.stderr,
            "namespace": to_wire(r.namespace),
            "error": error_to_wire(r.error, r.traceback, r.error_message),
            "ticks": r.ticks,
            "traceback": r.traceback,
            "stdout_truncated": r.stdout_truncated,
            "duration": r.duration,
            "isolation": dict(r.isolation),
            "restarted": r.restarted,
        }

    async def fork(self, spec: dict[str, Any], n: int, first: int, timeout: Any, parallel: Any) -> Any:
        """This node's share of a fork: clones ``first .. first+n-1``, streamed as they
        finish; the end item carries the template's isolation report."""
        mapper = _restore(dict(spec["policy"]))
        mapper._init, mapper._work = spec["init"], spec["work"]
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[Any] = asyncio.Queue()
        try:  # the template's start and init_fn, off the event loop
            clones = await loop.run_in_executor(
                self._threads, lambda: mapper.fork(n, first=first, timeout=timeout, parallel=parallel)
            )
        except BaseException:
            mapper.close()
            raise
        end = object()

        def pump() -> None:
            try:
                for c in clones:
                    loop.call_soon_threadsafe(q.put_nowait, asdict(c))
            except BaseException as e:  # noqa: BLE001 - handed to the stream
                loop.call_soon_threadsafe(q.put_nowait, e)
            loop.call_soon_threadsafe(q.put_nowait, end)

        worker = loop.run_in_executor(self._threads, pump)
        try:
            while True:
                item = await q.get()
                if item is end:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
            yield {
                "end": True,
                "isolation": clones.isolation,
                "denials_sources": clones.denials_sources,
                "cancelled": clones.cancelled,
            }
        finally:
            if not worker.done():
                clones.cancel()
                await asyncio.shield(worker)
            mapper.close()


class PoolTask:
    """One ``submit``: ``result()`` waits for the :class:`Result`; ``cancel()`` kills
    the run's tree on its node."""

    def __init__(self, ref: Any, node: str, release: Any) -> None:
        self.ref: Any = ref  # the Ray ObjectRef of the call
        self.node: str = node
        self._release = release

    def _settle(self) -> None:
        rel, self._release = self._release, None
        if rel is not None:
            rel()

    def result(self, timeout: float | None = None) -> Result:
        ray = _ray()
        try:
            rc, resp = ray.get(self.ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise
        except ray.exceptions.TaskCancelledError:
            self._settle()
            return Result(success=False, cancelled=True)
        except ray.exceptions.RayActorError as e:
            self._settle()
            raise NodeLost(f"node {self.node} died during the run: {e}") from e
        except BaseException:
            self._settle()
            raise
        self._settle()
        return _outcome(rc, resp)

    def cancel(self) -> None:
        """Kill the run's tree on its node (the result then reads as cancelled)."""
        _ray().cancel(self.ref)

    def done(self) -> bool:
        ready, _ = _ray().wait([self.ref], timeout=0)
        return bool(ready)


class SandboxPool:
    """``per_node`` sandboxes with ``sandbox``'s policy on each node of the Ray cluster
    (or the nodes given by id), one engine per node.

    ``run`` blocks for one result; ``submit`` returns a :class:`PoolTask`; ``map``
    yields results as they finish and keeps at most one run per slot in flight
    (back-pressure: it takes the next argv only when a slot is free)."""

    def __init__(self, sandbox: Sandbox, *, per_node: int = 4, nodes: Sequence[str] | None = None) -> None:
        ray = _ray()
        from ray.util.scheduling_strategies import (  # pyright: ignore[reportMissingImports]
            NodeAffinitySchedulingStrategy,
        )

        if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
            raise InvalidArgument(f"per_node must be a positive int, got {per_node!r}")
        self.policy: dict[str, Any] = _policy_of(sandbox)
        self.per_node: int = per_node
        if not ray.is_initialized():
            ray.init()
        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        ids = list(nodes) if nodes is not None else alive
        missing = [i for i in ids if i not in alive]
        if missing or not ids:
            raise InvalidArgument(f"no such live node(s): {missing or 'none alive'}")
        actor = ray.remote(num_cpus=0, max_concurrency=per_node, max_restarts=0)(_Node)
        self._actors = {
            nid: actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nid, soft=False)).remote()
            for nid in ids
        }
        self._load = dict.fromkeys(ids, 0)
        self._lock = threading.Lock()
        # the actors are up (and on their nodes) before the pool is
        ray.get([a.node_id.remote() for a in self._actors.values()])

    @property
    def nodes(self) -> list[str]:
        return list(self._actors)

    @property
    def slots(self) -> int:
        return self.per_node * len(self._actors)

    def _pick(self, node: str | None) -> str:
        with self._lock:
            nid = node if node is not None else min(self._load, key=lambda k: self._load[k])
            if nid not in self._load:
                raise InvalidArgument(f"{nid} is not a node of this pool")
            self._load[nid] += 1
            return nid

    def _done(self, nid: str) -> None:
        with self._lock:
            if nid in self._load:
                self._load[nid] -= 1

    def submit(self, argv: Sequence[Any], *, node: str | None = None, **kw: Any) -> PoolTask:
        """Start ``argv`` on the least-busy node (or ``node``); ``kw`` as for
        :meth:`Sandbox.run` (``timeout``, ``stdin``, ``env``, ``cwd``, ``max_output``)."""
        unknown = set(kw) - {"timeout", "stdin", "env", "cwd", "max_output"}
        if unknown:
            raise InvalidArgument(f"unknown run argument(s): {sorted(unknown)}")
        nid = self._pick(node)
        ref = self._actors[nid].run.remote(self.policy, list(argv), kw)
        return PoolTask(ref, nid, lambda: self._done(nid))

    def run(self, argv: Sequence[Any], **kw: Any) -> Result:
        """Run ``argv`` on the least-busy node and wait (as :meth:`Sandbox.run`)."""
        return self.submit(argv, **kw).result()

    def map(self, argvs: Iterable[Sequence[Any]], **kw: Any) -> Iterator[Result]:
        """Results in the order they finish; closing the iterator early cancels what
        is still running (its trees are killed on their nodes)."""
        ray = _ray()
        todo = iter(argvs)
        flying: dict[Any, PoolTask] = {}
        try:
            while True:
                while len(flying) < self.slots:
                    nxt = next(todo, None)
                    if nxt is None:
                        break
                    t = self.submit(nxt, **kw)
                    flying[t.ref] = t
                if not flying:
                    return
                ready, _ = ray.wait(list(flying), num_returns=1)
                yield flying.pop(ready[0]).result()
        finally:
            for t in flying.values():
                t.cancel()
                t._settle()

    def exec(
        self,
        code: str,
        policy: Any = None,
        *,
        isolation: str = "kernel",
        namespace: dict[str, Any] | None = None,
        node: str | None = None,
    ) -> Any:
        """The cooperative sandbox's ``exec`` on a node (default the least busy):
        ``policy`` is a module-level function returning the :class:`Policy` (or its
        ``"module:qualname"``), called on the node — a Policy holds live modules,
        which do not cross. One cooperative sandbox per (policy, level) per node
        keeps its state across calls there. Returns an :class:`ExecResult`."""
        from sandtrap_guest.wire import to_wire

        from ._coop import ExecResult, IsolationStatus, _error_from_wire

        roots: list[str] = []
        if policy is None:
            ref = "sandtrap_guest:Policy"
        elif isinstance(policy, str):
            ref = policy
        else:
            probs: list[str] = []
            d = _fork.describe_fn("policy", policy, probs)
            if probs or "policy_ref" not in d:
                raise InvalidArgument("; ".join(probs) or "policy must be a module-level function")
            ref, roots = d["policy_ref"], d["sys_path"]
        nid = self._pick(node)
        try:
            m = _ray().get(
                self._actors[nid].coop_exec.remote(
                    ref, roots, isolation, code, to_wire(namespace) if namespace else None
                )
            )
        finally:
            self._done(nid)
        return ExecResult(
            m["stdout"],
            m["namespace"],
            _error_from_wire(m["error"]),
            m["ticks"],
            stderr=m["stderr"],
            traceback=m["traceback"],
            stdout_truncated=m["stdout_truncated"],
            duration=float(m["duration"]),
            error_message=m["error"]["message"] if m["error"] else None,
            isolation=IsolationStatus(m["isolation"]),
            restarted=m["restarted"],
        )

    def fork(
        self, mapper: Sandbox, n: int, *, timeout: float | None = None, parallel: int | None = None
    ) -> ClusterClones:
        """``mapper.fork(n)`` across the pool's nodes: ``init_fn`` once per node, each
        node forking its share of the ids ``0..n-1`` (contiguous ranges, as even as
        possible) from its own template."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgument(f"fork: n must be a positive int, got {n!r}")
        if not mapper._work:
            raise InvalidArgument("fork needs work_fn (a module-level function or Python source)")
        spec = {"policy": _policy_of(mapper), "init": dict(mapper._init), "work": dict(mapper._work)}
        k = len(self._actors)
        ranges, start = [], 0
        for i, nid in enumerate(self._actors):
            share = n // k + (i < n % k)
            if share:
                ranges.append((nid, start, share))
            start += share
        return ClusterClones(self, spec, ranges, n, timeout, parallel)

    def reduce(
        self,
        reducer: Sandbox,
        argv: Sequence[Any],
        clones: Any,
        *,
        node: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        """``reducer.reduce(argv, clones)`` on ``node`` (default: the first of the pool)."""
        nid = node if node is not None else next(iter(self._actors))
        res = clones.results() if hasattr(clones, "results") else list(clones)
        items = [{"id": c.id, "stdout": c.stdout} for c in res]
        rc, resp = _ray().get(self._actors[nid].reduce.remote(_policy_of(reducer), list(argv), items, timeout))
        return _outcome(rc, resp)

    def close(self) -> None:
        ray = _ray()
        for a in self._actors.values():
            ray.kill(a)
        self._actors.clear()
        self._load.clear()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClusterClones(_fork.StreamingClones):
    """The clones of a fork across a pool: iterate to get them as they finish (from
    every node); ``results()`` waits and returns them in clone order. A node that dies
    takes its unfinished clones with it: their ids are in ``lost`` (``retry()`` forks
    them again on the live nodes). ``isolation`` maps node id to its template's report,
    ``denials_sources`` to what its clones' ``denials`` report."""

    def __init__(
        self,
        pool: SandboxPool,
        spec: dict[str, Any],
        ranges: list[tuple[str, int, int]],
        n: int,
        timeout: Any,
        parallel: Any,
    ) -> None:
        self.n: int = n
        self.pool: SandboxPool = pool
        self.lost: list[int] = []
        self.lost_nodes: dict[str, str] = {}
        self.isolation: dict[str, Any] = {}
        self.denials_sources: dict[str, dict[str, str]] = {}
        self.cancelled: bool = False
        self._spec, self._timeout, self._parallel = spec, timeout, parallel
        self._done: dict[int, _fork.CloneResult] = {}
        self._q: queue.Queue[Any] = queue.Queue()
        self._gens: list[Any] = []
        self._live = 0
        self._start(ranges)

    def _start(self, ranges: list[tuple[str, int, int]]) -> None:
        for nid, first, count in ranges:
            gen = (
                self.pool._actors[nid]
                .fork.options(num_returns="streaming")
                .remote(self._spec, count, first, self._timeout, self._parallel)
            )
            self._gens.append(gen)
            self._live += 1
            threading.Thread(target=self._drain, args=(nid, gen, first, count), daemon=True).start()

    def _drain(self, nid: str, gen: Any, first: int, count: int) -> None:
        ray = _ray()
        seen: set[int] = set()
        try:
            for ref in gen:
                item = ray.get(ref)
                if item.get("end"):
                    self._q.put(("end", nid, item))
                    break
                seen.add(item["id"])
                denials = [Denial.from_response(d) for d in item.get("denials") or []]  # asdict'ed on the node
                self._q.put(("clone", nid, _fork.CloneResult(**{**item, "denials": denials})))
        except Exception as e:  # noqa: BLE001 - a lost node (or a cancelled stream)
            lost = [i for i in range(first, first + count) if i not in seen]
            self._q.put(("lost", nid, (lost, f"{type(e).__name__}: {e}")))
        finally:
            self._q.put(("closed", nid, None))

    def __iter__(self) -> Iterator[_fork.CloneResult]:
        while self._live:
            kind, nid, val = self._q.get()
            if kind == "clone":
                self._done[val.id] = val
                yield val
            elif kind == "end":
                self.isolation[nid] = val.get("isolation") or {}
                self.denials_sources[nid] = dict(val.get("denials_sources") or {})
                self.cancelled = self.cancelled or bool(val.get("cancelled"))
            elif kind == "lost":
                ids, why = val
                self.lost.extend(i for i in ids if i not in self._done)
                self.lost.sort()
                self.lost_nodes[nid] = why
            elif kind == "closed":
                self._live -= 1

    def results(self) -> list[_fork.CloneResult]:
        """Every clone that finished, in clone order (waits for the rest; the lost
        ones are in ``lost``)."""
        for _ in self:
            pass
        return [self._done[i] for i in sorted(self._done)]

    def __len__(self) -> int:
        return self.n

    def stream_reduce(self, reducer: Sandbox, argv: Argv, timeout: float | None) -> Result:
        """``reducer.reduce(argv, clones)``: the reducer starts at once and reads the
        clones' stdout in clone order as they arrive from the nodes (a clone is held
        only until those before it came in; a lost clone is skipped)."""
        from ._process import StdioMode

        p = reducer.popen(
            argv, stdin=StdioMode.PIPED, stdout=StdioMode.CAPTURE, stderr=StdioMode.CAPTURE, timeout=timeout
        )
        assert p.stdin is not None
        held: dict[int, bytes] = {}
        nxt, ok = 0, True

        def flush(upto: int) -> None:
            nonlocal nxt, ok
            lost = set(self.lost)
            wrote = False
            while nxt < upto and (nxt in held or nxt in lost):
                out = held.pop(nxt, b"")
                nxt += 1
                if ok and out:
                    try:
                        p.stdin.write(out)
                        wrote = True
                    except (BrokenPipeError, ValueError):
                        ok = False  # the reducer stopped reading: it still gets waited for
            if ok and wrote:
                try:
                    p.stdin.flush()
                except (BrokenPipeError, ValueError):
                    ok = False

        try:
            for c in self:
                held[c.id] = c.stdout
                flush(self.n)
            flush(self.n)  # every node is done: each id came in or is lost
        except BaseException:
            p.kill()
            raise
        finally:
            try:
                p.stdin.close()
            except (BrokenPipeError, ValueError):
                pass
        return p.wait()

    def cancel(self) -> None:
        """Stop every node's share: templates and clones are killed there."""
        ray = _ray()
        self.cancelled = True
        for g in self._gens:
            try:
                ray.cancel(g)
            except Exception:  # noqa: BLE001 - finished already
                pass

    def retry(self) -> ClusterClones:
        """Fork the lost clones again (their own ids) on the pool's live nodes."""
        ray = _ray()
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        nodes = [nid for nid in self.pool._actors if nid in alive and nid not in self.lost_nodes]
        if not nodes:
            raise NodeLost("no live node of the pool is left to retry on")
        runs: list[tuple[int, int]] = []
        for i in self.lost:
            if runs and runs[-1][0] + runs[-1][1] == i:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        ranges = [(nodes[j % len(nodes)], first, count) for j, (first, count) in enumerate(runs)]
        out = ClusterClones.__new__(ClusterClones)
        ClusterClones.__init__(out, self.pool, self._spec, [], len(self.lost), self._timeout, self._parallel)
        out._start(ranges)
        return out
