"""The worker of the cooperative Python sandbox: ``python3 -m sandtrap_guest.worker``.

The engine runs it as a session (an ordinary sandboxed run — Landlock, seccomp and
limits in ``"kernel"`` isolation) and relays length-prefixed msgpack frames between
it and the host. Frames, host → worker:

    {"op": "init", "policy": <Policy.to_portable(host_fns=True)>, "filesystem_root": str|None, "echo": bool|str,
     "vfs": {"module_root": str}|None (the host serves a VirtualFS: "fs" frames),
     "spool_dir": str|None (spool=: values whose encoding is over spool.INLINE_LIMIT are written there)}
    {"op": "exec", "code": str, "namespace": {...}|None, "modules": {name: {...}}|None,
     "stdin": str|None, "argv": [str]|None, "echo": bool|str (optional: this exec's mode),
     "restore": <state>|None (restored before the code: state.py), "snapshot": bool (the result carries "state"),
     "prints": bool (the result carries "prints": each print's values),
     "await": bool (aexec: top-level await, async for, async with), "keep": [str] (optional: the names the
     result's namespace carries), "render": [per_print, limit] (optional: the result carries "rendered_prints"
     and "print_count")}
    {"op": "return", "value": ...} / {"op": "raise", "type": str, "message": str}   (answers to "call",
        "rpc", "fs"; either may carry "host_time": seconds of the call the exec's clock does not count)

    {"op": "template", "policy": ..., "sys_path": [str]}   (the engine's template start frame)

worker → host:

    {"op": "ready", "pid": int, "seccomp": {"engine": int|None}}
        (engine: instructions of the engine's fork layer installed) / {"op": "error", "message": str}
    {"op": "call", "name": str, "args": [...], "kwargs": {...}}   (a policy.fn grant, run by the host)
    {"op": "rpc", "target": str, "method": str, "args": [...], "kwargs": {...}}
        (a proxy's method call on a host object: rpc.py; answered "return"/"raise")
    {"op": "fs", "name": read|write|stat|list|mkdir|remove|rmdir|rename, "args": [...]}
        (a VirtualFS operation, answered by the host's VirtualFS: "return"/"raise")
    {"op": "result", "stdout": str, "stderr": str, "namespace": {...}, "error": {...}|None,
     "traceback": str|None, "ticks": int, "stdout_truncated": int, "duration": float,
     "spooled": {name: {"size": int, "file": str}} (with spool_dir: the values written to files)}

As a template (``session_open`` with a ``template`` frame, see docs/protocol.md) the
worker imports the runtime and the granted modules once, answers ready, then only
forks, one ahead of each request (the waiting fork joins the cgroup the engine
staged for it): the fork restricts itself with its sandbox's Landlock ruleset, takes
its working directory, environment and channel, installs the seccomp program the
engine sent with the request (``"seccomp"``: classic BPF, ``struct sock_filter``
entries) and makes itself non-dumpable, says ``{"op": "ready"}``, and is then sent
``init`` like a freshly started worker. A fork that cannot set itself up does not
serve: it sends an error frame and exits.

The engine's layer is what refuses process creation in a cooperative worker at
``isolation="kernel"`` without ``Policy.allow_subprocess`` (``session_open`` with
``"spawn": false``): ``fork``, ``vfork``, ``execve`` and ``clone`` without
``CLONE_THREAD`` answer ``EPERM`` (``execveat`` is refused by every sandbox's filter,
``clone3`` answers ``ENOSYS``, so the C library falls back to ``clone`` and threads
still start). Filters stack: the code cannot remove it.

Values cross as msgpack data (None, bool, int, float, str, bytes, list, tuple, dict);
anything else becomes a described placeholder (``wire.to_wire``). Never pickle.
"""

import os
import signal
import socket
import sys

from . import clock, mp, vfs
from .policy import Policy
from .session import GuestSession
from .wire import _clean_str, error_to_wire, to_wire


class HostError(Exception):
    """An exception raised by a host function, re-raised in the sandboxed code."""


def _read(stream):
    head = stream.read(4)
    if len(head) < 4:
        return None
    n = int.from_bytes(head, "big")
    data = stream.read(n)
    if len(data) < n:
        return None
    return mp.unpackb(data)


def _write(stream, obj):
    data = mp.packb(obj)
    stream.write(len(data).to_bytes(4, "big") + data)
    stream.flush()


def _recv_exact(sock, n, fds):
    buf = b""
    while len(buf) < n:
        data, anc, _flags, _addr = sock.recvmsg(n - len(buf), socket.CMSG_SPACE(16 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(
                    int.from_bytes(payload[i : i + 4], sys.byteorder)
                    for i in range(0, len(payload) - len(payload) % 4, 4)
                )
        if not data:
            return None
        buf += data
    return buf


def _recv_frame(sock):
    """One frame and the fds that came with it (None at EOF)."""
    fds = []
    head = _recv_exact(sock, 4, fds)
    if head is None:
        return None, fds
    data = _recv_exact(sock, int.from_bytes(head, "big"), fds)
    return (None if data is None else mp.unpackb(data)), fds


def _restrict(ruleset_fd):
    """landlock_restrict_self with the asking sandbox's ruleset: a layer on top of the
    template's domain (which allows every path), so the fork holds exactly that
    sandbox's rules, scoping of signals and abstract unix sockets included."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(446, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")


# ------------------------------------------------------------------ seccomp
_SECCOMP_NR = {"x86_64": 317, "aarch64": 277}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_INSTALLED = {"engine": None}


def _machine() -> str:
    import platform

    return platform.machine()


def install_seccomp(prog: bytes) -> int:
    """Install the classic-BPF program ``prog`` (``struct sock_filter`` entries, 8 bytes
    each, native endian) as a seccomp filter of every thread of this process (TSYNC;
    the worker has one thread at that point, and threads started later inherit it). Needs no_new_privs (set by the
    engine, and here too) or CAP_SYS_ADMIN. Returns the number of instructions."""
    import ctypes

    if not isinstance(prog, (bytes, bytearray)) or not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        raise ValueError(f"not a seccomp program ({len(prog) if isinstance(prog, (bytes, bytearray)) else prog!r})")
    nr = _SECCOMP_NR.get(_machine())
    if nr is None:
        raise OSError(f"seccomp: unsupported machine {_machine()!r}")
    libc = ctypes.CDLL(None, use_errno=True)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(bytes(prog), len(prog))
    fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
    if libc.prctl(38, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    # SECCOMP_FILTER_FLAG_TSYNC: every thread of the process (there should be only one)
    if libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(1), ctypes.c_ulong(1), ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC)")
    return len(prog) // 8


def _not_dumpable():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def _split(msg, fds):
    """A fork request's fds: channel, ruleset (or None), the next spare's cgroup."""
    chan, rest = fds[0], fds[1:]
    ruleset = rest.pop(0) if msg.get("landlock") else None
    return chan, ruleset, rest


def _adopt(msg, fds):
    """Become the asking sandbox's worker: its Landlock rules, its working directory
    and environment, its channel on stdin and stdout. (Its cgroup: the engine moves
    it, or it is already in the one the engine staged for it.)"""
    chan, ruleset, stage = _split(msg, fds)
    for fd in stage:  # meant for the next spare, not this one
        os.close(fd)
    if ruleset is not None:
        _restrict(ruleset)
        os.close(ruleset)
    if msg.get("cwd"):
        os.chdir(msg["cwd"])
    if msg.get("env") is not None:
        os.environ.clear()
        os.environ.update(kv.split("=", 1) for kv in msg["env"] if "=" in kv)
    if "seccomp" in msg:
        # the engine's layer for this fork (docs/protocol.md, "templates"): installed
        # before the fork answers, or it does not serve (its error goes on the channel)
        _INSTALLED["engine"] = install_seccomp(msg["seccomp"])
    _not_dumpable()
    os.dup2(chan, 0)
    os.dup2(chan, 1)
    os.close(chan)


def _spawn_spare(sock, warm, pending=(), stage=()):
    """Fork a worker ahead of the next request: it joins the cgroup the engine
    staged for it (``stage``: cgroup.procs fds), then waits on a control socket to be
    handed the request. Returns (pid, ctrl) in the template; returns None in the
    fork once it has adopted its request."""
    ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid:
        theirs.close()
        return pid, ctrl
    fds = []
    try:
        # none of the template's channel or of a request's fds (a channel, another
        # sandbox's cgroup.procs) that were open when this fork was made
        for fd in pending:
            os.close(fd)
        ctrl.close()
        sock.close()
        for fd in stage:
            os.write(fd, b"0")  # may wait ~10 ms for the kernel: done while idle
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            warm()  # fault in this fork's copies of the pages an exec touches, ahead of time
        except Exception:  # noqa: BLE001 - only a speed-up
            pass
        msg, fds = _recv_frame(theirs)
        if msg is None or not fds:
            os._exit(0)  # the template is gone
        theirs.close()
        _adopt(msg, fds)
    except BaseException as e:  # noqa: BLE001 - never serve half set up
        try:
            if fds:
                os.write(fds[0], _frame({"op": "error", "message": f"fork set-up: {type(e).__name__}: {e}"}))
        finally:
            os._exit(70)
    return None


def _serve_template(warm):
    """Fork on request. Returns in a fork (now a worker on its own channel); exits
    the process when the engine closes the template. One fork is made ahead of
    each request, so a request costs a hand-over, not a fork."""
    sock = socket.socket(fileno=os.dup(0))
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forks
    spare = None
    while True:
        msg, fds = _recv_frame(sock)
        if msg is None:
            sys.exit(0)
        want = 1 + bool(msg.get("landlock")) + int(msg.get("stage") or 0)
        if msg.get("op") != "fork" or len(fds) != want:
            for fd in fds:
                os.close(fd)
            _send(sock, {"op": "error", "message": f"unexpected template frame {msg.get('op')!r} with {len(fds)} fds"})
            continue
        pid = None
        for _attempt in range(2):
            if spare is None:
                spare = _spawn_spare(sock, warm, fds)
                if spare is None:
                    return  # the fork, adopted
            try:
                socket.send_fds(spare[1], [_frame(msg)], fds)
                pid = spare[0]
            except OSError:  # the spare died: make another
                os.kill(spare[0], signal.SIGKILL)
            spare[1].close()
            spare = None
            if pid is not None:
                break
        chan, ruleset, stage = _split(msg, fds)
        for fd in (chan, ruleset):
            if fd is not None:
                os.close(fd)
        if pid is None:
            for fd in stage:
                os.close(fd)
            _send(sock, {"op": "error", "message": "the template could not hand over a fork"})
            continue
        try:
            pidfd = os.pidfd_open(pid)
        except OSError as e:
            pidfd = None
            _send(sock, {"op": "error", "message": f"the fork died at once: {e}"})
        if pidfd is not None:
            try:
                socket.send_fds(sock, [_frame({"op": "forked", "pid": pid})], [pidfd])
            finally:
                os.close(pidfd)
        spare = _spawn_spare(sock, warm, stage=stage)
        if spare is None:
            return
        for fd in stage:
            os.close(fd)


def _warm(pol) -> None:
    """Run a throwaway exec in a waiting fork (faults in its pages ahead of the
    request) without starting any thread: Landlock and seccomp, installed when the
    fork adopts a request, restrict the calling thread (a thread started before would
    stay outside them), and threads started later inherit them."""
    pol.timeout = None  # this fork's copy: no watchdog for the warm-up
    pol.memory_limit_bytes = None
    GuestSession(pol).exec("x = 1")


def _frame(obj):
    data = mp.packb(obj)
    return len(data).to_bytes(4, "big") + data


def _send(sock, obj):
    sock.sendall(_frame(obj))


# what a host object's method raised, re-raised as its own builtin type when it is one
# of these (anything else is a HostError naming the type)
def _credit(reply):
    """The host's measure of a call's host time (the engine's, capped at the wait):
    the exec's clock does not count it."""
    t = reply.get("host_time")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
        clock.credit(float(t))


def _host_error(reply):
    import builtins

    name, message = str(reply.get("type", "Exception")), str(reply.get("message", ""))
    cls = getattr(builtins, name, None)
    if name in _PASSED_ERRORS and isinstance(cls, type) and issubclass(cls, Exception):
        return cls(message)
    return HostError(f"{name}: {message}")


_PASSED_ERRORS = frozenset(
    {
        "ValueError",
        "TypeError",
        "KeyError",
        "LookupError",
        "IndexError",
        "AttributeError",
        "RuntimeError",
        "ZeroDivisionError",
        "NotImplementedError",
        "PermissionError",
        "FileNotFoundError",
        "OSError",
        "ArithmeticError",
    }
)


# spool=: the directory the host gave (init's spool_dir) and a descriptor of it
_SPOOL: dict = {"dir": None, "fd": None}


def _set_spool(path) -> None:
    if _SPOOL["fd"] is not None:
        os.close(_SPOOL["fd"])
    _SPOOL.update(dir=None, fd=None)
    if isinstance(path, str) and path:
        _SPOOL.update(dir=path, fd=os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))


# the VirtualFS the host serves (its files' contents remembered within an exec)
_REMOTE: dict = {"fs": None}


def _forget_files() -> None:
    fs = _REMOTE["fs"]
    if fs is not None:
        fs.forget()


def handle_exec(session, msg) -> dict:
    """Run an exec frame; the result frame."""
    _forget_files()  # the host may have changed the files between execs
    try:
        return _handle_exec(session, msg)
    finally:
        _forget_files()


def _handle_exec(session, msg) -> dict:
    code = msg.get("code", "")
    r = None
    if isinstance(msg.get("restore"), dict):  # a fresh worker: the host's last state first
        try:
            r = session.restore(msg["restore"])
        except ValueError as e:
            r = session.exec(f"raise ValueError({str(e)[:2000]!r})")
    if r is None or r.error is None:
        r = session.exec(
            code if isinstance(code, str) else "",
            namespace=msg.get("namespace"),
            modules=msg.get("modules"),
            stdin=msg.get("stdin"),
            argv=msg.get("argv"),
            echo=msg.get("echo"),
            snapshot_prints=bool(msg.get("prints")),
            allow_await=bool(msg.get("await")),
            keep=msg["keep"] if isinstance(msg.get("keep"), list) else None,
            render_prints=tuple(msg["render"]) if isinstance(msg.get("render"), list) else None,
        )
    spooled = None
    try:
        if _SPOOL["dir"] is not None:
            from . import spool  # only a spooling sandbox loads it

            namespace, spooled = spool.spool_namespace(r.namespace, _SPOOL["dir"], _SPOOL["fd"])
        else:
            namespace = to_wire(r.namespace)
    except Exception as e:  # noqa: BLE001 - a namespace that cannot be converted is reported
        namespace = {"__st_placeholder__": "namespace", "repr": f"<not converted: {type(e).__name__}>"}
    return {
        **({"spooled": spooled} if spooled is not None else {}),
        "op": "result",
        "stdout": _clean_str(r.stdout),
        "stderr": _clean_str(r.stderr),
        "namespace": namespace,
        "error": error_to_wire(r.error, r.traceback, r.error_message),
        "traceback": None if r.traceback is None else _clean_str(r.traceback),
        "ticks": r.ticks,
        "stdout_truncated": r.stdout_truncated,
        "duration": r.duration,
        **({"state": _snapshot(session)} if msg.get("snapshot") else {}),
        **({"prints": to_wire(list(r.prints))} if msg.get("prints") else {}),
        **(
            {"rendered_prints": [_clean_str(t) for t in r.rendered_prints], "print_count": r.print_count}
            if isinstance(msg.get("render"), list)
            else {}
        ),
    }


def _snapshot(session) -> dict:
    try:
        return session.snapshot()
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        return {"version": 1, "source": "", "data": {}, "objects": {}, "dropped": [], "error": f"{type(e).__name__}"}


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    # the sandboxed code's prints go to the capture, never to the protocol stream
    sys.stdout = sys.stderr
    session = None

    def host_call(name, args, kwargs):
        _forget_files()  # host code may change the VirtualFS
        _write(out, {"op": "call", "name": name, "args": to_wire(list(args)), "kwargs": to_wire(dict(kwargs))})
        reply = _read(inp)
        if reply is None:
            raise SystemExit(0)
        _credit(reply)
        if reply.get("op") == "return":
            return reply.get("value")
        raise HostError(f"{reply.get('type', 'Exception')}: {reply.get('message', '')}")

    def rpc_call(target, method, args, kwargs):
        # a proxy's method call (rpc.py): the host checks the target and the method
        _forget_files()
        _write(
            out,
            {
                "op": "rpc",
                "target": target,
                "method": method,
                "args": to_wire(list(args)),
                "kwargs": to_wire(dict(kwargs)),
            },
        )
        reply = _read(inp)
        if reply is None:
            raise SystemExit(0)
        _credit(reply)
        if reply.get("op") == "return":
            return reply.get("value")
        raise _host_error(reply)

    def fs_call(name, args):
        # a VirtualFS operation: the host keeps the files (vfs.RemoteBackend)
        _write(out, {"op": "fs", "name": name, "args": args})
        reply = _read(inp)
        if reply is None:
            raise SystemExit(0)
        if reply.get("op") == "return":
            return reply.get("value")
        raise vfs.remote_error(str(reply.get("type", "OSError")), str(reply.get("message", "")))

    while True:
        msg = _read(inp)
        if msg is None:
            return 0
        op = msg.get("op")
        if op in ("init", "template"):
            try:
                sys.path.extend(p for p in msg.get("sys_path") or [] if p not in sys.path)
                mp.accelerate()
                policy = Policy.from_portable(msg["policy"], host_call=host_call, rpc_call=rpc_call)
                fs = None
                if isinstance(msg.get("vfs"), dict):
                    policy.module_root = str(msg["vfs"].get("module_root") or "/")
                    fs = vfs.RemoteBackend(fs_call)
                _REMOTE["fs"] = fs
                session = GuestSession(
                    policy,
                    filesystem_root=msg.get("filesystem_root"),
                    echo=msg.get("echo", False),
                    filesystem=fs,
                    rpc=rpc_call,
                )
                _set_spool(msg.get("spool_dir"))
                if msg.get("filesystem_root"):
                    os.chdir(msg["filesystem_root"])
                    os.environ["HOME"] = msg["filesystem_root"]
                if op == "template":
                    import ctypes  # noqa: F401 - loaded once here, used by every fork
                    import platform  # noqa: F401
            except Exception as e:  # noqa: BLE001 - reported to the host
                _write(out, {"op": "error", "message": f"{type(e).__name__}: {e}"})
                continue
            _write(out, {"op": "ready", "pid": os.getpid(), "seccomp": dict(_INSTALLED)})
            if op == "template":
                pol = policy
                _serve_template(lambda: _warm(pol))  # noqa: B023 - called in this iteration; returns in a fork
                session = None  # the host sends init (its filesystem root, echo)
                _write(out, {"op": "ready", "pid": os.getpid()})
        elif op == "exec" and session is not None:
            _write(out, handle_exec(session, msg))
        else:
            _write(out, {"op": "error", "message": f"unexpected frame {op!r}"})


if __name__ == "__main__":
    sys.exit(main())
