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

from .errors import (StAttributeDenied, StCallDenied, StCancelled, StError, StImportDenied,
                     StPolicyNotPortable, StTickLimit, StTimeout, StValidationError)
from .policy import Policy
from .session import BUILTIN_NAMES, ExecResult, GuestSession
from .wire import error_to_wire, to_wire

__version__ = "0.1.0"

__all__ = [
    "Policy", "GuestSession", "ExecResult", "BUILTIN_NAMES", "to_wire", "error_to_wire",
    "StError", "StValidationError", "StAttributeDenied", "StImportDenied", "StCallDenied",
    "StPolicyNotPortable", "StTimeout", "StTickLimit", "StCancelled",
]
