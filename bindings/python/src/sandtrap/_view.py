"""The copy-on-write workdir's types: ``BranchAction``, ``Change``, ``DryRunResult``
and ``CommitResult`` (docs/protocol.md, "workdir").

With ``workdir=PATH`` every run sees PATH copy-on-write: its writes land in a
layer of its own, listed afterwards as ``result.changes``, then committed to PATH
or discarded (``on_exit`` for a run that succeeded, ``on_error`` for one that
failed), or kept for :meth:`Sandbox.commit` / :meth:`Sandbox.abort`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._result import ErrorInfo, Result

__all__ = ["BranchAction", "Change", "DryRunResult", "CommitResult"]


class BranchAction(str, enum.Enum):
    """What becomes of a run's workdir changes (``on_exit``, ``on_error``)."""

    COMMIT = "commit"
    """applied to the workdir, file by file (each file atomically)"""
    ABORT = "abort"
    """discarded"""
    KEEP = "keep"
    """held until :meth:`Sandbox.commit` or :meth:`Sandbox.abort` (or the sandbox closes)"""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Change:
    """One path a run changed: ``kind`` is ``"A"`` (added), ``"M"`` (modified) or
    ``"D"`` (deleted); ``path`` is relative to the workdir. A rename is a ``D`` and
    an ``A``; directories are listed too."""

    kind: str
    path: str

    @classmethod
    def from_response(cls, m: Any) -> Change:
        return cls(str(m.get("kind") or ""), str(m.get("path") or ""))


def changes_of(v: Any) -> list[Change]:
    """The changes of an engine response list."""
    return [Change.from_response(c) for c in (v or []) if isinstance(c, dict)]


@dataclass
class DryRunResult:
    """What :meth:`Sandbox.dry_run` found: the run's outcome and every change it
    made, none of which reached the workdir."""

    success: bool
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    changes: list[Change]
    error: ErrorInfo | None
    result: Result = field(repr=False)
    """the run's full :class:`Result` (isolation report, usage, denials)"""

    @classmethod
    def from_result(cls, r: Result) -> DryRunResult:
        return cls(r.success, r.exit_code, r.stdout, r.stderr, list(r.changes), r.error, r)


@dataclass
class CommitResult:
    """What :meth:`Sandbox.commit` applied (``committed``), and the changes it refused
    (``commit_refused``: paths the run could not write, whose modes or times it
    changed; Landlock does not govern those). ``error`` says why it stopped before
    the end, when it did: what is in ``committed`` was applied."""

    committed: list[Change]
    commit_refused: list[Change]
    error: ErrorInfo | None = None

    @property
    def success(self) -> bool:
        return self.error is None
