"""Processes you can talk to: ``Sandbox.popen`` and ``Sandbox.apopen``.

A popen'd run's piped streams are the kernel's pipes, handed to this process: what
the program writes is read here straight from its pipe (nothing is copied or kept by
the engine), so streaming costs what a pipe costs. ``wait``, ``kill``, ``pause`` and
``resume`` go through the engine by the process's id (docs/protocol.md, "processes").
"""

from __future__ import annotations

import asyncio
import enum
import os
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from . import _native
from ._errors import SandboxClosed, SandtrapError
from ._result import ErrorInfo, ExitReason, Result

if TYPE_CHECKING:
    from ._sandbox import Sandbox, _Handle


class StdioMode(str, enum.Enum):
    """What one stream of a popen'd program is connected to (or pass a file
    descriptor, an ``int``, or an object with ``fileno()``; the program gets a
    duplicate and the caller keeps its own)."""

    PIPED = "piped"  #: a pipe whose other end is ``Process.stdin``/``stdout``/``stderr``
    INHERIT = "inherit"  #: this process's own fd 0, 1 or 2
    NULL = "null"  #: /dev/null
    CAPTURE = "capture"  #: stdout, stderr: kept by the engine (up to max_output), in the Result

    def __str__(self) -> str:
        return self.value


PIPED = StdioMode.PIPED
INHERIT = StdioMode.INHERIT
NULL = StdioMode.NULL
CAPTURE = StdioMode.CAPTURE

StdioSpec = StdioMode | int | BinaryIO | Any | None

_WAIT_SLICE = 0.25  # seconds of one engine wait from the main thread (Ctrl-C stays live)


def stdio_value(name: str, v: Any, probs: list[Any]) -> Any:
    """The engine's value of one stream's mode."""
    from ._errors import Problem

    if v is None:
        return None
    if isinstance(v, StdioMode):
        if v is StdioMode.CAPTURE and name == "stdin":
            probs.append(Problem(name, "CAPTURE is for stdout and stderr"))
        return v.value
    if v is subprocess.PIPE:
        return "piped"
    if v is subprocess.DEVNULL:
        return "null"
    if isinstance(v, bool):
        probs.append(Problem(name, "want a StdioMode or a file descriptor, got a bool"))
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)) and name == "stdin":
        return bytes(v)
    fileno = getattr(v, "fileno", None)
    if callable(fileno):
        try:
            return int(cast(Any, fileno)())
        except (OSError, ValueError) as e:
            probs.append(Problem(name, f"{v!r} has no file descriptor: {e}"))
            return None
    if isinstance(v, str):
        try:
            return StdioMode(v).value
        except ValueError:
            pass
    probs.append(Problem(name, f"want a StdioMode, a file descriptor or a file, got {type(v).__name__}"))
    return None


def _closed_result() -> Result:
    return Result(
        success=False,
        error=ErrorInfo("closed", "the sandbox was closed; its processes were killed"),
        reason=ExitReason.CLOSED,
    )


class _ProcessCore:
    """The engine's process: its id and the calls on it (shared by both APIs)."""

    __slots__ = (
        "handle",
        "id",
        "pid",
        "init_pid",
        "pause_via",
        "pause_note",
        "result",
        "_lock",
        "_finalizer",
        "__weakref__",
    )

    def __init__(self, handle: _Handle, resp: dict[str, Any]) -> None:
        self.handle: _Handle = handle
        self.id: int = int(resp["process"])
        self.pid: int = int(resp.get("pid") or 0)
        self.init_pid: int = int(resp.get("init_pid") or 0)
        self.pause_via: str = str(resp.get("pause") or "unavailable")
        self.pause_note: str | None = resp.get("pause_note")
        self.result: Result | None = None
        self._lock = threading.Lock()
        # a Process dropped unwaited: its tree is killed (nothing of a sandbox outlives
        # its owner), and the engine forgets it
        self._finalizer = weakref.finalize(self, _abandon, handle, self.id)

    def call(self, op: str, **kw: Any) -> dict[str, Any] | None:
        """One engine call on this process; None when the sandbox is gone."""
        ptr = self.handle.try_use()
        if not ptr or self.handle.closed:
            if ptr:
                self.handle.release()
            return None
        try:
            rc, resp = _native.sandbox_exec(ptr, _native.pack({"op": op, "process": self.id, **kw}))
        finally:
            self.handle.release()
        if rc != _native.OK or resp is None:
            err = _native.status_error(rc, resp)
            if isinstance(err, SandboxClosed):
                return None
            raise err
        return resp

    def wait_once(self, timeout: float | None) -> Result | None:
        """One engine wait (None: still running after timeout)."""
        if self.result is not None:
            return self.result
        try:
            resp = self.call("process_wait", timeout=timeout)
        except SandtrapError as e:
            with self._lock:
                if self.result is not None:  # another thread got it
                    return self.result
            raise e
        with self._lock:
            if self.result is not None:
                return self.result
            if resp is None:
                self.result = _closed_result()
            elif resp.get("done"):
                self.result = Result.from_response(resp.get("result") or {})
            else:
                return None
            self._finalizer.detach()
            return self.result

    def wait(self, timeout: float | None) -> Result | None:
        """Wait (interruptibly from the main thread) up to timeout (None: no limit)."""
        if self.result is not None:
            return self.result
        if threading.current_thread() is not threading.main_thread():
            return self.wait_once(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, max(0.0, deadline - time.monotonic()))
            r = self.wait_once(left)
            if r is not None or (deadline is not None and time.monotonic() >= deadline):
                return r

    def kill(self) -> None:
        if self.result is None:
            self.call("process_kill")

    def pause(self) -> None:
        if self.result is None:
            self.call("process_pause")

    def resume(self) -> None:
        if self.result is None:
            self.call("process_resume")

    def checkpoint(self, save_fn: Any, path: Any) -> Any:
        from ._checkpoint import Checkpoint, staging_dir

        state = None if save_fn is None else save_fn()
        if state is not None and not isinstance(state, (bytes, bytearray, memoryview)):
            raise TypeError(f"save_fn must return bytes (or None), got {type(state).__name__}")
        staged = path is None
        path = staging_dir() if staged else Path(path).absolute()
        resp = self.call("checkpoint", dir=str(path), app_state=None if state is None else bytes(state))
        if resp is None:
            raise SandboxClosed("the sandbox is closed")
        import json

        meta = json.loads((path / "checkpoint.json").read_text())  # the file's, exactly
        return Checkpoint(path, meta, None if state is None else bytes(state), staged=staged)

    def send_signal(self, sig: int, tree: bool) -> int:
        if self.result is not None:
            return 0
        resp = self.call("process_signal", signal=int(sig), to="tree" if tree else "leader")
        return 0 if resp is None else int(resp.get("sent") or 0)

    def start(self) -> None:
        from ._errors import InvalidState

        try:
            self.call("process_start")
        except SandtrapError as e:
            raise InvalidState(e.message) from None


def _abandon(handle: _Handle, pid: int) -> None:
    ptr = handle.try_use()
    if not ptr:
        return
    try:
        if not handle.closed:
            _native.sandbox_exec(ptr, _native.pack({"op": "process_kill", "process": pid}))
            _native.sandbox_exec(ptr, _native.pack({"op": "process_wait", "process": pid, "timeout": 5.0}))
    except Exception:  # noqa: BLE001 - a finalizer must not raise
        pass
    finally:
        handle.release()


def _wrap(fd: int | None, mode: str, bufsize: int, text: bool, encoding: str | None, errors: str | None) -> Any:
    if fd is None:
        return None
    if text:
        return open(fd, mode, buffering=bufsize if bufsize != 0 else -1, encoding=encoding, errors=errors)
    return open(fd, mode + "b", buffering=bufsize)


class Process:
    """A program running in a sandbox that you talk to (``Sandbox.popen``).

    ``stdin``, ``stdout`` and ``stderr`` are file objects for the streams opened
    ``PIPED`` (``None`` for the others): buffered binary files, or text files with
    ``text=True``. ``pid`` is the program's pid in this machine's pid namespace
    (``init_pid`` is its parent, the run's pid 1, whose pid namespace holds every
    process the program starts).

    ``wait(timeout=)`` returns the :class:`Result` (``reason``, ``exit_code``, the
    ``CAPTURE``'d streams, usage, the isolation report); ``kill()`` kills the whole
    process tree (idempotent); ``pause()``/``resume()`` stop and continue every
    process of it (``pause_via`` says how: ``"freezer"``, which nothing inside can
    undo; ``"sigstop"`` on a host without a cgroup v2 freezer, ``pause_note`` says
    why; ``"unavailable"``); ``send_signal(sig, tree=False)`` signals the program or
    its whole tree. As a context manager it closes ``stdin``, waits (killing the tree
    first when the block raised), and closes the streams. A ``Process`` dropped
    without being waited for has its tree killed. Limits and the timeout apply as
    for ``run``.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        handle: _Handle,
        args: Sequence[Any],
        resp: dict[str, Any],
        *,
        text: bool = False,
        encoding: str | None = None,
        errors: str | None = None,
        bufsize: int = -1,
    ) -> None:
        self._core: _ProcessCore = _ProcessCore(handle, resp)
        self.sandbox: Sandbox = sandbox
        self.args: list[Any] = list(args)
        self.pid: int = self._core.pid
        self.init_pid: int = self._core.init_pid
        self.pause_via: str = self._core.pause_via
        self.pause_note: str | None = self._core.pause_note
        self.stdin: Any = _wrap(resp.get("stdin"), "w", bufsize, text, encoding, errors)
        self.stdout: Any = _wrap(resp.get("stdout"), "r", bufsize, text, encoding, errors)
        self.stderr: Any = _wrap(resp.get("stderr"), "r", bufsize, text, encoding, errors)

    def __repr__(self) -> str:
        state = "running" if self._core.result is None else str(self._core.result.reason)
        return f"<sandtrap.Process pid={self.pid} {state} {self.args!r}>"

    @property
    def result(self) -> Result | None:
        """The Result once the program ended and was waited for (else None)."""
        return self._core.result

    @property
    def returncode(self) -> int | None:
        """``subprocess``'s returncode once waited for: the exit code, or minus the
        signal (``-9`` after ``kill()``)."""
        r = self._core.result
        return None if r is None else r.returncode

    def poll(self) -> Result | None:
        """The Result if the program ended, else None (never blocks)."""
        return self._core.wait_once(0.0)

    def wait(self, timeout: float | None = None) -> Result:
        """Wait for the program to end and return its :class:`Result`; raises
        ``subprocess.TimeoutExpired`` after ``timeout`` seconds (the program keeps
        running). Ctrl-C interrupts the wait (the program keeps running)."""
        r = self._core.wait(timeout)
        if r is None:
            raise subprocess.TimeoutExpired(self.args, cast(float, timeout))
        return r

    def kill(self) -> None:
        """Kill the program and every process it started (its pid namespace, setsid
        daemons included). Idempotent; a no-op once it ended."""
        self._core.kill()

    terminate = kill

    def pause(self) -> None:
        """Stop every process of the run (docs/security.md, "pause"); the timeout
        keeps counting. With ``pause_via == "freezer"`` (its own cgroup v2) no
        process, inside or out, can undo it; with ``"sigstop"`` a SIGCONT can."""
        self._core.pause()

    def send_signal(self, sig: int, *, tree: bool = False) -> int:
        """Send ``sig`` to the program (``tree=True``: to every process of the run
        but its pid 1, sandtrap-init) and return how many processes it reached (0
        once it ended). SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU and SIGCONT are refused
        (:class:`InvalidRequest`: use ``pause``/``resume``), as is ``tree`` without
        a pid namespace. A signal never reaches a process outside the run."""
        return self._core.send_signal(sig, tree)

    def checkpoint(
        self, save_fn: Callable[[], bytes] | None = None, *, path: str | os.PathLike[str] | None = None
    ) -> Any:
        """An application checkpoint of this process (see :class:`Checkpoint`):
        ``save_fn()``'s bytes, what the program was started with, and the list of
        what is not captured. The run is paused while its tree is inventoried. With
        ``path`` it is written there (which must not exist), else kept aside until
        ``Checkpoint.save(name)``."""
        return self._core.checkpoint(save_fn, path)

    def resume(self) -> None:
        """Continue every process of a paused run."""
        self._core.resume()

    def start(self) -> None:
        """Let a program made by ``create`` (``popen(..., start=False)``) exec.
        Raises :class:`InvalidState` when it was not parked or already started."""
        self._core.start()

    def communicate(
        self,
        input: bytes | str | None = None,  # noqa: A002 - subprocess's name for it
        timeout: float | None = None,
    ) -> tuple[Any, Any]:
        """Send ``input`` to stdin (then close it), read stdout and stderr to their
        end at the same time (so neither pipe can fill and block the program), wait,
        and return ``(stdout, stderr)`` (``None`` for streams not piped)."""
        out: dict[str, Any] = {}

        def reader(name: str, f: Any) -> None:
            try:
                out[name] = f.read()
            finally:
                f.close()

        threads = [
            threading.Thread(target=reader, args=(n, f), daemon=True)
            for n, f in (("stdout", self.stdout), ("stderr", self.stderr))
            if f is not None
        ]
        for t in threads:
            t.start()
        if self.stdin is not None:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(self.args, cast(float, timeout))
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out.get("stdout"), out.get("stderr")

    def _close_streams(self) -> None:
        for f in (self.stdin, self.stdout, self.stderr):
            if f is not None:
                try:
                    f.close()
                except (OSError, ValueError):
                    pass

    def __enter__(self) -> Process:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        try:
            if self.stdin is not None:
                try:
                    self.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass
            if exc_type is not None:
                self.kill()
            self.wait()
        finally:
            self._close_streams()


class AsyncProcess:
    """``Process`` for asyncio (``await Sandbox.apopen(...)``): ``stdin`` is an
    ``asyncio.StreamWriter``, ``stdout`` and ``stderr`` ``asyncio.StreamReader``s, and
    ``await wait()`` runs the engine's wait on a worker thread. ``async with`` closes
    stdin, waits (killing the tree when the block raised) and closes the streams."""

    def __init__(self, core: _ProcessCore, args: Sequence[Any]) -> None:
        self._core: _ProcessCore = core
        self.args: list[Any] = list(args)
        self.pid: int = core.pid
        self.init_pid: int = core.init_pid
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []

    @classmethod
    async def _start(cls, core: _ProcessCore, args: Sequence[Any], resp: dict[str, Any]) -> AsyncProcess:
        loop = asyncio.get_running_loop()
        self = cls(core, args)
        for name in ("stdout", "stderr"):
            fd = resp.get(name)
            if fd is None:
                continue
            reader = asyncio.StreamReader(limit=2**16, loop=loop)

            def protocol(r: asyncio.StreamReader = reader) -> asyncio.StreamReaderProtocol:
                return asyncio.StreamReaderProtocol(r)

            rtr, _ = await loop.connect_read_pipe(protocol, open(fd, "rb", 0))  # noqa: SIM115 - the transport owns it
            self._transports.append(rtr)
            setattr(self, name, reader)
        fd = resp.get("stdin")
        if fd is not None:
            wtr, proto = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()),
                open(fd, "wb", 0),  # noqa: SIM115 - the transport owns it
            )
            self._transports.append(wtr)
            self.stdin = asyncio.StreamWriter(wtr, proto, None, loop)
        return self

    @property
    def result(self) -> Result | None:
        return self._core.result

    @property
    def returncode(self) -> int | None:
        r = self._core.result
        return None if r is None else r.returncode

    def poll(self) -> Result | None:
        return self._core.wait_once(0.0)

    async def wait(self, timeout: float | None = None) -> Result:
        """Wait without blocking the event loop; raises ``asyncio.TimeoutError``
        after ``timeout`` (the program keeps running)."""
        from ._sandbox import _async_executor

        if self._core.result is not None:
            return self._core.result
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = 1.0 if deadline is None else min(1.0, max(0.0, deadline - loop.time()))
            r = await loop.run_in_executor(_async_executor(), self._core.wait_once, left)
            if r is not None:
                return r
            if deadline is not None and loop.time() >= deadline:
                raise asyncio.TimeoutError()

    def kill(self) -> None:
        self._core.kill()

    terminate = kill

    def pause(self) -> None:
        self._core.pause()

    def resume(self) -> None:
        self._core.resume()

    def send_signal(self, sig: int, *, tree: bool = False) -> int:
        return self._core.send_signal(sig, tree)

    @property
    def pause_via(self) -> str:
        return self._core.pause_via

    def _close(self) -> None:
        for tr in self._transports:
            tr.close()

    async def __aenter__(self) -> AsyncProcess:
        return self

    async def __aexit__(self, exc_type: object, *rest: object) -> None:
        try:
            if self.stdin is not None:
                self.stdin.close()
            if exc_type is not None:
                self.kill()
            await self.wait()
        finally:
            self._close()


__all__ = ["StdioMode", "Process", "AsyncProcess", "PIPED", "INHERIT", "NULL", "CAPTURE"]


def _popen_request(
    sb: Sandbox,
    argv: Any,
    stdin: Any,
    stdout: Any,
    stderr: Any,
    timeout: Any,
    env: Any,
    cwd: Any,
    max_output: Any,
    start: bool = True,
) -> tuple[_Handle, dict[str, Any]]:
    """Start a popen'd run: (the sandbox's handle, the engine's response)."""
    from ._sandbox import _raise_request, _run_fields

    probs: list[Any] = []
    req: dict[str, Any] = {"op": "popen"}
    if not start:
        req["start"] = False
    req.update(_run_fields(argv, timeout, env, cwd, max_output, probs))
    for name, v in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
        val = stdio_value(name, v, probs)
        if val is not None:
            req[name] = val
    if probs:
        _raise_request(probs)
    h = sb._live()
    h.acquire()
    try:
        rc, resp = _native.sandbox_exec(h.ptr, _native.pack(req))
    finally:
        h.release()
    if rc != _native.OK or resp is None:
        raise _native.status_error(rc, resp)
    return h, resp


class ProcessMixin:
    """Sandbox's methods for processes you talk to, and its one-process lifecycle
    (``spawn``/``wait``/``kill``/``pause``/``resume``/``pid``)."""

    _proc: Process | None = None

    def popen(
        self,
        argv: Any,
        *,
        stdin: StdioSpec = None,
        stdout: StdioSpec = None,
        stderr: StdioSpec = None,
        timeout: float | None = None,
        env: Any = None,
        cwd: Any = None,
        max_output: int | str | None = None,
        text: bool = False,
        encoding: str | None = None,
        errors: str | None = None,
        bufsize: int = -1,
        start: bool = True,
    ) -> Process:
        """Start ``argv`` in the sandbox and return it running as a :class:`Process`.

        Each of ``stdin``, ``stdout``, ``stderr`` is a :class:`StdioMode` (``PIPED``:
        a pipe you read or write through ``Process.stdin``/``stdout``/``stderr``;
        ``INHERIT``; ``NULL``; ``CAPTURE``, stdout and stderr only: kept by the engine
        up to ``max_output`` and returned in the Result), a file descriptor or a file
        (the program gets a duplicate), or ``None``: ``NULL`` for stdin, ``INHERIT`` for
        stdout and stderr. ``stdin`` may also be bytes, which the engine feeds.
        ``subprocess.PIPE`` and ``subprocess.DEVNULL`` are accepted. ``text=True``
        opens the pipes as text files. ``start=False`` makes the program — its pid
        known, its confinement in place — and parks it before its ``execve`` until
        ``Process.start()`` (the timeout counts from now).

        Raises :class:`NotFound`, :class:`SpawnFailed` or :class:`IsolationUnavailable`
        when the program could not start (as ``subprocess.Popen`` raises), and
        :class:`InvalidRequest` for bad arguments (every problem at once)."""
        h, resp = _popen_request(
            cast("Sandbox", self), argv, stdin, stdout, stderr, timeout, env, cwd, max_output, start
        )
        return Process(
            cast("Sandbox", self), h, argv, resp, text=text, encoding=encoding, errors=errors, bufsize=bufsize
        )

    async def apopen(
        self,
        argv: Any,
        *,
        stdin: StdioSpec = None,
        stdout: StdioSpec = None,
        stderr: StdioSpec = None,
        timeout: float | None = None,
        env: Any = None,
        cwd: Any = None,
        max_output: int | str | None = None,
    ) -> AsyncProcess:
        """``popen`` for asyncio: the piped streams are ``asyncio.StreamReader`` /
        ``StreamWriter``, and nothing blocks the event loop."""
        from ._sandbox import _async_executor

        loop = asyncio.get_running_loop()
        h, resp = await loop.run_in_executor(
            _async_executor(),
            lambda: _popen_request(cast("Sandbox", self), argv, stdin, stdout, stderr, timeout, env, cwd, max_output),
        )
        return await AsyncProcess._start(_ProcessCore(h, resp), argv, resp)

    # -- the sandbox's own process (lifecycle) ------------------------------------

    def spawn(self, argv: Any, **popen_args: Any) -> Process:
        """Start ``argv`` as this sandbox's process (``popen`` arguments apply); then
        ``wait``, ``kill``, ``pause``, ``resume`` and ``pid`` act on it. Raises
        :class:`InvalidState` while the previous one still runs."""
        from ._errors import InvalidState

        cur = self._proc
        if cur is not None and cur.poll() is None:
            raise InvalidState(f"the sandbox's process (pid {cur.pid}) is still running: wait() or kill() it first")
        self._proc = self.popen(argv, **popen_args)
        return self._proc

    def create(self, argv: Any, **popen_args: Any) -> Process:
        """``spawn`` that parks the program before its ``execve``: its pid
        (``sb.pid``) is known and its confinement in place, so things can be set up
        around it; ``start()`` lets it run."""
        return self.spawn(argv, start=False, **popen_args)

    def start(self) -> None:
        """Let the program ``create`` made run. Raises :class:`InvalidState` without
        a created program (or once it started)."""
        from ._errors import InvalidState

        cur = self._proc
        if cur is None or cur.poll() is not None:
            raise InvalidState("start() without create(): the sandbox has no parked program")
        cur.start()

    def _current(self, what: str) -> Process:
        from ._errors import InvalidState

        if self._proc is None:
            raise InvalidState(f"{what}: the sandbox has no process (spawn() one)")
        return self._proc

    @property
    def pid(self) -> int | None:
        """The pid of the sandbox's process (``spawn``), None before one."""
        return None if self._proc is None else self._proc.pid

    def wait(self, timeout: float | None = None) -> Result:
        """Wait for the sandbox's process (``spawn``) and return its Result."""
        return self._current("wait").wait(timeout)

    def kill(self) -> None:
        """Kill the sandbox's process and its whole tree (idempotent)."""
        self._current("kill").kill()

    def pause(self) -> None:
        """Stop every process of the sandbox's process tree."""
        self._current("pause").pause()

    def resume(self) -> None:
        """Continue a paused process tree."""
        self._current("resume").resume()

    def send_signal(self, sig: int, *, tree: bool = False) -> int:
        """Signal the sandbox's process (``tree=True``: its whole tree); see
        :meth:`Process.send_signal`."""
        return self._current("send_signal").send_signal(sig, tree=tree)

    def checkpoint(
        self, save_fn: Callable[[], bytes] | None = None, *, path: str | os.PathLike[str] | None = None
    ) -> Any:
        """An application checkpoint of the sandbox's process (``spawn``): see
        :meth:`Process.checkpoint` and :class:`Checkpoint`."""
        return self._current("checkpoint").checkpoint(save_fn, path=path)

    def restore(
        self,
        cp: Any,
        *,
        stdin: StdioSpec = None,
        stdout: StdioSpec = None,
        stderr: StdioSpec = None,
        timeout: float | None = None,
        text: bool = False,
        restore_fn: Callable[[bytes], Any] | None = None,
    ) -> Process:
        """Start the checkpoint's program again as the sandbox's process (as
        ``spawn``), its ``app_state`` on fd 3 (``SANDTRAP_CHECKPOINT_FD``,
        ``SANDTRAP_CHECKPOINT_SIZE``); ``restore_fn`` (if given) gets the state here
        too. ``cp`` is a :class:`Checkpoint` or its directory. Fails closed: a
        checkpoint taken under another policy raises :class:`PolicyError`, one whose
        files changed or whose format is unknown :class:`InvalidRequest`."""
        from ._errors import InvalidState
        from ._sandbox import _raise_request

        cur = self._proc
        if cur is not None and cur.poll() is None:
            raise InvalidState(f"the sandbox's process (pid {cur.pid}) is still running: wait() or kill() it first")
        path = str(getattr(cp, "path", cp))
        probs: list[Any] = []
        req: dict[str, Any] = {"op": "restore", "dir": os.path.abspath(path)}
        if timeout is not None:
            req["timeout"] = timeout
        for name, v in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
            val = stdio_value(name, v, probs)
            if val is not None:
                req[name] = val
        if probs:
            _raise_request(probs)
        sb = cast("Sandbox", self)
        h = sb._live()
        h.acquire()
        try:
            rc, resp = _native.sandbox_exec(h.ptr, _native.pack(req))
        finally:
            h.release()
        if rc != _native.OK or resp is None:
            raise _native.status_error(rc, resp)
        if restore_fn is not None and resp.get("app_state") is not None:
            restore_fn(resp["app_state"])
        argv = list(resp["checkpoint"]["process"]["argv"])
        self._proc = Process(sb, h, argv, resp, text=text)
        return self._proc
