"""Calls judged by Python: ``policy_fn`` and syscall handlers (issue 14).

The engine's supervisor traps the syscalls a run's handlers (and ``policy_fn``) name,
applies the sandbox's own rules first (Landlock, the deny list, network rules: a
handler can only tighten), and asks the host about what those rules let through, as
host calls of kind ``syscall`` on the ``run_handlers`` operation (docs/protocol.md,
"host calls"). This module answers them: it calls ``policy_fn(event, ctx)`` or the
handler's ``handle(ctx)`` and sends the decision back.

An ``async def handle`` is run on an event loop of the run's own (a thread): the
binding answers ``defer`` at once, so the engine goes on serving the run's other
trapped calls, and sends the decision (``handler_decide``) when the coroutine ends.
"""

from __future__ import annotations

import asyncio
import enum
import errno as _errno
import functools
import inspect
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _native

__all__ = ["Handler", "HandlerCtx", "NotifAction", "ExceptionPolicy", "SyscallEvent", "PolicyContext"]


class ExceptionPolicy(enum.IntEnum):
    """What the supervisor does when a handler raises or returns something that is
    not a :class:`NotifAction` (the engine applies it): ``KILL`` the caller's process
    group (the default of :class:`Handler`: fail closed), deny with ``EPERM`` (the
    default of ``policy_fn``), ``CONTINUE``, or deny with ``EIO``."""

    KILL = 0
    DENY_EPERM = 1
    CONTINUE = 2
    DENY_EIO = 3


_POLICY_WIRE = {
    ExceptionPolicy.KILL: "kill",
    ExceptionPolicy.DENY_EPERM: "deny_eperm",
    ExceptionPolicy.CONTINUE: "continue",
    ExceptionPolicy.DENY_EIO: "deny_eio",
}


@dataclass(frozen=True)
class NotifAction:
    """A handler's decision; build it with the class methods."""

    kind: str
    errno_value: int = 0
    return_value: int = 0
    srcfd: int = -1
    newfd_flags: int = 0
    sig: int = 0
    pgid: int = 0

    @classmethod
    def continue_(cls) -> NotifAction:
        """Let the sandbox's own decision stand: the kernel runs the call (with
        Landlock and every other kernel check), or — connect under network rules by
        destination — the supervisor performs it with the address the handler saw."""
        if cls is NotifAction:
            return _CONTINUE  # immutable: one for every call (making one costs 1 µs)
        return cls("continue")

    @classmethod
    def errno(cls, value: int) -> NotifAction:
        """Fail the call with ``value`` (1..4095) without running it."""
        return cls("errno", errno_value=value)

    @classmethod
    def returns(cls, value: int) -> NotifAction:
        """Return ``value`` without running the call."""
        return cls("returns", return_value=value)

    @classmethod
    def hold(cls) -> NotifAction:
        """Never answer: the calling thread waits until the run ends."""
        return cls("hold")

    @classmethod
    def kill(cls, sig: int = 9, pgid: int = 0) -> NotifAction:
        """Send ``sig`` to the caller's process group (``pgid`` is ignored: always
        the caller's own, found through a pidfd of it)."""
        return cls("kill", sig=sig, pgid=pgid)

    @classmethod
    def inject_fd_send(cls, srcfd: int, newfd_flags: int = 0) -> NotifAction:
        """Answer the call with a new descriptor of the caller's, a copy of ``srcfd``
        (SECCOMP_IOCTL_NOTIF_ADDFD). ``srcfd`` passes to the engine, which closes it:
        do not close it yourself. ``newfd_flags`` may hold ``os.O_CLOEXEC``."""
        if not isinstance(srcfd, int) or isinstance(srcfd, bool) or srcfd < 0:
            raise ValueError(f"inject_fd_send: srcfd must be a non-negative int, got {srcfd!r}")
        return cls("inject_fd", srcfd=srcfd, newfd_flags=newfd_flags)

    inject_fd = inject_fd_send

    @classmethod
    def inject_bytes(cls, data: bytes, *, seal: bool = True, cloexec: bool = True) -> NotifAction:
        """Answer the call (an open) with a descriptor of an in-memory file holding
        ``data``, at offset 0: the buffer is a memfd the binding creates and fills,
        sealed against writes and resizing unless ``seal=False``; the call's return
        value is the caller's new fd. Bounded by memory only: keep it small."""
        import fcntl

        flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seal else 0)
        fd = os.memfd_create("sandtrap-content", flags)
        try:
            view = memoryview(bytes(data))
            while view:
                view = view[os.write(fd, view) :]
            os.lseek(fd, 0, os.SEEK_SET)
            if seal:
                fcntl.fcntl(
                    fd,
                    fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SEAL | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK,
                )
        except BaseException:
            os.close(fd)
            raise
        return cls.inject_fd_send(fd, newfd_flags=os.O_CLOEXEC if cloexec else 0)

    def _wire(self) -> dict[str, Any]:
        k = self.kind
        if k == "errno":
            return {"action": "errno", "errno": int(self.errno_value)}
        if k == "returns":
            return {"action": "returns", "value": int(self.return_value)}
        if k == "inject_fd":
            return {"action": "inject_fd", "fd": int(self.srcfd), "flags": int(self.newfd_flags)}
        if k == "kill":
            return {"action": "kill", "signal": int(self.sig)}
        return {"action": k}


class Handler:
    """Subclass and override ``handle(ctx) -> NotifAction``; register with
    :meth:`Sandbox.run_with_handlers`. ``on_exception`` (default ``KILL``) is what
    happens when ``handle`` raises or returns something else. ``handle`` may be an
    ``async def``: it then runs on an event loop of the run's own while the engine
    serves the run's other trapped calls (several can be outstanding at once)."""

    on_exception: ExceptionPolicy = ExceptionPolicy.KILL

    def handle(self, ctx: HandlerCtx) -> NotifAction:
        raise NotImplementedError("Handler subclasses must override handle(ctx) -> NotifAction")


# name -> index of the path argument (single-path calls)
_PATH_ARG = {
    "openat": 1,
    "open": 0,
    "creat": 0,
    "unlinkat": 1,
    "unlink": 0,
    "mkdirat": 1,
    "mkdir": 0,
    "rmdir": 0,
    "newfstatat": 1,
    "statx": 1,
    "stat": 0,
    "lstat": 0,
    "faccessat": 1,
    "faccessat2": 1,
    "access": 0,
    "readlinkat": 1,
    "readlink": 0,
    "execve": 0,
    "execveat": 1,
    "truncate": 0,
    "chdir": 0,
    "mknodat": 1,
    "mknod": 0,
    "chmod": 0,
    "fchmodat": 1,
    "fchmodat2": 1,
    "chown": 0,
    "lchown": 0,
    "fchownat": 1,
    "utimensat": 1,
}
# the two-path calls: name -> (index of the first path: the old name or a symlink's
# target, index of the second: the new name)
_MULTI_PATH = {
    "renameat2": (1, 3),
    "renameat": (1, 3),
    "rename": (0, 1),
    "linkat": (1, 3),
    "link": (0, 1),
    "symlinkat": (0, 2),
    "symlink": (0, 1),
}


_CONTINUE = NotifAction("continue")


@dataclass(frozen=True)
class HandlerCtx:
    """One trapped call: its registers, what the supervisor copied (``path``,
    ``path2``, ``argv``, the address), and reads of the caller's memory while the
    call waits (``read``, ``read_cstr``, ``read_path``; ``None`` once it no longer
    waits). ``path2`` is the new name of a rename or link, or the link made by a
    symlink (whose ``path`` is its target)."""

    id: int
    pid: int
    syscall: str
    syscall_nr: int
    args: tuple[int, int, int, int, int, int]
    path: str | None = None
    argv: tuple[str, ...] | None = None
    path2: str | None = None
    family: str | None = None
    host: str | None = None
    port: int = 0
    flags: int = 0
    arch: int = 0
    instruction_pointer: int = 0
    _run: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def _of(cls, call: dict[str, Any], run: Any) -> HandlerCtx:
        """The context of one host call: the dataclass's fields set at once (its
        frozen __init__ sets each through object.__setattr__, 2.3 µs of a call's
        ~45 µs)."""
        ctx = object.__new__(cls)
        argv = call.get("argv")
        args = call.get("args")
        ctx.__dict__.update(
            id=call["event"],
            pid=call.get("pid", 0),
            syscall=call["syscall"],
            syscall_nr=call.get("nr", -1),
            args=tuple(args) if type(args) is list and len(args) == 6 else _six(args),
            path=call.get("path"),
            argv=tuple(argv) if argv is not None else None,
            path2=call.get("path2"),
            family=call.get("family"),
            host=call.get("host"),
            port=call.get("port", 0),
            flags=0,
            arch=0,
            instruction_pointer=0,
            _run=run,
        )
        return ctx

    def _read(self, req: dict[str, Any]) -> bytes | None:
        if self._run is None:
            return None
        resp = self._run.request({"op": "handler_read", "run": self._run.token, "event": self.id, **req})
        if not resp or not resp.get("success"):
            return None
        data = resp.get("data")
        return data if isinstance(data, bytes) else None

    def read(self, addr: int, length: int) -> bytes | None:
        """``length`` bytes of the caller's memory at ``addr`` (at most 1 MiB), read now."""
        if length < 0:
            return None
        return self._read({"addr": int(addr), "len": int(length)})

    def read_cstr(self, addr: int, max_len: int) -> str | None:
        """A NUL-terminated string at ``addr`` of at most ``max_len`` bytes, read now."""
        if max_len < 1:
            return None
        b = self._read({"addr": int(addr), "cstr": int(max_len)})
        return None if b is None else b.decode("utf-8", "replace")

    def write(self, addr: int, data: bytes) -> bool:
        """Not supported: the caller's memory is never written by a handler (use
        ``NotifAction.returns`` or ``inject_bytes``). Always False."""
        return False

    def read_path(self, arg: int | None = None, max_len: int = 4096) -> str | None:
        """The path argument. With ``arg=None`` it is the supervisor's copy (the one
        the engine acts on), for the calls whose path argument is known (of a
        two-path call its first: the old name, a symlink's target; ``read_path2``
        the second); with an explicit ``arg`` (0..5) the string at ``args[arg]``,
        read now."""
        if arg is None:
            if self.syscall not in _PATH_ARG and self.syscall not in _MULTI_PATH:
                raise ValueError(f"read_path: {self.syscall} is not a known path syscall: pass arg=")
            if self.path is not None:
                return self.path[:max_len]
            arg = _PATH_ARG[self.syscall] if self.syscall in _PATH_ARG else _MULTI_PATH[self.syscall][0]
        if not 0 <= arg < 6:
            raise ValueError(f"read_path: arg must be in 0..5, got {arg}")
        return self.read_cstr(self.args[arg], max_len)

    def read_path2(self, max_len: int = 4096) -> str | None:
        """The second path of a two-path call (rename, link: the new name; symlink:
        the link made), the supervisor's copy, which the engine acts on."""
        if self.syscall not in _MULTI_PATH:
            raise ValueError(f"read_path2: {self.syscall} has one path argument at most")
        if self.path2 is not None:
            return self.path2[:max_len]
        return self.read_cstr(self.args[_MULTI_PATH[self.syscall][1]], max_len)

    def paths(self, max_len: int = 4096) -> list[str | None]:
        """Every path the call names, copied: ``[read_path()]``, or for a two-path
        call ``[read_path(), read_path2()]``."""
        if self.syscall in _MULTI_PATH:
            return [self.read_path(max_len=max_len), self.read_path2(max_len)]
        return [self.read_path(max_len=max_len)]


@dataclass(frozen=True)
class SyscallEvent:
    """What ``policy_fn`` sees: execve (``argv``), connect/sendto/bind (``host``,
    ``port``), openat/open (``path``)."""

    syscall: str
    category: str
    pid: int
    parent_pid: int = 0
    host: str | None = None
    port: int = 0
    argv: tuple[str, ...] | None = None
    denied: bool = False
    path: str | None = None

    def argv_contains(self, s: str) -> bool:
        """True when an argv element contains ``s`` (execve events)."""
        return self.argv is not None and any(s in a for a in self.argv)


class PolicyContext:
    """Tightens the run's policy from the callback on (never widens it)."""

    def __init__(self) -> None:
        self._restrict: list[list[str]] = []
        self._pid_restrict: list[list[Any]] = []
        self._deny: list[str] = []
        self._max_memory = 0
        self._max_processes = 0

    def restrict_network(self, ips: Sequence[str]) -> None:
        """From now on connect, sendto and bind reach only these addresses (or CIDR
        prefixes); ``[]``: none. Several calls intersect."""
        if isinstance(ips, (str, bytes)):
            raise TypeError("restrict_network takes a list of addresses")
        self._restrict.append([str(ip) for ip in ips])

    def grant_network(self, ips: Sequence[str]) -> None:
        raise NotImplementedError("grant_network would widen the policy: sandtrap only tightens")

    def restrict_max_memory(self, bytes: int) -> None:  # noqa: A002
        """Lowers the sandbox's memory limit (its cgroup's, every process of it) to at
        most ``bytes`` until this run ends. The sandbox needs a cgroup (a policy with
        ``max_memory``, where cgroups are delegated); without one the engine cannot
        lower it and applies the callback's exception policy (the call is refused)."""
        if isinstance(bytes, bool) or not isinstance(bytes, int) or bytes <= 0:
            raise ValueError(f"restrict_max_memory takes a positive number of bytes, got {bytes!r}")
        self._max_memory = bytes if self._max_memory == 0 else min(self._max_memory, bytes)

    def restrict_max_processes(self, n: int) -> None:
        """Lowers the sandbox's process limit (its cgroup's pids.max: every process of
        the sandbox counts, its zygote and each run's init included) to at most ``n``
        until this run ends; needs a cgroup as ``restrict_max_memory`` does."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"restrict_max_processes takes a positive count, got {n!r}")
        self._max_processes = n if self._max_processes == 0 else min(self._max_processes, n)

    def restrict_pid_network(self, pid: int, ips: Sequence[str]) -> None:
        """From now on the process ``pid`` is a task of (an event's ``pid``) reaches
        only these addresses (or CIDR prefixes) with connect, sendto and bind, on top
        of every other rule; ``[]``: none. The process is pinned when the callback
        returns (a later process with the same number is not restricted); processes
        it forks are not covered (use ``restrict_network`` for the whole run)."""
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError(f"restrict_pid_network takes a pid, got {pid!r}")
        if isinstance(ips, (str, bytes)):
            raise TypeError("restrict_pid_network takes a list of addresses")
        self._pid_restrict.append([pid, [str(ip) for ip in ips]])

    def deny_path(self, path: str) -> None:
        """From now on the run's judged calls refuse (EACCES) ``path`` (absolute) and
        everything beneath it; opens, unlinks and mkdirs also by the file the
        supervisor reaches (symlinks and ``..`` resolved; a hard link or rename of a
        denied file stays denied)."""
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"deny_path takes an absolute path, got {path!r}")
        self._deny.append(path)

    def allow_path(self, path: str) -> None:
        raise NotImplementedError("allow_path would widen the policy: sandtrap only tightens")


def resolve_syscall(key: Any) -> str | int:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"a handler's syscall is a name or a number, got {type(key).__name__}")
    return key


def _policy_answer(result: Any, ctx: PolicyContext) -> dict[str, Any]:
    # None/False/0: allow; True/-1: deny EPERM; positive int: that errno; "audit"/-2
    if result is None or result is False or (isinstance(result, int) and not isinstance(result, bool) and result == 0):
        ans: dict[str, Any] = {"action": "continue"}
    elif result is True or result == -1:
        ans = {"action": "errno", "errno": _errno.EPERM}
    elif result == "audit" or result == -2:
        ans = {"action": "audit"}
    elif isinstance(result, int) and result > 0:
        ans = {"action": "errno", "errno": result}
    else:
        ans = {"action": "errno", "errno": _errno.EPERM}  # unrecognised: fail closed
    if ctx._restrict:
        # several restrictions in one callback: each is a set the address must be in
        # (the engine intersects them by membership: 10.0.0.0/8 and 10.1.2.3 leave 10.1.2.3)
        ans["restrict_network"] = [list(s) for s in ctx._restrict]
    if ctx._pid_restrict:
        ans["restrict_pid_network"] = [list(p) for p in ctx._pid_restrict]
    if ctx._deny:
        ans["deny_path"] = list(ctx._deny)
    if ctx._max_memory:
        ans["restrict_max_memory"] = ctx._max_memory
    if ctx._max_processes:
        ans["restrict_max_processes"] = ctx._max_processes
    return ans


def _error(e: BaseException) -> dict[str, Any]:
    return {"error": {"type": type(e).__name__, "message": str(e)}}


class _Run:
    """The binding's side of one run_handlers operation."""

    def __init__(self, ptr: int, handlers: dict[int, Handler], policy_fn: Callable[..., Any] | None) -> None:
        self.ptr = ptr
        self.handlers = handlers
        self.policy_fn = policy_fn
        self.token = 0
        self._async: dict[int, bool] = {}  # by handler id: its handle is a coroutine function
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def request(self, req: dict[str, Any]) -> dict[str, Any] | None:
        _, resp = _native.sandbox_exec(self.ptr, _native.pack(req))
        return resp

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name="sandtrap-handlers", daemon=True)
                self._thread.start()
            return self._loop

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)
            loop.close()

    def answer(self, call: dict[str, Any]) -> dict[str, Any]:
        """The answer to one host call: {"value": action} or {"error": ...}."""
        self.token = call.get("run", self.token)
        hid = call.get("handler", 0)
        argv = call.get("argv")
        if hid == 0:
            if self.policy_fn is None:
                return {"error": {"type": "NotImplemented", "message": "no policy_fn"}}
            ev = SyscallEvent(
                syscall=call["syscall"],
                category=call.get("category", "file"),
                pid=call.get("pid", 0),
                host=call.get("host"),
                port=call.get("port", 0),
                argv=tuple(argv) if argv is not None else None,
                path=call.get("path"),
            )
            ctx = PolicyContext()
            try:
                return {"value": _policy_answer(self.policy_fn(ev, ctx), ctx)}
            except Exception as e:  # the engine applies policy_fn's exception policy  # noqa: BLE001
                return _error(e)
        h = self.handlers.get(hid)
        if h is None:
            return {"error": {"type": "NotImplemented", "message": f"no handler {hid}"}}
        hctx = HandlerCtx._of(call, self)
        is_async = self._async.get(hid)
        if is_async is None:
            is_async = self._async[hid] = inspect.iscoroutinefunction(h.handle)
        if is_async:
            coro: Any = h.handle(hctx)  # a coroutine (iscoroutinefunction, asked once above)
            fut = asyncio.run_coroutine_threadsafe(coro, self.loop())
            fut.add_done_callback(functools.partial(self._decided, call))
            return {"value": {"action": "defer"}}
        try:
            act = h.handle(hctx)
            if inspect.iscoroutine(act):  # a sync def returning a coroutine: run it here
                act = asyncio.run(act)
        except Exception as e:  # noqa: BLE001
            return _error(e)
        if not isinstance(act, NotifAction):
            return {
                "error": {"type": "TypeError", "message": f"handle() returned {type(act).__name__}, not a NotifAction"}
            }
        return {"value": act._wire()}

    def _decided(self, call: dict[str, Any], fut: Any) -> None:
        req: dict[str, Any] = {"op": "handler_decide", "run": call["run"], "event": call["event"]}
        try:
            act = fut.result()
            if isinstance(act, NotifAction):
                req["value"] = act._wire()
            else:
                req["error"] = {
                    "type": "TypeError",
                    "message": f"handle() returned {type(act).__name__}, not a NotifAction",
                }
        except BaseException as e:  # noqa: BLE001
            req["error"] = {"type": type(e).__name__, "message": str(e)}
        try:
            self.request(req)  # the run may be over: the engine then says so, nothing to do
        except Exception:  # noqa: BLE001
            pass


def drive(
    ptr: int, req: dict[str, Any], handlers: dict[int, Handler], policy_fn: Callable[..., Any] | None
) -> tuple[int, dict[str, Any] | None]:
    """Run a run_handlers request to its end, answering its host calls here. A
    KeyboardInterrupt (or any BaseException) while answering aborts the run (its
    process tree is killed) and is re-raised once the engine has finished it."""
    run = _Run(ptr, handlers, policy_fn)
    pending_exc: BaseException | None = None
    try:
        rc, resp = _native.sandbox_exec(ptr, _native.pack(req))
        while resp is not None and "call" in resp:
            call = resp["call"]
            ans: dict[str, Any] = {"abort": True}
            try:
                if pending_exc is None and call.get("kind") == "syscall":
                    ans = run.answer(call)
                elif pending_exc is None:
                    ans = {"error": {"type": "NotImplemented", "message": f"no host call {call.get('kind')}"}}
            except BaseException as e:  # noqa: BLE001
                pending_exc = e
                ans = {"abort": True}
            rc, resp = _native.sandbox_exec(
                ptr, _native.pack({"op": "answer", "pending": resp["pending"], "call": call["id"], **ans})
            )
    finally:
        run.close()
    if pending_exc is not None:
        raise pending_exc
    return rc, resp


def _six(args: Any) -> tuple[int, int, int, int, int, int]:
    """The call's six registers (zeros where the engine sent fewer)."""
    a = [int(x) for x in (args or [])][:6] + [0] * 6
    return (a[0], a[1], a[2], a[3], a[4], a[5])
