"""COW-fork map-reduce: ``Sandbox(init_fn=, work_fn=).fork(n)`` and ``reduce``.

The engine drives it (docs/protocol.md, "map-reduce"): it starts the guest runtime's
template under the mapper's policy plus what the Python runtime itself needs (it
says what it added in ``Clones.isolation["python"]``), runs ``init_fn`` once there,
forks the clones — each an ``os.fork()`` of the template inside the sandbox, sharing
its memory copy-on-write and holding exactly its confinement and limits — and
streams them back as they finish. This module resolves functions to references
("module:qualname", imported in the template) or passes Python source strings, and
turns the stream into :class:`Clones`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _native
from ._result import Denial

if TYPE_CHECKING:
    from ._result import Result
    from ._sandbox import Argv, Sandbox, _Handle

Fn = Callable[..., Any] | str | None


@dataclass
class CloneResult:
    """One clone's outcome. ``denials`` is what this clone (and every process it
    started) was refused, at most 256 entries, ``denials_dropped`` counting those
    beyond; ``Clones.denials_sources`` says which sources are reported (Landlock's
    refusals are not)."""

    id: int
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None
    timed_out: bool = False
    stdout_truncated: bool = False
    denials: list[Denial] = field(default_factory=list)
    denials_dropped: int = 0

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _module_root(mod: Any) -> str | None:
    """The sys.path entry a module was imported from."""
    f = getattr(mod, "__file__", None)
    if not f or not isinstance(f, str):
        return None
    root = os.path.dirname(os.path.realpath(f))
    if os.path.basename(f) == "__init__.py":
        root = os.path.dirname(root)
    for _ in range(mod.__name__.count(".")):
        root = os.path.dirname(root)
    return root


def describe_fn(what: str, fn: Fn, probs: list[str]) -> dict[str, Any]:
    """A function as the fork request names it: a reference (and its import root) or
    source; problems (a lambda, a closure, no module file) go to ``probs``."""
    if fn is None:
        return {}
    key = what.split("_")[0]
    if isinstance(fn, str):
        try:
            compile(fn, f"<{what}>", "exec")
        except SyntaxError as e:
            probs.append(f"{what}: the source does not compile: {e}")
        return {f"{key}_src": fn}
    if not callable(fn) or not inspect.isfunction(fn):
        probs.append(f"{what}: want a module-level function or Python source, got {type(fn).__name__}")
        return {}
    qual = fn.__qualname__
    if "<lambda>" in qual or "<locals>" in qual:
        probs.append(
            f"{what}: {qual} is a lambda or a closure; the template imports functions by "
            "name: define it at module level, or pass its source as a string"
        )
        return {}
    mod = sys.modules.get(fn.__module__)
    obj: Any = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        probs.append(f"{what}: {fn.__module__}.{qual} is not reachable by that name")
        return {}
    main = fn.__module__ == "__main__"
    f = getattr(mod, "__file__", None)
    root = os.path.dirname(os.path.realpath(f)) if main and f else _module_root(mod)
    if root is None or not f:
        probs.append(f"{what}: module {fn.__module__} has no file to import in the template")
        return {}
    out = {f"{key}_ref": f"{'__mp_main__' if main else fn.__module__}:{qual}", "sys_path": [root]}
    if main:
        out["main_path"] = os.path.realpath(f)
    return out


class StreamingClones(ABC):
    """Clones that arrive from elsewhere (``sandtrap.ray``'s cluster fork): a
    reducer given them reads each clone's stdout as it arrives, in clone order,
    instead of waiting for them all."""

    @abstractmethod
    def results(self) -> list[CloneResult]:
        """Every clone that finished, in clone order (waits for the rest)."""

    @abstractmethod
    def stream_reduce(self, reducer: Sandbox, argv: Argv, timeout: float | None) -> Result:
        """``reducer.reduce(argv, clones)``: the reducer starts at once and is fed
        the clones as they come."""


class Clones:
    """The clones of one ``fork``: iterate (``for``, or ``async for``) to get them as
    they finish, ``done`` of ``n`` so far (the progress); ``results()`` waits for all
    and returns them in clone order. ``isolation`` (once every clone is in) is the
    template's isolation report, and ``denials_sources`` says, by source, whether the
    clones' denials are reported (``"reported"``) or why not, as a run's.

    Leaving an iteration early — ``break``, an exception, the task of an ``async
    for`` cancelled — stops the fork: the template and every clone still running are
    killed (the clones finished so far stay). ``with``/``async with`` make that
    deterministic (an ``async for`` broken out of is closed by the event loop soon
    after, as every async generator)."""

    def __init__(self, owner: Any, handle: _Handle, req: dict[str, Any], *, lazy: bool = False) -> None:
        self.n: int = req["n"]
        self._owner = owner  # the mapper: its handle stays open while clones come
        self.isolation: dict[str, Any] = {}
        self.denials_sources: dict[str, str] = {}
        self.cancelled: bool = False
        self._handle = handle
        self._tag = uuid.uuid4().hex
        self._done: dict[int, CloneResult] = {}
        self._pending: deque[CloneResult] = deque()
        self._asking: tuple[int, int] | None = None  # the engine's (pending op, call) holding a batch
        # afork: the fork request is made by the first iteration (async: in a thread)
        self._start: dict[str, Any] | None = {**req, "tag": self._tag}
        if not lazy:
            self._begin()

    def _begin(self) -> None:
        req, self._start = self._start, None
        if req is not None:
            self._take(self._request(req))

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        ptr = self._handle.acquire()
        try:
            rc, resp = _native.sandbox_exec(ptr, _native.pack(req))
        finally:
            self._handle.release()
        if rc != _native.OK:
            self._asking = None
            raise _native.status_error(rc, resp)
        return resp or {}

    def _take(self, resp: dict[str, Any]) -> None:
        """A batch of clones (a host call of kind "clones"), or the end."""
        call = resp.get("call")
        if call is None:
            self._asking = None
            self.isolation = resp.get("isolation") or {}
            self.denials_sources = {str(k): str(v) for k, v in (resp.get("denials_sources") or {}).items()}
            self.cancelled = bool(resp.get("cancelled"))
            return
        self._asking = (resp["pending"], call["id"])
        for it in call["items"]:
            c = CloneResult(
                it["id"],
                it["stdout"],
                it["stderr"],
                it["exit_code"],
                it["signal"],
                it["timed_out"],
                it["stdout_truncated"],
                [Denial.from_response(d) for d in (it.get("denials") or []) if isinstance(d, dict)],
                int(it.get("denials_dropped") or 0),
            )
            self._done[c.id] = c
            self._pending.append(c)

    @property
    def done(self) -> int:
        """How many clones finished so far (of ``n``)."""
        return len(self._done)

    def __iter__(self) -> Iterator[CloneResult]:
        """Clones in the order they finish; leaving early stops the fork."""
        self._begin()
        try:
            while True:
                while self._pending:
                    yield self._pending.popleft()
                if self._asking is None:
                    return
                p, c = self._asking
                self._take(self._request({"op": "answer", "pending": p, "call": c}))
        finally:
            if self._asking is not None:
                self.close()

    async def __aiter__(self) -> AsyncIterator[CloneResult]:
        """``async for``: clones as they finish, the event loop free while they run
        (each wait in a thread); cancelling the task, or leaving early, stops the
        fork."""
        loop = asyncio.get_running_loop()
        if self._start is not None:
            await loop.run_in_executor(None, self._begin)
        try:
            while True:
                while self._pending:
                    yield self._pending.popleft()
                if self._asking is None:
                    return
                p, c = self._asking
                fut = loop.run_in_executor(None, self._request, {"op": "answer", "pending": p, "call": c})
                try:
                    resp = await asyncio.shield(fut)
                except asyncio.CancelledError:
                    self.cancel()  # the engine ends the wait in flight: the template and clones die
                    try:
                        self._take(await fut)
                    except Exception:  # noqa: BLE001 - cancelled
                        self._asking = None
                    raise
                self._take(resp)
        finally:
            if self._asking is not None:
                self.close()

    def __enter__(self) -> Clones:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Clones:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def results(self) -> list[CloneResult]:
        """Every clone, in clone order (waits for the rest)."""
        for _ in self:
            pass
        return [self._done[i] for i in sorted(self._done)]

    def __len__(self) -> int:
        return self.n

    def cancel(self) -> None:
        """Stop forking (from any thread): the template and its clones are killed; the
        clones finished so far stay (iteration ends after them)."""
        ptr = self._handle.try_use()
        if ptr:
            try:
                _native.sandbox_cancel(ptr, self._tag)
            finally:
                self._handle.release()

    def close(self) -> None:
        """Stop taking clones: the engine kills the template and every clone still running."""
        if self._asking is not None:
            p, c = self._asking
            try:
                self._take(self._request({"op": "answer", "pending": p, "call": c, "abort": True}))
            except Exception:  # noqa: BLE001 - closed already
                self._asking = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


class LazyClones:
    """``Sandbox.afork``'s clones: ``fork`` is called when the ``async for`` starts
    (in a thread), then its :class:`Clones` are iterated asynchronously. ``done``,
    ``n``, ``isolation`` and ``cancelled`` are theirs once forked."""

    def __init__(self, start: Callable[[], Clones]) -> None:
        self._start = start
        self._clones: Clones | None = None

    @property
    def clones(self) -> Clones | None:
        return self._clones

    @property
    def done(self) -> int:
        return 0 if self._clones is None else self._clones.done

    @property
    def isolation(self) -> dict[str, Any]:
        return {} if self._clones is None else self._clones.isolation

    @property
    def denials_sources(self) -> dict[str, str]:
        return {} if self._clones is None else self._clones.denials_sources

    async def __aiter__(self) -> AsyncIterator[CloneResult]:
        clones = self._clones
        if clones is None:
            clones = await asyncio.get_running_loop().run_in_executor(None, self._start)
            self._clones = clones
        try:
            async for c in clones:
                yield c
        finally:
            clones.close()  # left early: the template and the clones still running die

    async def __aenter__(self) -> LazyClones:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._clones is not None:
            self._clones.close()
