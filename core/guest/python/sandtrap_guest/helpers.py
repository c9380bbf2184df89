"""Gated versions of granted stdlib helpers, and what a grant shares with the host.

Some stdlib functions do, on behalf of their caller, what the sandbox forbids its
own code: read or write any attribute by name (``functools.update_wrapper``,
``dataclasses.asdict``/``replace``/``fields``), build objects without their
constructor (``copy.copy``/``deepcopy`` through the reduce protocol), evaluate
strings as code (``typing.get_type_hints``), build code objects, functions and
classes outside a class statement (``types.CodeType``, ``types.FunctionType``,
``types.new_class``, ``dataclasses.make_dataclass``) or change state shared by the
whole process (``random.seed``, ``decimal.DefaultContext``). When such a module is
granted, the sandbox reads the gated version from it here instead
(``substitutions``); the rest of the module is the host's own.
"""

from __future__ import annotations

import sys
import types

from .errors import StCallDenied
from .rewriter import mangle

# reduce-protocol methods: copy calls what they return, on what they return
_REDUCE_DUNDERS = ("__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__")
_ATOMIC = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    range,
    type(Ellipsis),
    type(NotImplemented),
    types.FunctionType,
    types.BuiltinFunctionType,
    type,
)
_CONTAINERS = (list, tuple, set, frozenset, dict, bytearray)


def _type_dict_get(c, name):
    try:
        return type.__dict__["__dict__"].__get__(c).get(name)
    except TypeError:
        return None


def substitutions(gate):
    """(real object, replacement or None to refuse it) for every granted-able stdlib
    helper that needs one; only for modules already imported (grants import theirs)."""
    out = []
    mods = sys.modules
    ft = mods.get("functools")
    if ft is not None:
        upd = _update_wrapper(gate)
        out.append((ft.update_wrapper, upd))
        out.append((ft.wraps, _wraps(upd, ft)))
    dc = mods.get("dataclasses")
    if dc is not None:
        fields = _fields(gate, dc)
        out.append((dc.fields, fields))
        out.append((dc.asdict, _asdict(gate, dc, fields)))
        out.append((dc.astuple, _astuple(gate, dc, fields)))
        out.append((dc.replace, _replace(gate, dc)))
        out.append((dc.make_dataclass, None))  # builds a class outside a class statement
    cp = mods.get("copy")
    if cp is not None:
        out.append((cp.copy, _copy(gate, cp, deep=False)))
        out.append((cp.deepcopy, _copy(gate, cp, deep=True)))
        if hasattr(cp, "replace"):
            out.append((cp.replace, None))
    ty = mods.get("typing")
    if ty is not None:
        out.append((ty.get_type_hints, _get_type_hints(ty)))
    tp = mods.get("types")
    if tp is not None:
        # code objects and functions built from them run unchecked bytecode; classes
        # built by new_class skip the sandbox's class statement
        for n in ("CodeType", "FunctionType", "LambdaType", "new_class", "prepare_class"):
            if hasattr(tp, n):
                out.append((getattr(tp, n), None))
    rnd = mods.get("random")
    if rnd is not None:
        inst = getattr(rnd, "_inst", None)
        mine = rnd.Random()  # this session's own generator, seeded from the OS
        for n in dir(rnd):
            v = getattr(rnd, n, None)
            if isinstance(v, (types.MethodType, types.BuiltinMethodType)) and getattr(v, "__self__", None) is inst:
                out.append((v, getattr(mine, v.__name__)))
    dec = mods.get("decimal")
    if dec is not None:
        for n in ("DefaultContext", "BasicContext", "ExtendedContext"):
            v = getattr(dec, n, None)
            if v is not None:
                out.append((v, v.copy()))  # this session's copy of the shared template
    global _ITERTOOLS
    if _ITERTOOLS is None and "itertools" in mods:
        _ITERTOOLS = _itertools_subs()  # one set of classes per process
    out.extend(_ITERTOOLS or ())
    # decorators that change the class or function they are given with real setattr:
    # on a host class they would change it for the whole process
    for modname, names in (
        ("dataclasses", ("dataclass",)),
        ("functools", ("total_ordering",)),
        ("typing", ("final", "runtime_checkable", "no_type_check", "override")),
        ("abc", ("update_abstractmethods",)),
    ):
        m = mods.get(modname)
        for n in names:
            real = getattr(m, n, None) if m is not None else None
            if real is not None:
                out.append((real, _sandbox_targets_only(real, f"{modname}.{n}")))
    # ABCMeta.register on host ABCs is refused by the gate itself (gates._host_abc)
    seen = set()
    uniq = []
    for real, repl in out:
        if id(real) not in seen:
            seen.add(id(real))
            uniq.append((real, repl))
    return uniq


# ----------------------------------------------------------- nested iterators
MAX_ITER_DEPTH = 1000
_TRACKED: set = set()


def _depth_of(v) -> int:
    if type(v) in _TRACKED:
        try:
            return v._st_depth
        except AttributeError:
            return MAX_ITER_DEPTH
    return 0


def depth_tracked(base: type) -> type:
    """A subclass of the C iterator ``base`` (``map``, ``zip``, ``itertools.chain`` ...)
    that refuses to wrap iterators nested more than ``MAX_ITER_DEPTH`` deep: the C
    ``__next__`` of such a chain recurses once per level with no recursion check, and
    a chain of ~65,000 maps overflows the C stack (a segfault of the whole process)."""

    def __new__(cls, *args, **kwargs):
        d = 0
        for a in args:
            da = _depth_of(a)
            if da > d:
                d = da
        for a in kwargs.values():
            da = _depth_of(a)
            if da > d:
                d = da
        if d >= MAX_ITER_DEPTH:
            raise RecursionError(f"{base.__name__}() over iterators nested more than {MAX_ITER_DEPTH} deep")
        self = base.__new__(cls, *args, **kwargs)
        self._st_depth = d + 1
        return self

    ns = {
        "__slots__": ("_st_depth",),
        "__new__": __new__,
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "__doc__": base.__doc__,
    }
    if "from_iterable" in base.__dict__:
        # chain.from_iterable builds its object without __new__: a generator instead
        # (its frames count toward the recursion limit)
        def from_iterable(cls, iterables):
            return (x for it in iterables for x in it)

        ns["from_iterable"] = classmethod(from_iterable)
    t = type(base.__name__, (base,), ns)
    _TRACKED.add(t)
    return t


def _itertools_subs():
    it = sys.modules.get("itertools")
    if it is None:
        return []
    out = []
    for n in (
        "chain",
        "islice",
        "starmap",
        "takewhile",
        "dropwhile",
        "filterfalse",
        "accumulate",
        "compress",
        "zip_longest",
        "pairwise",
        "cycle",
        "groupby",
        "batched",
    ):
        real = getattr(it, n, None)
        if isinstance(real, type):
            try:
                out.append((real, depth_tracked(real)))
            except TypeError:  # not subclassable
                out.append((real, None))
    if hasattr(it, "tee"):
        out.append((it.tee, None))  # its objects are not subclassable: refused
    return out


_ITERTOOLS = None


# ------------------------------------------------------- mutating decorators
def _sandbox_targets_only(real, what: str):
    from .gates import is_user_class, is_user_function

    def check(target):
        if isinstance(target, type):
            if not is_user_class(target):
                raise StCallDenied(
                    f"{what} would change the host class {target.__qualname__} for the whole "
                    "process; apply it to classes defined in the sandbox"
                )
        elif callable(target) and not is_user_function(target):
            raise StCallDenied(
                f"{what} would change the host function {getattr(target, '__qualname__', '?')}; "
                "apply it to functions defined in the sandbox"
            )
        return target

    def guarded(*args, **kwargs):
        if args:
            check(args[0])
            return real(*args, **kwargs)
        deco = real(**kwargs)  # the decorator-factory form: dataclass(frozen=True)

        def apply(target):
            return deco(check(target))

        return apply

    guarded.__name__ = real.__name__
    guarded.__qualname__ = real.__qualname__
    guarded.__doc__ = real.__doc__
    return guarded


# ------------------------------------------------------------------ functools
def _update_wrapper(gate):
    import functools

    from .gates import is_user_function

    def update_wrapper(wrapper, wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
        """functools.update_wrapper whose reads and writes go through the sandbox's
        attribute gate (names it refuses are skipped)."""
        ga, sa = gate.ga, gate.sa
        for attr in assigned:
            try:
                value = ga(wrapped, attr)
            except AttributeError:
                continue
            try:
                sa(wrapper, attr, value)
            except AttributeError:
                continue
        for attr in updated:
            if attr == "__dict__":
                try:
                    keys = list(object.__getattribute__(wrapped, "__dict__"))
                except (AttributeError, TypeError):
                    keys = []
                for k in keys:
                    if not isinstance(k, str):
                        continue
                    try:
                        sa(wrapper, k, ga(wrapped, k))
                    except AttributeError:
                        continue
            else:
                try:
                    target, source = ga(wrapper, attr), ga(wrapped, attr)
                except AttributeError:
                    continue
                target.update(source)
        if is_user_function(wrapper):
            wrapper.__wrapped__ = wrapped  # for inspect in the host; unreadable in the sandbox
        return wrapper

    return update_wrapper


def _wraps(update_wrapper, functools):
    def wraps(wrapped, assigned=functools.WRAPPER_ASSIGNMENTS, updated=functools.WRAPPER_UPDATES):
        """functools.wraps over the gated update_wrapper."""
        return functools.partial(update_wrapper, wrapped=wrapped, assigned=assigned, updated=updated)

    return wraps


# ---------------------------------------------------------------- dataclasses
def _fields(gate, dc):
    real = dc.fields

    def fields(class_or_instance):
        """dataclasses.fields, limited to the fields the sandbox may read."""
        fs = real(class_or_instance)
        return tuple(f for f in fs if gate.allows_read(class_or_instance, f.name))

    return fields


def _plain(gate, deepcopy):
    def inner(obj, factory, as_tuple, depth):
        if depth > 500:
            raise RecursionError("dataclass nested too deeply")
        if not isinstance(obj, type) and hasattr(type(obj), "__dataclass_fields__"):
            vals = [
                (f.name, inner(gate.ga(obj, f.name), factory, as_tuple, depth + 1)) for f in gate.dataclass_fields(obj)
            ]
            return factory([v for _, v in vals]) if as_tuple else factory(vals)
        t = type(obj)
        if isinstance(obj, tuple) and hasattr(t, "_fields"):
            return gate.constructor(t)(*[inner(v, factory, as_tuple, depth + 1) for v in obj])
        if isinstance(obj, (list, tuple)):
            return gate.constructor(t)(inner(v, factory, as_tuple, depth + 1) for v in obj)
        if isinstance(obj, dict):
            return gate.constructor(t)(
                (inner(k, factory, as_tuple, depth + 1), inner(v, factory, as_tuple, depth + 1)) for k, v in obj.items()
            )
        return deepcopy(obj)

    return inner


def _asdict(gate, dc, fields):
    def asdict(obj, *, dict_factory=dict):
        """dataclasses.asdict through the sandbox's gate (fields it may read, copies
        made as the sandbox could make them)."""
        if isinstance(obj, type) or not hasattr(type(obj), "__dataclass_fields__"):
            raise TypeError("asdict() should be called on dataclass instances")
        return _plain(gate, gate.helper_deepcopy)(obj, dict_factory, False, 0)

    return asdict


def _astuple(gate, dc, fields):
    def astuple(obj, *, tuple_factory=tuple):
        """dataclasses.astuple through the sandbox's gate."""
        if isinstance(obj, type) or not hasattr(type(obj), "__dataclass_fields__"):
            raise TypeError("astuple() should be called on dataclass instances")
        return _plain(gate, gate.helper_deepcopy)(obj, tuple_factory, True, 0)

    return astuple


def _replace(gate, dc):
    def replace(obj, /, **changes):
        """dataclasses.replace through the sandbox's gate: values read as the sandbox
        reads them, the new object made as the sandbox may make it."""
        if isinstance(obj, type) or not hasattr(type(obj), "__dataclass_fields__"):
            raise TypeError("replace() should be called on dataclass instances")
        all_fields = type(obj).__dataclass_fields__
        for f in all_fields.values():
            kind = getattr(f, "_field_type", None)
            if kind is getattr(dc, "_FIELD_CLASSVAR", object()):
                continue
            if not f.init:
                if f.name in changes:
                    raise ValueError(
                        f"field {f.name} is declared with init=False, it cannot be specified with replace()"
                    )
                continue
            if f.name not in changes:
                if kind is getattr(dc, "_FIELD_INITVAR", object()) and f.default is dc.MISSING:
                    raise ValueError(f"InitVar {f.name!r} must be specified with replace()")
                changes[f.name] = gate.ga(obj, f.name)
        return gate.constructor(type(obj))(**changes)

    return replace


# ----------------------------------------------------------------------- copy
def _copy(gate, cp, deep: bool):
    real = cp.deepcopy if deep else cp.copy

    def check(x):
        from .gates import is_user_type

        stack, seen = [x], set()
        while stack:
            o = stack.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            t = type(o)
            if t in _ATOMIC:
                continue
            why = gate.copy_refusal(o)
            if why:
                raise StCallDenied(f"copy.{'deepcopy' if deep else 'copy'}: {why}")
            if not deep and o is not x:
                continue  # a shallow copy shares (does not rebuild) what x holds
            user = is_user_type(t)
            if deep and not user and t not in _CONTAINERS and not gate.deepcopy_ok(t):
                raise StCallDenied(
                    f"copy.deepcopy of a {t.__module__}.{t.__qualname__} object is not "
                    "supported in the sandbox (its state is the host's)"
                )
            # what the copy will rebuild: items, the instance dict, slots
            if isinstance(o, dict):
                stack.extend(o.keys())
                stack.extend(o.values())
            elif isinstance(o, (list, tuple, set, frozenset)) or t.__name__ == "deque":
                stack.extend(o)
            elif not user and t not in _CONTAINERS and hasattr(o, "keys") and hasattr(o, "values"):
                try:
                    stack.extend(o.keys())
                    stack.extend(o.values())
                except Exception:  # noqa: BLE001 - a mapping that cannot be walked is refused
                    raise StCallDenied(f"copy: a {t.__qualname__} object that cannot be walked") from None
            try:
                stack.extend(object.__getattribute__(o, "__dict__").values())
            except (AttributeError, TypeError):
                pass
            for c in t.__mro__:
                slots = _type_dict_get(c, "__slots__")
                for sname in (slots,) if isinstance(slots, str) else slots or ():
                    if isinstance(sname, str) and sname not in ("__dict__", "__weakref__"):
                        try:
                            stack.append(object.__getattribute__(o, mangle(c.__name__, sname)))
                        except (AttributeError, TypeError):
                            pass

    def copy(x, *memo):
        """copy.copy / copy.deepcopy, refused for objects the sandbox may not clone
        (constructable=False grants, per-exec values, classes defining the reduce
        protocol, deep copies of host objects)."""
        check(x)
        return real(x, *memo) if deep else real(x)

    copy.__name__ = "deepcopy" if deep else "copy"
    return copy


# --------------------------------------------------------------------- typing
def _get_type_hints(ty):
    def refs(v, depth=0):
        if isinstance(v, (str, ty.ForwardRef)):
            return True
        if depth > 50:
            return True
        for a in getattr(v, "__args__", None) or ():
            if refs(a, depth + 1):
                return True
        return False

    def get_type_hints(obj, globalns=None, localns=None, include_extras=False):
        """typing.get_type_hints without evaluating strings: annotations written as
        strings (forward references) are refused rather than run as unchecked code."""
        if isinstance(obj, type):
            dicts = [c.__dict__.get("__annotations__", {}) for c in reversed(obj.__mro__)]  # noqa: RUF063 - no descriptor runs
        else:
            a = getattr(obj, "__annotations__", None)
            dicts = [a] if isinstance(a, dict) else []
        hints = {}
        for d in dicts:
            if not isinstance(d, dict):
                continue
            for k, v in list(d.items()):
                if refs(v):
                    raise StCallDenied(
                        f"typing.get_type_hints does not evaluate string annotations in the sandbox ({k!r})"
                    )
                hints[k] = v
        if not include_extras and hasattr(ty, "_strip_annotations"):
            hints = {k: ty._strip_annotations(v) for k, v in hints.items()}
        return hints

    return get_type_hints


__all__ = ["substitutions"]
