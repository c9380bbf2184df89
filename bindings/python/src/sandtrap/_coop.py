"""The cooperative Python sandbox: ``sandbox(policy, isolation=...).exec(code)``.

``"none"`` runs the guest runtime (``sandtrap_guest``) in this process: the Python
layer is the only boundary, and an escape from it is an escape into this process.
``"process"`` and ``"kernel"`` run it in a worker that the engine starts as a session
(never a fork of this process). ``"process"`` contains crashes and runaway code (the
worker is killed at the timeout) but confines nothing: the worker may read and write
every file this process can (``/`` read-write) and use the network, so an escape from
the Python layer there is as good as one at ``"none"``. ``"kernel"`` runs the worker
under the engine's Landlock, seccomp and limits — only the Python runtime, granted
modules' directories and the ``IsolatedFS`` root are reachable, no network unless
``allow_network``, no process creation unless ``allow_subprocess`` — and fails closed
with :class:`IsolationUnavailable` unless ``allow_degraded``. It is the level to use
for code you do not trust. Host functions granted with ``policy.fn`` run here, in the
host, when the worker calls them; values cross as msgpack data, never pickle.

The engine drives the worker (docs/protocol.md, "cooperative sandbox": the worker's
policy, its frames, the deadline, restarts, the checks of everything the worker
sends); this module passes what only Python knows — this interpreter, ``sys.path``,
the policy's portable form and where its granted modules live — and answers the
engine's host calls by running the granted functions.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import sandtrap_guest
from sandtrap_guest import ExecResult as GuestExecResult
from sandtrap_guest import GuestSession, Policy
from sandtrap_guest import clock as _clock
from sandtrap_guest import errors as guest_errors
from sandtrap_guest import output as _output
from sandtrap_guest import rpc as _rpc
from sandtrap_guest.clock import host_time
from sandtrap_guest.output import passthrough_stdio
from sandtrap_guest.policy import MemberSpec, PolicyProblem
from sandtrap_guest.rewriter import echo_mode as _echo_mode
from sandtrap_guest.rpc import RpcProxyMarker, rpc_surface
from sandtrap_guest.session import PrintRendering, _Capture, validate_keep
from sandtrap_guest.vfs import VirtualFS
from sandtrap_guest.vfs import serve as _serve_fs
from sandtrap_guest.wire import to_wire

from . import _native
from ._coop_spool import SpoolDir, SpooledNamespace
from ._errors import InvalidArgument, IsolationUnavailable, SandtrapError

__all__ = [
    "sandbox",
    "IsolatedFS",
    "VirtualFS",
    "ExecResult",
    "IsolationStatus",
    "passthrough_stdio",
    "CoopSandbox",
    "WorkerError",
    "WorkerCrashed",
    "Policy",
    "MemberSpec",
    "RpcProxyMarker",
    "rpc_surface",
    "host_time",
    "PolicyProblem",
    "PrintRendering",
]

LEVELS = ("none", "process", "kernel")
# the worker program and its directory (tests substitute a deliberately malicious one)
_WORKER_MODULE: str | None = None
_WORKER_PATH: list[str] = []


class WorkerError(Exception):
    """An exception from sandboxed code in a worker whose class is not known here."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


class WorkerCrashed(SandtrapError):
    """The worker died during the call (a segfault, ``os._exit``, a kill), or broke the
    protocol (a frame that does not decode, the wrong shape or types): it was ended."""

    kind = "worker_crashed"


@dataclass
class IsolatedFS:
    """A directory that sandboxed code sees as its filesystem (created if missing)."""

    root: str

    def __post_init__(self) -> None:
        self.root = os.path.realpath(os.fspath(self.root))
        os.makedirs(self.root, exist_ok=True)


class IsolationStatus(Mapping[str, Any]):
    """What isolation took effect, as the seed's ``IsolationStatus`` (attributes) and as
    the engine's report (a read-only dict view: ``status["level"]``,
    ``status["landlock"]["abi"]``, ``dict(status)``).

    The seed's attributes: ``requested`` (``isolation="kernel"`` was asked for),
    ``platform``, ``landlock`` / ``seccomp`` (True applied, False asked for and
    missing, None not applicable), ``seatbelt`` (always None: Linux only),
    ``allow_network``, ``allow_host_fs`` (the worker may read and write the host's
    files: True at ``"process"``, which confines nothing, and at ``"none"``),
    ``root`` (the directory writes are confined to), ``degraded`` and ``summary()``.
    Ours: ``level`` and every key of the report (docs/protocol.md, "isolation
    report"). Unlike the seed, ``isolation="none"`` has a status too (``level``
    ``"none"``, nothing requested), never ``None``."""

    __slots__ = ("_report",)

    def __init__(self, report: Mapping[str, Any] | None = None) -> None:
        self._report = dict(report or {})

    # the dict view
    def __getitem__(self, key: str) -> Any:
        return self._report[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._report)

    def __len__(self) -> int:
        return len(self._report)

    def __repr__(self) -> str:
        return f"IsolationStatus({self._report!r})"

    # the seed's attributes
    @property
    def level(self) -> str:
        return str(self._report.get("level", "none"))

    @property
    def requested(self) -> bool:
        return self.level == "kernel"

    @property
    def platform(self) -> str:
        return sys.platform

    @property
    def landlock(self) -> bool | None:
        if not self.requested:
            return None
        return bool(self._report.get("landlock"))

    @property
    def seccomp(self) -> bool | None:
        if not self.requested:
            return None
        sc = self._report.get("seccomp")
        return bool(sc and sc.get("enforced", True))

    @property
    def seatbelt(self) -> None:
        return None

    @property
    def allow_network(self) -> bool:
        if self.level != "kernel":
            return True  # nothing confines the network at "none"/"process"
        net = self._report.get("net") or {}
        return net.get("mode") not in (None, "none")

    @property
    def allow_host_fs(self) -> bool:
        return self.level != "kernel"

    @property
    def root(self) -> str | None:
        if self.level != "kernel":
            return None
        for r in (self._report.get("landlock") or {}).get("fs_rules") or []:
            if r.get("access") == "rw" and r.get("path") not in ("/dev", "/tmp"):
                return str(r["path"])
        return None

    @property
    def degraded(self) -> bool:
        """Kernel isolation asked for and not fully applied."""
        if not self.requested:
            return False
        return bool(self._report.get("degraded")) or not (self.landlock and self.seccomp)

    def summary(self) -> str:
        """One line: what took effect."""
        if self.level == "none":
            return "in-process: no isolation (the Python layer only; no worker, no kernel restrictions)"
        if not self.requested:
            return "process isolation only (no kernel restrictions requested)"
        parts = [
            f"{n}={'applied' if v else 'UNAVAILABLE'}"
            for n, v in (("landlock", self.landlock), ("seccomp", self.seccomp))
        ]
        return f"kernel isolation on {self.platform}: {', '.join(parts)}"


@dataclass
class ExecResult(GuestExecResult):
    """The guest runtime's result, plus what the isolation level adds."""

    # the engine's report + "level"; the guest's own results carry the level's name
    isolation: IsolationStatus = field(default_factory=IsolationStatus)  # pyright: ignore[reportIncompatibleVariableOverride]
    restarted: bool = False  # a fresh worker ran this call (the namespace was reset)


def _attach_traceback(err: BaseException, text: str | None) -> None:
    """The traceback text where the seed put it (``error._st_traceback_text``), at
    every level: only ``<sandbox>`` frames and their lines."""
    if text is None:
        return
    try:
        err._st_traceback_text = text.rstrip()  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception class with __slots__
        pass


def _error_from_wire(e: dict[str, Any] | None) -> BaseException | None:
    if not e:
        return None
    name, module, message = e["type"], e["module"], e["message"]
    cls = None
    if module == "sandtrap_guest.errors":
        cls = getattr(guest_errors, name, None)
    elif module == "builtins":
        cls = getattr(builtins, name, None)
    elif module == "sandtrap" and name == "WorkerCrashed":
        cls = WorkerCrashed
    args = e.get("args")
    err: BaseException
    if (
        isinstance(cls, type)
        and issubclass(cls, BaseException)
        and not issubclass(cls, (SystemExit, KeyboardInterrupt))
    ):
        try:
            # a builtin exception's scalar arguments come as they were: KeyError('k')
            err = cls(*args) if isinstance(args, list) and module == "builtins" else cls(message)
        except Exception:  # noqa: BLE001 - odd constructors
            err = WorkerError(name, message)
    else:
        err = WorkerError(name, message)
    err.__sandtrap_traceback__ = e.get("traceback")  # type: ignore[attr-defined]
    _attach_traceback(err, e.get("traceback"))
    return err


def _module_dirs(policy: Policy) -> list[str]:
    """Where the modules the grants import live: the worker re-imports every grant by
    reference (granted modules, granted classes' modules), so it must read them."""
    mods: list[types.ModuleType | None] = [g.module for g in policy.modules.values()]
    mods += [sys.modules.get(getattr(g.cls, "__module__", "")) for g in policy.classes.values()]
    return sorted({os.path.dirname(os.path.realpath(f)) for m in mods if (f := getattr(m, "__file__", None))})


class CoopSandbox:
    """A persistent sandboxed namespace; see :func:`sandbox`."""

    def __init__(
        self,
        policy: Policy,
        isolation: str,
        filesystem: IsolatedFS | VirtualFS | None,
        echo: bool | str,
        allow_degraded: bool,
        state: dict[str, Any] | None = None,
        keep_state: bool = False,
        snapshot_prints: bool = False,
        preload_grants: bool = True,
        rpc_handlers: Mapping[str, Any] | None = None,
        render_prints: PrintRendering | None = None,
        spool: Any = False,
    ) -> None:
        from ._sandbox import _Handle

        if render_prints is not None and not isinstance(render_prints, PrintRendering):
            raise InvalidArgument("render_prints must be a sandtrap.PrintRendering or None")
        self.render_prints = render_prints
        handlers = dict(rpc_handlers or {})
        for k, h in handlers.items():
            if not isinstance(k, str) or not k or len(k) > _rpc.MAX_NAME or k.startswith(_rpc.GRANT_PREFIX):
                raise InvalidArgument(
                    f"rpc_handlers keys must be target names (1 to {_rpc.MAX_NAME} characters, not starting "
                    f"with {_rpc.GRANT_PREFIX!r}), got {k!r}"
                )
            if not callable(h):
                raise InvalidArgument(f"rpc_handlers[{k!r}] must be callable as handler(method, args, kwargs)")
        self.rpc_handlers = handlers
        # per target, the methods its markers declared (None: any public name)
        self._rpc_methods: dict[str, set[str] | None] = {}
        self.policy = policy
        self.level = isolation
        self.filesystem = filesystem
        _echo_mode(echo)  # ValueError for a wrong one, at every level
        self.echo = echo
        self.allow_degraded = allow_degraded
        self._lock = threading.Lock()  # one exec at a time (the engine also serialises)
        self._local: GuestSession | None = None
        self._closed = False  # isolation="none": closed (its namespace let go)
        self._handle: _Handle | None = None
        self._report: dict[str, Any] = {"level": isolation}
        # the state a fresh worker is given (the engine sends it only to one started
        # for the exec); with keep_state every exec brings back the current one
        self._state: dict[str, Any] | None = state
        self.keep_state: bool = bool(keep_state)
        self.snapshot_prints: bool = bool(snapshot_prints)
        virtual = filesystem if isinstance(filesystem, VirtualFS) else None
        root = filesystem.root if isinstance(filesystem, IsolatedFS) else None
        if isolation == "kernel" and policy.needs_host_fs():
            raise InvalidArgument(
                'host_fs_access=True on a class or module grant is not offered at isolation="kernel": it would take '
                "the host's whole filesystem into the worker (the seed then drops Landlock's filesystem rules). Grant "
                "the function with policy.fn (it runs here in the host, with the host's files), or give the worker a "
                'directory with IsolatedFS; at "none" and "process" granted code reaches the host\'s files anyway'
            )
        # spool=: the directory the result's large values are written to (private,
        # made here; at the worker levels the worker writes there)
        self._spool: SpoolDir | None = SpoolDir(spool, root) if spool is not False else None
        if isolation == "none":
            self._local = GuestSession(policy, filesystem_root=root, echo=echo, filesystem=virtual, rpc=self._serve_rpc)
            if state is not None:
                r = self._local.restore(state)  # ValueError for a malformed one
                if r.error is not None:
                    raise InvalidArgument(
                        f"the state could not be restored: {type(r.error).__name__}: {r.error_message}"
                    )
            return
        req: dict[str, Any] = {
            "op": "coop_open",
            "level": isolation,
            "policy": policy.to_portable(host_fns=True),  # StPolicyNotPortable
            "interpreter": sys.executable,
            "sys_path": [os.path.abspath(p) for p in sys.path if p],
            "module_dirs": _module_dirs(policy),
            "filesystem_root": root,
            "echo": echo,
            # a VirtualFS stays here: the worker reads and writes it through fs host calls
            "vfs": {"module_root": policy.module_root} if virtual is not None else None,
            "allow_degraded": allow_degraded,
            "preload_grants": preload_grants,
            # the worker's proxies may call these (and the policy's live-object grants)
            "rpc_targets": sorted(handlers),
            **({"spool_dir": self._spool.path} if self._spool is not None else {}),
        }
        if _WORKER_MODULE:
            req.update(worker_module=_WORKER_MODULE, worker_path=list(_WORKER_PATH))
        # a handle for the ops: the engine builds the worker's own policy (docs/protocol.md)
        try:
            rc, ptr, msg = _native.sandbox_new(_native.pack({"allow_degraded": True}))
        except ImportError as e:  # isolation="none" needs no library; these levels do
            raise IsolationUnavailable(
                f'isolation="{isolation}" needs the native library libsandtrap.so (Linux), which cannot be '
                f'loaded here: {e}. isolation="none" works without it'
            ) from e
        if rc != _native.OK:
            raise _native.status_error(rc, None, msg)
        self._handle = _Handle(ptr)
        try:
            self._report = self._request(req)["isolation"]
        except BaseException:
            self.close()
            raise

    def _request(self, req: dict[str, Any]) -> dict[str, Any]:
        if self._handle is None:
            raise SandtrapError("the sandbox is closed")
        ptr = self._handle.acquire()
        try:
            rc, resp = _native.sandbox_exec(ptr, _native.pack(req))
        finally:
            self._handle.release()
        if rc != _native.OK:
            raise _native.status_error(rc, resp)
        return resp or {}

    # ------------------------------------------------------------ host objects
    def _note_markers(self, values: Mapping[str, Any] | None) -> None:
        """Record the surface each RpcProxyMarker declares: the host holds a proxy's
        calls to it (the worker's own check is only the first)."""
        for v in (values or {}).values():
            if type(v) is RpcProxyMarker:
                if v.target not in self.rpc_handlers:
                    raise InvalidArgument(
                        f"RpcProxyMarker({v.target!r}): no rpc_handlers entry serves that target "
                        f"(known: {sorted(self.rpc_handlers)})"
                    )
                prev = self._rpc_methods.get(v.target, set())
                if v.methods is None or prev is None:
                    self._rpc_methods[v.target] = None
                else:
                    self._rpc_methods[v.target] = prev | set(v.methods)

    def _serve_rpc(self, target: Any, method: Any, args: Any, kwargs: Any) -> Any:
        """A proxy's call of an ``rpc_handlers`` target: the target must have been
        given as a marker, the method be public and (if the markers declared methods)
        one of them; arguments and result cross as data."""
        if not isinstance(target, str) or target not in self._rpc_methods or target not in self.rpc_handlers:
            raise LookupError(f"no host object {target!r}")
        allowed = self._rpc_methods[target]
        if not _rpc.public_name(method) or (allowed is not None and method not in allowed):
            raise AttributeError(f"{method!r} is not a method of the host object {target!r}")
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
            raise TypeError("arguments must be a list and a dict")
        return to_wire(self.rpc_handlers[target](method, tuple(args), dict(kwargs)))

    @staticmethod
    def _markers_to_wire(values: Mapping[str, Any]) -> dict[str, Any]:
        return {k: _rpc.marker_to_wire(v) if type(v) is RpcProxyMarker else v for k, v in values.items()}

    def _host_call(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run the granted function a host call names (or the VirtualFS operation, or
        a host object's method); the answer's value or error, with ``host_time``:
        the seconds of it the exec's timeout does not count (a whole ``host_time=True``
        function's or host object's call, else the ``host_time()`` blocks in it)."""
        t0 = time.monotonic()
        kind = call.get("kind")
        whole = kind == "rpc" or (
            kind == "fn" and getattr(self.policy.fns.get(str(call.get("name"))), "host_time", False)
        )
        clock = _clock.Clock()
        with _clock.use(clock):
            answer = self._host_call_run(call)
        secs = time.monotonic() - t0 if whole else clock.total
        if secs > 0 and "abort" not in answer:
            answer["host_time"] = secs
        return answer

    def _host_call_run(self, call: dict[str, Any]) -> dict[str, Any]:
        if call.get("kind") == "rpc":
            target = call.get("target")
            try:
                if isinstance(target, str) and target.startswith(_rpc.GRANT_PREFIX):
                    value = _rpc.call_object_grant(
                        self.policy, target, call.get("method"), call.get("args"), call.get("kwargs")
                    )
                else:
                    value = self._serve_rpc(target, call.get("method"), call.get("args"), call.get("kwargs"))
                return {"value": value}
            except Exception as e:  # noqa: BLE001 - handed back to the sandboxed code
                return {"error": {"type": type(e).__name__, "message": str(e)}}
        if call.get("kind") == "fs" and isinstance(self.filesystem, VirtualFS):
            try:
                return {"value": _serve_fs(self.filesystem.backend, call.get("name"), call.get("args"))}
            except Exception as e:  # noqa: BLE001 - an OSError for the sandboxed code
                msg = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                return {"error": {"type": type(e).__name__, "message": msg}}
        grant = self.policy.fns.get(str(call.get("name"))) if call.get("kind") == "fn" else None
        if grant is None:
            return {
                "error": {"type": "NotImplemented", "message": f"no host call {call.get('kind')}:{call.get('name')}"}
            }
        try:
            return {"value": to_wire(grant.fn(*call["args"], **call["kwargs"]))}
        except Exception as e:  # noqa: BLE001 - handed back to the sandboxed code
            return {"error": {"type": type(e).__name__, "message": str(e)}}

    # ----------------------------------------------------------------- exec
    def exec(
        self,
        code: str,
        namespace: dict[str, Any] | None = None,
        modules: dict[str, Any] | None = None,
        stdin: str | None = None,
        argv: list[str] | None = None,
        echo: bool | str | None = None,
        keep: Any = None,
    ) -> ExecResult:
        """Run ``code``; never raises for the code's own faults (see ``result.error``).
        ``echo`` overrides the sandbox's echo mode for this call (None keeps it).
        ``keep`` (a collection of names): the result's namespace holds only those —
        at the worker levels the others never leave the worker (the sandbox's
        namespace keeps them all)."""
        return self._exec(code, namespace, modules, stdin, argv, echo, keep, False)

    def _exec(
        self,
        code: str,
        namespace: dict[str, Any] | None,
        modules: dict[str, Any] | None,
        stdin: str | None,
        argv: list[str] | None,
        echo: bool | str | None,
        keep: Any,
        top_level_await: bool,
    ) -> ExecResult:
        if not isinstance(code, str):
            raise InvalidArgument("code must be a str")
        try:
            kept = validate_keep(keep)
        except TypeError as bad:
            raise InvalidArgument(str(bad)) from None
        rendering = self._rendering()
        if echo is not None:
            _echo_mode(echo)  # ValueError, at every level
        self._note_markers(namespace)
        for spec in (modules or {}).values():
            if isinstance(spec, Mapping):
                self._note_markers(spec)
        with self._lock:
            if self._local is not None:
                if self._closed:
                    raise SandtrapError("the sandbox is closed")
                r = self._local.exec(
                    code,
                    namespace=namespace,
                    modules=modules,
                    stdin=stdin,
                    argv=argv,
                    echo=echo,
                    snapshot_prints=self.snapshot_prints,
                    allow_await=top_level_await,
                    keep=kept,
                    render_prints=rendering,
                )
                if r.error is not None:
                    _attach_traceback(r.error, r.traceback)
                ns: Any = r.namespace
                sizes: dict[str, int] = {}
                if self._spool is not None:
                    ns = self._spool.write(r.namespace)
                    sizes = ns.sizes
                return ExecResult(
                    r.stdout,
                    ns,
                    r.error,
                    r.ticks,
                    stderr=r.stderr,
                    traceback=r.traceback,
                    stdout_truncated=r.stdout_truncated,
                    duration=r.duration,
                    error_message=r.error_message,
                    prints=r.prints,
                    rendered_prints=r.rendered_prints,
                    print_count=r.print_count,
                    sizes=sizes,
                    isolation=IsolationStatus(self._report),
                )
            resp = self._request(
                {
                    "op": "coop_exec",
                    "code": code,
                    "namespace": to_wire(self._markers_to_wire(namespace)) if namespace else None,
                    "modules": to_wire(
                        {k: self._markers_to_wire(v) if isinstance(v, Mapping) else v for k, v in modules.items()}
                    )
                    if modules
                    else None,
                    "stdin": stdin,
                    "argv": list(argv) if argv is not None else None,
                    **({"echo": echo} if echo is not None else {}),
                    **({"state": self._state} if self._state is not None else {}),
                    **({"snapshot": True} if self.keep_state else {}),
                    **({"prints": True} if self.snapshot_prints else {}),
                    **({"top_level_await": True} if top_level_await else {}),
                    **({"keep": sorted(kept)} if kept is not None else {}),
                    **(
                        {"render_prints": {"per_print": rendering[0], "limit": rendering[1]}}
                        if rendering is not None
                        else {}
                    ),
                }
            )
            # what granted host functions write while they run here (their prints,
            # warnings): appended after the worker's own output
            host_out, host_err = _Capture(self.policy.max_stdout), _Capture(self.policy.max_stdout)
            while "call" in resp:  # the worker called a granted function: it runs here
                call = resp["call"]
                answer: dict[str, Any] = {"abort": True}
                route = _output.begin(host_out, host_err)
                try:
                    answer = self._host_call(call)
                finally:  # interrupted (Ctrl-C): abort the exec, which ends the worker
                    _output.end(route)
                    resp = self._request({"op": "answer", "pending": resp["pending"], "call": call["id"], **answer})
        self._report = resp.get("isolation", self._report)  # sent when it changed
        if isinstance(resp.get("state"), dict):
            self._state = resp["state"]
        e = resp["error"]
        result_ns: Any = resp["namespace"]
        if self._spool is not None:
            result_ns = SpooledNamespace(self._spool, result_ns, resp.get("spooled") or {}, resp.get("sizes"))
        elif resp.get("spooled"):
            raise WorkerCrashed("the engine answered with spooled values, but this sandbox spools nothing")
        return ExecResult(
            resp["stdout"] + host_out.getvalue(),
            result_ns,
            _error_from_wire(e),
            resp["ticks"],
            stderr=resp["stderr"] + host_err.getvalue(),
            prints=[tuple(p) if isinstance(p, list) else p for p in resp.get("prints") or []],
            rendered_prints=list(resp.get("rendered_prints") or []),
            print_count=int(resp.get("print_count") or 0),
            sizes=dict(resp.get("sizes") or {}),
            traceback=resp["traceback"],
            stdout_truncated=resp["stdout_truncated"],
            duration=float(resp["duration"]),
            error_message=e["message"] if e else None,
            isolation=IsolationStatus(self._report),
            restarted=resp["restarted"],
        )

    def _rendering(self) -> tuple[int, int] | None:
        r = self.render_prints
        return None if r is None else (r.per_print, r.limit)

    def snapshot(self) -> dict[str, Any]:
        """The namespace as source plus data (never pickle): the import, def and class
        statements that made its functions and classes, its plain values, and its
        instances of sandbox classes as their attributes; ``dropped`` names the rest.
        ``sandbox(policy, state=snapshot)`` (any level, any process) rebuilds it."""
        with self._lock:
            if self._local is not None:
                if self._closed:
                    raise SandtrapError("the sandbox is closed")
                return self._local.snapshot()
        r = self._raw_exec({"op": "coop_exec", "code": "", "snapshot": True})
        state: dict[str, Any] = r["state"]
        return state

    def _raw_exec(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._state is not None:
                req = {**req, "state": self._state}
            resp = self._request(req)
            while "call" in resp:
                call = resp["call"]
                answer: dict[str, Any] = {"abort": True}
                try:
                    answer = self._host_call(call)
                finally:
                    resp = self._request({"op": "answer", "pending": resp["pending"], "call": call["id"], **answer})
            self._report = resp.get("isolation", self._report)
            if isinstance(resp.get("state"), dict):
                self._state = resp["state"] if self.keep_state else self._state
            return resp

    async def aexec(
        self,
        code: str,
        namespace: dict[str, Any] | None = None,
        modules: dict[str, Any] | None = None,
        stdin: str | None = None,
        argv: list[str] | None = None,
        echo: bool | str | None = None,
        keep: Any = None,
    ) -> ExecResult:
        """``exec`` that the event loop keeps running beside, and whose code may use
        top-level ``await``, ``async for`` and ``async with`` (the seed's aexec). Such
        a body runs as a coroutine on an event loop of its own — at ``"none"`` on the
        exec's thread, at the worker levels in the worker — never on the caller's
        loop, which would run the code's tasks outside the exec's limits; the
        timeout and ``cancel()`` stop an ``await`` too. Cancelling the task stops the
        code (as ``cancel()``), waits until it has stopped, and re-raises
        ``CancelledError``: the next exec does not wait for it."""
        if echo is not None:
            _echo_mode(echo)  # ValueError here, as exec
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, lambda: self._exec(code, namespace, modules, stdin, argv, echo, keep, True))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            while not fut.done():
                self.cancel()  # again until it lands: the exec may not have begun yet
                try:
                    await asyncio.wait([fut], timeout=0.02)
                except asyncio.CancelledError:
                    continue
            if not fut.cancelled():
                fut.exception()  # retrieved: no "never retrieved" warning
            raise

    def cancel(self) -> None:
        """Stop the running exec (from another thread): its worker is killed. With no
        exec running it does nothing: an idle worker and its namespace are kept."""
        if self._local is not None:
            self._local.cancel()
            return
        h = self._handle
        ptr = h.try_use() if h is not None else 0
        if ptr:
            try:
                _native.sandbox_cancel(ptr, None)
            finally:
                h.release()  # type: ignore[union-attr]

    def close(self) -> None:
        """End the worker (an exec running is cancelled first) and free the sandbox;
        with ``spool=``, remove the spool directory (unread values are gone)."""
        local = getattr(self, "_local", None)
        if local is not None and not self._closed:
            self._closed = True
            local.cancel()
            # after a running exec stopped (not from inside one: a host function closing it)
            if self._lock.acquire(timeout=5):
                try:
                    local.release()
                finally:
                    self._lock.release()
        if self._handle is not None:
            self.cancel()
            self._handle.close()
        spool = getattr(self, "_spool", None)
        if spool is not None:
            spool.close()

    def __enter__(self) -> CoopSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def sandbox(
    policy: Policy | None = None,
    isolation: str = "none",
    filesystem: IsolatedFS | None = None,
    echo: bool | str = False,
    allow_degraded: bool = False,
    *,
    mode: str = "raw",
    start_method: str | None = None,
    close_fds: bool = False,
    state: dict[str, Any] | None = None,
    keep_state: bool = False,
    snapshot_prints: bool = False,
    preload_grants: bool = True,
    rpc_handlers: Mapping[str, Any] | None = None,
    render_prints: PrintRendering | None = None,
    spool: Any = False,
) -> CoopSandbox:
    """A cooperative Python sandbox.

    ``snapshot_prints=True``: ``result.prints`` holds each print's (and echo's)
    values as data (tuples; non-data values as placeholders), at every level.
    ``result.stdout``/``stderr`` also hold what host code writes to ``sys.stdout``/
    ``sys.stderr`` during the exec (granted functions, library code, warnings,
    threads the exec starts); host code inside ``passthrough_stdio()`` writes to the
    real streams. At the worker levels a granted host function runs here, and what
    it writes is appended after the worker's output.

    ``state`` (from ``sb.snapshot()``) is rebuilt first: at ``"none"`` now, in a
    worker in every fresh worker (its first exec, or one after a restart). With
    ``keep_state=True`` each exec at a worker level brings back the current state,
    so functions, classes and instances survive a worker restart.

    The seed's ``mode`` (only ``"raw"``), ``start_method`` and ``close_fds`` are
    accepted: workers are always forks of a template that the engine started by
    execve and never inherit this process's memory or descriptors (what the seed's
    ``"forkserver"``/``"spawn"`` and ``close_fds=True`` give), so ``None``,
    ``"spawn"`` and ``"forkserver"`` are the same here and ``"fork"`` is refused:
    inheriting the host's memory is what the design never does (grant by reference,
    and host functions run in the host through host calls, so a non-portable
    ``policy.fn`` needs no fork).

    ``rpc_handlers`` ({target: handler}): an ``RpcProxyMarker(target, methods=...)``
    given in ``namespace=`` or ``modules=`` becomes a proxy in the sandbox whose
    method calls run ``handler(method, args, kwargs)`` here, at every level (at the
    worker levels through ``rpc`` host calls), arguments and result as data. A live
    object granted with ``policy.module(obj, name=...)`` is reached the same way. The
    host checks every call: a served target, a public method the markers declared.

    ``preload_grants`` (worker levels; default True): the template the workers are
    forked from imports the granted modules and classes once, and every worker
    inherits them (the seed's ``preload_grants=True``: the cheap start). False:
    the template imports none of them and each worker imports them after its fork
    (the seed's default, for grants unsafe to import in a process that is then
    forked, such as one that starts a thread at import; each worker then pays the
    import). At ``"none"`` there is no worker: the host imported the grants.

    ``isolation``:

    * ``"none"``: in this process. The Python layer (AST rewriting, the attribute
      gate, cooperative limits) is the only boundary; what escapes it is in your
      process.
    * ``"process"``: a worker process started by the engine. A crash or a runaway
      C call costs the call, not your process — but the worker reads and writes
      every file you can (``/`` read-write) and has the network: an escape from
      the Python layer there reaches your files and network just the same.
    * ``"kernel"``: the worker runs under Landlock, seccomp and limits — it reads the
      Python runtime and granted modules' directories, writes only the
      ``IsolatedFS`` root, has no network unless ``policy.allow_network`` and cannot
      create processes or run programs unless ``policy.allow_subprocess``. Fails
      closed (:class:`IsolationUnavailable`) unless ``allow_degraded``; the result's
      ``isolation`` says what took effect. Use this level for code you do not trust.
    """
    if isolation not in LEVELS:
        raise InvalidArgument(f"isolation must be one of {LEVELS}, got {isolation!r}")
    if mode != "raw":
        raise InvalidArgument(f"mode must be 'raw', got {mode!r}")
    if start_method == "fork":
        raise InvalidArgument(
            'start_method="fork" is not offered: workers never inherit this process\'s memory (they are forks of '
            "a template the engine starts by execve, so a multi-threaded host cannot deadlock them). Grants cross "
            "by reference and policy.fn grants run here in the host when the worker calls them, so closures and "
            "bound methods need no fork; use start_method=None (the same as 'forkserver' and 'spawn')"
        )
    if start_method not in (None, "spawn", "forkserver"):
        raise InvalidArgument(f"start_method must be None, 'spawn' or 'forkserver', got {start_method!r}")
    if not isinstance(close_fds, bool):
        raise InvalidArgument("close_fds must be a bool (workers never inherit descriptors either way)")
    if not isinstance(preload_grants, bool):
        raise InvalidArgument("preload_grants must be a bool")
    if not (spool is False or spool is True or isinstance(spool, (str, os.PathLike))):
        raise InvalidArgument(f"spool must be False, True or a directory to spool under, got {type(spool).__name__}")
    if policy is None:
        policy = Policy()
    if not isinstance(policy, Policy):
        raise InvalidArgument("policy must be a sandtrap.Policy")
    if filesystem is not None and not isinstance(filesystem, (IsolatedFS, VirtualFS)):
        filesystem = IsolatedFS(os.fspath(filesystem))
    return CoopSandbox(
        policy,
        isolation,
        filesystem,
        echo,
        allow_degraded,
        state,
        keep_state,
        snapshot_prints,
        preload_grants,
        rpc_handlers,
        render_prints,
        spool,
    )


_ = sandtrap_guest  # the guest runtime ships with this package
