"""Host time: what an exec's timeout does not count (the seed's ``host_time``).

The timeout bounds the sandboxed code, not the host it calls. Time spent inside
``host_time()`` — or in a call of a function granted with ``policy.fn(...,
host_time=True)``, or of a host object's method through a proxy (``rpc``) — moves the
exec's deadline later by exactly as long as it took. The tick limit still counts the
code that runs, and ``cancel()`` still stops it, so a host call that never returns is
the embedder's to bound.

At ``isolation="none"`` the block runs on the exec's own thread and the exec's
clock is paused directly. At the worker levels a granted function runs here in the
host while the worker waits: the binding measures the host time of the call and
sends it with the answer (``host_time``, docs/protocol.md), and the engine moves its
deadline and the worker its clock by that much (never more than the call waited).
Overlapping blocks count once (nesting is tracked per thread).
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_local = threading.local()


class Clock:
    """One exec's host-time account on one thread: ``refund(seconds)`` is called when
    the outermost host-time block ends."""

    __slots__ = ("refund", "depth", "t0", "total")

    def __init__(self, refund: Callable[[float], None] | None = None) -> None:
        self.refund = refund
        self.depth = 0
        self.t0 = 0.0
        self.total = 0.0

    def enter(self) -> None:
        if self.depth == 0:
            self.t0 = time.monotonic()
        self.depth += 1

    def exit(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            dt = time.monotonic() - self.t0
            self.total += dt
            if self.refund is not None:
                self.refund(dt)


@contextmanager
def use(clock: Clock | None) -> Iterator[Clock | None]:
    """Make ``clock`` this thread's account while the block runs."""
    prev = getattr(_local, "clock", None)
    _local.clock = clock
    try:
        yield clock
    finally:
        _local.clock = prev


@contextmanager
def host_time() -> Iterator[None]:
    """Do not count the time inside this block against the running exec's timeout.
    A no-op outside an exec (or on a thread that is not the exec's)."""
    clock = getattr(_local, "clock", None)
    if clock is None:
        yield
        return
    clock.enter()
    try:
        yield
    finally:
        clock.exit()


def wrap_host_time(fn: Any) -> Any:
    """``fn`` whose calls are host time (awaits included for a coroutine function)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            with host_time():
                return await fn(*args, **kwargs)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with host_time():
            return fn(*args, **kwargs)

    return wrapper


def credit(seconds: float) -> None:
    """Host time measured elsewhere (a worker's host call, answered with the host's
    measure): refund it to this thread's exec, unless a block here counts it already."""
    clock = getattr(_local, "clock", None)
    if clock is not None and clock.depth == 0 and clock.refund is not None and seconds > 0:
        clock.total += seconds
        clock.refund(seconds)


__all__ = ["host_time", "wrap_host_time", "credit", "Clock", "use"]
