"""Preset handlers for common interception patterns (import explicitly)::

    from sandtrap.presets import PathDenyHandler, COMMON_PATH_SYSCALLS
    sb.run_with_handlers(cmd, [(s, PathDenyHandler(deny=["*/.ssh/*"])) for s in COMMON_PATH_SYSCALLS])

Paths are the supervisor's copy of the call's path argument, as the program wrote it
(relative paths are not resolved): a deny list is a tightening on top of Landlock,
which judges the file actually reached.
"""

from __future__ import annotations

import errno as _errno
import fnmatch
import logging
from collections.abc import Callable

from ._handlers import ExceptionPolicy, Handler, HandlerCtx, NotifAction

__all__ = ["COMMON_PATH_SYSCALLS", "AuditPathsHandler", "PathDenyHandler", "PathAllowHandler", "LogSyscallsHandler"]

# Path-bearing syscalls a file handler is usually registered on. execveat is in the
# deny list of every sandbox (a memfd could be executed): registering a handler on
# it is an error, so it is not here.
COMMON_PATH_SYSCALLS: list[str] = [
    "openat",
    "unlinkat",
    "newfstatat",
    "statx",
    "faccessat",
    "readlinkat",
    "mkdirat",
    "execve",
]


class AuditPathsHandler(Handler):
    """Call ``callback(path, ctx)`` for each call; never changes the outcome
    (``on_exception=CONTINUE``)."""

    on_exception = ExceptionPolicy.CONTINUE

    def __init__(self, callback: Callable[[str | None, HandlerCtx], None], max_len: int = 4096) -> None:
        self.callback = callback
        self.max_len = max_len

    def handle(self, ctx: HandlerCtx) -> NotifAction:
        self.callback(ctx.read_path(max_len=self.max_len), ctx)
        return NotifAction.continue_()


class PathDenyHandler(Handler):
    """Deny (``errno``, EPERM) calls whose path matches an ``fnmatch`` pattern of
    ``deny`` (either path of a rename, link or symlink); a path that cannot be read
    is left to the other rules. Fails closed (``on_exception=KILL``)."""

    on_exception = ExceptionPolicy.KILL

    def __init__(self, deny: list[str], errno: int = _errno.EPERM, max_len: int = 4096) -> None:
        if not isinstance(deny, list):
            raise TypeError(f"deny must be a list of str patterns, got {type(deny).__name__}")
        self.deny = deny
        self.errno = errno
        self.max_len = max_len

    def handle(self, ctx: HandlerCtx) -> NotifAction:
        for path in ctx.paths(max_len=self.max_len):  # both of a rename, link, symlink
            if path is None:
                continue
            for pattern in self.deny:
                if fnmatch.fnmatchcase(path, pattern):
                    return NotifAction.errno(self.errno)
        return NotifAction.continue_()


class PathAllowHandler(Handler):
    """Allow only paths matching a pattern of ``allow`` (others: ``errno``, EACCES,
    also when the path cannot be read; both paths of a two-path call). fstat is newfstatat with the empty path
    (AT_EMPTY_PATH): allow ``""`` too when registering on newfstatat or statx."""

    on_exception = ExceptionPolicy.KILL

    def __init__(self, allow: list[str], errno: int = _errno.EACCES, max_len: int = 4096) -> None:
        if not isinstance(allow, list):
            raise TypeError(f"allow must be a list of str patterns, got {type(allow).__name__}")
        self.allow = allow
        self.errno = errno
        self.max_len = max_len

    def handle(self, ctx: HandlerCtx) -> NotifAction:
        for path in ctx.paths(max_len=self.max_len):  # every path of the call must be allowed
            if path is None or not any(fnmatch.fnmatchcase(path, p) for p in self.allow):
                return NotifAction.errno(self.errno)
        return NotifAction.continue_()


class LogSyscallsHandler(Handler):
    """Log one line per call (``logging.getLogger("sandtrap.audit").info`` unless
    ``logger`` is given); never changes the outcome."""

    on_exception = ExceptionPolicy.CONTINUE

    def __init__(self, logger: Callable[[str], None] | None = None) -> None:
        self.logger = logger or logging.getLogger("sandtrap.audit").info

    def handle(self, ctx: HandlerCtx) -> NotifAction:
        self.logger(f"syscall={ctx.syscall} nr={ctx.syscall_nr} pid={ctx.pid} args={ctx.args}")
        return NotifAction.continue_()
