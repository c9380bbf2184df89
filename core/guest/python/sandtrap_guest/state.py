"""State across turns: a session's namespace as source plus data, never pickle.

``snapshot(session)`` returns plain msgpack-able data::

    {"version": 2,
     "source": "import math\\ndef f(x): ...\\nclass C: ...",   # the import, def and class
                                                        # statements that made what is bound
     "data": {name: value},        # plain data; an instance of a sandbox class, anywhere
                                   # in it, is {"__st_obj__": "C", "state": {attr: value}};
                                   # a list of at least COLS_MIN instances of one class
                                   # with one attribute layout is its columns:
                                   # {"__st_cols__": "C", "n": count, "cols": {attr: [value, ...]}}
     "dropped": [name, ...]}       # what could not be kept, by name

``restore(session, state)`` runs ``source`` as an ordinary exec (rewritten and checked
like any code: a state is untrusted input), binds ``data``, and rebuilds each object
without running its code (``object.__new__`` of a class the source defined, then its
attributes into its ``__dict__``). Tuples come back as lists; shared references
and cycles are not kept (a value met twice is copied; a cycle is dropped). Instances
of host classes, generators, open files, lambdas assigned to names, and classes
with ``__slots__`` are dropped (and named).

Version 2 added the columns; a version-1 state (which never holds them) restores as
before, any other version is refused.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import types
from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain, repeat
from typing import Any

from .gates import SANDBOX_FILENAME, USER_MARK
from .wire import PLACEHOLDER, to_wire

VERSION = 2
VERSIONS = (1, 2)  # what restore accepts
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
            found = _statements(source) if len(source) <= _CACHE_MAX_SOURCE else _statements.__wrapped__(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # (not cached: raised)
        for kind, name, text, decorated in found:
            if kind == "def":
                self.defs.pop(name, None)
                self.defs[name] = text
                if decorated:
                    self.decorated.add(name)
                else:
                    self.decorated.discard(name)
            else:
                self.imports.pop(text, None)
                self.imports[text] = None


_CACHE_MAX_SOURCE = 64 * 1024  # as session._compiled: bigger sources are parsed each time


@functools.lru_cache(maxsize=256)
def _statements(source: str) -> tuple[tuple[str, str, str, bool], ...]:
    """The top-level def/class statements (kind "def", name, text, decorated) and
    imports (kind "import", "", text, False) of one source, in order: a function of
    the source alone, so kept per process (a state's source is recorded again in
    every sandbox it is restored into)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out: list[tuple[str, str, str, bool]] = []
    for st in tree.body:
        if isinstance(st, _DEF):
            start = min([d.lineno for d in st.decorator_list] + [st.lineno])
            text = "".join(lines[start - 1 : st.end_lineno])
            if st.col_offset:
                continue
            out.append(("def", st.name, text if text.endswith("\n") else text + "\n", bool(st.decorator_list)))
        elif isinstance(st, (ast.Import, ast.ImportFrom)) and not st.col_offset:
            imp = ast.get_source_segment(source, st)
            if imp:
                out.append(("import", "", imp, False))
    return tuple(out)


def _has_placeholder(w: Any, depth: int = 0) -> bool:
    if depth > 200:
        return True
    if isinstance(w, dict):
        return PLACEHOLDER in w or any(_has_placeholder(v, depth + 1) for v in w.values())
    if isinstance(w, (list, tuple)):
        return any(_has_placeholder(v, depth + 1) for v in w)
    return False


def _sandbox_class(c: object) -> bool:
    try:
        return isinstance(c, type) and type.__dict__["__dict__"].__get__(c).get("__st_user__") is USER_MARK
    except Exception:  # noqa: BLE001
        return False


def _defined_here(v: object, name: str) -> bool:
    """``v`` is what a recorded def or class statement of this name made."""
    if type(v) is types.FunctionType:
        code = v.__code__
        return code.co_filename == SANDBOX_FILENAME and code.co_name == name
    return _sandbox_class(v) and type.__dict__["__name__"].__get__(v) == name


class _Drop(Exception):
    pass


OBJ = "__st_obj__"  # {OBJ: class name, "state": {attr: value}}: an instance of a sandbox class
COLS = "__st_cols__"  # {COLS: class name, "n": count, "cols": {attr: [value, ...]}}: a list of them
COLS_MIN = 16  # shorter lists keep one marker per instance


_SCALARS = frozenset({str, bytes, bool, float, type(None)})
_PLAIN = _SCALARS | {int}  # an int still needs its range checked
_NESTED = frozenset({list, dict})
_INT_MIN, _INT_MAX = -(2**63), 2**63
_KEY_TYPES = frozenset({str, int, float, bool, type(None)})
_LIST_ONLY = frozenset({list})


def _encoder(classes: set[str]) -> Callable[[Any, int], Any]:
    """An encoder for one snapshot: plain data, with instances of the kept sandbox
    classes (nested anywhere in lists, tuples and dicts) as object markers; _Drop
    when something cannot be kept. Per-type verdicts are cached for the snapshot."""
    kinds: dict[type, Any] = {}  # type -> class name (a kept sandbox class) or None
    get_dict = object.__getattribute__

    def enc(v: Any, depth: int) -> Any:
        t = type(v)
        name = kinds.get(t)
        if name:  # an instance of a kept sandbox class (its type seen before)
            return obj(v, name, depth)
        if t in _SCALARS:
            return v
        if t is int:
            if _INT_MIN <= v < _INT_MAX:
                return v
            raise _Drop
        if depth > 100:
            raise _Drop
        if t is list or t is tuple:
            if len(v) >= COLS_MIN:
                c = columns(v, depth)
                if c is not None:
                    return c
            return [
                x if type(x) in _PLAIN and (type(x) is not int or _INT_MIN <= x < _INT_MAX) else enc(x, depth + 1)
                for x in v
            ]
        if t is dict:
            out: dict[Any, Any] = {}
            for k, x in v.items():
                if type(k) not in _KEY_TYPES or (type(k) is str and k.startswith("__st_")):
                    raise _Drop
                out[k] = enc(x, depth + 1)
            return out
        name = kind(t)
        if name is not None:
            return obj(v, name, depth)
        w = to_wire(v)
        if _has_placeholder(w):
            raise _Drop
        return w

    def kind(t: type) -> Any:
        name = kinds.get(t, False)
        if name is False:
            name = None
            if _sandbox_class(t):
                n = type.__dict__["__name__"].__get__(t)
                name = n if n in classes else None
            kinds[t] = name
        return name

    def plain_column(col: Any) -> bool:
        """Every value of ``col`` kept as it is (scalars; ints in range): C-level passes."""
        ts = set(map(type, col))
        if not ts <= _PLAIN:
            return False
        if int not in ts:
            return True
        ints = col if len(ts) == 1 else [x for x in col if type(x) is int]
        return min(ints) >= _INT_MIN and max(ints) < _INT_MAX

    def columns(v: Any, depth: int) -> Any:
        """A list of instances of one kept sandbox class with one attribute layout as
        its columns (each checked in a few C-level passes); None: not such a list."""
        name = kind(type(v[0]))
        if name is None or depth > 98 or len(set(map(type, v))) != 1:
            return None
        try:
            dicts = list(map(get_dict, v, repeat("__dict__")))
        except AttributeError:
            raise _Drop from None  # __slots__
        layouts = set(map(tuple, dicts))
        if len(layouts) != 1:
            return None
        keys = layouts.pop()
        if not keys or not all(type(k) is str for k in keys):
            return None
        cols: dict[str, Any] = {}
        for k, col in zip(keys, zip(*map(dict.values, dicts), strict=True), strict=True):
            if plain_column(col):
                cols[k] = list(col)
            elif set(map(type, col)) == _LIST_ONLY and plain_column(list(chain.from_iterable(col))):
                cols[k] = list(map(list, col))  # lists of scalars: copies
            else:
                cols[k] = [enc(x, depth + 2) for x in col]
        return {COLS: name, "n": len(v), "cols": cols}

    def obj(v: Any, name: str, depth: int) -> Any:
        if depth > 100:
            raise _Drop
        try:
            d = get_dict(v, "__dict__")
        except AttributeError:
            raise _Drop from None  # __slots__
        st: dict[str, Any] = dict(d)
        for k, x in st.items():
            if type(k) is not str:
                raise _Drop
            tx = type(x)
            if tx in _SCALARS:
                continue
            if tx is int:
                if not _INT_MIN <= x < _INT_MAX:
                    raise _Drop
            elif tx is list and depth < 100:  # (a value replaced: the keys stay as they are)
                st[k] = [
                    y if type(y) in _PLAIN and (type(y) is not int or _INT_MIN <= y < _INT_MAX) else enc(y, depth + 2)
                    for y in x
                ]
            else:
                st[k] = enc(x, depth + 1)
        return {OBJ: name, "state": st}

    return enc


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector paused while a snapshot is encoded or a state's data
    decoded: everything made is kept (the result), so every collection the
    allocations would trigger (each traversing the young objects, the oldest
    generation the whole heap) is waste — half of a 1,000-object snapshot's time.
    Only these loops, never sandbox code; the previous setting comes back after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def snapshot(session: Any) -> dict[str, Any]:
    with _no_gc():
        return _snapshot(session)


def _snapshot(session: Any) -> dict[str, Any]:
    rec: Recorder = session._recorder
    ns = session.namespace
    kept_defs = [
        name
        for name in rec.defs
        if name in ns
        and (_defined_here(ns[name], name) or (name in rec.decorated and _has_placeholder(to_wire(ns[name]))))
    ]
    classes = {n for n in kept_defs if _sandbox_class(ns[n])}
    enc = _encoder(classes)
    data: dict[str, Any] = {}
    dropped: list[str] = []
    for name, v in ns.items():
        if name in kept_defs:
            continue
        if type(v) is types.FunctionType or isinstance(v, type):
            dropped.append(name)  # not made by a def/class statement of that name
            continue
        try:
            data[name] = enc(v, 0)
        except (_Drop, RecursionError):
            dropped.append(name)
    source = "".join(f"{imp}\n" for imp in rec.imports) + "".join(rec.defs[n] for n in kept_defs)
    return {"version": VERSION, "source": source, "data": data, "dropped": sorted(dropped)}


def _check(state: object) -> list[str]:
    problems: list[str] = []
    if not isinstance(state, dict):
        return ["a state is a dict (from snapshot())"]
    if state.get("version") not in VERSIONS or type(state.get("version")) is not int:
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


def _decoder(ns: dict[str, Any]) -> tuple[Callable[[Any, int], Any], Callable[[Any, int], Any]]:
    """A decoder for one restore: object markers become instances of classes the
    state's source defined (checked once per class)."""
    from . import rewriter as rw

    ok: dict[str, Any] = {}
    good: set[str] = set()  # attribute names already checked (allowed)
    new = object.__new__
    get_dict = object.__getattribute__
    reserved = rw.RESERVED_PREFIX

    def cls_for(name: Any) -> Any:
        c = ok.get(name, False)
        if c is False:
            c = ns.get(name) if isinstance(name, str) else None
            # only classes the sandbox wrote, all the way down (a host base class
            # could refuse construction: constructable=False), with object's __new__
            if not (
                _sandbox_class(c)
                and all(b is object or _sandbox_class(b) for b in type.__dict__["__mro__"].__get__(c))
                and c.__new__ is object.__new__
            ):
                c = None
            ok[name] = c
        return c

    def build(w: Any, depth: int) -> Any:
        name = w.get(OBJ)
        cls = ok.get(name, False) if type(name) is str else None
        if cls is False:
            cls = cls_for(name)
        st = w.get("state")
        if cls is None or type(st) is not dict:
            return None
        inst = new(cls)
        try:
            d = get_dict(inst, "__dict__")
        except AttributeError:
            return None
        if st.keys() <= good:  # every name seen and allowed before: one C-level update
            d.update(st)
            d1 = depth + 1
            for k, x in st.items():
                t = type(x)
                if t is list:  # a copy: never the state's own containers
                    d[k] = dec(x, d1) if d1 > 100 else [y if type(y) not in _NESTED else dec(y, d1 + 1) for y in x]
                elif t is dict:
                    d[k] = dec(x, d1)
            return inst
        for k, x in st.items():
            if type(k) is not str or k.startswith(reserved) or (k[:2] == "__" and k[-2:] == "__"):
                continue
            good.add(k)
            t = type(x)
            d[k] = dec(x, depth + 1) if (t is list or t is dict) else x
        return inst

    def columns(w: Any, depth: int) -> Any:
        """A list of instances from their columns (checked once per column, then
        C-level passes: no per-instance Python code); None if malformed."""
        name = w.get(COLS)
        cls = cls_for(name) if type(name) is str else None
        n, cols = w.get("n"), w.get("cols")
        if (
            cls is None
            or type(n) is not int
            or type(cols) is not dict
            or not cols  # the count is bounded by the columns' own lengths
            or not all(type(c) is list and len(c) == n for c in cols.values())
        ):
            return None
        insts = list(map(new, repeat(cls, n)))
        try:
            dicts = list(map(get_dict, insts, repeat("__dict__")))
        except AttributeError:
            return None
        d1 = depth + 1
        for k, col in cols.items():
            if type(k) is not str or k.startswith(reserved) or (k[:2] == "__" and k[-2:] == "__"):
                continue
            ts = set(map(type, col))
            if ts & _NESTED:  # copies: never the state's own containers
                if ts == _LIST_ONLY and not set(map(type, chain.from_iterable(col))) & _NESTED:
                    col = list(map(list, col))
                else:
                    col = [x if type(x) not in _NESTED else dec(x, d1) for x in col]
            deque(map(dict.__setitem__, dicts, repeat(k), col), maxlen=0)
        return insts

    def dec(w: Any, depth: int) -> Any:
        t = type(w)
        if t is list:
            if depth > 100:
                raise ValueError("invalid state: nested too deeply")
            d1 = depth + 1
            return [
                x
                if type(x) not in _NESTED
                else (build(x, d1) if type(x) is dict and OBJ in x and d1 <= 100 else dec(x, d1))
                for x in w
            ]
        if t is dict:
            if depth > 100:
                raise ValueError("invalid state: nested too deeply")
            if OBJ in w:
                return build(w, depth)
            if COLS in w:
                return columns(w, depth)
            return {k: dec(x, depth + 1) for k, x in w.items()}
        return w

    return dec, build


def restore(session: Any, state: Any) -> Any:
    """Run the state's source, then bind its data (objects rebuilt without running
    their code); the source's exec result (its ``error`` says what failed; a
    malformed state is a ValueError)."""
    from . import rewriter as rw

    problems = _check(state)
    if problems:
        raise ValueError("invalid state: " + "; ".join(problems))
    data = dict(state.get("data") or {})
    objects = dict(state.get("objects") or {})
    bad = [
        n
        for n in (*data, *objects)
        if n.startswith(rw.RESERVED_PREFIX) or n in rw.DENIED_NAMES or (n.startswith("__") and n.endswith("__"))
    ]
    if bad:
        raise ValueError(f"invalid state: names {bad}")
    r = session.exec(state.get("source", ""))
    if r.error is not None:
        return r
    ns = session._ns
    dec, build = _decoder(ns)
    with _no_gc():
        for name, w in data.items():
            ns[name] = dec(w, 0)
        for name, o in objects.items():  # the older form: {name: {class, state}}
            inst = build({OBJ: o["class"], "state": o["state"]}, 0)
            if inst is not None:
                ns[name] = inst
    r.namespace = session.namespace
    return r


__all__ = ["snapshot", "restore", "Recorder", "VERSION"]
