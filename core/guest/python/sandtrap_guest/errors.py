"""Exceptions raised by the sandtrap guest runtime.

Hierarchy::

    StError(BaseException)
    ├── StValidationError(StError, Exception)     code rejected before it ran
    ├── StAttributeDenied(StError, AttributeError) the attribute gate said no
    ├── StImportDenied(StError, ModuleNotFoundError) import of an ungranted module
    ├── StCallDenied(StError, TypeError)           a call the sandbox refuses
    │                                              (three-argument type(), metaclasses,
    │                                              constructing a constructable=False class)
    ├── StPolicyNotPortable(StError, ValueError)   policy cannot cross to a worker
    ├── StTimeout(StError)                         wall-clock timeout
    ├── StTickLimit(StError)                       tick budget exhausted
    ├── StCancelled(StError)                       cancel() was called
    └── StOutsideExec(StError, GeneratorExit, Exception)  sandboxed code reached a checkpoint
                                                   outside every exec (called or
                                                   finalized by the host afterwards)

The three limit errors derive from ``BaseException`` only, so sandboxed
``except Exception:`` cannot swallow them; the policy errors also derive from
the matching builtin so ordinary code (``hasattr``, ``except ImportError``)
behaves as it would in plain Python.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (the template stays lean)
TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterable


class StError(BaseException):
    """Base of every sandtrap error."""


class StValidationError(StError, Exception):
    """The source was rejected by the validator; nothing ran.

    ``lineno`` is 1-based, ``col`` is the 0-based column (as in :mod:`ast`).
    """

    def __init__(
        self, message: str, lineno: int | None = None, col: int | None = None, text: str | None = None
    ) -> None:
        self.message = message
        self.lineno = lineno
        self.col = col
        self.text = text
        if lineno is not None:
            Exception.__init__(self, f"line {lineno}, col {col}: {message}")
        else:
            Exception.__init__(self, message)

    def __reduce__(self) -> tuple[type[StValidationError], tuple[str, int | None, int | None, str | None]]:
        return (type(self), (self.message, self.lineno, self.col, self.text))


class StAttributeDenied(StError, AttributeError):
    """Attribute read, write or delete refused by the attribute gate."""


class StImportDenied(StError, ModuleNotFoundError):
    """Import of a module the policy does not grant."""


class StCallDenied(StError, TypeError):
    """A call the sandbox refuses to make."""


class StPolicyNotPortable(StError, ValueError):
    """The policy cannot be sent to a worker process by reference.

    ``problems`` lists every problem found, not only the first.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: list[str] = list(problems)
        ValueError.__init__(self, "policy is not portable:\n  - " + "\n  - ".join(self.problems))

    def __reduce__(self) -> tuple[type[StPolicyNotPortable], tuple[list[str]]]:
        return (type(self), (self.problems,))


class StTimeout(StError):
    """The wall-clock timeout expired (checked at checkpoints)."""


class StTickLimit(StError):
    """The tick budget was exhausted."""


class StCancelled(StError):
    """``cancel()`` was called on the running session."""


class StOutsideExec(StError, GeneratorExit, Exception):
    """Sandboxed code was about to run outside an ``exec``: a sandbox-defined function
    called by the host after the exec returned, a generator's ``finally`` run by the
    host's garbage collector, a weakref callback ... It stops at its first checkpoint
    (the entry of a function, the start of a ``finally`` or ``except`` block, the
    resumption after a ``yield``). It derives from ``GeneratorExit`` so that closing
    a sandbox generator outside an exec ends it quietly."""


__all__ = [
    "StError",
    "StValidationError",
    "StAttributeDenied",
    "StImportDenied",
    "StCallDenied",
    "StPolicyNotPortable",
    "StTimeout",
    "StTickLimit",
    "StCancelled",
    "StOutsideExec",
]
