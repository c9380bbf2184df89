"""State across turns: a session's namespace as source plus data, never pickle.

``snapshot(session)`` returns plain msgpack-able data::

    {"version": 1,
     "source": "import math\\ndef f(x): ...\\nclass C: ...",   # the import, def and class
                                                        # statements that made what is bound
     "data": {name: value},                             # values to_wire carries whole
     "objects": {name: {"class": "C", "state": {attr: value}}},  # instances of sandbox classes
     "dropped": [name, ...]}                            # what could not be kept, by name

``restore(session, state)`` runs ``source`` as an ordinary exec (rewritten and checked
like any code: a state is untrusted input), binds ``data``, and rebuilds each object
without running its code (``object.__new__`` of a class the source defined, then its
attributes into its ``__dict__``). Tuples come back as lists once a state has crossed
msgpack. Objects nested inside containers, instances of host classes, generators,
open files, lambdas assigned to names, and classes with ``__slots__`` are dropped (and
named).
"""

from __future__ import annotations

import ast
import types
from typing import Any

from .gates import SANDBOX_FILENAME, USER_MARK
from .wire import PLACEHOLDER, to_wire

VERSION = 1
_DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class Recorder:
    """The statements of a session's execs that bind functions, classes and modules,
    in order (a later definition of a name replaces the earlier one)."""

    __slots__ = ("defs", "decorated", "imports")

    def __init__(self) -> None:
        self.defs: dict[str, str] = {}
        self.decorated: set[str] = set()  # what a decorator made may be any object
        self.imports: dict[str, None] = {}

    def record(self, source: str) -> None:
        if "def " not in source and "class " not in source and "import " not in source:
            return
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
        lines = source.splitlines(keepends=True)
        for st in tree.body:
            if isinstance(st, _DEF):
                start = min([d.lineno for d in st.decorator_list] + [st.lineno])
                text = "".join(lines[start - 1 : st.end_lineno])
                if st.col_offset:
                    continue
                self.defs.pop(st.name, None)
                self.defs[st.name] = text if text.endswith("\n") else text + "\n"
                if st.decorator_list:
                    self.decorated.add(st.name)
                else:
                    self.decorated.discard(st.name)
            elif isinstance(st, (ast.Import, ast.ImportFrom)) and not st.col_offset:
                text = ast.get_source_segment(source, st)
                if text:
                    self.imports.pop(text, None)
                    self.imports[text] = None


def _has_placeholder(w: Any, depth: int = 0) -> bool:
    if depth > 200:
        return True
    if isinstance(w, dict):
        return PLACEHOLDER in w or any(_has_placeholder(v, depth + 1) for v in w.values())
    if isinstance(w, (list, tuple)):
        return any(_has_placeholder(v, depth + 1) for v in w)
    return False


def _sandbox_class(c) -> bool:
    try:
        return isinstance(c, type) and type.__dict__["__dict__"].__get__(c).get("__st_user__") is USER_MARK
    except Exception:  # noqa: BLE001
        return False


def _defined_here(v, name: str) -> bool:
    """``v`` is what a recorded def or class statement of this name made."""
    if type(v) is types.FunctionType:
        code = v.__code__
        return code.co_filename == SANDBOX_FILENAME and code.co_name == name
    return _sandbox_class(v) and type.__dict__["__name__"].__get__(v) == name


def snapshot(session) -> dict:
    rec: Recorder = session._recorder
    ns = session.namespace
    kept_defs = [
        name
        for name in rec.defs
        if name in ns
        and (_defined_here(ns[name], name) or (name in rec.decorated and _has_placeholder(to_wire(ns[name]))))
    ]
    data: dict[str, Any] = {}
    objects: dict[str, Any] = {}
    dropped: list[str] = []
    for name, v in ns.items():
        if name in kept_defs:
            continue
        t = type(v)
        if t is types.FunctionType or isinstance(v, type):
            dropped.append(name)  # not made by a def/class statement of that name
            continue
        w = to_wire(v)
        if not _has_placeholder(w):
            data[name] = w
            continue
        if _sandbox_class(t) and type.__dict__["__name__"].__get__(t) in kept_defs:
            try:
                d = object.__getattribute__(v, "__dict__")
            except AttributeError:
                dropped.append(name)  # __slots__
                continue
            st = to_wire(dict(d))
            if not _has_placeholder(st) and all(isinstance(k, str) for k in st):
                objects[name] = {"class": t.__name__, "state": st}
                continue
        dropped.append(name)
    source = "".join(f"{imp}\n" for imp in rec.imports) + "".join(rec.defs[n] for n in kept_defs)
    return {"version": VERSION, "source": source, "data": data, "objects": objects, "dropped": sorted(dropped)}


def _check(state) -> list[str]:
    problems = []
    if not isinstance(state, dict):
        return ["a state is a dict (from snapshot())"]
    if state.get("version") != VERSION:
        problems.append(f"unsupported state version {state.get('version')!r}")
    if not isinstance(state.get("source", ""), str):
        problems.append("state source must be a str")
    for key in ("data", "objects"):
        v = state.get(key, {})
        if not isinstance(v, dict) or not all(isinstance(k, str) and k.isidentifier() for k in v):
            problems.append(f"state {key} must map names to values")
    for name, o in (state.get("objects") or {}).items():
        if not (
            isinstance(o, dict)
            and isinstance(o.get("class"), str)
            and isinstance(o.get("state"), dict)
            and all(isinstance(k, str) and k.isidentifier() for k in o["state"])
        ):
            problems.append(f"state objects[{name!r}] must be {{class: str, state: {{attr: value}}}}")
    return problems


def restore(session, state):
    """Run the state's source, bind its data, rebuild its objects; the source's exec
    result (its ``error`` says what failed; a malformed state is a ValueError)."""
    from . import rewriter as rw

    problems = _check(state)
    if problems:
        raise ValueError("invalid state: " + "; ".join(problems))
    bad = [
        n
        for n in (*state.get("data", {}), *state.get("objects", {}))
        if n.startswith(rw.RESERVED_PREFIX) or n in rw.DENIED_NAMES or (n.startswith("__") and n.endswith("__"))
    ]
    if bad:
        raise ValueError(f"invalid state: names {bad}")
    r = session.exec(state.get("source", ""), namespace=dict(state.get("data") or {}) or None)
    if r.error is not None:
        return r
    ns = session._ns
    for name, o in (state.get("objects") or {}).items():
        cls = ns.get(o["class"])
        # only classes the sandbox wrote, all the way down (a host base class could
        # refuse construction: constructable=False), with object's own __new__
        if not _sandbox_class(cls) or not all(
            c is object or _sandbox_class(c) for c in type.__dict__["__mro__"].__get__(cls)
        ):
            continue
        if cls.__new__ is not object.__new__:
            continue
        try:
            inst = object.__new__(cls)
            d = object.__getattribute__(inst, "__dict__")
        except (TypeError, AttributeError):
            continue
        for k, v in o["state"].items():
            if k.startswith(rw.RESERVED_PREFIX) or (k.startswith("__") and k.endswith("__")):
                continue
            d[k] = v
        ns[name] = inst
    return r


__all__ = ["snapshot", "restore", "Recorder", "VERSION"]
