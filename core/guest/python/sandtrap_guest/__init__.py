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

__version__ = "0.1.0"

# Loaded on first use (PEP 562): ``python3 -m sandtrap_guest.template`` imports this
# package, and the map-reduce template must stay lean — every clone copies what it
# holds, and threading's at-fork hook alone costs each clone ~130 page faults.
_WHERE = {
    "Policy": "policy",
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


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'sandtrap_guest' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
