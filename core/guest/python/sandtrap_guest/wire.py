"""Conversion of sandbox values to msgpack-able data for the worker protocol.

``to_wire(value)`` returns only None, bool, int (64-bit range), float, str, bytes,
list, tuple and dict (keys str/int/float/bool/None/bytes/tuple-of-those), recursively.
Anything else becomes ``{"__st_placeholder__": "<type name>", "repr": "<short repr>"}``.

It never runs sandbox-defined code: a ``__repr__`` written in the sandbox is not
called (the placeholder names the type instead), so converting a namespace cannot
loop forever or escape the checkpoints.
"""

from __future__ import annotations

import traceback as _tb
import types
from typing import Any

PLACEHOLDER = "__st_placeholder__"
MAX_DEPTH = 64
REPR_LIMIT = 200
_INT_MIN, _INT_MAX = -(2 ** 63), 2 ** 64 - 1
_SCALARS = (type(None), bool, int, float, str, bytes)
_SAFE_REPR_TYPES = frozenset({range, slice, type(Ellipsis), type(NotImplemented)})
_SAFE_REPR_MODULES = frozenset({"datetime", "decimal", "fractions", "uuid", "pathlib", "ipaddress"})


def _short(s: str) -> str:
    return s if len(s) <= REPR_LIMIT else s[: REPR_LIMIT - 3] + "..."


def _sandbox_defined(t: type) -> bool:
    from .gates import is_user_type
    return is_user_type(t)


def _repr_is_safe(t: type) -> bool:
    """Types whose repr never runs sandbox-defined code."""
    if t in _SAFE_REPR_TYPES:
        return True
    mod = getattr(t, "__module__", "")
    return mod in _SAFE_REPR_MODULES and not _sandbox_defined(t)


def safe_repr(value: Any, _depth: int = 0) -> str:
    """A bounded repr that never calls a sandbox-defined ``__repr__``/``__str__``:
    containers are walked here, a few known types use their own repr, anything else
    is shown as ``<module.Type object>``."""
    t = type(value)
    if _depth > 3:
        return "..."
    try:
        if t in _SCALARS or t is bytearray or t is complex:
            return _short(repr(value))
        if isinstance(value, (list, tuple, set, frozenset)) and not _sandbox_defined(t):
            items = list(value)[:10]
            inner = ", ".join(safe_repr(v, _depth + 1) for v in items)
            if len(value) > 10:
                inner += ", ..."
            if isinstance(value, list):
                return _short(f"[{inner}]")
            if isinstance(value, tuple):
                return _short(f"({inner}{',' if len(value) == 1 else ''})")
            if isinstance(value, frozenset):
                return _short(f"frozenset({{{inner}}})")
            return _short(f"{{{inner}}}" if value else "set()")
        if isinstance(value, dict) and not _sandbox_defined(t):
            items = list(value.items())[:10]
            inner = ", ".join(f"{safe_repr(k, _depth + 1)}: {safe_repr(v, _depth + 1)}" for k, v in items)
            return _short("{" + inner + (", ..." if len(value) > 10 else "") + "}")
        if isinstance(value, type):
            return _short(f"<class '{getattr(value, '__module__', '?')}.{value.__qualname__}'>")
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
            return _short(repr(value))
        if _repr_is_safe(t):
            r = repr(value)
            if isinstance(r, str):
                return _short(r)
        return _short(f"<{getattr(t, '__module__', '?')}.{t.__qualname__} object>")
    except Exception:  # noqa: BLE001 - a repr must never fail the conversion
        return _short(f"<{t.__qualname__} object>")


def placeholder(value: Any) -> dict:
    return {PLACEHOLDER: type(value).__name__, "repr": safe_repr(value)}


def to_wire(value: Any) -> Any:
    """Convert ``value`` to msgpack-able data (see the module docstring)."""
    return _conv(value, 0, set())


def _conv(v: Any, depth: int, active: set) -> Any:
    t = type(v)
    if v is None or t is bool or t is float or t is str or t is bytes:
        return v
    if t is int:
        return v if _INT_MIN <= v <= _INT_MAX else placeholder(v)
    if depth >= MAX_DEPTH:
        return {PLACEHOLDER: t.__name__, "repr": "<nested too deeply>"}
    if isinstance(v, (list, tuple, dict)) and not _sandbox_defined(t):
        if id(v) in active:
            return {PLACEHOLDER: t.__name__, "repr": "<recursive reference>"}
        active.add(id(v))
        try:
            if isinstance(v, dict):
                out = {}
                for k, val in list(v.items()):
                    out[_key(k, depth, active)] = _conv(val, depth + 1, active)
                return out
            items = [_conv(x, depth + 1, active) for x in list(v)]
            return items if isinstance(v, list) else tuple(items)
        finally:
            active.discard(id(v))
    return placeholder(v)


def _key(k: Any, depth: int, active: set) -> Any:
    t = type(k)
    if k is None or t in (bool, float, str, bytes):
        return k
    if t is int and _INT_MIN <= k <= _INT_MAX:
        return k
    if t is tuple:
        conv = _conv(k, depth + 1, active)
        try:
            hash(conv)
            return conv
        except TypeError:
            pass
    return safe_repr(k)


def error_to_wire(error: BaseException | None, traceback_text: str | None = None) -> dict | None:
    """A msgpack-able description of an exec error."""
    if error is None:
        return None
    d = {
        "type": type(error).__name__,
        "module": type(error).__module__,
        "message": _short_text(str(error) if not _sandbox_defined(type(error)) else
                               ", ".join(safe_repr(a) for a in getattr(error, "args", ()))),
        "traceback": traceback_text if traceback_text is not None else
        "".join(_tb.format_exception_only(type(error), error)),
    }
    for attr in ("lineno", "col"):
        v = getattr(error, attr, None)
        if isinstance(v, int):
            d[attr] = v
    return d


def _short_text(s: str, limit: int = 4000) -> str:
    return s if len(s) <= limit else s[: limit - 3] + "..."


__all__ = ["to_wire", "safe_repr", "placeholder", "error_to_wire", "PLACEHOLDER"]
