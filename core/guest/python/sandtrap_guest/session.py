"""GuestSession: runs rewritten code against a policy, in-process.

Ticks
-----
A tick is one checkpoint.  Checkpoints are, exactly:

* the start of every iteration of a ``for``/``async for``/``while`` body;
* the entry of every sandbox-defined function, method, generator, coroutine and
  lambda (a generator's entry tick happens when it is first resumed);
* every step of every ``for`` clause of a comprehension or generator expression;
* every call of a builtin function that is not a type (``print``, ``len``, ``sum``,
  ``sorted``, ``isinstance``, ``getattr``, ``open`` ...) and of every ``policy.fn``
  grant;
* every REPL echo of a final expression.

Calls of types (``int``, ``list``, ``range``, ``str`` ...), of granted classes and of
functions reached through granted modules (``math.sqrt``) do not tick, nor do
methods of objects (``lst.append``).  The count is deterministic: it depends only on
the program's control flow, never on timing.

The counter is a countdown ``__st_n__`` decremented inline; it lives in one closure
cell per session that every piece of sandboxed code shares (the module body runs as
a function whose closure is that cell, see ``rewriter``).  When it drops below zero
``__st_chk__`` accounts the ticks, checks cancel -> tick limit -> timeout -> memory,
and re-arms it with at most ``_MAX_STRIDE`` (< 257, so the counter stays a cached
small int).  The stride adapts so the check runs about every
``_TARGET_INTERVAL`` seconds however slow each tick is; the tick limit is exact
(a ``StTickLimit`` result reports ``tick_limit + 1`` ticks: the tick that tripped).
"""

from __future__ import annotations

import builtins as _bi
import errno
import functools
import io
import itertools
import os
import posixpath
import sys
import threading
import time
import traceback as _tb
import types
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import clock as _clock
from . import output as _output
from . import rewriter as rw
from . import rpc as _rpc
from . import state as _state
from . import vfs
from .errors import StCancelled, StError, StImportDenied, StOutsideExec, StTickLimit, StTimeout, StValidationError
from .gates import SANDBOX_FILENAME, USER_MARK, ExecToken, Gate, _MatchVals, open_to_sandbox
from .helpers import depth_tracked
from .policy import Policy

_MAX_STRIDE = 256  # the counter stays within the cached small ints [-5, 256]
_TARGET_INTERVAL = 0.002
_MEM_INTERVAL = 0.005
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

# Builtins offered to sandboxed code.
_TYPE_NAMES = (
    "bool",
    "bytearray",
    "bytes",
    "classmethod",
    "complex",
    "dict",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "int",
    "list",
    "map",
    "object",
    "property",
    "range",
    "reversed",
    "set",
    "slice",
    "staticmethod",
    "str",
    "super",
    "tuple",
    "zip",
)
_EXCEPTION_NAMES = (
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BufferError",
    "EOFError",
    "Exception",
    "FloatingPointError",
    "ImportError",
    "IndexError",
    "KeyError",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotImplementedError",
    "OSError",
    "IOError",
    "EnvironmentError",
    "OverflowError",
    "RecursionError",
    "ReferenceError",
    "RuntimeError",
    "StopIteration",
    "StopAsyncIteration",
    "SyntaxError",
    "IndentationError",
    "TabError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeTranslateError",
    "ValueError",
    "ZeroDivisionError",
    "BlockingIOError",
    "BrokenPipeError",
    "ChildProcessError",
    "ConnectionError",
    "ConnectionAbortedError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "FileExistsError",
    "FileNotFoundError",
    "InterruptedError",
    "IsADirectoryError",
    "NotADirectoryError",
    "PermissionError",
    "ProcessLookupError",
    "TimeoutError",
    "Warning",
    "UserWarning",
    "DeprecationWarning",
    "PendingDeprecationWarning",
    "SyntaxWarning",
    "RuntimeWarning",
    "FutureWarning",
    "ImportWarning",
    "UnicodeWarning",
    "BytesWarning",
    "ResourceWarning",
    "EncodingWarning",
    "ExceptionGroup",
)
_CONST_NAMES = ("Ellipsis", "NotImplemented")
# Non-type builtins passed through unchanged except for the tick.
_PLAIN_FUNCS = (
    "abs",
    "all",
    "any",
    "ascii",
    "bin",
    "callable",
    "chr",
    "divmod",
    "format",
    "hash",
    "hex",
    "id",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "max",
    "min",
    "next",
    "oct",
    "ord",
    "pow",
    "repr",
    "round",
    "sorted",
    "sum",
    "aiter",
    "anext",
)
# C iterators that wrap iterators: nesting is bounded (helpers.depth_tracked)
_TRACKED_ITERATORS = {n: depth_tracked(getattr(_bi, n)) for n in ("map", "filter", "zip", "enumerate")}
# Documented absences: exec eval compile globals vars breakpoint __import__ exit quit
# memoryview (and open unless filesystem_root is given).
BUILTIN_NAMES = tuple(
    sorted(
        {
            *_TYPE_NAMES,
            "type",
            *_EXCEPTION_NAMES,
            *_CONST_NAMES,
            *_PLAIN_FUNCS,
            "print",
            "getattr",
            "hasattr",
            "setattr",
            "delattr",
            "dir",
            "help",
            "locals",
            "input",
        }
    )
)


@dataclass
class ExecResult:
    stdout: str
    namespace: dict[str, Any]
    error: BaseException | None
    ticks: int
    isolation: str | Mapping[str, Any] = "none"  # the level; the binding's results: its report
    stderr: str = ""
    traceback: str | None = None
    stdout_truncated: int = 0
    duration: float = 0.0
    error_message: str | None = None  # str(error), made under the exec's limits
    prints: list[Any] = field(default_factory=list)  # with snapshot_prints: each print's values (wire data)
    rendered_prints: list[str] = field(default_factory=list)  # with render_prints: each print as text
    print_count: int = 0  # with render_prints: how many prints were made (rendered or not)
    sizes: dict[str, int] = field(default_factory=dict)  # worker levels: each value's bytes on the wire

    @property
    def ok(self) -> bool:
        return self.error is None


class _Capture:
    """stdout buffer that keeps the last ``limit`` characters."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self.parts.append(s)
        self.size += len(s)
        if self.limit is not None and self.size > 2 * self.limit + 8192:
            self._trim()
        return len(s)

    def flush(self) -> None:
        pass

    def _trim(self):
        text = "".join(self.parts)
        cut = max(0, len(text) - (self.limit or 0))
        self.dropped += cut
        text = text[cut:]
        self.parts = [text]
        self.size = len(text)

    def getvalue(self) -> str:
        if self.limit is not None and self.size > self.limit:
            self._trim()
        text = "".join(self.parts)
        if self.dropped:
            text = f"[sandtrap: {self.dropped} earlier characters of output truncated]\n" + text
        return text


@open_to_sandbox
class _Writer:
    """File-like object for the synthetic ``sys.stdout``/``sys.stderr``."""

    def __init__(self, cap: _Capture):
        self._cap = cap

    def write(self, s):
        return self._cap.write(s)

    def writelines(self, lines):
        for s in lines:
            self._cap.write(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def _read_rss() -> int:
    """Resident set size of this process now (bytes)."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
        try:
            data = os.read(fd, 128)
        finally:
            os.close(fd)
        return int(data.split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return _maxrss()


def _maxrss() -> int:
    try:
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return r if sys.platform == "darwin" else r * 1024
    except Exception:  # noqa: BLE001
        return 0


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0):
    memory allocated and freed between two checks still shows in the peak."""
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
        try:
            os.write(fd, b"5")
        finally:
            os.close(fd)
        return True
    except OSError:
        return False


def _read_peak() -> int:
    """Peak RSS since the last ``_reset_peak`` (bytes), or the current RSS."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        i = data.find(b"VmHWM:")
        if i >= 0:
            return int(data[i + 6 : data.index(b"kB", i)]) * 1024
    except (OSError, ValueError):
        pass
    return _read_rss()


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    _PAGE = 4096


class _Meter:
    __slots__ = (
        "base",
        "armed",
        "stride",
        "running",
        "tripped",
        "cancelled",
        "deadline",
        "tick_limit",
        "memory_limit",
        "rss_base",
        "last_chk",
        "last_mem",
        "timeout",
        "cell",
        "peak",
        "forced",
    )

    def refund(self, seconds: float) -> None:
        """Host time (clock.py): the deadline moves later by ``seconds``."""
        d = self.deadline
        if d is not None and self.running and seconds > 0:
            self.deadline = d + seconds

    def __init__(self, cell):
        self.base = 0
        self.armed = _MAX_STRIDE
        self.stride = _MAX_STRIDE
        self.running = False
        self.tripped: BaseException | None = None
        self.cancelled = False
        self.deadline: float | None = None
        self.tick_limit: int | None = None
        self.memory_limit: int | None = None
        self.rss_base = 0
        self.last_chk = 0.0
        self.last_mem = 0.0
        self.timeout: float | None = None
        self.cell = cell
        self.peak = False  # rss readings are peaks since the exec started
        self.forced = False  # the watchdog asked for a check

    def grown(self) -> int:
        return (_read_peak() if self.peak else _read_rss()) - self.rss_base


class _Watchdog:
    """One daemon thread for every session of the process. While an exec runs with a
    timeout, a memory limit or a pending cancel, it zeroes the session's tick
    countdown — at the deadline, at the cancel, and every ``POLL`` seconds under a
    memory limit — so the very next checkpoint (the next loop iteration, call, ...)
    runs the checks, however slow each iteration has become and however long the
    stride it was on. It never reads anything itself: a read would release the GIL,
    and the exec thread would run another long step before the countdown is zeroed.
    (Code inside one long C call still holds the thread until the call returns.)"""

    POLL = 0.005  # memory-limit checks are forced this often
    FORCE = 0.001  # re-zeroing interval until the exec notices a limit
    IDLE = 1.0  # a look at least this often (a new exec's deadline is planned then)

    def __init__(self):
        self._cond = threading.Condition()
        self._meters: dict[int, _Meter] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._next_wake: float | None = None

    def watch(self, m: _Meter) -> None:
        if self._pid != os.getpid():
            # a fork (the worker template's): the thread, and any lock it held, stayed behind
            self._cond = threading.Condition()
            self._meters = {}
            self._thread = None
            self._next_wake = None
            self._pid = os.getpid()
        with self._cond:
            self._meters[id(m)] = m
            if self._thread is None:  # (it only ever stops with the process; a fork is handled above)
                self._thread = threading.Thread(target=self._run, name="sandtrap-watchdog", daemon=True)
                self._thread.start()
            # wake it only when this exec needs a look before the one it planned
            # (a thread switch per exec otherwise)
            need = None if m.deadline is None else m.deadline
            if m.memory_limit is not None or m.cancelled:
                need = 0.0
            if need is not None and (self._next_wake is None or need < self._next_wake):
                self._cond.notify()

    def unwatch(self, m: _Meter) -> None:
        with self._cond:
            self._meters.pop(id(m), None)

    def poke(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self):
        mono = time.monotonic
        with self._cond:
            while True:
                now = mono()
                wait = self.IDLE
                for m in list(self._meters.values()):
                    w = self._check(m, now)
                    if w is not None and w < wait:
                        wait = w
                self._next_wake = now + wait
                self._cond.wait(wait)

    def _check(self, m: _Meter, now: float):
        """Zero the countdown when a check is due; seconds until the next look."""
        if not m.running or m.tripped is not None:
            return None
        if m.cancelled or (m.deadline is not None and now >= m.deadline):
            m.forced = True
            m.cell.cell_contents = 1  # the next checkpoint runs __st_chk__
            return self.FORCE
        wait = None if m.deadline is None else m.deadline - now
        if m.memory_limit is not None:
            m.forced = True
            m.cell.cell_contents = 1  # __st_chk__ reads the (peak) RSS
            wait = self.POLL if wait is None else min(wait, self.POLL)
        return wait


_WATCHDOG = _Watchdog()


class GuestSession:
    """A persistent sandboxed namespace plus the machinery to run code in it.

    ``exec`` never raises for the code's faults: they land on ``result.error``.
    It raises only for host mistakes (bad arguments, concurrent use of one session).
    """

    isolation = "none"

    def __init__(
        self,
        policy: Policy | None = None,
        filesystem_root: str | os.PathLike | None = None,
        echo: bool | str = False,
        filesystem: Any = None,
        rpc: Any = None,
    ):
        self.policy = policy if policy is not None else Policy()
        # calls of proxies for host objects (rpc.py): ``rpc(target, method, args,
        # kwargs)`` for the targets the host serves; live-object grants of this
        # policy (in this process) are called here
        self._rpc_external = rpc
        self._obj_proxies: dict[str, Any] = {}
        if not isinstance(self.policy, Policy):
            raise TypeError("policy must be a Policy")
        self.echo = _echo_mode(echo)
        self.filesystem_root = None
        if filesystem_root is not None:
            root = os.path.realpath(os.fspath(filesystem_root))
            if not os.path.isdir(root):
                raise ValueError(f"filesystem_root {root!r} is not a directory")
            self.filesystem_root = root
        # a VirtualFS (or its backend): the sandbox's open/os/os.path/io.open/pathlib
        # see it, and `import name` finds name.py under policy.module_root in it
        self._vfs: vfs.VFSView | None = None
        if filesystem is not None:
            if filesystem_root is not None:
                raise ValueError("give filesystem_root or a VirtualFS filesystem, not both")
            self._vfs = vfs.VFSView(vfs.backend_of(filesystem))
        self._vfs_modules: dict[str, tuple[bytes, types.ModuleType]] = {}
        self._recorder = _state.Recorder()  # the def/class/import statements, for snapshot()
        self._prints: _PrintSink | None = None  # this exec's prints (snapshot_prints, render_prints)
        self._lock = threading.Lock()
        # the tick countdown (rewriter.N): a checkpoint decrements it and calls
        # __st_chk__ when it reaches 0, so it is never armed below 1. 1 outside an
        # exec: sandboxed code the host runs afterwards stops at its first checkpoint
        # (StOutsideExec)
        self._cell = types.CellType(1)
        self._meter = _Meter(self._cell)
        self._cap = _Capture(None)
        self._err = _Capture(None)
        self._stdin: io.StringIO | None = None
        self._code_lines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._ns: dict[str, Any] = {}
        self._exec_module_names: dict[str, types.ModuleType] = {}
        self._chk, self._tick = self._make_meter_fns()
        self.gate = Gate(self.policy, self._tick).finish()
        if self._vfs is not None:
            self.gate.add_substitutions(vfs.substitutions(self._vfs, self._tick))
        self._synthetic_parents = self._make_parents()
        self._builtins = self._make_builtins()
        self._ns.update({"__builtins__": self._builtins, "__name__": "__main__"})

    # ------------------------------------------------------------ namespace
    @property
    def namespace(self) -> dict:
        """The user-visible names of the persistent namespace (a copy)."""
        return _user_namespace(self._ns)

    # ---------------------------------------------------------------- meter
    def _make_meter_fns(self):
        cell = self._cell
        m = self._meter
        mono = time.monotonic
        session = self

        def __st_chk__():
            # Runs once per stride (up to _MAX_STRIDE ticks) on a hot loop: keep it lean
            # (no min()/max()/int() calls, each attribute read once).
            try:
                n = cell.cell_contents
            except ValueError:
                n = 0
            if type(n) is not int:
                n = 0
            base = m.base + m.armed - n
            m.base = base
            if not m.running:
                m.armed = 1
                cell.cell_contents = 1
                raise StOutsideExec(
                    "sandboxed code runs only inside exec(): this was called (or finalized) "
                    "by the host after the exec returned"
                )
            if m.tripped is not None:
                m.armed = 1
                cell.cell_contents = 1
                err = m.tripped
                raise type(err)(*err.args)
            limit = m.tick_limit
            try:
                if m.cancelled:
                    raise session._trip(StCancelled("execution was cancelled"))
                if limit is not None and base > limit:
                    raise session._trip(StTickLimit(f"tick limit of {limit} exceeded"))
                now = mono()
                deadline = m.deadline
                if deadline is not None and now >= deadline:
                    raise session._trip(StTimeout(f"execution exceeded the timeout of {m.timeout:g}s"))
                if m.memory_limit is not None and (m.forced or now - m.last_mem >= _MEM_INTERVAL):
                    m.forced = False
                    m.last_mem = now
                    grown = m.grown()
                    if grown > m.memory_limit:
                        raise session._trip(
                            MemoryError(f"memory limit of {m.memory_limit} bytes exceeded (RSS grew by {grown} bytes)")
                        )
            except BaseException:
                m.armed = 1
                cell.cell_contents = 1
                raise
            dt = now - m.last_chk
            m.last_chk = now
            # aim at one check per _TARGET_INTERVAL whatever a tick costs; grow at most x2:
            # stride = max(1, min(_MAX_STRIDE, 2 * stride, int(stride * _TARGET_INTERVAL / dt)))
            stride = m.stride
            if stride < _MAX_STRIDE or dt > _TARGET_INTERVAL:
                grown2 = stride * 2
                if dt > 0:
                    fit = stride * _TARGET_INTERVAL / dt
                    if fit < grown2:
                        grown2 = int(fit) if fit >= 1 else 1
                stride = grown2 if grown2 < _MAX_STRIDE else _MAX_STRIDE
                m.stride = stride
            if limit is not None and limit - base < stride:
                stride = limit - base + 1  # the check at tick limit + 1 (base <= limit here)
            m.armed = stride
            cell.cell_contents = stride
            return True

        # the counter is a closure variable of __st_tick__ too (no attribute access)
        __st_tick__ = _with_closure(_tick_template, {rw.N: cell, "chk": types.CellType(__st_chk__)})
        return __st_chk__, __st_tick__

    def _trip(self, err: BaseException) -> BaseException:
        if self._meter.tripped is None:
            self._meter.tripped = err
        return err

    def _ticks_now(self) -> int:
        try:
            n = self._cell.cell_contents
        except ValueError:
            n = 0
        if type(n) is not int:
            n = 0
        return self._meter.base + self._meter.armed - n

    def release(self) -> None:
        """Let go of the namespace (the sandbox closed): its functions' globals are the
        namespace itself, a cycle only the cyclic collector frees — with every object
        the namespace holds — so emptying it frees them now, by reference count (what
        results handed out still hold stays alive)."""
        self._ns.clear()

    def cancel(self) -> None:
        """Cancel the running ``exec`` (thread-safe); it stops at its next checkpoint."""
        m = self._meter
        m.cancelled = True
        if m.running:
            _WATCHDOG.watch(m)  # zeroes the countdown until the exec notices

    # -------------------------------------------------------------- builtins
    def _make_builtins(self) -> dict:
        tick = self._tick
        gate = self.gate
        b: dict[str, Any] = {}
        for n in _TYPE_NAMES:
            b[n] = _TRACKED_ITERATORS.get(n) or getattr(_bi, n)
        for n in (*_EXCEPTION_NAMES, *_CONST_NAMES):
            if hasattr(_bi, n):
                b[n] = getattr(_bi, n)
        b["type"] = gate.SafeType
        for n in _PLAIN_FUNCS:
            if hasattr(_bi, n):
                b[n] = _ticking(getattr(_bi, n), tick)
        b["getattr"] = _ticking(gate.getattr, tick, "getattr")
        b["hasattr"] = _ticking(gate.hasattr, tick, "hasattr")
        b["setattr"] = _ticking(gate.setattr, tick, "setattr")
        b["delattr"] = _ticking(gate.delattr, tick, "delattr")
        b["print"] = self._make_print()
        b["dir"] = self._make_dir()
        b["help"] = self._make_help()
        b["locals"] = self._make_locals()
        b["input"] = self._make_input()
        if self.filesystem_root is not None:
            b["open"] = _make_open(self.filesystem_root, tick)
        elif self._vfs is not None:
            b["open"] = _ticking(self._vfs.open, tick, "open")
        for name, C in gate.exposed_classes.items():
            b[name] = C
        for name, g in self.policy.fns.items():
            b[name] = _ticking(_clock.wrap_host_time(g.fn) if g.host_time else g.fn, tick, name)
        # runtime helpers (unnameable by sandboxed code)
        b["__build_class__"] = gate.build_class
        # C code called from sandbox frames (numpy, pandas, time.strptime) imports through
        # the calling frame's builtins (PyImport_Import). Sandboxed code cannot name it:
        # the rewriter refuses `__import__` and `__builtins__`, frames are unreachable.
        b["__import__"] = _bi.__import__
        b[rw.CHK] = self._chk
        b[rw.TICK] = self._tick
        b[rw.GA] = gate.ga
        b[rw.SA] = gate.sa
        b[rw.DA] = gate.da
        b[rw.IMPORT] = self._import
        b[rw.IMPORTFROM] = self._importfrom
        b[rw.ECHO] = self._echo
        b[rw.EXC] = Exception
        b[rw.MARK] = USER_MARK
        b[rw.MATCH] = _MatchVals
        b[rw.MATCHCLS] = gate.match_class
        return b

    def _make_print(self):
        tick = self._tick
        session = self
        ga = self.gate.ga

        def print(*args, sep=" ", end="\n", file=None, flush=False):  # noqa: A001
            tick()
            if sep is None:
                sep = " "
            if end is None:
                end = "\n"
            if not isinstance(sep, str):
                raise TypeError(f"sep must be None or a string, not {type(sep).__name__}")
            if not isinstance(end, str):
                raise TypeError(f"end must be None or a string, not {type(end).__name__}")
            text = sep.join([str(a) for a in args]) + end
            if session._prints is not None and file is None:
                session._prints.append(args)
            if file is None:
                session._cap.write(text)
            else:
                ga(file, "write")(text)

        print.__doc__ = _bi.print.__doc__
        return print

    def _make_dir(self):
        tick = self._tick
        gate = self.gate

        def dir(*args):  # noqa: A001
            tick()
            if len(args) > 1:
                raise TypeError(f"dir expected at most 1 argument, got {len(args)}")
            if not args:
                return sorted(k for k in _frame_names(sys._getframe(1)) if _visible_name(k))
            obj = args[0]
            return [n for n in _bi.dir(obj) if gate.allows_read(obj, n)]

        return dir

    def _make_help(self):
        tick = self._tick
        session = self
        gate = self.gate

        def help(*args):  # noqa: A001
            """help(thing): its documentation as the sandbox may see it (the members
            the policy lets it read, their signatures and docstrings) into stdout."""
            tick()
            if len(args) > 1:
                raise TypeError(f"help expected at most 1 argument, got {len(args)}")
            if not args:
                text = _HELP_WELCOME
            elif isinstance(args[0], str):
                raise TypeError("help() with a string argument is not supported in the sandbox")
            else:
                text = _render_help(gate, args[0])
            if session._prints is not None:
                session._prints.append((text,))
            session._cap.write(text)

        return help

    def _make_locals(self):
        tick = self._tick

        def locals():  # noqa: A001
            """A snapshot of the caller's local names (runtime internals removed)."""
            tick()
            return {k: v for k, v in _frame_names(sys._getframe(1)).items() if _visible_name(k)}

        return locals

    def _make_input(self):
        tick = self._tick
        session = self

        def input(prompt=""):  # noqa: A001
            tick()
            if prompt:
                session._cap.write(str(prompt))
            src = session._stdin
            line = src.readline() if src is not None else ""
            if not line:
                raise EOFError("EOF when reading a line")
            return line[:-1] if line.endswith("\n") else line

        return input

    def _echo(self, value):
        self._tick()
        if value is not None and self._prints is not None:
            self._prints.append((value,))
        if value is not None:
            self._cap.write(repr(value) + "\n")

    # --------------------------------------------------------------- imports
    def _make_parents(self) -> dict[str, types.ModuleType]:
        """Synthetic parent packages for dotted grant names whose parent is not granted
        (granting ``os.path`` alone makes ``import os.path`` bind an ``os`` that holds
        only ``path``)."""
        parents: dict[str, types.ModuleType] = {}
        for name in sorted(self.policy.modules):
            parts = name.split(".")
            for i in range(1, len(parts)):
                pname = ".".join(parts[:i])
                if pname in self.policy.modules:
                    continue
                if pname not in parents:
                    parents[pname] = types.ModuleType(pname, None)
        for name in sorted(self.policy.modules):
            parts = name.split(".")
            if len(parts) > 1:
                pname = ".".join(parts[:-1])
                if pname in parents:
                    setattr(parents[pname], parts[-1], self.policy.modules[name].module)
        for pname, mod in parents.items():
            parts = pname.split(".")
            if len(parts) > 1 and ".".join(parts[:-1]) in parents:
                setattr(parents[".".join(parts[:-1])], parts[-1], mod)
            self.gate.session_modules[id(mod)] = mod
        return parents

    def _resolve_module(self, dotted: str) -> types.ModuleType:
        if not isinstance(dotted, str) or not dotted or any(not p.isidentifier() for p in dotted.split(".")):
            raise StImportDenied(f"invalid module name {dotted!r}", name=str(dotted))
        m = self._exec_module_names.get(dotted)
        if m is not None:
            return m
        g = self.policy.modules.get(dotted)
        if g is not None:
            return g.module
        og = self.policy.objects.get(dotted)
        if og is not None:
            return self._object_proxy(og)
        p = self._synthetic_parents.get(dotted)
        if p is not None:
            return p
        found = self.policy.import_grant(dotted)  # the innermost grant, by name
        if found is not None and found[1]:
            import importlib

            g, segs = found
            real = g.module.__name__ + "." + ".".join(segs)
            try:
                mod = importlib.import_module(real)
            except ImportError as e:
                raise ModuleNotFoundError(f"No module named {dotted!r}", name=dotted) from e
            if self.gate.module_rule(mod, real) is not None:
                return mod
        if dotted in ("main", "__main__"):
            return self._main_module()
        if self._vfs is not None:
            m = self._vfs_module(dotted)
            if m is not None:
                return m
        raise StImportDenied(f"import of module {dotted!r} is not allowed by the sandbox policy", name=dotted)

    # ------------------------------------------------------- host objects
    def _object_proxy(self, og):
        """The proxy sandboxed code gets for a live-object grant (``import name``)."""
        if type(og.obj) is _rpc.RpcProxy:  # a worker's: it calls the host already
            return og.obj
        p = self._obj_proxies.get(og.name)
        if p is None:
            methods, attributes = og.surface()
            p = _rpc.RpcProxy(self._rpc_call, _rpc.GRANT_PREFIX + og.name, methods, attributes, label=og.name)
            self._obj_proxies[og.name] = p
        return p

    def _rpc_call(self, target, method, args, kwargs):
        """A proxy's call: its arguments cross as data (at every level), a live
        object granted to this policy is called here, any other target goes to the
        host's ``rpc``."""
        from .wire import to_wire

        args_w, kwargs_w = to_wire(list(args)), to_wire(dict(kwargs))
        with _clock.host_time():  # a host object's method is host time, as in the seed
            if isinstance(target, str) and target.startswith(_rpc.GRANT_PREFIX):
                return _rpc.call_object_grant(self.policy, target, method, args_w, kwargs_w)
            if self._rpc_external is None:
                raise LookupError(f"no host object {target!r}: this sandbox serves no rpc_handlers")
            return self._rpc_external(target, method, args_w, kwargs_w)

    def _proxies_for(self, values: dict) -> dict:
        """``values`` with each RpcProxyMarker (or its wire form) replaced by a proxy."""
        out = dict(values)
        for k, v in values.items():
            m = _rpc.marker_from_wire(v)
            if m is not None:
                out[k] = _rpc.RpcProxy(self._rpc_call, m[0], m[1], m[2])
        return out

    def _main_module(self) -> types.ModuleType:
        """``import main`` / ``from main import X``: the session's own namespace (what
        earlier execs defined), read-only, as a module."""
        mod = types.ModuleType("main", None)
        for k, v in _user_namespace(self._ns).items():
            setattr(mod, k, v)
        self.gate.session_modules[id(mod)] = mod
        return mod

    def _vfs_module(self, dotted: str) -> types.ModuleType | None:
        """A module the sandbox wrote into its VirtualFS: ``<module_root>/a/b.py`` or
        ``<module_root>/a/b/__init__.py`` for ``a.b``, rewritten and run as sandboxed
        code in a namespace of its own (same builtins, same limits). Re-run when its
        source changed; a package's parents are imported first."""
        view = self._vfs
        root = vfs.norm(getattr(self.policy, "module_root", "/") or "/")
        rel = dotted.replace(".", "/")
        for path, is_pkg in ((f"{root}/{rel}/__init__.py", True), (f"{root}/{rel}.py", False)):
            path = vfs.norm(path)
            st = view.backend.stat(path)
            if st is None or st[0] != "file":
                continue
            if "." in dotted:
                parent = self._resolve_module(dotted.rsplit(".", 1)[0])
            source = view.backend.read(path)
            cached = self._vfs_modules.get(dotted)
            if cached is not None and cached[0] == source:
                return cached[1]
            try:
                text = source.decode("utf-8")
            except UnicodeDecodeError as e:
                raise SyntaxError(f"{path}: not UTF-8 ({e})") from None
            tree = rw.rewrite(text, filename=SANDBOX_FILENAME)
            codeobj = _main_code(compile(tree, SANDBOX_FILENAME, "exec", dont_inherit=True))
            self._register_code(codeobj, text)
            mod = types.ModuleType(dotted, None)
            mod.__dict__["__builtins__"] = self._builtins
            mod.__file__ = path
            if is_pkg:
                mod.__path__ = [posixpath.dirname(path)]
            self.gate.session_modules[id(mod)] = mod
            self._vfs_modules[dotted] = (source, mod)  # before it runs: a cycle finds it
            try:
                if codeobj.co_flags & _CO_NEWLOCALS:
                    types.FunctionType(
                        codeobj, mod.__dict__, "<module>", None, (self._cell,) * len(codeobj.co_freevars)
                    )()
                else:
                    exec(codeobj, mod.__dict__)
            except BaseException:
                self._vfs_modules.pop(dotted, None)
                raise
            if "." in dotted:
                setattr(parent, dotted.rsplit(".", 1)[1], mod)
            return mod
        return None

    def _import(self, dotted: str, leaf: bool):
        mod = self._resolve_module(dotted)
        if leaf or "." not in dotted:
            return mod
        top = dotted.split(".")[0]
        # every prefix must be importable too, as in Python
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            self._resolve_module(".".join(parts[:i]))
        return self._resolve_module(top)

    def _importfrom(self, modname: str, names: tuple):
        mod = self._resolve_module(modname)
        out = []
        for n in names:
            sub = f"{modname}.{n}"
            try:
                out.append(self.gate.ga(mod, n))
                continue
            except AttributeError as e:
                denied = e
            try:
                out.append(self._resolve_module(sub))
                continue
            except StImportDenied as e:
                if _submodule_exists(mod, n):  # it is there: the policy refused it
                    raise StImportDenied(f"cannot import name {n!r} from {modname!r}: {e}", name=modname) from None
            except ImportError:
                pass
            if isinstance(denied, StError):
                raise StImportDenied(f"cannot import name {n!r} from {modname!r}: {denied}", name=modname) from None
            raise ImportError(f"cannot import name {n!r} from {modname!r}", name=modname)
        return tuple(out)

    def _make_exec_modules(self, modules, stdin, argv, token) -> dict[str, types.ModuleType]:
        out: dict[str, types.ModuleType] = {}
        for name, spec in (modules or {}).items():
            if (
                not isinstance(name, str)
                or not all(p.isidentifier() for p in name.split("."))
                or name.startswith(rw.RESERVED_PREFIX)
            ):
                raise ValueError(f"invalid module name {name!r}")
            mod = types.ModuleType(name, None)
            if isinstance(spec, types.ModuleType):
                items = {k: getattr(spec, k) for k in _bi.dir(spec) if not k.startswith("_")}
            elif isinstance(spec, dict):
                items = self._proxies_for(spec)
            else:
                raise TypeError(f"modules[{name!r}] must be a dict or a module")
            for k, v in items.items():
                if not isinstance(k, str) or not k.isidentifier() or (k.startswith("__") and k.endswith("__")):
                    raise ValueError(f"invalid attribute name {k!r} in modules[{name!r}]")
                setattr(mod, k, self.gate.exec_value(v, token))  # gone when the exec returns
            out[name] = mod
        if stdin is not None or argv is not None:
            if "sys" not in out:
                sysmod = types.ModuleType("sys", "Synthetic sys module of the sandbox.")
                sysmod.argv = list(argv) if argv is not None else [""]
                sysmod.stdin = self._stdin
                sysmod.stdout = _Writer(self._cap)
                sysmod.stderr = _Writer(self._err)
                sysmod.version = sys.version
                sysmod.version_info = tuple(sys.version_info)
                sysmod.platform = sys.platform
                sysmod.maxsize = sys.maxsize
                sysmod.byteorder = sys.byteorder
                out["sys"] = sysmod
        # parents of dotted per-exec names
        for name in list(out):
            parts = name.split(".")
            for i in range(1, len(parts)):
                pname = ".".join(parts[:i])
                if pname not in out:
                    out[pname] = types.ModuleType(pname, None)
            if len(parts) > 1:
                setattr(out[".".join(parts[:-1])], parts[-1], out[name])
        return out

    # ------------------------------------------------------------------ exec
    def exec(
        self,
        code: str,
        namespace: dict | None = None,
        modules: dict | None = None,
        stdin: str | None = None,
        argv: list | None = None,
        echo: bool | str | None = None,
        snapshot_prints: bool = False,
        allow_await: bool = False,
        keep: Any = None,
        render_prints: tuple[int, int] | None = None,
    ) -> ExecResult:
        """Run ``code``; never raises for the code's faults (see ``result.error``).
        ``snapshot_prints``: ``result.prints`` holds each print's (and echo's) values
        as wire data. ``allow_await`` (aexec): top-level ``await``, ``async for`` and
        ``async with``; such a body runs as a coroutine on an event loop of its own,
        in this thread, until it completes. ``keep`` (a collection of names, not a
        str): the result's namespace holds only those (the session keeps every name).
        ``render_prints`` ``(per_print, limit)``: ``result.rendered_prints`` holds the
        first ``limit`` prints rendered as text of at most ``per_print`` characters,
        ``result.print_count`` how many prints were made."""
        if render_prints is not None:
            per, lim = render_prints
            if not all(type(v) is int and v >= 1 for v in (per, lim)):
                raise ValueError("render_prints must be (per_print, limit): positive ints")
            render_prints = (per, lim)
        keep = validate_keep(keep)
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        if namespace is not None:
            if not isinstance(namespace, dict):
                raise TypeError("namespace must be a dict")
            for k in namespace:
                if (
                    not isinstance(k, str)
                    or not k.isidentifier()
                    or k.startswith(rw.RESERVED_PREFIX)
                    or k in rw.DENIED_NAMES
                    or k == "__builtins__"
                ):
                    raise ValueError(f"invalid namespace name {k!r}")
        if stdin is not None and not isinstance(stdin, str):
            raise TypeError("stdin must be a str")
        if argv is not None and (not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv)):
            raise TypeError("argv must be a list of str")
        echo_mode = self.echo if echo is None else _echo_mode(echo)
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this GuestSession is already executing (sessions are not re-entrant)")
        try:
            sink = _PrintSink(snapshot_prints, render_prints)
            self._prints = sink if (snapshot_prints or render_prints) else None
            try:
                r = self._exec_locked(code, namespace, modules, stdin, argv, echo_mode, allow_await)
                if keep is not None:
                    r.namespace = {k: v for k, v in r.namespace.items() if k in keep}
                r.prints = sink.values if sink.values is not None else []
                r.rendered_prints = sink.rendered
                r.print_count = sink.count
                return r
            finally:
                self._prints = None
        finally:
            self._lock.release()

    def _exec_locked(self, code, namespace, modules, stdin, argv, echo_mode, allow_await=False) -> ExecResult:
        pol = self.policy
        t0 = time.monotonic()
        self._cap = _Capture(pol.max_stdout)
        self._err = _Capture(pol.max_stdout)
        self._stdin = io.StringIO(stdin) if stdin is not None else None
        m = self._meter
        m.cancelled = False
        m.tripped = None
        error: BaseException | None = None
        ticks = 0
        try:
            codeobj = _compiled(code, echo_mode, allow_await)
        except (SyntaxError, StValidationError) as e:
            e.__traceback__ = None
            return ExecResult(
                stdout="",
                namespace=self.namespace,
                error=e,
                ticks=0,
                isolation=self.isolation,
                traceback=_format_exception_only(e),
                duration=time.monotonic() - t0,
            )
        except (ValueError, OverflowError, RecursionError, MemoryError) as e:
            err = StValidationError(f"code could not be compiled: {type(e).__name__}: {e}")
            return ExecResult(
                stdout="",
                namespace=self.namespace,
                error=err,
                ticks=0,
                isolation=self.isolation,
                traceback=_format_exception_only(err),
                duration=time.monotonic() - t0,
            )
        self._register_code(codeobj, code)
        if codeobj.co_flags & _CO_NEWLOCALS:
            # the module body as a function whose closure is the counter cell
            main = types.FunctionType(codeobj, self._ns, "<module>", None, (self._cell,) * len(codeobj.co_freevars))
        else:
            main = None  # a plain module body (it does not touch the counter)
        token = ExecToken("a value given through modules=")
        exec_mods = self._make_exec_modules(modules, stdin, argv, token)
        self._exec_module_names = exec_mods
        self.gate.exec_modules = {id(mod): mod for mod in exec_mods.values()}
        if namespace:
            self._ns.update(self._proxies_for(namespace))
        ns = self._ns
        guards = _state_guards(pol)
        for g in guards:
            g.__enter__()
        # arm the meter
        m.base = 0
        m.stride = 1  # start checking at once; the stride grows while ticks are cheap
        m.tick_limit = pol.tick_limit
        m.memory_limit = pol.memory_limit_bytes
        m.timeout = pol.timeout
        m.forced = False
        m.armed = 1  # the first checkpoint checks
        self._cell.cell_contents = 1
        if pol.memory_limit_bytes is not None:
            m.peak = _reset_peak()
            m.rss_base = _read_rss()
        now = time.monotonic()
        m.last_chk = m.last_mem = now
        m.deadline = None if pol.timeout is None else now + pol.timeout
        m.running = True
        watched = pol.timeout is not None or pol.memory_limit_bytes is not None
        if watched:
            _WATCHDOG.watch(m)
        tb_text = message = None
        route = _output.begin(self._cap, self._err)  # host writes to sys.stdout/err land here
        clock_scope = _clock.use(_clock.Clock(m.refund))  # host time moves the deadline
        clock_scope.__enter__()
        try:
            if main is not None:
                if codeobj.co_flags & _CO_COROUTINE:
                    _run_coroutine(main(), m, self._chk)
                else:
                    main()
            else:
                exec(codeobj, ns)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - every fault of the code is a result
            error = e
        finally:
            ticks = self._ticks_now()
            if m.memory_limit is not None and m.tripped is None:
                grown = m.grown()
                if grown > m.memory_limit:
                    # also memory allocated and freed again after the last check
                    self._trip(
                        MemoryError(f"memory limit of {m.memory_limit} bytes exceeded (RSS grew by {grown} bytes)")
                    )
            if m.tripped is not None and error is not m.tripped:
                # a limit was hit and then swallowed or superseded: the limit wins
                if m.tripped.__traceback__ is None and error is not None:
                    m.tripped.__context__ = error
                error = m.tripped
            if error is not None:
                # Formatting may call a sandbox-defined __str__: do it while the meter
                # still enforces the limits (a tripped limit makes it fail fast), and
                # never again afterwards (result.error_message, error_to_wire).
                try:
                    tb_text = self._format_traceback(error)
                except BaseException:  # noqa: BLE001
                    tb_text = self._format_traceback(error, safe=True)
                try:
                    message = str(error)
                    if type(message) is not str:
                        raise TypeError
                except BaseException:  # noqa: BLE001
                    message = _safe_message(error)
            clock_scope.__exit__(None, None, None)
            _output.end(route)
            if watched:
                _WATCHDOG.unwatch(m)
            m.running = False
            m.armed = 1
            self._cell.cell_contents = 1  # sandboxed code the host runs later stops at once
            m.base = 0
            token.alive = False  # values given through modules= are gone
            if self._vfs is not None:
                self._vfs.close_all()  # files left open are written back
            self.gate.exec_done()
            for g in reversed(guards):
                try:
                    g.__exit__(None, None, None)
                except Exception:  # noqa: BLE001 - restoring host state must not fail the call
                    pass
            # per-exec modules vanish: drop names still bound to them
            ids = self.gate.exec_modules
            for k in [k for k, v in ns.items() if issubclass(type(v), types.ModuleType) and id(v) in ids]:
                del ns[k]
            self.gate.exec_modules = {}
            self._exec_module_names = {}
        if error is not None:
            _set_tb(error, _strip_internal(_get_tb(error)))
        self._recorder.record(code)
        return ExecResult(
            stdout=self._cap.getvalue(),
            namespace=self.namespace,
            error=error,
            ticks=ticks,
            isolation=self.isolation,
            stderr=self._err.getvalue(),
            traceback=tb_text,
            stdout_truncated=self._cap.dropped,
            duration=time.monotonic() - t0,
            error_message=message,
        )

    # ----------------------------------------------------------------- state
    def snapshot(self) -> dict:
        """The namespace as source plus data (``state.py``): what ``restore`` rebuilds
        in another session, another worker, another process. Never pickle."""
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("this GuestSession is executing")
        try:
            return _state.snapshot(self)
        finally:
            self._lock.release()

    def restore(self, state: dict) -> ExecResult:
        """Rebuild a ``snapshot()`` here: its source runs as an exec (checked like any
        code), then its data and objects are bound. The source's ExecResult."""
        return _state.restore(self, state)

    # ------------------------------------------------------------ tracebacks
    def _register_code(self, codeobj, source: str):
        lines = source.splitlines()
        stack = [codeobj]
        while stack:
            c = stack.pop()
            try:
                self._code_lines[c] = lines
            except TypeError:
                pass
            stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))

    def _format_traceback(self, error: BaseException, safe: bool = False) -> str:
        out = ["Traceback (most recent call last):\n"]
        tb = _get_tb(error)
        last, repeats = None, 0
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == SANDBOX_FILENAME:
                lineno = tb.tb_lineno
                key = (code, lineno)
                repeats = repeats + 1 if key == last else 1
                if repeats <= 3:
                    out.append(f'  File "{SANDBOX_FILENAME}", line {lineno}, in {code.co_name}\n')
                    lines = self._code_lines.get(code)
                    if lines and 0 < lineno <= len(lines):
                        out.append(f"    {lines[lineno - 1].strip()}\n")
                elif tb.tb_next is None or (tb.tb_next.tb_frame.f_code, tb.tb_next.tb_lineno) != key:
                    out.append(f"  [Previous line repeated {repeats - 3} more times]\n")
                last = key
            tb = tb.tb_next
        if len(out) == 1:
            out = []
        if safe:
            msg = _safe_message(error)
            out.append(f"{type(error).__qualname__}: {msg}\n" if msg else f"{type(error).__qualname__}\n")
        else:
            out.extend(_tb.format_exception_only(type(error), error))
        return "".join(out)


_get_tb = BaseException.__traceback__.__get__  # never an exception class's own __getattribute__
_set_tb = BaseException.__traceback__.__set__
_get_args = BaseException.args.__get__


def _safe_message(error: BaseException) -> str:
    """The exception's arguments, shown without running any of its code."""
    from .wire import safe_repr

    args = _get_args(error)
    if len(args) == 1 and type(args[0]) is str:
        return args[0]
    return ", ".join(safe_repr(a) for a in args)


def _state_guards(policy) -> list:
    """Context managers around every exec that keep process-wide state the sandbox can
    reach through a grant from outliving the exec: the thread's decimal context and,
    when ``warnings`` is granted, the warning filters."""
    out = []
    dec = sys.modules.get("decimal")
    if dec is not None:
        out.append(dec.localcontext())
    wn = sys.modules.get("warnings")
    if wn is not None and any(g.module is wn for g in policy.modules.values()):
        out.append(wn.catch_warnings())
    return out


def _tick_template_factory(__st_n__, chk):
    def __st_tick__():
        nonlocal __st_n__
        if not (__st_n__ := __st_n__ - 1):
            chk()
        return True

    return __st_tick__


_tick_template = _tick_template_factory(0, None)


def _with_closure(fn, cells: dict):
    """A copy of the closure ``fn`` whose free variables are the given cells."""
    code = fn.__code__
    return types.FunctionType(
        code, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells[n] for n in code.co_freevars)
    )


_CO_NEWLOCALS = 0x2
_CO_NOT_PLAIN = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async generator
_MAIN_PREFIX = f"{rw.OUTER}.<locals>.{rw.MAIN}.<locals>."


_CO_COROUTINE = 0x80
_TOP_AWAIT = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT (the body itself is an async def here)


def validate_keep(keep: Any) -> frozenset[str] | None:
    """``keep`` as a frozenset of names (None: every name). A bare str is refused: it
    is a collection of its characters (``keep="ui"`` would keep ``u`` and ``i``)."""
    if keep is None:
        return None
    if isinstance(keep, (str, bytes)) or not hasattr(keep, "__iter__"):
        raise TypeError(
            f"keep must be a collection of names, not {type(keep).__name__}: write keep=('ui',) for a single name"
        )
    names = frozenset(keep)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"keep names must be strings, got {n!r}")
    return names


def _run_coroutine(coro, meter, chk) -> None:
    """Run the module body's coroutine (aexec's top-level await) to completion on a
    new event loop in this thread. The loop looks at the meter every few
    milliseconds: past the deadline, or cancelled, it cancels the body's task (so an
    ``await`` of a long sleep stops too) and the meter's check raises the limit. The
    loop is closed afterwards, its pending tasks cancelled: a task the code started
    and did not await does not outlive the exec."""
    import asyncio

    loop = asyncio.new_event_loop()
    task = loop.create_task(coro)
    mono = time.monotonic

    stopped = [False]

    def look():
        if task.done():
            return
        if meter.cancelled or (meter.deadline is not None and mono() >= meter.deadline):
            stopped[0] = True
            task.cancel()
        loop.call_later(0.005, look)

    loop.call_soon(look)
    try:
        try:
            loop.run_until_complete(task)
        except BaseException:
            if stopped[0]:
                chk()  # the limit that cancelled it wins over what the code made of that
            raise
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


@functools.lru_cache(maxsize=256)
def _compiled_cached(code: str, echo_mode: Any, allow_await: bool) -> types.CodeType:
    return _compile(code, echo_mode, allow_await)


def _compile(code: str, echo_mode: Any, allow_await: bool) -> types.CodeType:
    tree = rw.rewrite(code, echo=echo_mode, filename=SANDBOX_FILENAME, allow_await=allow_await)
    return _main_code(
        compile(tree, SANDBOX_FILENAME, "exec", flags=_TOP_AWAIT if allow_await else 0, dont_inherit=True),
        allow_await,
    )


_CACHE_MAX_SOURCE = 64 * 1024


def _compiled(code: str, echo_mode: Any, allow_await: bool) -> types.CodeType:
    """The rewritten, compiled code of an exec: the same source run again (a loop of
    execs, a state's source restored into each new sandbox) is rewritten and compiled
    once per process. The rewrite depends on nothing but these arguments (not the
    policy: what the code may reach is checked when it runs), and a code object is
    immutable, so sessions can share it. A source that fails is not cached (its
    error is raised each time); sources over 64 KiB are not kept."""
    if type(code) is not str or len(code) > _CACHE_MAX_SOURCE:
        return _compile(code, echo_mode, allow_await)
    return _compiled_cached(code, echo_mode, bool(allow_await))


def _main_code(module_code: types.CodeType, allow_await: bool = False) -> types.CodeType:
    """The code to run: the module body's code object out of the compiled wrapper (see
    ``rewriter``), named ``<module>``, with the wrapper's names removed from nested
    qualnames; or ``module_code`` itself when the rewriter did not wrap the body
    (nothing in it touches the counter)."""
    outer = [c for c in module_code.co_consts if isinstance(c, types.CodeType) and c.co_name == rw.OUTER]
    if not outer and rw.N not in module_code.co_names:
        return module_code
    main = (
        [c for c in outer[0].co_consts if isinstance(c, types.CodeType) and c.co_name == rw.MAIN]
        if len(outer) == 1
        else []
    )
    if len(main) != 1:
        raise StValidationError("code could not be compiled: module wrapper not found")
    main = main[0]
    if (
        main.co_flags & (_CO_NOT_PLAIN & ~_CO_COROUTINE if allow_await else _CO_NOT_PLAIN)
        or not main.co_flags & _CO_NEWLOCALS
        or main.co_argcount
        or main.co_kwonlyargcount
        or main.co_freevars not in ((), (rw.N,))
    ):
        raise StValidationError("code could not be compiled: unexpected module wrapper")
    if not _HAS_QUALNAME:
        return _strip_qualnames_310(main).replace(co_name="<module>")
    return _strip_qualnames(main).replace(co_name="<module>", co_qualname="<module>")


_HAS_QUALNAME = hasattr(types.CodeType, "co_qualname")


def _strip_qualnames_310(code: types.CodeType) -> types.CodeType:
    """Python 3.10: a function's qualname is a string constant of the code that makes
    it (there is no co_qualname)."""
    consts = list(code.co_consts)
    changed = False
    for i, c in enumerate(consts):
        if isinstance(c, types.CodeType):
            n = _strip_qualnames_310(c)
            changed = changed or n is not c
            consts[i] = n
        elif type(c) is str and c.startswith(_MAIN_PREFIX):
            consts[i] = c[len(_MAIN_PREFIX) :]
            changed = True
    return code.replace(co_consts=tuple(consts)) if changed else code


def _strip_qualnames(code: types.CodeType) -> types.CodeType:
    consts = code.co_consts
    new = None
    for i, c in enumerate(consts):
        if isinstance(c, types.CodeType) and c.co_qualname.startswith(_MAIN_PREFIX):
            if new is None:
                new = list(consts)
            new[i] = _strip_qualnames(c)
    qn = code.co_qualname
    if qn.startswith(_MAIN_PREFIX):
        qn = qn[len(_MAIN_PREFIX) :]
    elif new is None:
        return code
    return code.replace(co_qualname=qn, co_consts=tuple(new) if new is not None else consts)


def _frame_names(frame) -> dict:
    """The names ``locals()``/``dir()`` see: those of the nearest *sandbox* frame at or
    below ``frame`` — the namespace for the module body (a function frame whose
    globals are the namespace), else the frame's locals. Frames of the runtime (a
    gate, a builtin's wrapper) and of host code are skipped: when sandboxed code makes
    a C callback (``iter(locals, None)`` as a ``__dir__``/``__repr__``/``__iter__`` hook)
    run inside one of them, it sees its own nearest frame, never theirs."""
    while frame is not None and frame.f_code.co_filename != SANDBOX_FILENAME:
        frame = frame.f_back
    if frame is None:
        return {}
    code = frame.f_code
    if code.co_name == "<module>":
        return frame.f_globals
    return frame.f_locals


_HELP_WELCOME = (
    "Welcome to help!\n\n"
    "To get help on a function or object, call help(thing).\n"
    "For example: help(sorted), help(int), help(my_function)\n"
)
_HELP_MEMBERS = 500  # members listed for one module or class at most


def _help_read(gate: Gate, obj: Any, name: str) -> Any:
    """``obj.name`` as sandboxed code would read it, or None where it may not."""
    try:
        return gate.ga(obj, name)
    except Exception:  # noqa: BLE001 - refused or failing: not shown
        return None


def _help_signature(obj: Any) -> str:
    import inspect

    try:
        return str(inspect.signature(_ticked_target(obj)))
    except Exception:  # noqa: BLE001 - no signature to show
        return "(...)"


def _help_doc(gate: Gate, obj: Any, first_line: bool = False) -> str:
    import inspect

    doc = _help_read(gate, obj, "__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return ""
    doc = inspect.cleandoc(doc)
    return doc.split("\n\n", 1)[0].replace("\n", " ") if first_line else doc


def _render_help(gate: Gate, obj: Any) -> str:
    """What ``help(obj)`` shows: only what the gate lets sandboxed code read (a
    module's or class's members, each by its signature and first docstring line;
    excluded and private members are not listed). An instance shows its class."""
    shown = obj
    if isinstance(obj, types.ModuleType):
        kind = "module"
    elif isinstance(obj, type):
        kind = "class"
    elif callable(obj):
        kind = "function"
    else:
        kind = "class"
        shown = type(obj)
    real = (gate.proxies.get(shown) or gate.meta_proxies.get(shown) or shown) if kind == "class" else shown
    name = _help_read(gate, shown, "__name__")
    name = name if isinstance(name, str) else "?"
    lines = [f"Help on {kind} {name}:", ""]
    if kind == "function":
        lines.append(f"{name}{_help_signature(obj)}")
        doc = _help_doc(gate, obj)
        if doc:
            lines += ["", *("    " + ln if ln else "" for ln in doc.split("\n"))]
        return "\n".join(lines).rstrip("\n") + "\n"
    header = f"{kind} {name}"
    if kind == "class":
        header += _help_signature(real) if real is not type else ""
    lines.append(header)
    doc = _help_doc(gate, shown)
    if doc:
        lines += [*("    " + ln if ln else "" for ln in doc.split("\n"))]
    members = []
    try:
        names = sorted(_bi.dir(real))
    except Exception:  # noqa: BLE001 - a dir() that fails lists nothing
        names = []
    for n in names:
        if n.startswith("_") or len(members) >= _HELP_MEMBERS:
            continue
        if not gate.allows_read(shown, n):
            continue
        try:
            v = gate.ga(shown, n)
        except Exception:  # noqa: BLE001 - refused when read: not shown
            continue
        if callable(v) or isinstance(v, (property, classmethod, staticmethod)):
            sig = _help_signature(v) if callable(v) else ""
            first = _help_doc(gate, v, first_line=True)
            members.append(f"    {n}{sig}" + (f"\n        {first}" if first else ""))
        else:
            members.append(f"    {n} = {_help_value(v)}")
    if members:
        lines += ["", "    Members:", "", *members]
    return "\n".join(lines).rstrip("\n") + "\n"


def _help_value(v: Any) -> str:
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001 - a repr that fails
        return f"<{type(v).__name__}>"
    return r if len(r) <= 80 else r[:77] + "..."


@dataclass(frozen=True)
class PrintRendering:
    """Render each print's values as bounded text as the print is made (the seed's
    ``PrintRendering``): ``result.rendered_prints`` holds the first ``limit`` prints,
    at most ``per_print`` characters each (its values share it, each at least 40,
    values past it counted as ``...N more``); ``result.print_count`` counts them all.
    Unlike the seed (reprobate, an extra package) the text is made here: a str as it
    prints, anything else by ``wire.safe_repr`` (containers walked, a few known types'
    own repr, other objects as ``<module.Type object>``), which never runs
    sandbox-defined code. Nothing is copied, and out of a worker only text crosses."""

    per_print: int = 2000
    limit: int = 200

    def __post_init__(self) -> None:
        for name in ("per_print", "limit"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"PrintRendering.{name} must be a positive int")


class _PrintSink:
    """One exec's prints (``print``, an echoed value, ``help``): their values as wire
    data (``snapshot_prints``) and/or rendered as bounded text as they are made
    (``render_prints``: ``(per_print, limit)``, the seed's ``PrintRendering``)."""

    __slots__ = ("values", "rendered", "count", "per_print", "limit")

    def __init__(self, snapshot: bool, rendering: tuple[int, int] | None) -> None:
        self.values: list | None = [] if snapshot else None
        self.rendered: list[str] = []
        self.count = 0
        self.per_print, self.limit = rendering if rendering is not None else (0, 0)

    def append(self, args: tuple) -> None:
        if self.values is not None:
            self.values.append(_print_values(args))
        if self.per_print:
            self.count += 1
            if len(self.rendered) < self.limit:
                self.rendered.append(render_print(args, self.per_print))


_MIN_ROOM = 8


def render_print(args: tuple, per_print: int) -> str:
    """One print's values, space-joined within ``per_print`` characters (the seed's
    budget: each value gets at least 40, values past it are counted as ``...N
    more``). A str is shown as it prints; anything else by ``wire.safe_repr``, which
    never runs sandbox-defined code (a sandbox class's ``__repr__`` is not called)."""
    from .wire import safe_repr

    count = len(args)
    share = max(40, per_print // max(1, count))
    parts: list[str] = []
    used = -1
    for i, value in enumerate(args):
        after = count - i - 1
        reserve = len(f" ...{after} more") if after else 0
        room = per_print - used - 1 - reserve
        if room < 1 or (parts and room < _MIN_ROOM):
            break
        budget = min(share, room)
        text = value if type(value) is str else safe_repr(value)
        if len(text) > budget:
            text = text[: max(0, budget - 3)] + "..."[:budget]
        parts.append(text)
        used += 1 + len(text)
    left = count - len(parts)
    if left:
        parts.append(f"...{left} more")
    return " ".join(parts)[:per_print]


def _print_values(args: tuple) -> tuple:
    """A print's values as wire data (never the live objects: the same at every level)."""
    from .wire import to_wire

    return tuple(to_wire(list(args)))


def _submodule_exists(mod, name: str) -> bool:
    """Whether the host could import ``name`` from the package ``mod`` (never imports it)."""
    real = getattr(mod, "__name__", None)
    if not isinstance(real, str) or not isinstance(getattr(mod, "__path__", None), list):
        return False
    if f"{real}.{name}" in sys.modules:
        return True
    import importlib.util

    try:
        return importlib.util.find_spec(f"{real}.{name}") is not None
    except (ImportError, ValueError):
        return False


def _ticking(fn, tick, name: str | None = None):
    def wrapper(*args, **kwargs):
        tick()
        return fn(*args, **kwargs)

    wrapper.__name__ = name or getattr(fn, "__name__", "function")
    wrapper.__qualname__ = wrapper.__name__
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper


# A ticking wrapper's code: help() shows the signature of the function it calls,
# read from its closure. (Not a table from wrapper to function: a weak-keyed one
# leaked every sandbox, since the function — a bound method of its Gate — holds
# the sandbox that holds the wrapper, so no key ever died.)
_TICKING_CODE = _ticking(abs, lambda: None).__code__


def _ticked_target(obj: Any) -> Any:
    """The function a ticking wrapper calls (obj itself if it is none)."""
    if getattr(obj, "__code__", None) is _TICKING_CODE:
        return obj.__closure__[_TICKING_CODE.co_freevars.index("fn")].cell_contents
    return obj


def _make_open(root: str, tick):
    root_real = os.path.realpath(root)

    def open(  # noqa: A001 - the sandbox's open()
        file,
        mode="r",
        buffering=-1,
        encoding=None,
        errors=None,
        newline=None,
        closefd=True,
        opener=None,
    ):
        """open() restricted to the sandbox filesystem root ("/" is the root)."""
        tick()
        if opener is not None or closefd is not True:
            raise PermissionError(errno.EACCES, "opener/closefd are not available in the sandbox")
        if isinstance(file, (int, bool)):
            raise PermissionError(errno.EACCES, "file descriptors cannot be opened in the sandbox")
        path = os.fspath(file)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            raise TypeError("expected str, bytes or os.PathLike object")
        if "\0" in path:
            raise ValueError("embedded null byte")
        rel = path.lstrip("/\\") if os.path.isabs(path) else path
        real = os.path.realpath(os.path.join(root_real, rel))
        if real != root_real and not real.startswith(root_real + os.sep):
            raise PermissionError(errno.EACCES, "path escapes the sandbox filesystem root", path)
        return io.open(real, mode, buffering, encoding, errors, newline)  # noqa: UP020 - the real open, whatever builtins.open has become

    return open


_echo_mode = rw.echo_mode


def _visible_name(k) -> bool:
    return (
        isinstance(k, str)
        and not k.startswith(rw.RESERVED_PREFIX)
        and k not in ("__builtins__", "__annotations__", "__warningregistry__")
    )


_HIDDEN_KEYS = frozenset({"__builtins__", "__name__", "__doc__", "__annotations__", "__warningregistry__"})


def _user_namespace(ns: dict) -> dict:
    return {
        k: v
        for k, v in ns.items()
        if k not in _HIDDEN_KEYS and not k.startswith(rw.RESERVED_PREFIX) and not issubclass(type(v), types.ModuleType)
    }  # (isinstance would run a sandbox hook)


def _is_internal(code) -> bool:
    fn = code.co_filename
    return os.path.dirname(fn) == _PKG_DIR


def _strip_internal(tb):
    """Drop the runtime's own frames (exec machinery, gates) from a traceback."""
    kept = []
    while tb is not None:
        if not _is_internal(tb.tb_frame.f_code):
            kept.append(tb)
        tb = tb.tb_next
    for a, b in itertools.pairwise(kept):
        a.tb_next = b
    if kept:
        kept[-1].tb_next = None
        return kept[0]
    return None


def _format_exception_only(e: BaseException) -> str:
    if isinstance(e, StValidationError):
        out = []
        if e.lineno is not None:
            out.append(f'  File "{SANDBOX_FILENAME}", line {e.lineno}\n')
            if e.text is not None:
                out.append(f"    {e.text.strip()}\n")
                indent = len(e.text) - len(e.text.lstrip())
                if e.col is not None and e.col >= indent:
                    out.append("    " + " " * (e.col - indent) + "^\n")
        out.append(f"{type(e).__name__}: {e.message}\n")
        return "".join(out)
    return "".join(_tb.format_exception_only(type(e), e))


__all__ = ["GuestSession", "ExecResult", "BUILTIN_NAMES"]
