"""sandtrap: run commands confined by Landlock, seccomp, a pid namespace and limits.

>>> from sandtrap import Sandbox
>>> sb = Sandbox(fs_readable=["/usr", "/lib", "/etc"], max_memory="256M", clean_env=True)
>>> result = sb.run(["python3", "-c", "print('hello')"], timeout=30)
>>> result.success, result.stdout
(True, b'hello\\n')

Pipelines join sandboxes with kernel pipes, each stage under its own policy::

    (trusted.cmd(["cat", "/opt/data/secret.csv"]) | restricted.cmd(["tr", "a-z", "A-Z"])).run()

Everything raised is a :class:`SandtrapError`; a failing program is not an
exception, its fate is in the :class:`Result`.
"""

from __future__ import annotations

from sandtrap_guest import (
    StAttributeDenied,
    StCallDenied,
    StCancelled,
    StError,
    StImportDenied,
    StPolicyNotPortable,
    StTickLimit,
    StTimeout,
    StValidationError,
)

from . import errors
from ._checkpoint import Checkpoint
from ._coop import (
    CoopSandbox,
    ExecResult,
    IsolatedFS,
    IsolationStatus,
    MemberSpec,
    Policy,
    PolicyProblem,
    PrintRendering,
    RpcProxyMarker,
    VirtualFS,
    WorkerCrashed,
    WorkerError,
    host_time,
    passthrough_stdio,
    rpc_surface,
    sandbox,
)
from ._coop_spool import SpoolClosedError, SpooledNamespace
from ._errors import (
    ForkedChildError,
    InternalError,
    InvalidArgument,
    InvalidRequest,
    InvalidState,
    IsolationUnavailable,
    NotFound,
    PolicyError,
    Problem,
    ProcessFailed,
    SandboxClosed,
    SandtrapError,
    SpawnFailed,
)
from ._fields import PolicyOptions, Protection
from ._fork import CloneResult, Clones
from ._gather import Gather, GatherPipeline, NamedCommand, inputs
from ._handlers import ExceptionPolicy, Handler, HandlerCtx, NotifAction, PolicyContext, SyscallEvent
from ._policy import parse_memory_size, parse_ports
from ._process import CAPTURE, INHERIT, NULL, PIPED, AsyncProcess, Process, StdioMode
from ._profile import load_profile, policy_from_dict, profile_argv
from ._result import Denial, ErrorInfo, ExitReason, LearnResult, Result
from ._sandbox import Command, Pipeline, Sandbox, confine, probe
from ._version import __version__
from ._view import BranchAction, Change, CommitResult, DryRunResult

ForkedChild = ForkedChildError  # the engine's name for it


def library_version() -> str:
    """Version of the loaded libsandtrap.so (loads it)."""
    from . import _native

    return _native.version()


__all__ = [
    "__version__",
    "Sandbox",
    "Command",
    "Pipeline",
    "Gather",
    "GatherPipeline",
    "NamedCommand",
    "inputs",
    "Result",
    "ExitReason",
    "Process",
    "Checkpoint",
    "AsyncProcess",
    "StdioMode",
    "PIPED",
    "INHERIT",
    "NULL",
    "CAPTURE",
    "ProcessFailed",
    "InvalidState",
    "Denial",
    "LearnResult",
    "ErrorInfo",
    "BranchAction",
    "Change",
    "DryRunResult",
    "CommitResult",
    "PolicyOptions",
    "Problem",
    "parse_ports",
    "parse_memory_size",
    "Protection",
    "load_profile",
    "policy_from_dict",
    "profile_argv",
    "confine",
    "probe",
    "library_version",
    "sandbox",
    "RpcProxyMarker",
    "rpc_surface",
    "host_time",
    "PolicyProblem",
    "PrintRendering",
    "Clones",
    "CloneResult",
    "Policy",
    "MemberSpec",
    "IsolatedFS",
    "VirtualFS",
    "ExecResult",
    "CoopSandbox",
    "IsolationStatus",
    "passthrough_stdio",
    "errors",
    "Handler",
    "HandlerCtx",
    "NotifAction",
    "ExceptionPolicy",
    "SyscallEvent",
    "PolicyContext",
    "WorkerError",
    "WorkerCrashed",
    "SpooledNamespace",
    "SpoolClosedError",
    "StError",
    "StValidationError",
    "StAttributeDenied",
    "StImportDenied",
    "StCallDenied",
    "StPolicyNotPortable",
    "StTimeout",
    "StTickLimit",
    "StCancelled",
    "SandtrapError",
    "InvalidArgument",
    "InvalidRequest",
    "PolicyError",
    "IsolationUnavailable",
    "NotFound",
    "SpawnFailed",
    "ForkedChildError",
    "ForkedChild",
    "SandboxClosed",
    "InternalError",
]
