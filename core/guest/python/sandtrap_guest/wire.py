"""Conversion of sandbox values to msgpack-able data for the worker protocol.

``to_wire(value)`` returns only None, bool, int (64-bit range), float, str, bytes,
list, tuple and dict (keys str/int/float/bool/None/bytes), recursively. Anything else
becomes ``{"__st_placeholder__": "<type name>", "repr": "<short repr>"}``; so do
integers beyond 64 bits, containers nested deeper than ``MAX_DEPTH`` and, once the
whole value holds ``MAX_NODES`` items or ``MAX_BYTES`` of text and bytes, the rest.

It never runs sandbox-defined code: a ``__repr__`` written in the sandbox is not
called (the placeholder names the type instead), types are read with ``type()``
(never ``isinstance``, which would consult a sandbox ``__getattribute__`` for
``__class__``), so converting a namespace cannot loop forever or escape the
checkpoints. It is linear in the object graph: a container met again is converted
once (its conversion is shared), and its size counts each time it is met, so a
value whose tree is exponentially larger than its graph (``t = (t, t)`` a hundred
times) stops at the cap.
"""

from __future__ import annotations

import types
from typing import Any

PLACEHOLDER = "__st_placeholder__"
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_BYTES = 64 << 20
REPR_LIMIT = 200
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
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
        if issubclass(t, (list, tuple, set, frozenset)) and not _sandbox_defined(t):
            items = list(value)[:10]
            inner = ", ".join(safe_repr(v, _depth + 1) for v in items)
            if len(value) > 10:
                inner += ", ..."
            if issubclass(t, list):
                return _short(f"[{inner}]")
            if issubclass(t, tuple):
                return _short(f"({inner}{',' if len(value) == 1 else ''})")
            if issubclass(t, frozenset):
                return _short(f"frozenset({{{inner}}})")
            return _short(f"{{{inner}}}" if value else "set()")
        if issubclass(t, dict) and not _sandbox_defined(t):
            items = list(value.items())[:10]
            inner = ", ".join(f"{safe_repr(k, _depth + 1)}: {safe_repr(v, _depth + 1)}" for k, v in items)
            return _short("{" + inner + (", ..." if len(value) > 10 else "") + "}")
        if issubclass(t, type):
            return _short(f"<class '{getattr(value, '__module__', '?')}.{value.__qualname__}'>")
        if t in (types.FunctionType, types.BuiltinFunctionType, types.ModuleType):
            return _short(repr(value))
        if _repr_is_safe(t):
            r = repr(value)
            if type(r) is str:
                return _short(r)
        return _short(f"<{getattr(t, '__module__', '?')}.{t.__qualname__} object>")
    except Exception:  # noqa: BLE001 - a repr must never fail the conversion
        return _short(f"<{t.__qualname__} object>")


def placeholder(value: Any, why: str | None = None) -> dict:
    return {PLACEHOLDER: type(value).__name__, "repr": why or safe_repr(value)}


def to_wire(value: Any) -> Any:
    """Convert ``value`` to msgpack-able data (see the module docstring)."""
    return _Conv().conv(value, 0)


class _Conv:
    __slots__ = ("memo", "active", "nodes", "nbytes")

    def __init__(self):
        self.memo: dict[int, tuple[Any, int, int]] = {}  # id -> (converted, nodes, bytes)
        self.active: set[int] = set()
        self.nodes = 0
        self.nbytes = 0

    def full(self) -> bool:
        return self.nodes >= MAX_NODES or self.nbytes >= MAX_BYTES

    def conv(self, v: Any, depth: int) -> Any:
        t = type(v)
        self.nodes += 1
        if t is str or t is bytes:
            self.nbytes += len(v)
            if self.nbytes > MAX_BYTES:
                return placeholder(v, f"<{len(v)} {'characters' if t is str else 'bytes'}: namespace too large>")
            if t is str:
                return _clean_str(v)
            return v
        if v is None or t is bool or t is float:
            return v
        if t is int:
            return v if _INT_MIN <= v <= _INT_MAX else placeholder(v)
        if t is not list and t is not tuple and t is not dict:
            if t in (bytearray, set, frozenset) or not issubclass(t, (list, tuple, dict)) or _sandbox_defined(t):
                return placeholder(v)
        if depth >= MAX_DEPTH:
            return placeholder(v, "<nested too deeply>")
        key = id(v)
        if key in self.active:
            return placeholder(v, "<recursive reference>")
        seen = self.memo.get(key)
        if seen is not None:
            conv, n, b = seen
            if self.nodes + n > MAX_NODES or self.nbytes + b > MAX_BYTES:
                return placeholder(v, "<namespace too large>")
            self.nodes += n
            self.nbytes += b
            return conv
        if self.full():
            return placeholder(v, "<namespace too large>")
        n0, b0 = self.nodes, self.nbytes
        self.active.add(key)
        try:
            if issubclass(t, dict):
                out: Any = {}
                for k, val in list(dict.items(v)):
                    out[self.key(k, depth)] = self.conv(val, depth + 1)
            else:
                items = [self.conv(x, depth + 1) for x in (list.copy(v) if issubclass(t, list) else tuple(v))]
                out = items if issubclass(t, list) else tuple(items)
        finally:
            self.active.discard(key)
        self.memo[key] = (out, self.nodes - n0 - 1, self.nbytes - b0)
        return out

    def key(self, k: Any, depth: int) -> Any:
        t = type(k)
        if k is None or t is bool or t is float or t is bytes:
            return k
        if t is str:
            return _clean_str(k)
        if t is int and _INT_MIN <= k <= _INT_MAX:
            return k
        # tuples and everything else: a string (a list key would not be hashable when
        # decoded, and msgpack cannot say "tuple")
        return safe_repr(k)


def _clean_str(s: str) -> str:
    """``s`` as valid UTF-8 can carry it: lone surrogates (which sandboxed code can
    build with ``chr``) become U+FFFD."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        import re

        return re.sub("[\ud800-\udfff]", "\ufffd", s)


def error_to_wire(
    error: BaseException | None, traceback_text: str | None = None, message: str | None = None
) -> dict | None:
    """A msgpack-able description of an exec error. ``message`` is ``str(error)`` as
    the exec computed it under its limits (``ExecResult.error_message``); without it
    only the arguments are shown (never a sandbox ``__str__``, which would run outside
    every limit)."""
    if error is None:
        return None
    t = type(error)
    if message is None:
        from .session import _safe_message

        message = _safe_message(error)
    d = {
        "type": t.__name__,
        "module": t.__module__ if type(t.__module__) is str else "",
        "message": _clean_str(_short_text(message)),
        "traceback": _clean_str(
            traceback_text if traceback_text is not None else f"{t.__qualname__}: {_short_text(message)}\n"
        ),
    }
    if not _sandbox_defined(t):
        # the arguments, when they are a few scalars: KeyError('k') comes back as
        # KeyError('k'), not KeyError("'k'") (str() of a KeyError is its repr)
        args = BaseException.args.__get__(error)
        if len(args) <= 8 and all(
            type(a) in (bool, float, type(None))
            or (type(a) is int and -(2**63) <= a < 2**63)
            or (type(a) is str and len(a) <= 4096)
            for a in args
        ):
            d["args"] = [_clean_str(a) if type(a) is str else a for a in args]
        for attr in ("lineno", "col"):
            try:
                v = object.__getattribute__(error, attr)
            except AttributeError:
                continue
            if type(v) is int:
                d[attr] = v
    return d


def _short_text(s: str, limit: int = 4000) -> str:
    return s if len(s) <= limit else s[: limit - 3] + "..."


__all__ = ["to_wire", "safe_repr", "placeholder", "error_to_wire", "PLACEHOLDER"]
