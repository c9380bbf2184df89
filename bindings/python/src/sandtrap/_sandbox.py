"""Sandbox, Command, Pipeline and confine(): the process sandbox over the C ABI."""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import os
import sys
import threading
import types
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, Union, cast, overload

from . import _fork, _native
from ._errors import (
    InvalidArgument,
    InvalidRequest,
    InvalidState,
    PolicyError,
    Problem,
    SandboxClosed,
    SandtrapError,
    error_for,
    problems_message,
)
from ._fields import DEFAULTS, KEYWORDS, FieldAttributes
from ._gather import NamedCommand
from ._policy import PolicyOptions, parse_memory_size, to_engine
from ._process import ProcessMixin
from ._result import ErrorInfo, LearnResult, Result
from ._typing import ArgSequence
from ._view import CommitResult, DryRunResult, changes_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._coop import CoopSandbox
    from ._coop import Policy as CoopPolicy
    from .ray import ClusterClones, SandboxPool

_S = TypeVar("_S", bound="Sandbox")

StrPath = Union[str, "os.PathLike[str]"]
Arg = Union[str, bytes, "os.PathLike[str]"]
Stdin = bytes | bytearray | memoryview | str | None
# the program and its arguments: a list or tuple, never a single string (run("ls") is a type error)
Argv = ArgSequence[Arg]

# ---------------------------------------------------------------------------
# Handles and calls


class _Handle:
    """A sandtrap_sandbox* shared by the calls using it.

    ``close()`` marks it closed at once; the C handle is freed when the last call in
    flight releases it, so no thread ever passes a freed pointer to the library.
    """

    __slots__ = ("ptr", "id", "_lock", "_users", "_closed", "used", "__weakref__")

    def __init__(self, ptr: int) -> None:
        self.ptr: int = ptr
        self.id: int = _native.sandbox_id(ptr)
        self._lock = threading.Lock()
        self._users = 0
        self._closed = False
        self.used: bool = False  # a call has used it: the sandbox's policy is fixed

    @property
    def closed(self) -> bool:
        return self._closed

    def acquire(self) -> int:
        with self._lock:
            if self._closed:
                raise SandboxClosed("the sandbox is closed")
            self._users += 1
            self.used = True
            return self.ptr

    def try_use(self) -> int:
        """Like acquire, also on a closed handle that still has calls in flight."""
        with self._lock:
            if not self.ptr:
                return 0
            self._users += 1
            return self.ptr

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            self._free_if_unused()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._free_if_unused()

    def replace_unused(self) -> bool:
        """Close and free it if no call ever used it (a field was assigned before
        the first run); False, leaving it as it is, when one did."""
        with self._lock:
            if self.used or self._closed:
                return False
            self._closed = True
            self._free_if_unused()
            return True

    def _free_if_unused(self) -> None:
        if self._closed and self._users == 0 and self.ptr:
            ptr, self.ptr = self.ptr, 0
            _native.sandbox_free(ptr)


_PENDING, _RUNNING, _DONE, _SKIPPED = range(4)


class _Call:
    """One exec call: its cancel tag, the handles it holds, and its state."""

    __slots__ = ("tag", "handles", "_lock", "state")

    def __init__(self, handles: list[_Handle]) -> None:
        self.tag = uuid.uuid4().hex
        self.handles = handles
        self._lock = threading.Lock()
        self.state = _PENDING

    def run(self, req: bytes) -> tuple[int, dict[str, Any] | None] | None:
        """Execute (in whatever thread); None when cancelled before it started."""
        try:
            with self._lock:
                if self.state != _PENDING:
                    self.state = _SKIPPED
                    return None
                self.state = _RUNNING
            try:
                return _native.sandbox_exec(self.handles[0].ptr, req)
            finally:
                with self._lock:
                    self.state = _DONE
        finally:
            for h in self.handles:
                h.release()

    def cancel(self) -> None:
        """Kill the call's process trees (or stop it from starting). Idempotent; the
        caller repeats it until the call returns, which closes the window between the
        call starting and the engine registering its tag."""
        with self._lock:
            if self.state == _PENDING:
                self.state = _SKIPPED
                return
            if self.state != _RUNNING:
                return
        for h in self.handles:
            ptr = h.try_use()
            if not ptr:
                continue
            try:
                _native.sandbox_cancel(ptr, self.tag)
            except SandtrapError:
                pass
            finally:
                h.release()


_CANCEL_RETRY = 0.02  # seconds between cancel attempts while a call winds down

# Worker threads: one pool for asyncio (arun) and one that lets the main thread's
# blocking run() stay interruptible by Ctrl-C. Both are recreated after os.fork().
_pool_lock = threading.Lock()
_async_pool: concurrent.futures.ThreadPoolExecutor | None = None
_sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
_forked = False


def _async_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _async_pool
    with _pool_lock:
        if _async_pool is None:
            # engine calls of arun() at once: each holds a thread while its program
            # runs (the Node binding reads the same variable, with the same default)
            n = int(os.environ.get("SANDTRAP_MAX_CONCURRENT", "256") or 256)
            _async_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, n), thread_name_prefix="sandtrap-async"
            )
        return _async_pool


def _sync_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _sync_pool
    with _pool_lock:
        if _sync_pool is None:
            _sync_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandtrap-run")
        return _sync_pool


def _after_fork_in_child() -> None:
    global _async_pool, _sync_pool, _forked, _pool_lock
    # the pools' threads do not exist in the child
    _async_pool = _sync_pool = None
    _pool_lock = threading.Lock()
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _outcome(rc: int, resp: dict[str, Any] | None) -> Result:
    """The Result of an exec call, or the exception of a call-level failure."""
    if rc == _native.OK or (resp is not None and rc in (_native.E_NOT_FOUND, _native.E_SPAWN_FAILED)):
        if resp is None:
            raise error_for(kind="internal", message="the engine returned no response")
        return Result.from_response(resp)
    raise _native.status_error(rc, resp)


def _wait_sync(call: _Call, req: bytes) -> Result:
    return cast(Result, _wait_with(call, req, _outcome))


def _wait_with(call: _Call, req: bytes, outcome: Callable[[int, dict[str, Any] | None], Any]) -> Any:
    """Run a call to completion in the calling thread, or — from the main thread —
    in a helper thread so that KeyboardInterrupt (or any exception raised by a
    signal handler) cancels the run's whole process tree before propagating."""
    if _forked or threading.current_thread() is not threading.main_thread():
        out = call.run(req)
        assert out is not None
        return outcome(*out)
    fut = _sync_executor().submit(call.run, req)
    try:
        out = fut.result()
    except BaseException:
        while True:
            call.cancel()
            try:
                concurrent.futures.wait([fut], timeout=_CANCEL_RETRY)
            except BaseException:  # noqa: BLE001 - a second Ctrl-C: keep winding down
                continue
            if fut.done():
                break
        raise
    assert out is not None
    return outcome(*out)


async def _wait_async(call: _Call, req: bytes) -> Result:
    return cast(Result, await _wait_async_with(call, req, _outcome))


async def _wait_async_with(call: _Call, req: bytes, outcome: Callable[[int, dict[str, Any] | None], Any]) -> Any:
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(_async_executor(), call.run, req)
    try:
        out = await asyncio.shield(fut)
    except asyncio.CancelledError:
        # Kill the tree, wait until the engine has reaped it, then propagate.
        while not fut.done():
            call.cancel()
            try:
                await asyncio.wait([fut], timeout=_CANCEL_RETRY)
            except asyncio.CancelledError:
                continue
        if not fut.cancelled():
            fut.exception()  # retrieved: no "never retrieved" warning
        raise
    assert out is not None
    return outcome(*out)


# ---------------------------------------------------------------------------
# Request checks


def _fs_str(field: str, v: Any, probs: list[Problem], allow_bytes: bool, element: int | None = None) -> Any:
    """v as a str (or bytes, when allowed) without NUL bytes; element: its index in
    a list (argv)."""

    def bad(msg: str) -> None:
        probs.append(Problem(field, msg if element is None else f"element {element}: {msg}"))

    def nul() -> None:
        probs.append(
            Problem(field, "contains a NUL byte" if element is None else f"element {element} contains a NUL byte")
        )

    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, (bytes, bytearray)):
        if not allow_bytes:
            bad(f"{bytes(v)!r} is bytes; give a str (decode with os.fsdecode())")
            return None
        v = bytes(v)
        if b"\0" in v:
            nul()
            return None
        return v
    if not isinstance(v, str):
        bad(f"want a str, got {type(v).__name__}")
        return None
    if "\0" in v:
        nul()
        return None
    return v


def _run_fields(
    argv: Any, timeout: Any, env: Any, cwd: Any, max_output: Any, probs: list[Problem], at: str = ""
) -> dict[str, Any]:
    """Type-check the fields shared by run requests and pipeline stages (whose
    problems are about ``stages[i].key``, as the engine's)."""
    req: dict[str, Any] = {}
    if isinstance(argv, (str, bytes, os.PathLike)):
        probs.append(Problem(f"{at}argv", f"must be a list like ['ls', '-l'], not a single {type(argv).__name__}"))
    elif not isinstance(argv, Sequence):
        probs.append(Problem(f"{at}argv", f"must be a list of strings, got {type(argv).__name__}"))
    elif len(argv) == 0:
        probs.append(Problem(f"{at}argv", "must not be empty"))
    else:
        args = [_fs_str(f"{at}argv", a, probs, allow_bytes=True, element=i) for i, a in enumerate(argv)]
        req["argv"] = args
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            probs.append(Problem(f"{at}timeout", f"want seconds as an int or float, got {type(timeout).__name__}"))
        else:
            req["timeout"] = float(timeout)
    if env is not None:
        if not isinstance(env, Mapping):
            probs.append(Problem(f"{at}env", f"want a dict of str to str, got {type(env).__name__}"))
        else:
            for k, v in env.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    probs.append(Problem(f"{at}env", f"{k!r}: {v!r}: names and values must be str"))
            req["env"] = dict(env)
    if cwd is not None:
        c = _fs_str(f"{at}cwd", cwd, probs, allow_bytes=False)
        if c is not None:
            req["cwd"] = c
    if max_output is not None:
        if isinstance(max_output, bool) or not isinstance(max_output, (int, str)):
            probs.append(
                Problem(f"{at}max_output", f'want a byte count or a size like "1M", got {type(max_output).__name__}')
            )
        else:
            req["max_output"] = max_output
    return req


def _stdin(stdin: Any, probs: list[Problem]) -> bytes | str | None:
    if stdin is None or isinstance(stdin, (bytes, str)):
        return stdin
    if isinstance(stdin, (bytearray, memoryview)):
        return bytes(stdin)
    probs.append(Problem("stdin", f"want bytes or str, got {type(stdin).__name__}"))
    return None


def _raise_request(probs: list[Problem]) -> NoReturn:
    raise InvalidRequest(problems_message("invalid request", probs), probs)


def _with_host_env(policy: dict[str, Any]) -> dict[str, Any]:
    """The policy as sent to the engine: without ``clean_env``, the program inherits
    Python's *current* ``os.environ`` (as subprocess does), snapshotted now.

    The engine, a Go c-shared library, only sees the environment the process started
    with (and not every later change made through ``os.environ``), so the binding
    passes it explicitly; the policy's own ``env`` still wins. Variables whose value is
    not valid UTF-8 are left out.
    """
    if policy.get("clean_env") or not isinstance(policy.get("env", {}), dict):
        return policy
    env: dict[str, str] = {}
    for k, v in os.environ.items():
        try:
            k.encode("utf-8")
            v.encode("utf-8")
        except UnicodeEncodeError:
            continue
        env[k] = v
    env.update(policy.get("env") or {})
    return dict(policy, env=env)


# ---------------------------------------------------------------------------
# The public classes


class Sandbox(ProcessMixin, FieldAttributes):
    """A policy, validated and compiled once, that runs many commands.

    The keyword arguments are the policy fields of :class:`PolicyOptions`
    (docs/protocol.md, "Policy map"): every one is optional; leaving one out (or
    passing ``None``) means "not granted" for permissions (files, network) and "no
    limit" for limits, except ``max_processes``, whose default is 64 (the seed's;
    ``0``: no limit), shared by the sandbox's concurrent runs. ``init_fn`` and ``work_fn`` prepare :meth:`fork`.

    Construction validates everything at once and raises one :class:`PolicyError`
    whose ``problems`` list every problem, each a :class:`Problem` (``field``,
    ``message``): unknown or unsupported fields, wrong types, relative or missing
    paths, bad sizes… It raises :class:`IsolationUnavailable` when a requested
    protection cannot be applied here and ``allow_degraded`` is not set.

    Every field reads as an attribute (``sb.max_processes``): the value given, or
    its default (docs/sandbox-reference.md; lists read as tuples, ``env``
    read-only). Assigning a field before the sandbox's first use (a run, a
    process, ``isolation()``, ``fork()``, ``confine()``…) rebuilds it with the new
    value, validated at once (:class:`PolicyError` leaves the old policy in place);
    after it raises :class:`InvalidState`: a sandbox's runs all share one policy.

    A sandbox is thread-safe: many threads (and ``arun`` coroutines) may run commands
    in it at once. ``close()`` (or leaving a ``with`` block) frees it; runs in flight
    finish first.
    """

    # typed as two forms: Sandbox(policy, ...) is a CoopSandbox, anything else a Sandbox
    # whose __init__ checks the keywords (a __new__ returning Any would hide them from
    # a checker that then skips __init__)
    @overload
    def __new__(cls, policy: CoopPolicy, *args: Any, **kwargs: Any) -> CoopSandbox: ...  # type: ignore[misc]

    @overload
    def __new__(cls: type[_S], *args: Any, **kwargs: Any) -> _S: ...

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Sandbox(policy, ...) with a cooperative Policy is the seed's in-process
        # cooperative sandbox (docs/cooperative.md); the keyword form is this class
        if cls is Sandbox and (args or "policy" in kwargs):
            from ._coop import Policy as CoopPolicy
            from ._coop import sandbox as coop_sandbox

            if isinstance(args[0] if args else kwargs.get("policy"), CoopPolicy):
                return coop_sandbox(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        *_positional: Any,
        init_fn: Callable[[], Any] | str | None = None,
        work_fn: Callable[[int], Any] | str | None = None,
        policy_fn: Callable[[Any, Any], Any] | None = None,
        **fields: Unpack[PolicyOptions],
    ) -> None:
        self._handle: _Handle | None = None
        probs: list[Problem] = []
        if policy_fn is not None and not callable(policy_fn):
            probs.append(Problem("policy_fn", f"must be a callable (event, ctx), got {type(policy_fn).__name__}"))
        if policy_fn is not None and fields.get("no_supervisor"):
            probs.append(Problem("policy_fn", "needs the syscall supervisor, which no_supervisor turns off"))
        self._policy_fn = policy_fn
        if _positional:
            probs.append(Problem("", f"Sandbox takes keyword arguments only (got {len(_positional)} positional)"))
        policy, conversion = to_engine(fields)
        probs.extend(conversion)
        self._policy = {k: v for k, v in policy.items() if v is not None}
        # what the attributes read: a snapshot (the caller's lists and dicts are not ours)
        self._fields: dict[str, Any] = {k: _frozen(v) for k, v in fields.items() if v is not None}
        self._init_fn, self._work_fn = init_fn, work_fn
        init_probs: list[str] = []
        work_probs: list[str] = []
        self._init = _fork.describe_fn("init_fn", init_fn, init_probs)
        self._work = _fork.describe_fn("work_fn", work_fn, work_probs)
        # describe_fn words each problem "<name>: ..."
        probs.extend(Problem("init_fn", m.removeprefix("init_fn: ")) for m in init_probs)
        probs.extend(Problem("work_fn", m.removeprefix("work_fn: ")) for m in work_probs)
        if probs:
            # let the engine judge the convertible fields too: one list of everything
            try:
                _native.sandbox_free(_native.new_sandbox(_native.pack(policy)))
            except PolicyError as e:
                probs.extend(e.problems)
            except (SandtrapError, ImportError):
                pass
            raise PolicyError(problems_message("invalid policy", probs), probs)
        ptr = _native.new_sandbox(_native.pack(_with_host_env(policy)))
        self._handle = _Handle(ptr)
        self._finalizer = weakref.finalize(self, self._handle.close)

    # -- fields as attributes ------------------------------------------------------

    def _field(self, keyword: str) -> Any:
        if keyword in self._fields:
            return self._fields[keyword]
        return _frozen(DEFAULTS[keyword])

    def _set_field(self, keyword: str, value: Any) -> None:
        old = self._live()
        if old.used:
            raise InvalidState(
                f"{keyword}: the sandbox has been used (a run, a process, isolation(), fork(), confine()...) and its"
                " policy is fixed: make another Sandbox with the new value"
            )
        fields = {k: _frozen(v) for k, v in {**self._fields, keyword: value}.items() if v is not None}
        policy, probs = to_engine(fields)
        if probs:
            raise PolicyError(problems_message("invalid policy", probs), probs)
        ptr = _native.new_sandbox(_native.pack(_with_host_env(policy)))  # PolicyError: nothing changes
        new = _Handle(ptr)
        if not old.replace_unused():
            new.close()
            raise InvalidState(f"{keyword}: the sandbox was used while the field was being set; its policy is fixed")
        self._finalizer.detach()
        self._handle = new
        self._finalizer = weakref.finalize(self, new.close)
        self._fields = fields
        self._policy = {k: v for k, v in policy.items() if v is not None}

    def memory_bytes(self) -> int | None:
        """``max_memory`` in bytes (``"512M"`` -> 536870912), or None when unset."""
        m = self.max_memory
        return None if m is None else parse_memory_size(m)

    @property
    def policy_fn(self) -> Callable[[Any, Any], Any] | None:
        """The ``policy_fn`` given (or None)."""
        return self._policy_fn

    @property
    def init_fn(self) -> Callable[[], Any] | str | None:
        """The ``init_fn`` given (or None)."""
        return self._init_fn

    @property
    def work_fn(self) -> Callable[[int], Any] | str | None:
        """The ``work_fn`` given (or None)."""
        return self._work_fn

    # -- properties ------------------------------------------------------------

    @property
    def policy(self) -> dict[str, Any]:
        """The policy map sent to the engine (fields that were set)."""
        return dict(self._policy)

    @property
    def id(self) -> int:
        """The engine's id of this sandbox (names it as a pipeline stage)."""
        return self._live().id

    @property
    def closed(self) -> bool:
        return self._handle is None or self._handle.closed

    def _live(self) -> _Handle:
        if self._handle is None or self._handle.closed:
            raise SandboxClosed("the sandbox is closed")
        return self._handle

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        fields = ", ".join(f"{k}={v!r}" for k, v in self._policy.items())
        return f"<sandtrap.Sandbox{state} {fields}>"

    # -- running -----------------------------------------------------------------

    def _run_request(
        self, argv: Any, timeout: Any, stdin: Any, env: Any, cwd: Any, max_output: Any, op: str = "run", **extra: Any
    ) -> tuple[_Call, bytes]:
        probs: list[Problem] = []
        req: dict[str, Any] = {"op": op, **extra}
        req.update(_run_fields(argv, timeout, env, cwd, max_output, probs))
        data = _stdin(stdin, probs)
        if data is not None:
            req["stdin"] = data
        if probs:
            _raise_request(probs)
        h = self._live()
        h.acquire()
        call = _Call([h])
        req["tag"] = call.tag
        try:
            packed = _native.pack(req)
        except BaseException:
            h.release()
            raise
        return call, packed

    def run(
        self,
        argv: Argv,
        timeout: float | None = None,
        stdin: Stdin = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> Result:
        """Run ``argv`` in the sandbox and wait for it.

        Args:
            argv: the program (looked up in the PATH it will see) and its arguments.
            timeout: wall-clock seconds (overrides the policy's ``timeout``); the whole
                process tree is killed when it expires (``result.timed_out``).
            stdin: bytes or str fed to the program (default: /dev/null).
            env: variables merged over the policy's environment.
            cwd: working directory (overrides the policy's).
            max_output: bytes kept of each of stdout and stderr.

        Returns a :class:`Result`; a failing, missing, timed-out or limited program is
        reported there, not raised. Raises :class:`InvalidRequest` for bad arguments,
        :class:`IsolationUnavailable`, :class:`ForkedChildError`, :class:`SandboxClosed`
        or :class:`InternalError` when the call itself cannot be carried out.
        Pressing Ctrl-C kills the run's whole process tree.
        """
        if self._policy_fn is not None:
            return self.run_with_handlers(
                argv, [], timeout=timeout, stdin=stdin, env=env, cwd=cwd, max_output=max_output
            )
        call, req = self._run_request(argv, timeout, stdin, env, cwd, max_output)
        return _wait_sync(call, req)

    def run_with_handlers(
        self,
        argv: ArgSequence[Arg],
        handlers: Sequence[tuple[str | int, Any]],
        timeout: float | None = None,
        stdin: Stdin = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
        name: str | None = None,
    ) -> Result:
        """Run ``argv`` with syscall handlers: ``handlers`` is a sequence of
        ``(syscall, Handler)`` pairs (a name such as ``"openat"`` or a number). The
        sandbox's own rules judge each call first; a handler only sees what they let
        through and can only tighten (``NotifAction``). The sandbox's ``policy_fn``,
        if any, is asked first. A handler on a syscall the deny list refuses raises
        :class:`InvalidRequest`. Handlers run in the calling thread (``async def``
        ones on an event loop of the run's own)."""
        from . import _handlers

        regs: list[dict[str, Any]] = []
        by_id: dict[int, Any] = {}
        probs: list[Problem] = []
        for i, pair in enumerate(handlers):
            try:
                key, h = pair
            except (TypeError, ValueError):
                probs.append(Problem(f"handlers[{i}]", "must be a (syscall, Handler) pair"))
                continue
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                probs.append(Problem(f"handlers[{i}].syscall", f"must be a name or a number, got {type(key).__name__}"))
                continue
            if not callable(getattr(h, "handle", None)):
                probs.append(Problem(f"handlers[{i}]", f"{type(h).__name__} has no handle(ctx) method"))
                continue
            pol = getattr(h, "on_exception", _handlers.ExceptionPolicy.KILL)
            try:
                wire = _handlers._POLICY_WIRE[_handlers.ExceptionPolicy(pol)]
            except ValueError:
                probs.append(Problem(f"handlers[{i}].on_exception", f"{pol!r} is not an ExceptionPolicy"))
                continue
            by_id[i + 1] = h
            regs.append({"syscall": key, "id": i + 1, "on_exception": wire})
        if probs:
            _raise_request(probs)
        extra: dict[str, Any] = {"handlers": regs}
        if self._policy_fn is not None:
            extra["policy_fn"] = {"on_exception": "deny_eperm"}
        call, req = self._run_request(argv, timeout, stdin, env, cwd, max_output, op="run_handlers")
        import msgpack

        m = msgpack.unpackb(req, raw=False)
        m.update(extra)
        h = call.handles[0]
        try:
            rc, resp = _handlers.drive(h.ptr, m, by_id, self._policy_fn)
        finally:
            h.release()
        return _outcome(rc, resp)

    async def arun(
        self,
        argv: Argv,
        timeout: float | None = None,
        stdin: Stdin = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> Result:
        """``run`` for asyncio: the engine call runs on a worker thread, the event loop
        keeps going. Cancelling the task (``task.cancel()``, ``asyncio.wait_for``
        expiring) kills the run's whole process tree, waits until it is gone, and
        re-raises ``CancelledError``."""
        call, req = self._run_request(argv, timeout, stdin, env, cwd, max_output)
        return await _wait_async(call, req)

    def dry_run(
        self,
        argv: Argv,
        timeout: float | None = None,
        stdin: Stdin = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> DryRunResult:
        """Run ``argv`` as :meth:`run` does, list what it changed under the
        sandbox's ``workdir`` and discard it all: the workdir is left as it was,
        byte for byte. Raises :class:`InvalidRequest` when the sandbox has no
        workdir."""
        call, req = self._run_request(argv, timeout, stdin, env, cwd, max_output, op="dry_run")
        return DryRunResult.from_result(_wait_sync(call, req))

    def _branch_op(self, op: str, result: Result | int) -> dict[str, Any]:
        bid = result if isinstance(result, int) else result.branch_id
        if not bid:
            raise InvalidRequest(
                "invalid request: branch_id: the result's changes were not kept (on_exit/on_error keep)",
                [Problem("branch_id", "the result's changes were not kept (on_exit/on_error keep)")],
            )
        h = self._live()
        h.acquire()
        try:
            rc, resp = _native.sandbox_exec(h.ptr, _native.pack({"op": op, "branch_id": bid}))
        finally:
            h.release()
        if rc != _native.OK or resp is None:
            raise _native.status_error(rc, resp)
        return resp

    def commit(self, result: Result | int) -> CommitResult:
        """Apply the kept changes of ``result`` (a run whose branch was ``"kept"``, or
        its ``branch_id``) to the workdir, file by file; they are gone afterwards.
        What was applied and what was refused is in the :class:`CommitResult`."""
        resp = self._branch_op("commit", result)
        err = resp.get("error")
        info = ErrorInfo(str(err.get("kind") or ""), str(err.get("message") or "")) if isinstance(err, dict) else None
        return CommitResult(changes_of(resp.get("committed")), changes_of(resp.get("commit_refused")), info)

    def abort(self, result: Result | int) -> None:
        """Discard the kept changes of ``result`` (or of its ``branch_id``)."""
        self._branch_op("abort", result)

    def learn(
        self,
        argv: Argv,
        timeout: float | None = None,
        stdin: Stdin = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> LearnResult:
        """Run ``argv`` permissively but recorded, and return the smallest policy it
        needed (:class:`LearnResult`: ``policy`` for ``Sandbox(**policy)``,
        ``profile`` as TOML).

        The learning run may read and execute every file (a read-only view of /),
        write only where this sandbox's ``fs_writable`` lets it, and reach only what
        its ``net_allow`` allows: every other write and destination is refused and
        recorded (so a command that stops at a refused write learns only up to it:
        grant a broad ``fs_writable`` to learn a narrower one). Every other protection
        of this sandbox stays (docs/security.md, "Learn mode")."""

        def outcome(rc: int, resp: dict[str, Any] | None) -> LearnResult:
            if rc == _native.OK or (
                resp is not None and "result" in resp and rc in (_native.E_NOT_FOUND, _native.E_SPAWN_FAILED)
            ):
                if resp is None:
                    raise error_for(kind="internal", message="the engine returned no response")
                return LearnResult.from_response(resp, KEYWORDS)
            raise _native.status_error(rc, resp)

        call, req = self._run_request(argv, timeout, stdin, env, cwd, max_output, op="learn")
        return cast(LearnResult, _wait_with(call, req, outcome))

    def cmd(
        self,
        argv: Argv,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> Command:
        """A command to run under this sandbox, to chain with ``|`` into a
        :class:`Pipeline` (or to ``.run()`` alone)."""
        return Command(self, argv, timeout=timeout, env=env, cwd=cwd, max_output=max_output)

    def isolation(self) -> dict[str, Any]:
        """What every run of this sandbox enforces (docs/protocol.md, isolation
        report), without running anything."""
        h = self._live()
        h.acquire()
        try:
            rc, resp = _native.sandbox_exec(h.ptr, _native.pack({"op": "isolation"}))
        finally:
            h.release()
        if rc != _native.OK or resp is None:
            raise _native.status_error(rc, resp)
        return resp

    def ports(self) -> dict[int, int]:
        """``{virtual_port: real_port}`` for the sockets this sandbox's runs hold
        bound now (``port_remap``; ``{}`` without it, or when nothing is bound). A
        host client reaches a sandbox's server on the real port; inside, the
        virtual port is what ``bind``, ``getsockname`` and loopback ``connect`` see."""
        h = self._live()
        h.acquire()
        try:
            rc, resp = _native.sandbox_exec(h.ptr, _native.pack({"op": "ports"}))
        finally:
            h.release()
        if rc != _native.OK or resp is None:
            raise _native.status_error(rc, resp)
        return {int(k): int(v) for k, v in resp.get("ports", {}).items()}

    def cancel(self) -> int:
        """Kill every run of this sandbox in flight; returns how many."""
        h = self._live()
        ptr = h.try_use()
        if not ptr:
            return 0
        try:
            n = _native.sandbox_cancel(ptr, None)
        finally:
            h.release()
        if n < 0:
            raise _native.status_error(n)
        return n

    # -- hooks for later issues -------------------------------------------------

    @overload
    def fork(
        self,
        n: int,
        *,
        timeout: float | None = None,
        parallel: int | None = None,
        first: int = 0,
        cluster: None = None,
    ) -> _fork.Clones: ...

    @overload
    def fork(
        self,
        n: int,
        *,
        timeout: float | None = None,
        parallel: int | None = None,
        first: int = 0,
        cluster: SandboxPool,
    ) -> ClusterClones: ...

    def fork(
        self,
        n: int,
        *,
        timeout: float | None = None,
        parallel: int | None = None,
        first: int = 0,
        cluster: SandboxPool | None = None,
    ) -> _fork.Clones | ClusterClones:
        """Run ``init_fn`` once in a confined template, then fork ``n`` clones of it
        (inside the sandbox, copy-on-write) that each run ``work_fn(clone_id)`` with
        ``CLONE_ID`` set and their own stdout. Iterate the returned :class:`Clones` to
        get clones as they finish; ``.results()`` waits and returns them in order.
        ``timeout`` kills a clone that runs longer (default: the policy's ``timeout``, as
        for a run); ``parallel`` bounds clones alive at once (default: 4 per CPU). The
        template may also read this interpreter's files, the guest runtime and the
        functions' modules: ``Clones.isolation["python"]`` says what was added.
        ``first`` numbers the clones ``first .. first+n-1`` (one share of a larger fork).
        ``cluster`` (a :class:`sandtrap.ray.SandboxPool`) forks across its nodes instead:
        ``init_fn`` once per node, each node's share of the ids there, results streamed
        back (:class:`sandtrap.ray.ClusterClones`)."""
        if cluster is not None:
            if first:
                raise InvalidArgument("fork: first numbers a local share; a cluster fork numbers its clones 0..n-1")
            return cluster.fork(self, n, timeout=timeout, parallel=parallel)
        h = self._live()
        if not self._work:
            raise InvalidArgument("fork needs work_fn (a module-level function or Python source)")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgument(f"fork: n must be a positive int, got {n!r}")
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise InvalidArgument(f"fork: first must be a non-negative int, got {first!r}")
        req: dict[str, Any] = {
            "op": "fork",
            "n": n,
            "first": first,
            "interpreter": sys.executable,
            "timeout": timeout,
            "parallel": parallel,
            **self._init,
            **self._work,
            "sys_path": self._init.get("sys_path", []) + self._work.get("sys_path", []),
        }
        return _fork.Clones(self, h, req)

    def afork(self, n: int, **fork_args: Any) -> _fork.LazyClones:
        """``fork`` for ``async for``: the clones are forked when the iteration
        starts, every wait in a thread (the event loop stays free); cancelling the
        task, or leaving the loop, kills the template and the clones still running
        (``async with`` makes that immediate)."""
        return _fork.LazyClones(lambda: self.fork(n, **fork_args))

    def reduce(self, argv: Argv, clones: Any, timeout: float | None = None) -> Result:
        """Run ``argv`` here with the clones' outputs, in clone order, on its stdin.
        This sandbox holds its own policy: none of the mapper's access."""
        if isinstance(clones, _fork.StreamingClones):  # sandtrap.ray's: fed to the reducer as they come
            return clones.stream_reduce(self, argv, timeout)
        call, req = self._reduce_request(argv, clones, timeout)
        return _wait_sync(call, req)

    async def areduce(self, argv: Argv, clones: Any, timeout: float | None = None) -> Result:
        """``reduce`` for asyncio: cancelling the task kills the reducer's whole
        process tree, waits until it is gone, and re-raises ``CancelledError``
        (``clones`` given as a :class:`Clones` are all collected first, in a thread)."""
        if isinstance(clones, (_fork.StreamingClones, _fork.Clones)):
            clones = await asyncio.get_running_loop().run_in_executor(None, clones.results)
        call, req = self._reduce_request(argv, clones, timeout)
        return await _wait_async(call, req)

    def _reduce_request(self, argv: Argv, clones: Any, timeout: float | None) -> tuple[_Call, bytes]:
        if isinstance(clones, _fork.Clones):
            clones = clones.results()
        items = [
            {"id": c.id, "stdout": c.stdout} if isinstance(c, _fork.CloneResult) else {"id": i, "stdout": bytes(c)}
            for i, c in enumerate(clones)
        ]
        return self._run_request(argv, timeout, None, None, None, None, op="reduce", clones=items)

    # -- lifetime ------------------------------------------------------------------

    def close(self) -> None:
        """Free the sandbox. Runs in flight finish first; later calls raise
        :class:`SandboxClosed`. Idempotent."""
        if self._handle is not None:
            self._finalizer.detach()
            self._handle.close()

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # pickles as its policy (e.g. to a multiprocessing "spawn" worker), rebuilt
        # and validated again on the other side
        return (_restore, (dict(self._policy),))

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # also registered with weakref.finalize, which covers interpreter exit
        if getattr(self, "_handle", None) is not None:
            self.close()


def _frozen(v: Any) -> Any:
    """A field's value as an attribute reads it: lists as tuples, maps read-only."""
    if isinstance(v, (str, bytes, bytearray, enum.Enum, os.PathLike)) or not isinstance(v, (Mapping, Iterable)):
        return v
    if isinstance(v, Mapping):
        return types.MappingProxyType(dict(v))
    return tuple(_frozen(x) for x in v)


def _restore(policy: dict[str, Any]) -> Sandbox:
    return Sandbox(**{KEYWORDS.get(k, k): v for k, v in policy.items()})


class Command:
    """``argv`` bound to a sandbox: one stage of a pipeline."""

    __slots__ = ("sandbox", "argv", "timeout", "env", "cwd", "max_output")

    def __init__(
        self,
        sandbox: Sandbox,
        argv: Argv,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: StrPath | None = None,
        max_output: int | str | None = None,
    ) -> None:
        if not isinstance(sandbox, Sandbox):
            raise InvalidRequest(f"a command needs a Sandbox, got {type(sandbox).__name__}")
        probs: list[Problem] = []
        _run_fields(argv, timeout, env, cwd, max_output, probs)
        if probs:
            _raise_request(probs)
        self.sandbox: Sandbox = sandbox
        self.argv: list[Arg] = list(argv)
        self.timeout: float | None = timeout
        self.env: dict[str, str] | None = dict(env) if env is not None else None
        self.cwd: StrPath | None = cwd
        self.max_output: int | str | None = max_output

    def __or__(self, other: Command | Pipeline) -> Pipeline:
        return Pipeline(self) | other

    def as_(self, name: str) -> NamedCommand:
        """This command's output, named for a gather's consumer:
        ``(a.cmd(x).as_("code") + b.cmd(y).as_("data") | c.cmd(z)).run()``."""
        return NamedCommand(self, name)

    def __repr__(self) -> str:
        return f"<sandtrap.Command {self.argv!r}>"

    def run(self, stdin: Stdin = None, timeout: float | None = None) -> Result:
        """Run this command alone."""
        return self.sandbox.run(
            self.argv,
            timeout=timeout if timeout is not None else self.timeout,
            stdin=stdin,
            env=self.env,
            cwd=self.cwd,
            max_output=self.max_output,
        )

    async def arun(self, stdin: Stdin = None, timeout: float | None = None) -> Result:
        """``run`` for asyncio."""
        return await self.sandbox.arun(
            self.argv,
            timeout=timeout if timeout is not None else self.timeout,
            stdin=stdin,
            env=self.env,
            cwd=self.cwd,
            max_output=self.max_output,
        )

    def _stage(self, probs: list[Problem], i: int, at: str = "") -> dict[str, Any]:
        at = at or f"stages[{i}]."
        st = _run_fields(self.argv, self.timeout, self.env, self.cwd, self.max_output, probs, at=at)
        st["sandbox"] = self.sandbox._live().id
        return st


class Pipeline:
    """Commands joined by kernel pipes: stage *i*'s stdout feeds stage *i+1*'s stdin.

    Each stage runs under its own sandbox's policy, so a downstream stage sees the
    bytes without gaining the upstream stage's access. Every stage's stderr is
    captured; the last stage's stdout is.
    """

    __slots__ = ("stages",)

    def __init__(self, *stages: Command) -> None:
        for s in stages:
            if not isinstance(s, Command):
                raise InvalidRequest(f"pipeline stages must be Commands (sandbox.cmd(...)), got {type(s).__name__}")
        self.stages: tuple[Command, ...] = tuple(stages)

    def __or__(self, other: Command | Pipeline) -> Pipeline:
        if isinstance(other, Command):
            return Pipeline(*self.stages, other)
        if isinstance(other, Pipeline):
            return Pipeline(*self.stages, *other.stages)
        return NotImplemented

    def __len__(self) -> int:
        return len(self.stages)

    def __repr__(self) -> str:
        return "<sandtrap.Pipeline " + " | ".join(repr(s.argv) for s in self.stages) + ">"

    def _request(
        self,
        stdin: Any,
        timeout: Any,
        stdout: Any = None,
        gather: list[dict[str, Any]] | None = None,
        more: list[Sandbox] | None = None,
        probs: list[Problem] | None = None,
    ) -> tuple[_Call, bytes]:
        if not self.stages:
            raise InvalidRequest("an empty pipeline has nothing to run")
        probs = probs if probs is not None else []
        if gather is None and len(self.stages) < 2:
            probs.append(Problem("stages", "a pipeline needs at least two stages (run one command with .run())"))
        stages = [s._stage(probs, i) for i, s in enumerate(self.stages)]
        req: dict[str, Any] = {"op": "pipeline", "stages": stages}
        if gather is not None:
            req["gather"] = gather
        if stdout is not None:
            fileno = getattr(stdout, "fileno", None)
            fd = stdout if isinstance(stdout, int) and not isinstance(stdout, bool) else None
            if fd is None and callable(fileno):
                fd = int(cast(Any, fileno)())
            if fd is None:
                probs.append(Problem("stdout", f"want a file descriptor or a file, got {type(stdout).__name__}"))
            else:
                req["stdout"] = fd
        data = _stdin(stdin, probs)
        if data is not None:
            req["stdin"] = data
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                probs.append(Problem("timeout", f"want seconds as an int or float, got {type(timeout).__name__}"))
            else:
                req["timeout"] = float(timeout)
        if probs:
            _raise_request(probs)
        handles: list[_Handle] = []
        try:
            for sb in [*(more or []), *(s.sandbox for s in self.stages)]:
                h = sb._live()
                if h not in handles:
                    h.acquire()
                    handles.append(h)
        except BaseException:
            for h in handles:
                h.release()
            raise
        call = _Call(handles)
        req["tag"] = call.tag
        try:
            packed = _native.pack(req)
        except BaseException:
            for h in handles:
                h.release()
            raise
        return call, packed

    def run(self, stdin: Stdin = None, timeout: float | None = None, stdout: Any = None) -> Result:
        """Run every stage at once; returns the last stage's :class:`Result` with
        ``stages`` holding each stage's result in order. ``timeout`` is the default of
        every stage that has none of its own. ``stdout`` (a file descriptor or a file)
        gets the last stage's output instead of the result. A pipeline has at least
        two stages."""
        call, req = self._request(stdin, timeout, stdout)
        return _wait_sync(call, req)

    async def arun(self, stdin: Stdin = None, timeout: float | None = None, stdout: Any = None) -> Result:
        """``run`` for asyncio; cancellation kills every stage's process tree."""
        call, req = self._request(stdin, timeout, stdout)
        return await _wait_async(call, req)


def confine(sandbox: Sandbox, seccomp: bool = False) -> None:
    """Confine the calling process, for good, with the sandbox's filesystem and
    network rules (Landlock, on every thread), and with its seccomp filter when
    ``seccomp`` is true. It cannot be undone; calling it again stacks a further
    restriction. Children started afterwards (sandboxed or not) inherit it.

    Raises :class:`IsolationUnavailable` when the confinement cannot be applied
    safely (the process is left untouched).
    """
    if not isinstance(sandbox, Sandbox):
        raise InvalidRequest(f"confine() needs a Sandbox, got {type(sandbox).__name__}")
    h = sandbox._live()
    h.acquire()
    try:
        _native.confine(h.ptr, bool(seccomp))
    finally:
        h.release()


def probe() -> dict[str, Any]:
    """What this kernel and process can enforce: ``landlock_abi``, ``seccomp``,
    ``root``, ``pid_namespace``, ``user_namespace``, ``cgroup``…"""
    return _native.probe()


__all__ = ["Sandbox", "Command", "Pipeline", "confine", "probe"]
