"""sandtrap guest runtime: the cooperative Python sandbox (in-process level).

Pure Python, standard library only.  The Go engine embeds this package and runs it
in a worker process; the Python binding imports the same code for
``isolation="none"``.

    from sandtrap_guest import Policy, GuestSession
    sess = GuestSession(Policy(timeout=5, tick_limit=100_000))
    r = sess.exec("total = sum(range(10))\\nprint(f'total = {total}')")
    r.stdout, r.namespace, r.error, r.ticks      # 'total = 45\\n', {'total': 45}, None, 2

This layer is NOT an adversarial boundary on its own; see README.md.
"""

import importlib

# typing.TYPE_CHECKING without importing typing (the template stays lean)
TYPE_CHECKING = False

if TYPE_CHECKING:  # the names __getattr__ loads, re-exported for type checkers
    from .errors import StAttributeDenied as StAttributeDenied
    from .errors import StCallDenied as StCallDenied
    from .errors import StCancelled as StCancelled
    from .errors import StError as StError
    from .errors import StImportDenied as StImportDenied
    from .errors import StOutsideExec as StOutsideExec
    from .errors import StPolicyNotPortable as StPolicyNotPortable
    from .errors import StTickLimit as StTickLimit
    from .errors import StTimeout as StTimeout
    from .errors import StValidationError as StValidationError
    from .policy import MemberSpec as MemberSpec
    from .policy import Policy as Policy
    from .session import BUILTIN_NAMES as BUILTIN_NAMES
    from .session import ExecResult as ExecResult
    from .session import GuestSession as GuestSession
    from .wire import error_to_wire as error_to_wire
    from .wire import to_wire as to_wire

__version__ = "0.1.0"

# Loaded on first use (PEP 562): ``python3 -m sandtrap_guest.template`` imports this
# package, and the map-reduce template must stay lean — every clone copies what it
# holds, and threading's at-fork hook alone costs each clone ~130 page faults.
_WHERE = {
    "Policy": "policy",
    "MemberSpec": "policy",
    "GuestSession": "session",
    "ExecResult": "session",
    "BUILTIN_NAMES": "session",
    "to_wire": "wire",
    "error_to_wire": "wire",
    **{
        n: "errors"
        for n in (
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
        )
    },
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> object:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'sandtrap_guest' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
