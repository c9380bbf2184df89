"""The COW-fork template of the process sandbox: ``python3 -m sandtrap_guest.template``
(the package's ``__init__`` loads nothing until asked, so the template stays lean).

The engine runs it as a session under the mapper's policy (Landlock, seccomp, pid
namespace, limits); ``init`` runs once here, then every clone is an ``os.fork()`` of
this process's memory — inside the sandbox, sharing the template's memory
copy-on-write and holding exactly its confinement — with ``CLONE_ID`` set, its own
stdout and stderr pipes and stdin at EOF. Frames (length-prefixed msgpack, as in
worker.py):

    host → {"op": "init", "init_src"|"init_ref", "work_src"|"work_ref", "sys_path": [str],
            "main_path": str (the host's __main__ file, loaded as __mp_main__)}
         ← {"op": "ready"} | {"op": "error", "message", "traceback", "step"}
           (step: what failed — "main" loading main_path, "init" the init function,
           "work" loading the work function)
    host → {"op": "fork", "n": int, "parallel": int, "timeout": float|None, "max_output": int,
            "forkers": int|None (default: one per CPU this process may run on),
            "max_processes": int|None (the sandbox's process limit, if any: forkers and
            clones are kept within it), "first": int (the first clone's id, default 0:
            the clones are first .. first+n-1), "session": bytes|None (a seccomp program:
            each clone makes itself a session of its own and loads it, see ``_child``)}
         ← {"op": "forking"}
    host → {"op": "next"}   (repeat until done)
         ← {"op": "clones", "items": [{id, stdout, stderr, exit_code, signal, timed_out,
             stdout_truncated, session}], "done": bool}
           (session: the pidfs inode of the clone, the leader of its session — by which
           the engine finds the clone's denials; 0: none)

``*_ref`` is "module:qualname" (imported here); ``*_src`` is Python source run in the
template's globals (``work_src`` sees ``CLONE_ID``). Work functions take the clone id.

Forking runs on every CPU: the template forks one *forker* per CPU (an ``os.fork()`` of
itself, so its memory is the template's), and each forker forks clones, drains their
output, reaps them and sends each result back as soon as it finishes. The template
hands out clone ids to the forkers as they finish clones (a few ahead of each), relays
results to the host, and keeps going while a frame is on its way: the host's round trip
does not stall forking. Results the host has not asked for yet are bounded (ids stop
going out), so a slow consumer slows the forking down rather than filling memory.
Forkers and clones stay within the sandbox's process limit; with room for just one
process besides the template, the template forks the clones itself (see ``Fork``).
"""

import gc
import os
import select
import struct
import sys
import time

from . import mp

# A reply to "next" waits up to LINGER seconds after the previous one to carry more
# clones (one frame per clone would cost more than the clone), at most FRAME_BYTES of
# output and BATCH clones; the first clone goes out at once.
LINGER = 0.05
BATCH = 4096
FRAME_BYTES = 64 << 20
# Results not yet asked for, beyond which no more clones start (host backpressure).
BACKLOG_ITEMS = 16384
BACKLOG_BYTES = 256 << 20
_ID = 4  # bytes of one clone id on a forker's id pipe (little-endian)
# A forker's result record: id, len(stdout), len(stderr), a status word (the wait
# status and the flags below); then stdout and stderr. The template packs the item.
_REC = struct.Struct("<IIIIQ")  # ... and the clone's session (_Clone.session)
_TIMED_OUT, _TRUNC, _NO_STATUS = 1 << 16, 1 << 17, 1 << 18


# -- frames on the session channel (fd 0 in, fd 1 out) -------------------------------


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(fd=0):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    data = _read_exact(fd, int.from_bytes(head, "big"))
    return None if data is None else mp.unpackb(data)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_frame(obj, fd=1):
    data = mp.packb(obj)
    _write_all(fd, len(data).to_bytes(4, "big") + data)


def _array_head(n):
    if n < 16:
        return bytes([0x90 | n])
    if n < 65536:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


_CLONES_HEAD = {
    done: b"\x83" + mp.packb("op") + mp.packb("clones") + mp.packb("done") + mp.packb(done) + mp.packb("items")
    for done in (False, True)
}


def _write_clones(items, done, fd=1):
    """{"op": "clones", "done", "items"} from items already packed (``_item``)."""
    body = b"".join([_CLONES_HEAD[done], _array_head(len(items))] + items)
    _write_all(fd, len(body).to_bytes(4, "big") + body)


# -- init ---------------------------------------------------------------------------


def _load_main(path):
    """The host's __main__ as __mp_main__ (its ``if __name__ == "__main__"`` code does not run)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = mod
    spec.loader.exec_module(mod)


def _resolve(ref):
    import importlib

    mod, _, qual = ref.partition(":")
    if mod == "__mp_main__" and "__mp_main__" not in sys.modules:
        raise ImportError("the host's __main__ is not importable here")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


# -- sealing: the template and every clone are apart ------------------------------------

_libc = None
_scope = -1  # a Landlock ruleset each clone enters: a domain of its own


def _seal():
    """The template (and so its forkers and clones, which inherit it) is not dumpable:
    no process of the sandbox opens its /proc/<pid>/fd, mem or environ. Each clone will
    enter a Landlock domain of its own (``_scope``): it cannot signal or trace the
    template, the forkers or another clone, nor reach their abstract unix sockets."""
    global _libc, _scope
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
    abi = _libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION)
    if abi < 1:
        return  # no Landlock: the engine has reported it (the sandbox needed allow_degraded)
    if abi >= 6:  # scoped: signals (2) and abstract unix sockets (1)
        attr = (ctypes.c_uint64 * 3)(0, 0, 3)
        size = 24
    else:  # a layer that refuses only making block devices (already refused) is a domain too
        attr = (ctypes.c_uint64 * 3)(1 << 11, 0, 0)
        size = 16 if abi >= 4 else 8
    _scope = _libc.syscall(444, attr, ctypes.c_size_t(size), 0)
    if _scope < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")


def _enter_scope():
    if _scope >= 0 and _libc.syscall(446, _scope, 0) != 0:  # landlock_restrict_self
        import ctypes

        raise OSError(ctypes.get_errno(), "landlock_restrict_self: a clone must be a domain of its own")


# -- sessions: a clone and everything it starts stay in a session of its own ---------------

_SECCOMP_NR = {"x86_64": 317, "aarch64": 277}
_layer = None  # (nr, fprog, buffer): the engine's seccomp program refusing setsid and setpgid


def _set_layer(prog):
    """Keep the fork frame's "session" program ready to load (a clone only calls
    seccomp with it)."""
    global _layer
    _layer = None
    if prog is None:
        return
    import ctypes
    import platform

    if not isinstance(prog, bytes) or not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        raise ValueError("the session layer is not a seccomp program")
    nr = _SECCOMP_NR.get(platform.machine())
    if nr is None:
        raise OSError(f"seccomp: unsupported machine {platform.machine()!r}")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(prog, len(prog))
    _layer = (nr, SockFprog(len(prog) // 8, ctypes.addressof(buf)), buf)


def _own_session():
    """In a clone, first: a session (and process group) of its own, then the layer that
    keeps it and every process it starts there (setsid, setpgid: EPERM). The supervisor
    finds the clone of a denial by the caller's session; the forker kills the clone's
    group when it ends. Fails the clone (before its work) if either fails."""
    if _layer is None:
        return
    import ctypes

    os.setsid()
    nr, fprog, _ = _layer
    # SECCOMP_SET_MODE_FILTER for this (single-threaded) process; no_new_privs is the sandbox's
    if _libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp: the clone's session layer")


def _kill_group(c):
    """Kill whatever the clone left in its process group (its session: nothing in it can
    leave). Only while the clone is not reaped: until then its pid, the group's id, is
    nobody else's."""
    if _layer is not None:
        try:
            os.killpg(c.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass


# -- a clone ----------------------------------------------------------------------------


def _child(cid, out_w, err_w, work, g, drop):
    """Runs in the clone (never returns). What every clone needs and can be set before
    the fork (CLONE_ID, sys.stdout and sys.stderr on fd 1 and 2, stdin) the forker has
    set: each page written here is a page the clone copies."""
    code = 0
    try:
        _own_session()
        _enter_scope()
        if _scope >= 0:
            os.close(_scope)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        for fd in drop:  # the forker's channel and pipes: a clone must not hold them open
            os.close(fd)
        if callable(work):
            work(cid)
        else:
            g["CLONE_ID"] = cid  # the clone's own copy of the template's globals
            exec(work, g)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            try:
                print(e.code, file=sys.stderr)
            except Exception:  # noqa: BLE001
                pass
            code = 1
    except BaseException:  # noqa: BLE001 - reported on the clone's stderr
        try:
            import traceback

            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    finally:
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        try:
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)


def _streams():
    """sys.stdout and sys.stderr of a clone: fd 1 and fd 2 (stderr line-buffered, as Python's own)."""
    return open(1, "w", closefd=False), open(2, "w", buffering=1, closefd=False)


class _Clone:
    __slots__ = (
        "id",
        "pid",
        "out",
        "err",
        "obuf",
        "ebuf",
        "open",
        "trunc",
        "deadline",
        "timed_out",
        "pidfd",
        "session",
    )

    def __init__(self, cid, pid, out, err, deadline, pidfd=-1, session=0):
        self.id, self.pid, self.out, self.err = cid, pid, out, err
        self.pidfd = pidfd  # a pidfd of the clone (-1: none), readable once it exited
        self.session = session  # its pidfs inode (0: unknown)
        self.obuf, self.ebuf = bytearray(), bytearray()
        self.open = 2  # pipes not yet at EOF
        self.trunc = False
        self.deadline = deadline
        self.timed_out = False


_KEYS = [
    mp.packb(k) for k in ("id", "stdout", "stderr", "exit_code", "signal", "timed_out", "stdout_truncated", "session")
]


def _bin_head(n):
    if n < 256:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 65536:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def _item(cid, out, err, code, sig, timed_out=False, trunc=False, session=0):
    """One clone's result as a packed msgpack map; out and err are bytes-like."""
    k = _KEYS
    return b"".join(
        (
            b"\x88",
            k[0],
            mp.packb(cid),
            k[1],
            _bin_head(len(out)),
            out,
            k[2],
            _bin_head(len(err)),
            err,
            k[3],
            mp.packb(code),
            k[4],
            mp.packb(sig),
            k[5],
            b"\xc3" if timed_out else b"\xc2",
            k[6],
            b"\xc3" if trunc else b"\xc2",
            k[7],
            mp.packb(session),
        )
    )


def _unrecord(cid, out, err, word, session):
    """A forker's record as the host's item."""
    if word & _NO_STATUS:
        code = sig = None
    else:
        status = word & 0xFFFF
        code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    return _item(cid, out, err, code, sig, bool(word & _TIMED_OUT), bool(word & _TRUNC), session)


# -- a forker -----------------------------------------------------------------------------


class _Forker:
    """Forks the clones whose ids it is given (``add``, or on the pipe ``ids``), at most
    ``parallel`` alive; drains their stdout and stderr, reaps them and appends a record
    for each to ``out``. A forker process loops in ``step(res=...)``; the template itself,
    when the sandbox's process limit leaves no room for forkers, calls ``step`` from its
    own loop."""

    def __init__(self, work, g, parallel, timeout, max_output, ids=-1, drop=(), stdin=-1):
        self.work, self.g, self.ids = work, g, ids
        self.parallel = max(1, parallel)
        self.timeout = timeout or None
        self.max_output = max_output
        self.drop = drop
        self.stdin = stdin  # >= 0: the template forks (see Fork): the clone's stdin, and it makes its sys.stdout/stderr
        self.queue = []  # ids given, not forked yet (reversed: pop() is the next)
        self.idbuf = b""  # part of an id (a read may end inside one)
        self.ids_open = ids >= 0
        self.clones = {}  # fd -> _Clone
        self.exits = {}  # a clone's pidfd -> _Clone (until it exited)
        self.live = 0
        self.out = []  # records not handed on yet
        self.extra = set()  # the owner's fds, polled with the clones' (step returns them)
        self.poll = select.poll()
        if ids >= 0:
            self.poll.register(ids, select.POLLIN)
        self.fork_failed = None  # (errno text, first failure time) while forks fail
        self.retry_at = 0.0

    def watch(self, fd):
        self.extra.add(fd)
        self.poll.register(fd, select.POLLIN)

    def add(self, ids):
        got = list(ids)
        got.reverse()
        self.queue[:0] = got

    @property
    def idle(self):
        return not self.live and not self.queue

    def _spawn(self, cid):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # set here, not in the clone: the clone inherits it at no cost of its own
        os.environ["CLONE_ID"] = str(cid)
        try:
            pid = os.fork()
        except OSError:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            raise
        if pid == 0:
            if self.stdin >= 0:
                os.dup2(self.stdin, 0)
                sys.stdout, sys.stderr = _streams()
            # the read ends of its own and its siblings' pipes: a clone reads none of them
            _child(cid, out_w, err_w, self.work, self.g, [*self.drop, out_r, err_r, *self.clones, *self.exits])
        os.close(out_w)
        os.close(err_w)
        pidfd, session = -1, 0
        if _layer is not None:
            try:  # its exit ends its session's leftovers even while they hold its pipes
                pidfd = os.pidfd_open(pid)
                session = os.fstat(pidfd).st_ino
            except OSError:
                pass
        c = _Clone(cid, pid, out_r, err_r, time.monotonic() + self.timeout if self.timeout else None, pidfd, session)
        self.clones[out_r] = self.clones[err_r] = c
        self.poll.register(out_r, select.POLLIN)
        self.poll.register(err_r, select.POLLIN)
        if pidfd >= 0:
            self.exits[pidfd] = c
            self.poll.register(pidfd, select.POLLIN)
        self.live += 1

    def _exited(self, c):
        """The clone exited (not reaped yet): its leftovers die with its group."""
        self.poll.unregister(c.pidfd)
        del self.exits[c.pidfd]
        os.close(c.pidfd)
        c.pidfd = -1
        _kill_group(c)

    def _finish(self, c):
        if _layer is not None:
            os.waitid(os.P_PID, c.pid, os.WEXITED | os.WNOWAIT)  # exited, still holding its pid
            if c.pidfd >= 0:
                self._exited(c)
            else:
                _kill_group(c)
        _, status = os.waitpid(c.pid, 0)
        word = status | (_TIMED_OUT if c.timed_out else 0) | (_TRUNC if c.trunc else 0)
        self.out += (_REC.pack(c.id, len(c.obuf), len(c.ebuf), word, c.session), c.obuf, c.ebuf)
        self.live -= 1

    def _fail(self, cid, why):
        """A clone that could not be forked: reported on its own, like any failure."""
        msg = f"sandtrap: could not fork clone {cid}: {why}\n".encode()
        self.out += (_REC.pack(cid, 0, len(msg), _NO_STATUS, 0), msg)

    def _start_clones(self):
        now = None
        while self.queue and self.live < self.parallel:
            if self.fork_failed is not None:
                now = now or time.monotonic()
                if now < self.retry_at:
                    return
            cid = self.queue[-1]
            try:
                self._spawn(cid)
            except OSError as e:
                # out of processes or memory: wait for a clone to end (ours, or another
                # forker's) and try again; with none alive to wait for, give up on it
                now = time.monotonic()
                if self.fork_failed is None:
                    self.fork_failed = (str(e), now)
                if self.live == 0 and now - self.fork_failed[1] >= 1.0:
                    self.queue.pop()
                    self._fail(cid, self.fork_failed[0])
                    self.fork_failed = (self.fork_failed[0], now - 1.0)  # the next gives up at once
                    continue
                self.retry_at = now + 0.01
                return
            self.queue.pop()
            self.fork_failed = None

    def step(self, wait=None, res=-1):
        """Start the clones that may start, then wait (at most ``wait`` seconds; None:
        until something happens) and handle what happened: output, exits, ids, timeouts.
        Returns the owner's fds (``watch``) that are readable. With ``res`` (a forker
        process) it loops instead, sending the records to ``res``, until the ids end."""
        clones, read, max_output, extra, poll = self.clones, os.read, self.max_output, self.extra, self.poll.poll
        while True:
            self._start_clones()
            w = wait
            if res >= 0:
                if self.out:
                    _write_all(res, b"".join(self.out))
                    self.out = []
                if not self.live and not self.queue and not self.ids_open:
                    return []
            elif self.out:
                w = 0.0  # records to hand on first
            if self.timeout and self.live:
                ends = [c.deadline for c in clones.values() if not c.timed_out]
                if ends:
                    left = max(0.0, min(ends) - time.monotonic())
                    w = left if w is None else min(w, left)
            if self.fork_failed is not None and self.queue:
                left = max(0.0, self.retry_at - time.monotonic())
                w = left if w is None else min(w, left)
            ready = []
            for fd, _ in poll(None if w is None else int(w * 1000) + (w > 0)):
                if extra and fd in extra:
                    ready.append(fd)
                    continue
                if fd == self.ids:
                    data = read(fd, 65536)
                    if not data:
                        self.ids_open = False
                        self.poll.unregister(fd)
                        continue
                    data = self.idbuf + data
                    end = len(data) - len(data) % _ID
                    self.idbuf = data[end:]
                    self.add(int.from_bytes(data[i : i + _ID], "little") for i in range(0, end, _ID))
                    continue
                if fd in self.exits:
                    self._exited(self.exits[fd])
                    continue
                c = clones.get(fd)
                if c is None:  # a clone's pidfd closed by _finish earlier in this batch
                    continue
                data = read(fd, 65536)
                if data:
                    buf = c.obuf if fd == c.out else c.ebuf
                    room = max_output - len(buf)
                    if room >= len(data):
                        buf += data
                    else:
                        if room > 0:
                            buf += data[:room]
                        c.trunc = True
                    continue
                self.poll.unregister(fd)
                os.close(fd)
                del clones[fd]
                c.open -= 1
                if c.open == 0:
                    self._finish(c)
            if self.timeout and self.live:
                now = time.monotonic()
                for c in list(clones.values()):
                    if not c.timed_out and now >= c.deadline:
                        c.timed_out = True
                        try:
                            os.kill(c.pid, 9)
                        except ProcessLookupError:
                            pass
                        _kill_group(c)
            if res < 0:
                return ready


# -- the template's side of a fork ---------------------------------------------------------


class _Sub:
    """The template's view of a forker process (or, inline, of its own _Forker)."""

    __slots__ = ("pid", "ids", "res", "share", "given", "buf")

    def __init__(self, pid, ids, res, share):
        self.pid, self.ids, self.res, self.share = pid, ids, res, share
        self.given = set()  # ids handed to it and not reported yet
        self.buf = bytearray()  # a record not complete yet


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Fork:
    """One ``fork`` frame's clones, driven from the template's event loop.

    Normally one forker process per CPU forks the clones, and a process limit
    (``max_processes``: the template, forkers and clones together) bounds both. One that
    leaves room for a single process besides the template gets no forker: the template
    forks its clones itself, one at a time (as it does when no forker can be forked)."""

    def __init__(self, work, g, n, parallel, timeout, max_output, forkers=None, max_processes=None, first=0):
        self.n = first + n  # ids first .. first+n-1 (a share of a larger fork starts past 0)
        self.next_id = first
        self.pending = []  # packed items not yet sent to the host
        self.pending_bytes = 0
        self.subs = {}  # result fd -> _Sub
        self.local = None  # the template's own _Forker (no forker processes)
        parallel = max(1, parallel)
        k = max(1, min(forkers or _cpus(), parallel, n))
        if max_processes:
            room = max_processes - 1  # besides the template
            if room < 2:
                k = 0
                parallel = 1
            else:
                k = max(1, min(k, room // 2))
                parallel = max(k, min(parallel, room - k))
        # the forkers and their clones share the template's memory as it is now: keep
        # the collector off its objects (a collection would write to every one of them)
        gc.freeze()
        for i in range(k):
            share = parallel // k + (i < parallel % k)
            ids_r, ids_w = os.pipe()
            res_r, res_w = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                for fd in (ids_r, ids_w, res_r, res_w):
                    os.close(fd)
                break
            if pid == 0:
                self._forker_main(work, g, ids_r, ids_w, res_r, res_w, share, timeout, max_output)
            os.close(ids_r)
            os.close(res_w)
            self.subs[res_r] = _Sub(pid, ids_w, res_r, share)
        if self.subs and len(self.subs) < k:  # fewer forkers than asked for: share the rest out
            missing = parallel - sum(s.share for s in self.subs.values())
            for i, s in enumerate(self.subs.values()):
                s.share += missing // len(self.subs) + (i < missing % len(self.subs))
        if not self.subs:
            # no forker (no room, or it could not be forked): the template forks; the
            # clones get stdin at EOF in place of the frames, sys.stdout/stderr of their own
            r, w = os.pipe()
            os.close(w)
            self.eof = r
            self.local = _Forker(work, g, parallel, timeout, max_output, stdin=r)
            self.local.watch(0)
            self.me = _Sub(os.getpid(), -1, -1, self.local.parallel)
        self._give()

    def _forker_main(self, work, g, ids_r, ids_w, res_r, res_w, share, timeout, max_output):
        code = 0
        try:
            os.close(ids_w)
            os.close(res_r)
            for s in self.subs.values():  # the other forkers' channels
                os.close(s.ids)
                os.close(s.res)
            # stdin and stdout are the host's channel: not for the forker or its clones
            r, w = os.pipe()
            os.close(w)
            os.dup2(r, 0)
            os.dup2(r, 1)
            os.close(r)
            # the clones' sys.stdout and sys.stderr, made once (the forker never writes
            # to its stdout, its stderr is line-buffered: a clone inherits empty buffers)
            sys.stdout, sys.stderr = _streams()
            _Forker(work, g, share, timeout, max_output, ids=ids_r, drop=(ids_r, res_w)).step(res=res_w)
        except BaseException:  # noqa: BLE001 - the template reports this forker's clones
            try:
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
            code = 1
        os._exit(code)

    def _give(self):
        """Hand out ids: to each forker a few beyond its share (so it never waits for
        the next), unless the host is behind."""
        if self.next_id < self.n and (len(self.pending) >= BACKLOG_ITEMS or self.pending_bytes >= BACKLOG_BYTES):
            return
        for s in self.subs.values() if self.local is None else (self.me,):
            if self.next_id >= self.n:
                break
            if s.ids < 0 and self.local is None:
                continue
            want = min(2 * s.share + 2, 8192) - len(s.given)  # 8192 ids fit a pipe: never blocks
            if want <= 0:
                continue
            a, b = self.next_id, min(self.n, self.next_id + want)
            if self.local is None:
                _write_all(s.ids, b"".join(i.to_bytes(_ID, "little") for i in range(a, b)))
            else:
                self.local.add(range(a, b))
            s.given.update(range(a, b))
            self.next_id = b
        if self.next_id >= self.n:
            for s in self.subs.values():
                if s.ids >= 0:
                    os.close(s.ids)
                    s.ids = -1

    def _records(self, s, data):
        """Results from a forker (a part of its stream)."""
        s.buf += data
        buf, pos, head = s.buf, 0, _REC.size
        with memoryview(buf) as view:
            while len(buf) - pos >= head:
                cid, lo, le, word, session = _REC.unpack_from(buf, pos)
                a = pos + head
                if len(buf) - a < lo + le:
                    break
                item = _unrecord(cid, view[a : a + lo], view[a + lo : a + lo + le], word, session)
                self.pending.append(item)
                self.pending_bytes += len(item)
                s.given.discard(cid)
                pos = a + lo + le
        if pos:
            del buf[:pos]
        self._give()

    def _ended(self, fd):
        """A forker ended: whatever it was given and did not report is lost with it."""
        s = self.subs.pop(fd)
        os.close(fd)
        if s.ids >= 0:
            os.close(s.ids)
            s.ids = -1
        _, status = os.waitpid(s.pid, 0)
        if s.given:
            how = (
                f"was killed by signal {os.WTERMSIG(status)}"
                if os.WIFSIGNALED(status)
                else f"exited with status {os.waitstatus_to_exitcode(status)}"
            )
            msg = f"sandtrap: the process forking this clone {how} before the clone was reported\n".encode()
            for cid in sorted(s.given):
                self.pending.append(_item(cid, b"", msg, None, None))
            s.given.clear()
        if not self.subs and self.next_id < self.n:
            msg = b"sandtrap: no process was left to fork this clone\n"
            for cid in range(self.next_id, self.n):
                self.pending.append(_item(cid, b"", msg, None, None))
            self.next_id = self.n
        self._give()

    def wait(self, poll, wait):
        """Wait (seconds; None: until something happens) for results or a frame and take
        in the results; True when a frame from the host is waiting."""
        if self.local is not None:
            ready = self.local.step(wait)
            if self.local.out:
                self._records(self.me, b"".join(self.local.out))
                self.local.out = []
            return 0 in ready
        frame = False
        for fd, _ in poll.poll(None if wait is None else int(wait * 1000) + (wait > 0)):
            if fd == 0:
                frame = True
                continue
            data = os.read(fd, 1 << 20)
            if data:
                self._records(self.subs[fd], data)
            else:
                poll.unregister(fd)
                self._ended(fd)
        return frame

    @property
    def done(self):
        if self.local is not None:
            return self.next_id >= self.n and self.local.idle and not self.local.out
        return not self.subs

    def take(self):
        """Up to one frame's worth of results."""
        if len(self.pending) <= BATCH and self.pending_bytes <= FRAME_BYTES:
            items, self.pending, self.pending_bytes = self.pending, [], 0
        else:
            size, k = 0, 0
            while k < len(self.pending) and k < BATCH and (k == 0 or size + len(self.pending[k]) <= FRAME_BYTES):
                size += len(self.pending[k])
                k += 1
            items, self.pending = self.pending[:k], self.pending[k:]
            self.pending_bytes -= size
        self._give()
        return items

    def kill(self):
        pids = [s.pid for s in self.subs.values()]
        if self.local is not None:
            pids = [c.pid for c in self.local.clones.values()]
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def close(self):
        if self.local is not None:
            os.close(self.eof)


def _serve_fork(fork):
    """The template's event loop while clones run: results from the forkers, "next"
    frames from the host, answered with what has finished (see LINGER)."""
    poll = select.poll()
    poll.register(0, select.POLLIN)
    for fd in fork.subs:
        poll.register(fd, select.POLLIN)
    want = False
    last = 0.0  # when the last reply went out
    while True:
        if want:
            now = time.monotonic()
            if fork.done or (
                fork.pending
                and (now - last >= LINGER or len(fork.pending) >= BATCH or fork.pending_bytes >= FRAME_BYTES)
            ):
                items = fork.take()
                finished = fork.done and not fork.pending
                _write_clones(items, finished)
                want, last = False, now
                if finished:
                    fork.close()
                    return True
                continue
        wait = None
        if want and fork.pending:
            wait = max(0.0, last + LINGER - time.monotonic())
        if fork.wait(poll, wait):
            msg = _read_frame(0)
            if msg is None:  # the host is gone
                fork.kill()
                return False
            if msg.get("op") == "next":
                want = True
            else:
                _write_frame({"op": "error", "message": f"unexpected frame {msg.get('op')!r} while forking"})


def main() -> int:
    # the frames use fd 0 and fd 1 directly; init's prints go to stderr
    sys.stdout = sys.stderr
    _seal()
    work, g = None, {"__name__": "__sandtrap_template__"}
    while True:
        msg = _read_frame(0)
        if msg is None:
            return 0
        op = msg.get("op")
        step = None  # what an init error is about: "main", "init" or "work"
        try:
            if op == "init":
                sys.path[:0] = [p for p in msg.get("sys_path") or [] if p not in sys.path]
                if msg.get("main_path"):
                    step = "main"
                    _load_main(msg["main_path"])
                step = "init"
                if msg.get("init_ref"):
                    _resolve(msg["init_ref"])()
                elif msg.get("init_src"):
                    exec(compile(msg["init_src"], "<init>", "exec"), g)
                step = "work"
                work = (
                    _resolve(msg["work_ref"])
                    if msg.get("work_ref")
                    else compile(msg.get("work_src") or "", "<work>", "exec")
                )
                _write_frame({"op": "ready"})
            elif op == "fork" and work is not None:
                sys.stdout.flush()
                sys.stderr.flush()
                _set_layer(msg.get("session"))
                fork = Fork(
                    work,
                    g,
                    int(msg["n"]),
                    int(msg.get("parallel") or 4 * _cpus()),
                    msg.get("timeout"),
                    int(msg.get("max_output") or (16 << 20)),
                    msg.get("forkers"),
                    msg.get("max_processes"),
                    int(msg.get("first") or 0),
                )
                _write_frame({"op": "forking"})
                if not _serve_fork(fork):
                    return 0
            else:
                _write_frame({"op": "error", "message": f"unexpected frame {op!r}"})
        except Exception as e:  # noqa: BLE001 - reported to the host
            import traceback

            _write_frame(
                {
                    "op": "error",
                    "message": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(),
                    "step": step,
                }
            )


if __name__ == "__main__":
    sys.exit(main())
