"""Capture of what host code writes to ``sys.stdout``/``sys.stderr`` during an exec.

While at least one exec runs in this process, ``sys.stdout`` and ``sys.stderr`` are
routers (installed when the first exec starts, put back when the last one ends, if
nobody replaced them meanwhile). A write goes to the capture of the exec running on
the writing thread, or — for a thread started while exactly one exec runs (sandbox
code with ``threading`` granted, a library's worker thread) — to that exec's; else
to the stream that was there before. So granted host functions, library code
(``df.info()``), ``warnings`` and threads land in ``result.stdout``/``stderr`` in
order with the sandbox's prints. ``passthrough_stdio()`` lets host code write to the
real streams instead.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, cast

_lock = threading.Lock()
_routes: dict[int, tuple[Any, Any]] = {}  # thread ident -> (stdout capture, stderr capture)
_running: list[tuple[set[int], tuple[Any, Any]]] = []  # per running exec: threads alive at its start
_saved: dict[str, Any] = {}
_local = threading.local()


class _Router:
    __slots__ = ("_which", "_real")

    def __init__(self, which: int, real: TextIO) -> None:
        self._which = which
        self._real = real

    def _target(self) -> Any:
        if getattr(_local, "passthrough", 0):
            return None
        ident = threading.get_ident()
        caps = _routes.get(ident)
        if caps is None and len(_running) == 1:
            known, c = _running[0]
            if ident not in known:
                caps = c
        return None if caps is None else caps[self._which]

    def write(self, s: object) -> int:
        cap = self._target()
        if cap is None:
            return self._real.write(s)  # type: ignore[arg-type]  # what the real stream takes
        if not isinstance(s, str):
            s = str(s)
        return cast(int, cap.write(s))  # what the capture returns, unchanged

    def writelines(self, lines: Iterable[object]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._target() is None:
            self._real.flush()

    def isatty(self) -> bool:
        return False if self._target() is not None else self._real.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def begin(out_cap: Any, err_cap: Any) -> Any:
    """An exec starts on this thread: route its writes (and its new threads')."""
    ident = threading.get_ident()
    caps = (out_cap, err_cap)
    known = {t.ident for t in threading.enumerate() if t.ident is not None}
    entry = (known, caps)
    with _lock:
        if not _running:
            _saved["stdout"], _saved["stderr"] = sys.stdout, sys.stderr
            sys.stdout = _Router(0, sys.stdout)
            sys.stderr = _Router(1, sys.stderr)
        _running.append(entry)
        prev = _routes.get(ident)
        _routes[ident] = caps
    return (ident, prev, entry)


def end(token: Any) -> None:
    ident, prev, entry = token
    with _lock:
        if prev is None:
            _routes.pop(ident, None)
        else:
            _routes[ident] = prev
        try:
            _running.remove(entry)
        except ValueError:
            pass
        if not _running:
            if isinstance(sys.stdout, _Router):
                sys.stdout = _saved.get("stdout", sys.__stdout__)
            if isinstance(sys.stderr, _Router):
                sys.stderr = _saved.get("stderr", sys.__stderr__)
            _saved.clear()


@contextlib.contextmanager
def passthrough_stdio() -> Iterator[None]:
    """Host code inside this block writes to the real ``sys.stdout``/``sys.stderr``,
    not to the running exec's capture (the seed's ``sandtrap.passthrough_stdio``)."""
    _local.passthrough = getattr(_local, "passthrough", 0) + 1
    try:
        yield
    finally:
        _local.passthrough -= 1


__all__ = ["begin", "end", "passthrough_stdio"]
