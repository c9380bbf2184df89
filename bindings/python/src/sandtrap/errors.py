"""``sandtrap.errors``: the exceptions of the cooperative sandbox, under its seed's names.

The seed's names (PyPI ``sandtrap``'s ``sandtrap.errors``) and ours:

* ``StError`` and its limits ``StTimeout``, ``StTickLimit``, ``StCancelled``;
  ``StValidationError`` (code the rewriter refuses) and ``StPolicyNotPortable``
  (a ``ValueError`` too) — the guest runtime's classes themselves. One difference:
  our ``StError`` derives from ``BaseException`` (limits are sticky: ``except
  Exception`` in sandboxed code cannot swallow them); ``StValidationError``,
  ``StPolicyNotPortable`` and the denials are ``Exception`` subclasses.
* the denials ``StAttributeDenied`` (an ``AttributeError``), ``StImportDenied`` (a
  ``ModuleNotFoundError``), ``StCallDenied`` (a ``TypeError``) and ``StOutsideExec``:
  ours only (the seed raises plain ``AttributeError``/``ImportError``; ours are
  subclasses of those, so the seed's handlers catch them).
* ``IsolationUnavailable``: a ``RuntimeError`` as in the seed, and our
  ``SandtrapError``.
* ``StForkUnsafe`` (``StError``, ``RuntimeError``): the seed raises it when a worker
  forked from the host dies at start. Our workers are never forks of the host, so it
  is never raised; ``start_method="fork"`` is refused instead (``InvalidArgument``).
* ``StLostWrite`` (``StError``, ``OSError``): content lost when a file of a
  ``VirtualFS`` is left for the garbage collector instead of being closed.
* ``RpcChannelClosed`` (``RuntimeError``): a host call from a worker that has stopped.
* ``WorkerCrashed``, ``WorkerError``: ours (a worker that died or broke the protocol;
  an exception from a worker whose class is not known here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandtrap_guest.errors import (
    StAttributeDenied,
    StCallDenied,
    StCancelled,
    StError,
    StImportDenied,
    StOutsideExec,
    StPolicyNotPortable,
    StTickLimit,
    StTimeout,
    StValidationError,
)

from ._coop_spool import SpoolClosedError
from ._errors import IsolationUnavailable, SandtrapError

if TYPE_CHECKING:  # at run time from _coop on first use (_coop imports this module)
    from ._coop import WorkerCrashed, WorkerError


class StForkUnsafe(StError, RuntimeError):
    """Never raised here: workers are forks of a template the engine started by execve,
    never of this process (the seed raised it under ``start_method="fork"``)."""


class StLostWrite(StError, OSError):
    """A ``VirtualFS`` file's content was lost: the file was left for the garbage
    collector instead of being closed (its buffered writes are flushed at close)."""


class RpcChannelClosed(RuntimeError):
    """A host call from a worker that no longer serves its parent."""


def __getattr__(name: str) -> Any:
    if name in ("WorkerCrashed", "WorkerError"):
        from . import _coop

        return getattr(_coop, name)
    raise AttributeError(f"module 'sandtrap.errors' has no attribute {name!r}")


__all__ = [
    "StError",
    "StTimeout",
    "StTickLimit",
    "StCancelled",
    "StValidationError",
    "StPolicyNotPortable",
    "StAttributeDenied",
    "StImportDenied",
    "StCallDenied",
    "StOutsideExec",
    "StForkUnsafe",
    "StLostWrite",
    "RpcChannelClosed",
    "IsolationUnavailable",
    "SandtrapError",
    "WorkerCrashed",
    "WorkerError",
    "SpoolClosedError",
]
