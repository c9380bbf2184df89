"""The cooperative Python sandbox: ``sandbox(policy, isolation=...).exec(code)``.

``"none"`` runs the guest runtime (``sandtrap_guest``) in this process. ``"process"``
and ``"kernel"`` run it in a worker that the engine starts as a session (never a
fork of this process): ``"kernel"`` under the engine's Landlock, seccomp and limits,
failing closed with :class:`IsolationUnavailable` unless ``allow_degraded``. Host
functions granted with ``policy.fn`` run here, in the host, when the worker calls
them; values cross as msgpack data, never pickle.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import sandtrap_guest
from sandtrap_guest import ExecResult as GuestExecResult
from sandtrap_guest import GuestSession, Policy, StCancelled, StTimeout
from sandtrap_guest import errors as guest_errors
from sandtrap_guest.wire import to_wire

from . import _native
from ._errors import InvalidArgument, IsolationUnavailable, SandtrapError

__all__ = ["sandbox", "IsolatedFS", "ExecResult", "CoopSandbox", "WorkerError", "Policy"]

LEVELS = ("none", "process", "kernel")
_GRACE = 2.0  # seconds a worker may overrun the policy's timeout before it is killed


class WorkerError(Exception):
    """An exception from sandboxed code in a worker whose class is not known here."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


class WorkerCrashed(SandtrapError):
    """The worker died during the call (a segfault, ``os._exit``, a kill)."""

    kind = "worker_crashed"


@dataclass
class IsolatedFS:
    """A directory that sandboxed code sees as its filesystem (created if missing)."""

    root: str

    def __post_init__(self) -> None:
        self.root = os.path.realpath(os.fspath(self.root))
        os.makedirs(self.root, exist_ok=True)


@dataclass
class ExecResult(GuestExecResult):
    """The guest runtime's result, plus what the isolation level adds."""

    isolation: dict = field(default_factory=dict)  # {"level": ..., and the engine's report}
    restarted: bool = False  # a fresh worker ran this call (the namespace was reset)


def _error_from_wire(e: dict | None) -> BaseException | None:
    if not e:
        return None
    name, module, message = e.get("type", "Exception"), e.get("module", ""), e.get("message", "")
    cls = None
    if module == "sandtrap_guest.errors":
        cls = getattr(guest_errors, name, None)
    elif module == "builtins":
        cls = getattr(builtins, name, None)
    err: BaseException
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            err = cls(message)
        except Exception:  # noqa: BLE001 - odd constructors
            err = WorkerError(name, message)
    else:
        err = WorkerError(name, message)
    err.__sandtrap_traceback__ = e.get("traceback")  # type: ignore[attr-defined]
    return err


class CoopSandbox:
    """A persistent sandboxed namespace; see :func:`sandbox`."""

    def __init__(self, policy: Policy, isolation: str, filesystem: IsolatedFS | None,
                 echo: bool | str, allow_degraded: bool) -> None:
        self.policy = policy
        self.level = isolation
        self.filesystem = filesystem
        self.echo = echo
        self.allow_degraded = allow_degraded
        self._lock = threading.Lock()
        self._local: GuestSession | None = None
        self._handle = 0
        self._session: int | None = None
        self._report: dict = {"level": isolation}
        root = filesystem.root if filesystem else None
        if isolation == "none":
            self._local = GuestSession(policy, filesystem_root=root, echo=echo)
            return
        self._portable = policy.to_portable(host_fns=True)  # raises StPolicyNotPortable
        self._open_engine()

    # ---------------------------------------------------------------- engine
    def _engine_policy(self) -> dict[str, Any]:
        guest_dir = _native.guest_dir()
        if not guest_dir:
            raise IsolationUnavailable(f"the engine has no guest runtime: {_native.probe().get('guest_dir_error')}")
        env = {"PYTHONPATH": guest_dir, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
               "PYTHONSAFEPATH": "1"}
        root = self.filesystem.root if self.filesystem else None
        if self.level == "process":
            return {"fs_readable": ["/"], "fs_writable": ["/"], "net_allow": ["*"],
                    "net_allow_udp": True, "net_allow_unix": True, "allow_degraded": True,
                    "env": env, **({"cwd": root} if root else {})}
        readable = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, guest_dir,
                    "/usr", "/lib"}
        for extra in ("/lib64", "/lib32"):
            if os.path.exists(extra):
                readable.add(extra)
        for g in self.policy.modules.values():
            f = getattr(g.module, "__file__", None)
            if f:
                readable.add(os.path.dirname(os.path.realpath(f)))
        readable = {os.path.realpath(p) for p in readable if p and os.path.exists(p)}
        pol: dict[str, Any] = {"fs_readable": sorted(readable), "clean_env": True,
                               # HOME is the root, set by the worker's init: the
                               # configuration's template is the same for every root
                               "env": {**env, "HOME": "/nonexistent"},
                               "allow_degraded": self.allow_degraded, "max_processes": 64}
        if root:
            pol["fs_writable"] = [root]
            pol["cwd"] = root
        if self.policy.allow_network:
            pol["net_allow"] = ["*"]
            pol["net_allow_udp"] = True
        if self.policy.memory_limit:
            pol["max_memory"] = int(self.policy.memory_limit) + (256 << 20)
        return pol

    def _open_engine(self) -> None:
        rc, handle, msg = _native.sandbox_new(_native.pack(self._engine_policy()))
        if rc != _native.OK:
            raise _native.status_error(rc, None, msg)
        self._handle = handle
        rc, resp = _native.sandbox_exec(handle, _native.pack({"op": "isolation"}))
        if rc == _native.OK and resp:
            self._report = {"level": self.level, **resp}

    def _request(self, req: dict) -> dict:
        rc, resp = _native.sandbox_exec(self._handle, _native.pack(req))
        if rc != _native.OK:
            raise _native.status_error(rc, resp)
        return resp or {}

    def _start_worker(self) -> None:
        # A fork of this configuration's template (started once per host process,
        # confined exactly like this sandbox; the fork joins this sandbox's cgroup).
        # One template serves every sandbox that differs only in paths: the start frame
        # holds no filesystem root; the fork is sent init like a fresh worker.
        start = {"op": "template", "policy": self._portable,
                 "sys_path": [p for p in sys.path if p and os.path.isdir(p)]}
        rc, resp = _native.sandbox_exec(self._handle, _native.pack(
            {"op": "session_open", "argv": [sys.executable, "-S", "-m", "sandtrap_guest.worker"],
             "template": _native.pack(start)}))
        if rc != _native.OK:
            err = _native.status_error(rc, resp)
            raise IsolationUnavailable(f"the sandbox worker did not start: {err}") from err
        self._session = resp["session"]
        reply = self._exchange({"op": "init", "policy": self._portable,
                                "filesystem_root": self.filesystem.root if self.filesystem else None,
                                "echo": self.echo}, 30.0)
        if reply is None or reply.get("op") != "ready":
            why = (reply or {}).get("message") or self._last_end
            self._session = None
            raise IsolationUnavailable(f"the sandbox worker did not start: {why}")

    def _exchange(self, frame: dict, timeout: float) -> dict | None:
        """Send one frame, get one back; None when the worker ended (it is gone)."""
        resp = self._request({"op": "session_send", "session": self._session,
                              "frame": _native.pack(frame), "timeout": timeout})
        if resp.get("ended"):
            self._session = None
            self._stale = bool(resp.get("confined"))  # the frame was not delivered
            res = resp.get("result") or {}
            stderr = (res.get("stderr") or b"")[-2000:]
            self._last_end = f"{resp.get('reason')}; stderr: {stderr.decode('utf-8', 'replace')}"
            return None
        import msgpack

        return msgpack.unpackb(resp["frame"], raw=False)

    def _host_call(self, msg: dict) -> dict:
        grant = self.policy.fns.get(msg.get("name"))
        if grant is None:
            return {"op": "raise", "type": "NameError", "message": f"no host function {msg.get('name')!r}"}
        try:
            value = grant.fn(*msg.get("args", []), **msg.get("kwargs", {}))
            return {"op": "return", "value": to_wire(value)}
        except Exception as e:  # noqa: BLE001 - handed back to the sandboxed code
            return {"op": "raise", "type": type(e).__name__, "message": str(e)}

    # ----------------------------------------------------------------- exec
    def exec(self, code: str, namespace: dict | None = None, modules: dict | None = None,
             stdin: str | None = None, argv: list[str] | None = None) -> ExecResult:
        """Run ``code``; never raises for the code's own faults (see ``result.error``)."""
        if not isinstance(code, str):
            raise InvalidArgument("code must be a str")
        with self._lock:
            if self._local is not None:
                r = self._local.exec(code, namespace=namespace, modules=modules, stdin=stdin, argv=argv)
                return ExecResult(r.stdout, r.namespace, r.error, r.ticks, stderr=r.stderr,
                                  traceback=r.traceback, stdout_truncated=r.stdout_truncated,
                                  duration=r.duration, isolation=dict(self._report))
            if not self._handle:
                raise SandtrapError("the sandbox is closed")
            restarted = False
            self._last_end = ""
            self._cancelled = False
            if self._session is None:
                self._start_worker()
                restarted = self._ever_started
            self._ever_started = True
            timeout = (self.policy.timeout or 3600.0) + _GRACE
            frame = {"op": "exec", "code": code, "namespace": to_wire(namespace) if namespace else None,
                     "modules": to_wire(modules) if modules else None, "stdin": stdin,
                     "argv": list(argv) if argv is not None else None}
            self._stale = False
            reply = self._exchange(frame, timeout)
            if reply is None and self._stale:
                # the worker predates this process's confine(): it was ended before
                # the code ran; a fresh one holds the new confinement too
                self._start_worker()
                restarted = True
                reply = self._exchange(frame, timeout)
            while reply is not None and reply.get("op") == "call":
                reply = self._exchange(self._host_call(reply), timeout)
            if reply is None or reply.get("op") != "result":
                err: BaseException
                if reply is not None:
                    err = WorkerCrashed(f"unexpected worker reply {reply!r:.200}")
                elif self._cancelled:
                    err = StCancelled("cancelled: the worker was killed (the next exec starts a fresh one)")
                elif "timed out" in self._last_end:
                    err = StTimeout(f"the worker overran the timeout and was killed ({self._last_end})")
                else:
                    err = WorkerCrashed(f"the worker died: {self._last_end}")
                self._cancelled = False
                return ExecResult("", {}, err, 0, isolation=dict(self._report), restarted=restarted)
            return ExecResult(reply.get("stdout", ""), reply.get("namespace") or {},
                              _error_from_wire(reply.get("error")), int(reply.get("ticks", 0)),
                              stderr=reply.get("stderr", ""), traceback=reply.get("traceback"),
                              stdout_truncated=int(reply.get("stdout_truncated") or 0),
                              duration=float(reply.get("duration") or 0.0),
                              isolation=dict(self._report), restarted=restarted)

    _ever_started = False
    _stale = False
    _last_end = ""
    _cancelled = False

    async def aexec(self, code: str, **kwargs: Any) -> ExecResult:
        """``exec`` on a worker thread; the event loop keeps running."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.exec(code, **kwargs))

    def cancel(self) -> None:
        """Stop the running exec (from another thread)."""
        if self._local is not None:
            self._local.cancel()
        elif self._handle:
            # the worker runs the code to completion on its own: stop it by killing it
            self._cancelled = True
            _native.sandbox_cancel(self._handle, None)

    def close(self) -> None:
        if self._handle:
            h, self._handle = self._handle, 0
            _native.sandbox_free(h)

    def __enter__(self) -> CoopSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def sandbox(policy: Policy | None = None, isolation: str = "none", filesystem: IsolatedFS | None = None,
            echo: bool | str = False, allow_degraded: bool = False) -> CoopSandbox:
    """A cooperative Python sandbox. ``isolation``: ``"none"`` (in this process),
    ``"process"`` (a worker started by the engine) or ``"kernel"`` (a worker under
    Landlock, seccomp and limits; fails closed unless ``allow_degraded``)."""
    if isolation not in LEVELS:
        raise InvalidArgument(f"isolation must be one of {LEVELS}, got {isolation!r}")
    if policy is None:
        policy = Policy()
    if not isinstance(policy, Policy):
        raise InvalidArgument("policy must be a sandtrap.Policy")
    if filesystem is not None and not isinstance(filesystem, IsolatedFS):
        filesystem = IsolatedFS(os.fspath(filesystem))
    return CoopSandbox(policy, isolation, filesystem, echo, allow_degraded)


_ = sandtrap_guest  # the guest runtime ships with this package
