"""Exceptions raised by sandtrap.

Every exception is a :class:`SandtrapError` carrying ``kind`` (the engine's stable
status name, see docs/protocol.md) and ``code`` (the C status code, a negative
integer). A run whose *program* fails, times out, is cancelled, is missing or hits a
limit does not raise: its fate is in the returned :class:`~sandtrap.Result`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "Problem",
    "SandtrapError",
    "InvalidArgument",
    "InvalidRequest",
    "PolicyError",
    "IsolationUnavailable",
    "NotFound",
    "SpawnFailed",
    "ForkedChildError",
    "SandboxClosed",
    "InternalError",
    "error_for",
]


class Problem(str):
    """One problem of a policy or a request, as the engine reports it: ``field``,
    the field (keyword, request key) it is about, ``""`` when it is about the input
    as a whole, and ``message``, what is wrong with it. As a ``str`` it reads
    ``"field: message"``."""

    field: str
    message: str

    def __new__(cls, field: str, message: str) -> Problem:
        self = super().__new__(cls, f"{field}: {message}" if field else message)
        self.field = field
        self.message = message
        return self

    def __repr__(self) -> str:
        return f"Problem(field={self.field!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (Problem, (self.field, self.message))

    @classmethod
    def from_engine(cls, p: Any) -> Problem:
        """A problem of an engine response ({field, message})."""
        if isinstance(p, dict):
            return cls(str(p.get("field") or ""), str(p.get("message") or ""))
        return cls("", str(p))


def problems_message(what: str, problems: list[Problem]) -> str:
    """The human message of a list of problems, as the engine writes it:
    ``"what: problem"``, or ``"what (N problems):"`` and one ``"- problem"`` a line."""
    if len(problems) == 1:
        return f"{what}: {problems[0]}"
    return f"{what} ({len(problems)} problems):\n" + "\n".join(f"- {p}" for p in problems)


class SandtrapError(Exception):
    """Base class of every sandtrap error.

    Attributes:
        kind: stable status name (``"invalid_policy"``, ``"isolation_unavailable"``…).
        code: the C ABI status code (``-3``…).
        message: the human-readable message (also ``str(err)``).
        problems: every problem found, for validation errors, each a
            :class:`Problem` (``field``, ``message``); else one problem, the message.
    """

    kind: str = "internal"
    code: int = -99

    def __init__(self, message: str, problems: Iterable[Problem | str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems: list[Problem] = [
            p if isinstance(p, Problem) else Problem("", p) for p in (problems if problems is not None else [message])
        ]

    def __str__(self) -> str:
        return self.message


class InvalidArgument(SandtrapError, ValueError):
    """A NULL handle or buffer reached the C ABI (a bug in the caller or binding)."""

    kind: str = "invalid_argument"
    code: int = -1


class InvalidRequest(SandtrapError, ValueError):
    """The request was malformed: wrong types, unknown keys, NUL bytes in argv…"""

    kind: str = "invalid_request"
    code: int = -2


class PolicyError(SandtrapError, ValueError):
    """The policy failed validation; ``problems`` lists every problem at once."""

    kind: str = "invalid_policy"
    code: int = -3


class IsolationUnavailable(SandtrapError, RuntimeError):
    """A requested protection cannot be applied here (and ``allow_degraded`` is off).
    A ``RuntimeError`` too, as the cooperative sandbox's seed has it."""

    kind: str = "isolation_unavailable"
    code: int = -4


class NotFound(SandtrapError):
    """The program does not exist. ``run`` reports this in ``Result.error`` instead;
    :meth:`Result.check` raises it."""

    kind: str = "not_found"
    code: int = -5


class SpawnFailed(SandtrapError):
    """The child could not be started (e.g. Landlock denied executing it).
    ``run`` reports this in ``Result.error``; :meth:`Result.check` raises it."""

    kind: str = "spawn_failed"
    code: int = -6


class ForkedChildError(SandtrapError):
    """sandtrap was called in a child created by ``os.fork()`` of a process that had
    loaded it; the engine cannot run there."""

    kind: str = "forked_child"
    code: int = -7


class SandboxClosed(SandtrapError, ValueError):
    """The sandbox was closed."""

    kind: str = "closed"
    code: int = -8


class InternalError(SandtrapError):
    """A bug in sandtrap: please report it."""

    kind: str = "internal"
    code: int = -99


class ProcessFailed(SandtrapError):
    """:meth:`Result.check` of a run that did not succeed: ``result`` is that
    :class:`Result` (its ``reason``, ``exit_code``, ``stderr``…)."""

    kind: str = "process_failed"
    code: int = -100
    result: Any = None


class InvalidState(SandtrapError, RuntimeError):
    """An operation that the object's state does not allow (``start()`` without
    ``create()``, ``spawn()`` while the sandbox's process runs)."""

    kind: str = "invalid_state"
    code: int = -101


_BY_KIND: dict[str, type[SandtrapError]] = {
    c.kind: c
    for c in (
        InvalidArgument,
        InvalidRequest,
        PolicyError,
        IsolationUnavailable,
        NotFound,
        SpawnFailed,
        ForkedChildError,
        SandboxClosed,
        InternalError,
    )
}
_BY_CODE: dict[int, type[SandtrapError]] = {c.code: c for c in _BY_KIND.values()}

FORKED_CHILD_MESSAGE = (
    "sandtrap cannot be used in a child created by os.fork() after the parent loaded "
    "it: the engine's runtime does not survive fork(). Use it in the parent, start "
    "the child with subprocess or multiprocessing's 'spawn'/'forkserver' start method, "
    "or exec a new program in the child"
)


def error_for(
    kind: str | None = None,
    code: int | None = None,
    message: str = "",
    problems: Iterable[Problem | str] | None = None,
) -> SandtrapError:
    """The exception matching an engine status name or code."""
    cls: type[SandtrapError] = SandtrapError
    if kind and kind in _BY_KIND:
        cls = _BY_KIND[kind]
    elif code is not None and code in _BY_CODE:
        cls = _BY_CODE[code]
    if cls is ForkedChildError and not message:
        message = FORKED_CHILD_MESSAGE
    err = cls(message or (kind or "unknown error"), problems)
    if cls is SandtrapError:
        # an unknown kind from a newer engine: keep what it said
        err.kind = kind or "unknown"
        err.code = code if code is not None else -99
    return err
