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

The host side of the worker protocol treats the worker as hostile: one deadline
(the policy's timeout plus ``GRACE``) covers the whole exec, host calls included;
a frame that does not decode, or has the wrong shape or types, ends the worker and
the call returns :class:`WorkerCrashed`.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import sandtrap_guest
from sandtrap_guest import ExecResult as GuestExecResult
from sandtrap_guest import GuestSession, Policy, StCancelled, StTimeout
from sandtrap_guest import errors as guest_errors
from sandtrap_guest.wire import to_wire

from . import _native
from ._errors import InvalidArgument, IsolationUnavailable, SandtrapError

__all__ = ["sandbox", "IsolatedFS", "ExecResult", "CoopSandbox", "WorkerError", "WorkerCrashed", "Policy"]

LEVELS = ("none", "process", "kernel")
GRACE = 0.5  # seconds a worker may overrun the policy's timeout before it is killed
_NO_TIMEOUT = 24 * 3600.0
# the worker program (tests substitute a deliberately malicious one)
_WORKER_MODULE = "sandtrap_guest.worker"
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


class _ProtocolError(Exception):
    """What the worker sent is not a valid frame of the protocol."""


def _typed(d: dict, key: str, types: tuple, optional: bool = False) -> None:
    if key not in d:
        if optional:
            return
        raise _ProtocolError(f"missing {key!r}")
    v = d[key]
    if optional and v is None:
        return
    if type(v) not in types:
        raise _ProtocolError(f"{key!r} is a {type(v).__name__}")


def _check_result(r: dict) -> None:
    for k in ("stdout", "stderr"):
        _typed(r, k, (str,))
    _typed(r, "namespace", (dict,))
    _typed(r, "traceback", (str,), optional=True)
    _typed(r, "ticks", (int,))
    _typed(r, "stdout_truncated", (int,))
    _typed(r, "duration", (int, float))
    for k in r["namespace"]:
        if type(k) is not str:
            raise _ProtocolError("namespace names must be str")
    e = r.get("error")
    if e is not None:
        if type(e) is not dict:
            raise _ProtocolError("'error' is not a map")
        for k in ("type", "module", "message"):
            _typed(e, k, (str,))
        _typed(e, "traceback", (str,), optional=True)


def _check_call(c: dict) -> None:
    _typed(c, "name", (str,))
    _typed(c, "args", (list,))
    _typed(c, "kwargs", (dict,))
    if not all(type(k) is str for k in c["kwargs"]):
        raise _ProtocolError("keyword names must be str")


def _decode(data: Any) -> dict:
    import msgpack

    if type(data) is not bytes:
        raise _ProtocolError("the frame is not bytes")
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any decoding failure (StackError, ExtraData, bad UTF-8 ...)
        raise _ProtocolError(f"the frame does not decode: {type(e).__name__}: {e}") from None
    if type(msg) is not dict or type(msg.get("op")) is not str:
        raise _ProtocolError(f"the frame is not a map with an op: {type(msg).__name__}")
    return msg


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
    name, module, message = e["type"], e["module"], e["message"]
    cls = None
    if module == "sandtrap_guest.errors":
        cls = getattr(guest_errors, name, None)
    elif module == "builtins":
        cls = getattr(builtins, name, None)
    err: BaseException
    if isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, (SystemExit,
                                                                                        KeyboardInterrupt)):
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
        self._lock = threading.Lock()      # one exec at a time
        self._state = threading.Lock()     # _busy, _cancelled (cancel() from other threads)
        self._busy = False
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
        pythonpath = os.pathsep.join([guest_dir, *_WORKER_PATH])
        env = {"PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
               "PYTHONSAFEPATH": "1"}
        root = self.filesystem.root if self.filesystem else None
        if self.level == "process":
            # crash containment only: the worker sees everything this process sees
            pol: dict[str, Any] = {"fs_readable": ["/"], "fs_writable": ["/"], "net_allow": ["*"],
                                   "net_allow_udp": True, "net_allow_unix": True, "allow_degraded": True,
                                   "env": env, **({"cwd": root} if root else {})}
            if self.policy.memory_limit:
                pol["max_memory"] = int(self.policy.memory_limit) + (256 << 20)
            return pol
        readable = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, guest_dir,
                    "/usr", "/lib", *_WORKER_PATH}
        for extra in ("/lib64", "/lib32"):
            if os.path.exists(extra):
                readable.add(extra)
        # the worker re-imports every grant by reference: the modules granted, and
        # those defining granted classes and (host_fns aside) functions
        grant_modules = [g.module for g in self.policy.modules.values()]
        grant_modules += [sys.modules.get(getattr(g.cls, "__module__", "")) for g in self.policy.classes.values()]
        for m in grant_modules:
            f = getattr(m, "__file__", None)
            if f:
                readable.add(os.path.dirname(os.path.realpath(f)))
        readable = {os.path.realpath(p) for p in readable if p and os.path.exists(p)}
        pol = {"fs_readable": sorted(readable), "clean_env": True,
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

    def _deny_spawn(self) -> bool:
        return self.level == "kernel" and not self.policy.allow_subprocess

    def _start_worker(self) -> None:
        # A fork of this configuration's template (started once per host process,
        # confined exactly like this sandbox; the fork joins this sandbox's cgroup).
        # One template serves every sandbox that differs only in paths: the start frame
        # holds no filesystem root; the fork is sent init like a fresh worker.
        start = {"op": "template", "policy": self._portable,
                 "sys_path": [p for p in sys.path if p and os.path.isdir(p)]}
        # spawn false: the fork's own seccomp layer refuses new processes and programs
        req = {"op": "session_open", "argv": [sys.executable, "-S", "-m", _WORKER_MODULE],
               "template": _native.pack(start), "spawn": not self._deny_spawn()}
        rc, resp = _native.sandbox_exec(self._handle, _native.pack(req))
        if rc != _native.OK:
            err = _native.status_error(rc, resp)
            raise IsolationUnavailable(f"the sandbox worker did not start: {err}") from err
        self._session = resp["session"]
        try:
            reply = self._exchange({"op": "init", "policy": self._portable,
                                    "filesystem_root": self.filesystem.root if self.filesystem else None,
                                    "echo": self.echo}, 30.0)
        except _ProtocolError as e:
            self._end_worker()
            raise IsolationUnavailable(f"the sandbox worker did not start: {e}") from None
        if reply is None or reply.get("op") != "ready":
            why = (reply or {}).get("message") or self._last_end
            self._end_worker()
            raise IsolationUnavailable(f"the sandbox worker did not start: {why}")
        self._report_subprocess(reply.get("seccomp"))

    def _report_subprocess(self, installed: Any) -> None:
        """``result.isolation["subprocess"]``: may the worker create processes, and what
        refuses it. At "kernel" without allow_subprocess a worker that did not install
        the filter fails closed (IsolationUnavailable) unless allow_degraded."""
        installed = installed if isinstance(installed, dict) else {}
        if not self._deny_spawn():
            why = ("allow_subprocess=True" if self.level == "kernel" else
                   'isolation="process" refuses nothing at the kernel level')
            self._report["subprocess"] = {"allowed": True, "why": why}
            return
        by = []
        if installed.get("engine"):
            by.append("the fork's seccomp layer (fork, vfork, clone without CLONE_THREAD, execve: EPERM)")
        self._report["subprocess"] = {"allowed": False, "enforced_by": by}
        if not by:
            msg = "the worker could not refuse process creation (no seccomp layer installed: this kernel has no seccomp)"
            if not self.allow_degraded:
                self._end_worker()
                raise IsolationUnavailable(msg)
            degraded = list(self._report.get("degraded") or [])
            if f"subprocess: {msg}" not in degraded:
                degraded.append(f"subprocess: {msg}")
            self._report["degraded"] = degraded

    def _end_worker(self) -> None:
        """Kill the worker (a protocol violation, the deadline): the next exec starts a
        fresh one."""
        if self._session is not None:
            sid, self._session = self._session, None
            try:
                self._request({"op": "session_close", "session": sid})
            except SandtrapError:
                pass

    def _exchange(self, frame: dict, timeout: float | None) -> dict | None:
        """Send one frame, get one back; None when the worker ended (it is gone).
        Raises _ProtocolError (the worker is still running: end it) for a reply that
        is not a frame of the protocol."""
        req = {"op": "session_send", "session": self._session, "frame": _native.pack(frame)}
        if timeout is not None:
            req["timeout"] = max(timeout, 0.001)
        resp = self._request(req)
        if resp.get("ended"):
            self._session = None
            self._stale = bool(resp.get("confined"))  # the frame was not delivered
            res = resp.get("result") or {}
            stderr = res.get("stderr") or b""
            stderr = (stderr if isinstance(stderr, bytes) else b"")[-2000:]
            self._last_end = f"{resp.get('reason')}; stderr: {stderr.decode('utf-8', 'replace')}"
            return None
        return _decode(resp.get("frame"))

    def _host_call(self, msg: dict) -> dict:
        grant = self.policy.fns.get(msg["name"])
        if grant is None:
            return {"op": "raise", "type": "NameError", "message": f"no host function {msg['name']!r}"}
        try:
            value = grant.fn(*msg["args"], **msg["kwargs"])
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
                                  duration=r.duration, error_message=r.error_message,
                                  isolation=dict(self._report))
            if not self._handle:
                raise SandtrapError("the sandbox is closed")
            self._last_end = ""
            restarted = False
            if self._session is None:
                self._start_worker()
                restarted = self._ever_started
            self._ever_started = True
            with self._state:
                self._busy = True
                self._cancelled = False
            try:
                return self._exec_worker(code, namespace, modules, stdin, argv, restarted)
            finally:
                with self._state:
                    self._busy = False
                    self._cancelled = False

    def _exec_worker(self, code, namespace, modules, stdin, argv, restarted) -> ExecResult:
        # one deadline for the whole exec: the code, every host call it makes, the
        # conversion of its namespace, the reply
        limit = self.policy.timeout
        deadline = None if limit is None else time.monotonic() + limit + GRACE

        def left() -> float | None:
            return None if deadline is None else deadline - time.monotonic()

        frame = {"op": "exec", "code": code, "namespace": to_wire(namespace) if namespace else None,
                 "modules": to_wire(modules) if modules else None, "stdin": stdin,
                 "argv": list(argv) if argv is not None else None}
        self._stale = False
        fault = None
        try:
            reply = self._exchange(frame, left())
            if reply is None and self._stale:
                # the worker predates this process's confine(): it was ended before
                # the code ran; a fresh one holds the new confinement too
                self._start_worker()
                restarted = True
                reply = self._exchange(frame, left())
            while reply is not None and reply.get("op") == "call":
                _check_call(reply)
                answer = self._host_call(reply)
                remaining = left()
                if remaining is not None and remaining <= 0:
                    self._end_worker()
                    self._last_end = "timed out during host calls"
                    reply = None
                    break
                reply = self._exchange(answer, remaining)
            if reply is not None:
                if reply.get("op") != "result":
                    raise _ProtocolError(f"unexpected worker frame {reply.get('op')!r:.60}")
                _check_result(reply)
        except _ProtocolError as e:
            self._end_worker()
            fault = WorkerCrashed(f"the worker broke the protocol and was ended: {e}")
            reply = None
        if reply is None:
            err: BaseException
            if fault is not None:
                err = fault
            elif self._cancelled:
                err = StCancelled("cancelled: the worker was killed (the next exec starts a fresh one)")
            elif deadline is not None and time.monotonic() >= deadline - 0.05:
                err = StTimeout(f"the worker overran the timeout of {limit:g}s and was killed ({self._last_end})")
            else:
                err = WorkerCrashed(f"the worker died: {self._last_end}")
            return ExecResult("", {}, err, 0, isolation=dict(self._report), restarted=restarted)
        error = _error_from_wire(reply.get("error"))
        return ExecResult(reply["stdout"], reply["namespace"], error, reply["ticks"],
                          stderr=reply["stderr"], traceback=reply.get("traceback"),
                          stdout_truncated=reply["stdout_truncated"], duration=float(reply["duration"]),
                          error_message=(reply.get("error") or {}).get("message"),
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
        """Stop the running exec (from another thread). With no exec running it does
        nothing: an idle worker and its namespace are kept."""
        if self._local is not None:
            self._local.cancel()
            return
        with self._state:
            if not self._busy or not self._handle:
                return
            # the worker runs the code to completion on its own: stop it by killing it
            # (everything this sandbox's handle runs: the worker is all it runs)
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
    """A cooperative Python sandbox.

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
    if policy is None:
        policy = Policy()
    if not isinstance(policy, Policy):
        raise InvalidArgument("policy must be a sandtrap.Policy")
    if filesystem is not None and not isinstance(filesystem, IsolatedFS):
        filesystem = IsolatedFS(os.fspath(filesystem))
    return CoopSandbox(policy, isolation, filesystem, echo, allow_degraded)


_ = sandtrap_guest  # the guest runtime ships with this package
