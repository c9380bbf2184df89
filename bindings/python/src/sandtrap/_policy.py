"""Policy fields: Python values converted to the engine's, and ``parse_ports``.

The field table is generated from the engine's schema (``_fields.py``); the engine
judges every value and reports every problem at once. What stays here is what only
Python knows: paths as ``os.PathLike``, any iterable as a list, any mapping as a
dict, ``None`` as "not set", and ``bytes`` refused as a path.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import PolicyError, Problem, problems_message
from ._fields import FIELDS, PolicyOptions, StrPath
from ._native import pack

__all__ = ["FIELDS", "PolicyOptions", "StrPath", "to_engine", "parse_ports", "parse_memory_size"]


def _value(v: Any) -> Any:
    """A value msgpack can carry: paths as str, iterables as lists, mappings as dicts."""
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, enum.Enum):
        return v.value  # BranchAction
    if isinstance(v, (str, bytes, bytearray, bool, int, float)) or v is None:
        return v
    if isinstance(v, Mapping):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, Iterable):
        return [_value(x) for x in v]
    return v


def _bytes_paths(key: str, kind: str, v: Any) -> Problem | None:
    """bytes paths are refused: the engine takes text, and decoding is the caller's."""
    items = v if kind == "paths" and isinstance(v, list) else [v] if kind == "path" else []
    for it in items:
        if isinstance(it, (bytes, bytearray)):
            return Problem(
                key, f"{bytes(it)!r} is a bytes path; sandtrap takes str paths (decode it with os.fsdecode())"
            )
    return None


def to_engine(fields: Mapping[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The policy map for the engine from keyword arguments, and the problems of
    values it cannot carry.

    Fields set to ``None`` are left out. A keyword that is not a field is sent as
    ``key: None``: the engine reports it (unknown, with the nearest name, or not
    supported yet).
    """
    policy: dict[str, Any] = {}
    probs: list[Problem] = []
    for name, value in fields.items():
        if name not in FIELDS:
            policy[name] = None
            continue
        key, kind = FIELDS[name]
        if value is None:
            continue
        v = _value(value)
        p = _bytes_paths(key, kind, v)
        if p is None:
            try:
                pack(v)
            except (TypeError, ValueError, OverflowError) as e:
                p = Problem(key, f"a {type(value).__name__} cannot be sent to the engine ({e})")
        if p is not None:
            probs.append(p)
        else:
            policy[key] = v
    return policy, probs


def parse_ports(ports: Iterable[int | str] | int | str) -> list[int]:
    """Expand ports and ranges into a sorted list without duplicates.

    >>> parse_ports([80, "443", "8000-8005"])
    [80, 443, 8000, 8001, 8002, 8003, 8004, 8005]
    >>> parse_ports("22,443")
    [22, 443]

    Raises :class:`PolicyError` listing every malformed or out-of-range item.
    """
    items: Iterable[Any]
    if isinstance(ports, (int, str)):
        items = [ports]
    elif isinstance(ports, Iterable):
        items = ports
    else:
        raise PolicyError(f"invalid ports: want a list of ports, got {type(ports).__name__}")
    seen: set[int] = set()
    probs: list[Problem] = []

    def bad(msg: str) -> None:
        probs.append(Problem("", msg))

    for it in items:
        if isinstance(it, int) and not isinstance(it, bool):
            if 1 <= it <= 65535:
                seen.add(it)
            else:
                bad(f"port {it!r} out of range 1-65535")
            continue
        if not isinstance(it, str):
            bad(f'port {it!r}: want an int or a string like "8000-8005"')
            continue
        for part in it.split(","):
            lo, sep, hi = part.strip().partition("-")
            try:
                a = int(lo.strip())
                b = int(hi.strip()) if sep else a
            except ValueError:
                bad(f'port {part!r}: want "N", "LOW-HIGH" or a comma list of them ("22,443,8000-8005")')
                continue
            if b < a:
                bad(f"port {part!r}: range ends before it starts")
            elif not (1 <= a <= 65535 and 1 <= b <= 65535):
                bad(f"port {part!r} out of range 1-65535")
            else:
                seen.update(range(a, b + 1))
    if probs:
        raise PolicyError(problems_message("invalid ports", probs), probs)
    return sorted(seen)


_SUFFIX = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory_size(s: int | str) -> int:
    """Bytes of a size as the policy's size fields take it (the engine's grammar,
    core/policy.ParseSize): an int, or a string ``"1048576"``, ``"512K"``,
    ``"256M"``, ``"1.5G"``, ``"2GiB"``, ``"1T"`` (binary units, case-insensitive).

    >>> parse_memory_size("512M")
    536870912

    Raises :class:`PolicyError` (a ``ValueError``) for anything else.
    """
    if isinstance(s, int) and not isinstance(s, bool):
        if 0 <= s <= 1 << 62:
            return s
    elif isinstance(s, str):
        t = s.strip().upper()
        t = t.removesuffix("IB").removesuffix("B")
        mult = 1
        if t and t[-1] in _SUFFIX:
            mult, t = _SUFFIX[t[-1]], t[:-1]
        t = t.strip()
        if t and t.replace(".", "", 1).isdigit() and t.isascii():
            n = float(t) * mult
            if n <= 1 << 62:
                return int(n)
    msg = f'{s!r} is not a size (examples: 1048576, "512K", "256M", "1.5G")'
    raise PolicyError(f"invalid size: {msg}", [Problem("", msg)])
