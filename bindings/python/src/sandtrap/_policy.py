"""Policy fields: Python-side type checks, the unsupported fields of the seed API,
and ``parse_ports``. Values are validated by the engine (one list of problems)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

from ._errors import PolicyError

PathLike = Union[str, "os.PathLike[str]"]

# field -> kind of value; the order is docs/protocol.md's
FIELDS: dict[str, str] = {
    "fs_readable": "paths",
    "fs_writable": "paths",
    "fs_denied": "paths",
    "net_allow": "ports_or_targets",
    "net_deny": "ports_or_targets",
    "net_allow_bind": "ports",
    "net_allow_udp": "bool",
    "net_allow_unix": "bool",
    "max_memory": "size",
    "max_processes": "count",
    "max_open_files": "count",
    "max_disk": "size",
    "max_cpu": "count",
    "max_cpu_time": "seconds",
    "timeout": "seconds",
    "max_output": "size",
    "env": "env",
    "clean_env": "bool",
    "cwd": "path",
    "uid": "id",
    "gid": "id",
    "extra_allow_syscalls": "names",
    "extra_deny_syscalls": "names",
    "allow_degraded": "bool",
}

# Fields of the API we follow that sandtrap does not offer, and why.
UNSUPPORTED: dict[str, str] = {
    "http_ca": "sandtrap has no HTTP proxy",
    "http_key": "sandtrap has no HTTP proxy",
    "http_ports": "sandtrap has no HTTP proxy; use net_allow",
    "http_allow": "sandtrap has no HTTP ACL; use net_allow (ports)",
    "http_deny": "sandtrap has no HTTP ACL; use net_allow (ports)",
    "fs_storage": "sandtrap has no copy-on-write storage layer",
    "workdir": "sandtrap has no copy-on-write workdir (and no dry_run); use cwd",
    "random_seed": "determinism controls are not supported",
    "time_start": "determinism controls are not supported",
    "deterministic_dirs": "determinism controls are not supported",
    "no_randomize_memory": "determinism controls are not supported",
    "no_coredump": "core dumps are always disabled in sandtrap; drop the field",
    "no_huge_pages": "not supported",
    "no_supervisor": "not supported: sandtrap has no syscall supervisor",
    "chroot": "sandtrap does not chroot; grant paths with fs_readable/fs_writable",
    "fs_mount": "sandtrap does not mount; grant paths with fs_readable/fs_writable",
    "on_exit": "sandtrap has no copy-on-write branches",
    "on_error": "sandtrap has no copy-on-write branches",
    "port_remap": "port virtualization is not supported",
    "gpu_devices": "not supported",
    "cpu_cores": "not supported; use max_cpu",
    "num_cpus": "not supported; use max_cpu",
    "name": "not supported",
    "policy_fn": "dynamic syscall policies are not supported; use extra_deny_syscalls",
    "handlers": "syscall handlers are not supported",
}


def _tname(v: Any) -> str:
    return type(v).__name__


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _path(field: str, v: Any, probs: list[str]) -> str | None:
    """A str path from str or os.PathLike; bytes are refused with a clear message."""
    if isinstance(v, (bytes, bytearray)):
        probs.append(f"{field}: {bytes(v)!r} is a bytes path; sandtrap takes str paths "
                     "(decode it with os.fsdecode())")
        return None
    if isinstance(v, os.PathLike):
        try:
            v = os.fspath(v)
        except TypeError as e:
            probs.append(f"{field}: {e}")
            return None
        if isinstance(v, bytes):
            probs.append(f"{field}: {v!r} is a bytes path; sandtrap takes str paths "
                         "(decode it with os.fsdecode())")
            return None
    if not isinstance(v, str):
        probs.append(f"{field}: want a path (str or pathlib.Path), got {_tname(v)}")
        return None
    return v


def _items(field: str, v: Any, probs: list[str], what: str) -> list[Any] | None:
    """The items of a list-valued field (any iterable but str/bytes/mapping)."""
    if isinstance(v, (str, bytes, bytearray, os.PathLike)):
        probs.append(f"{field}: want a list of {what}, got a single {_tname(v)} "
                     f"(write [{v!r}])")
        return None
    if isinstance(v, Mapping) or not isinstance(v, Iterable):
        probs.append(f"{field}: want a list of {what}, got {_tname(v)}")
        return None
    return list(v)


def check_field(field: str, kind: str, v: Any, probs: list[str]) -> Any:
    """Type-check one field; returns the msgpack-ready value (or None after a problem)."""
    n0 = len(probs)
    out: Any = None
    if kind == "paths":
        items = _items(field, v, probs, "paths")
        if items is not None:
            out = [_path(f"{field}[{i}]", it, probs) for i, it in enumerate(items)]
    elif kind == "path":
        out = _path(field, v, probs)
    elif kind in ("ports", "ports_or_targets"):
        items = _items(field, v, probs, "ports")
        if items is not None:
            out = []
            for i, it in enumerate(items):
                if _is_int(it) or isinstance(it, str):
                    out.append(it)
                else:
                    example = '"host:443"' if kind == "ports_or_targets" else '"8000-8005"'
                    probs.append(f"{field}[{i}]: want a port number or a string like "
                                 f"{example}, got {_tname(it)}")
    elif kind == "bool":
        if not isinstance(v, bool):
            probs.append(f"{field}: want True or False, got {_tname(v)}")
        out = v
    elif kind == "size":
        if not (_is_int(v) or isinstance(v, str)):
            probs.append(f"{field}: want a byte count (int) or a size string like \"256M\", "
                         f"got {_tname(v)}")
        out = v
    elif kind in ("count", "id"):
        if not _is_int(v):
            probs.append(f"{field}: want an int, got {_tname(v)}")
        out = v
    elif kind == "seconds":
        if not (_is_int(v) or isinstance(v, float)):
            probs.append(f"{field}: want seconds as an int or float, got {_tname(v)}")
        out = v
    elif kind == "env":
        if not isinstance(v, Mapping):
            probs.append(f"{field}: want a dict of str to str, got {_tname(v)}")
        else:
            out = {}
            for k, val in v.items():
                if not isinstance(k, str):
                    probs.append(f"{field}: variable name {k!r} is {_tname(k)}, not str")
                elif not isinstance(val, str):
                    probs.append(f"{field}[{k!r}]: want a str value, got {_tname(val)}")
                else:
                    out[k] = val
    elif kind == "names":
        items = _items(field, v, probs, "syscall names")
        if items is not None:
            out = []
            for i, it in enumerate(items):
                if isinstance(it, str):
                    out.append(it)
                else:
                    probs.append(f"{field}[{i}]: want a syscall name (str), got {_tname(it)}")
    else:  # pragma: no cover - FIELDS and this function go together
        raise AssertionError(kind)
    return out if len(probs) == n0 else None


def check_policy(fields: Mapping[str, Any], positional: tuple[Any, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    """Type-check constructor arguments.

    Returns the policy map of every well-typed field (``None`` values are omitted:
    not set) and the problems found in the others.
    """
    probs: list[str] = []
    if positional:
        probs.append(f"Sandbox takes keyword arguments only (got {len(positional)} positional)")
    policy: dict[str, Any] = {}
    for name, value in fields.items():
        if name in FIELDS:
            if value is None:
                continue
            checked = check_field(name, FIELDS[name], value, probs)
            if checked is not None:
                policy[name] = checked
        elif name in UNSUPPORTED:
            probs.append(f"{name}: not supported by sandtrap ({UNSUPPORTED[name]})")
        else:
            close = difflib.get_close_matches(name, list(FIELDS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            probs.append(f"unknown field {name!r}{hint}")
    return policy, probs


_PREFIX = re.compile(r"^invalid (policy|request)(?: \((\d+) problems\))?:(?: |(?=\n- ))")
# how an engine problem starts: a field or key name, a path, a quoted value…
_STARTS = re.compile(r'^(?:[a-z_]+(?:\[[^\]]*\])?(?::| |$)|/|"|unknown |stage \d|syscall )')


def split_problems(message: str) -> list[str]:
    """The problems of an engine message: "invalid policy: a" (one problem),
    "invalid policy (N problems):\n- a\n- b" (one per line).

    Older engines joined problems with "; ", which may also occur inside one problem
    ("… is relative; give an absolute path"): there a fragment that does not start
    like a problem is glued back to the one before it.
    """
    m = _PREFIX.match(message)
    if not m:
        return [message] if message else []
    rest = message[m.end():]
    if rest.startswith("\n- "):  # one problem per line
        return [p for p in rest[3:].split("\n- ") if p]
    if m.group(2) is None:  # exactly one problem
        return [rest]
    want = int(m.group(2)) if m.group(2) else None
    parts = rest.split("; ")
    if want is not None and len(parts) == want:
        return parts
    out: list[str] = []
    for i, part in enumerate(parts):
        joinable = bool(out) and (want is None or len(out) + (len(parts) - i) > want)
        head = part.split(" ", 1)[0].rstrip(":")
        if joinable and (not _STARTS.match(part) or head not in _KNOWN_HEADS and not part.startswith(("/", '"'))):
            out[-1] += "; " + part
        else:
            out.append(part)
    return out



_KNOWN_HEADS = set(FIELDS) | {"unknown", "syscall", "uid", "uid/gid", "cwd", "stage", "run",
                                 "pipeline", "request", "policy", "argv", "stdin", "tag"}


def format_problems(what: str, probs: list[str]) -> str:
    if len(probs) == 1:
        return f"{what}: {probs[0]}"
    return f"{what} ({len(probs)} problems):\n" + "\n".join(f"  - {p}" for p in probs)


def parse_ports(ports: Iterable[int | str] | int | str) -> list[int]:
    """Expand ports and ranges into a sorted list without duplicates.

    >>> parse_ports([80, "443", "8000-8005"])
    [80, 443, 8000, 8001, 8002, 8003, 8004, 8005]

    Raises :class:`PolicyError` listing every malformed or out-of-range item.
    """
    items: Iterable[Any]
    if isinstance(ports, (int, str)):
        items = [ports]
    elif isinstance(ports, Iterable):
        items = ports
    else:
        raise PolicyError(f"invalid ports: want a list of ports, got {_tname(ports)}")
    seen: set[int] = set()
    probs: list[str] = []

    def add(n: int, orig: Any) -> None:
        if not 1 <= n <= 65535:
            probs.append(f"port {orig!r} out of range 1-65535")
        else:
            seen.add(n)

    for it in items:
        if isinstance(it, int) and not isinstance(it, bool):
            add(it, it)
            continue
        if not isinstance(it, str):
            probs.append(f"port {it!r}: want an int or a string like \"8000-8005\"")
            continue
        lo, sep, hi = it.strip().partition("-")
        try:
            a = int(lo.strip())
            b = int(hi.strip()) if sep else a
        except ValueError:
            probs.append(f"port {it!r}: want \"N\" or \"LOW-HIGH\"")
            continue
        if b < a:
            probs.append(f"port {it!r}: range ends before it starts")
            continue
        if not (1 <= a <= 65535 and 1 <= b <= 65535):
            probs.append(f"port {it!r} out of range 1-65535")
            continue
        seen.update(range(a, b + 1))
    if probs:
        raise PolicyError(format_problems("invalid ports", probs), probs)
    return sorted(seen)
