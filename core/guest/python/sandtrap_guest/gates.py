"""The attribute gate and the objects it hands out instead of dangerous ones.

Every attribute read, write and delete written in sandboxed code (``obj.attr``,
``getattr``/``setattr``/``delattr``/``hasattr``, ``str.format`` fields, ``match``
class patterns, ``operator.attrgetter`` when granted) is decided here.

Read rules, first match wins:

1. names starting with ``__st_`` (the runtime's own) -> denied
2. frame, traceback, code and cell objects -> every attribute denied
3. generator/coroutine/frame/traceback/code internals by name (``gi_frame``,
   ``cr_frame``, ``ag_frame``, ``tb_frame``, ``f_back``, ``f_globals``, ``co_*``
   via code objects, ``mro`` ...) -> denied on every object (``ALWAYS_DENIED``)
4. modules: only granted modules (policy grants, their submodules under
   ``recursive=True``, per-exec ``modules=``); names filtered by the grant's
   include/exclude; an attribute whose value is a module must itself be granted
5. dunders: ``SAFE_DUNDER_ATTRS`` and ``SAFE_DUNDER_METHODS`` everywhere;
   ``__init__`` on classes, super objects and sandbox-defined instances;
   ``__new__`` only through a guard that constructs sandbox-defined classes;
   any other dunder only when the sandbox itself defined it (first definer in the
   MRO is a sandbox class) and it is not structural (``NEVER_DUNDERS``)
6. ``_private`` names: allowed on sandbox-defined objects unless a host class in
   the MRO defines the name; on host objects only when a class grant's
   include/exclude allows it (default exclude ``_*``)
7. public names: allowed, except where a class grant's include/exclude says no
8. the value read is checked too: frames/tracebacks/code objects are refused;
   ``eval``/``exec``/``compile``/``open``/... are refused; ``getattr`` & co.,
   ``type``, ``operator.attrgetter``/``methodcaller``, ``string.Formatter``,
   ``str.format``/``format_map`` are replaced by gated versions.

Writes/deletes: modules are read-only; host classes and host functions are
read-only; dunders may not be written except ``__doc__``/``__name__``/
``__qualname__``/``__module__`` on sandbox-defined functions and classes;
``_private`` only on sandbox-defined objects (and not over a host-defined name);
public names on host instances are subject to class grant filters.
"""

from __future__ import annotations

import builtins
import string
import sys
import types
from typing import Any, TypeVar

from .errors import StAttributeDenied, StCallDenied
from .policy import submodule_allowed as _submodule_allowed

SANDBOX_FILENAME = "<sandbox>"
_PREFIX = "__st_"

SAFE_DUNDER_ATTRS = frozenset(
    {
        "__name__",
        "__qualname__",
        "__doc__",
        "__module__",
        "__version__",
        "__all__",
        "__members__",
    }
)
SAFE_DUNDER_METHODS = frozenset(
    {
        "__len__",
        "__iter__",
        "__next__",
        "__reversed__",
        "__contains__",
        "__getitem__",
        "__setitem__",
        "__delitem__",
        "__missing__",
        "__enter__",
        "__exit__",
        "__aenter__",
        "__aexit__",
        "__aiter__",
        "__anext__",
        "__repr__",
        "__str__",
        "__bytes__",
        "__format__",
        "__hash__",
        "__bool__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__add__",
        "__radd__",
        "__iadd__",
        "__sub__",
        "__rsub__",
        "__isub__",
        "__mul__",
        "__rmul__",
        "__imul__",
        "__matmul__",
        "__rmatmul__",
        "__imatmul__",
        "__truediv__",
        "__rtruediv__",
        "__itruediv__",
        "__floordiv__",
        "__rfloordiv__",
        "__ifloordiv__",
        "__mod__",
        "__rmod__",
        "__imod__",
        "__divmod__",
        "__rdivmod__",
        "__pow__",
        "__rpow__",
        "__ipow__",
        "__lshift__",
        "__rlshift__",
        "__ilshift__",
        "__rshift__",
        "__rrshift__",
        "__irshift__",
        "__and__",
        "__rand__",
        "__iand__",
        "__xor__",
        "__rxor__",
        "__ixor__",
        "__or__",
        "__ror__",
        "__ior__",
        "__neg__",
        "__pos__",
        "__abs__",
        "__invert__",
        "__complex__",
        "__int__",
        "__float__",
        "__index__",
        "__round__",
        "__trunc__",
        "__floor__",
        "__ceil__",
        "__call__",
        "__length_hint__",
        "__fspath__",
        "__sizeof__",
        "__copy__",
        "__deepcopy__",
        "__class_getitem__",
    }
)
# Structural dunders: never readable, even when found in a sandbox class's __dict__
# (``__dict__`` and ``__weakref__`` are descriptors Python puts there itself).
NEVER_DUNDERS = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__class__",
        "__bases__",
        "__base__",
        "__mro__",
        "__subclasses__",
        "__globals__",
        "__code__",
        "__closure__",
        "__builtins__",
        "__self__",
        "__func__",
        "__wrapped__",
        "__traceback__",
        "__defaults__",
        "__kwdefaults__",
        "__objclass__",
        "__loader__",
        "__spec__",
        "__path__",
        "__file__",
        "__cached__",
    }
)
ALWAYS_DENIED = frozenset(
    {
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "gi_running",
        "gi_suspended",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "cr_running",
        "cr_suspended",
        "ag_frame",
        "ag_code",
        "ag_await",
        "ag_running",
        "tb_frame",
        "tb_next",
        "tb_lasti",
        "tb_lineno",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "f_trace",
        "f_lasti",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "func_dict",
        "im_func",
        "im_self",
        "im_class",
        "cell_contents",
        "mro",
    }
)
WRITABLE_DUNDERS = frozenset({"__doc__", "__name__", "__qualname__", "__module__"})
# Dunders never written on sandbox classes: structural, or read by host helpers
# that would act on them (``dataclasses`` builds source code from
# ``__annotations__``; ``__del__`` would run in the host's garbage collector,
# outside every limit).
STRUCTURAL_WRITES = frozenset(
    {
        "__new__",
        "__getattribute__",
        "__setattr__",
        "__delattr__",
        "__init_subclass__",
        "__set_name__",
        "__get__",
        "__set__",
        "__delete__",
        "__class_getitem__",
        "__del__",
        "__annotations__",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__slots__",
        "__prepare__",
        "__mro_entries__",
    }
)
# Names of the object/type slot wrappers that reach past the gate (the reduce
# protocol builds objects without their constructor, ``__getattribute__`` and
# ``__setattr__`` read and write past it, ``__dir__`` lists what it hides ...).
# A C-level method or slot wrapper of one of these names is refused as a value,
# wherever it was read from and whoever stored it there.
SLOT_DENIED = frozenset(
    {
        "__getattribute__",
        "__setattr__",
        "__delattr__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__setstate__",
        "__getnewargs__",
        "__getnewargs_ex__",
        "__subclasshook__",
        "__dir__",
        "__prepare__",
        "__instancecheck__",
        "__subclasscheck__",
        "__set_name__",
        "__get__",
        "__set__",
        "__delete__",
        "__new__",
        "__subclasses__",
        "mro",
    }
)
_C_METHOD_TYPES = (
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.BuiltinFunctionType,
)
_C_DESCRIPTOR_TYPES = frozenset(
    {types.WrapperDescriptorType, types.MethodWrapperType, types.MethodDescriptorType, types.ClassMethodDescriptorType}
)
# Names whose reads are decided per object (gated replacements, definer-dependent):
# never cached.
_SPECIAL_NAMES = frozenset(
    {
        "format",
        "format_map",
        "__new__",
        "__setattr__",
        "__delattr__",
        "register",
        "__init_subclass__",
        "__init__",
        "__call__",
    }
)

OPAQUE_TYPES = (types.FrameType, types.TracebackType, types.CodeType, types.CellType)
_OPAQUE = frozenset(OPAQUE_TYPES)
_MATCH_SELF = 1 << 22  # _Py_TPFLAGS_MATCH_SELF

_type_dict = type.__dict__["__dict__"].__get__  # C-level, cannot be overridden
# the super type under another name: a function that names ``super`` gets a __class__
# cell, and a C callback could then make a zero-argument super() of the gate
_SUPER = super
_super_thisclass = super.__dict__["__thisclass__"].__get__
_super_selfclass = _SUPER.__dict__["__self_class__"].__get__
_super_self = _SUPER.__dict__["__self__"].__get__
_func_code = types.FunctionType.__dict__["__code__"].__get__


class _Marker:
    """The sentinel sandbox class bodies assign to ``__st_user__``."""

    __slots__ = ()

    def __repr__(self):
        return "<sandbox class marker>"


USER_MARK = _Marker()


def is_user_class(c: type) -> bool:
    try:
        return _type_dict(c).get("__st_user__") is USER_MARK
    except TypeError:
        return False


def is_user_type(t: type) -> bool:
    """``t`` or one of its bases was defined by sandboxed code."""
    try:
        mro = t.__mro__
    except AttributeError:
        return False
    return any(is_user_class(c) for c in mro)


_PKG = __name__.rpartition(".")[0]
_runtime_cache: dict = {}


_T = TypeVar("_T", bound=type)


def open_to_sandbox(cls: _T) -> _T:
    """Mark a class of the runtime whose instances sandboxed code may use
    (``sys.stdout``'s writer, the gated ``string.Formatter``)."""
    type.__setattr__(cls, "_st_open", True)
    _runtime_cache.clear()
    return cls


def runtime_opaque(t: type) -> bool:
    """``t`` is one of the runtime's own classes (the gate, the session, the policy
    and its grants, the meter ...): its instances and the class itself are opaque to
    sandboxed code, which could otherwise reach every capability the runtime holds.
    Exceptions and the classes marked open are exempt."""
    r = _runtime_cache.get(t)
    if r is None:
        try:
            mod = _type_dict(t).get("__module__")
            mro = t.__mro__
        except (TypeError, AttributeError):
            return False
        r = (
            isinstance(mod, str)
            and (mod == _PKG or mod.startswith(_PKG + "."))
            and not issubclass(t, BaseException)
            and not any("_st_open" in _type_dict(c) for c in mro)
        )
        if len(_runtime_cache) > 4096:
            _runtime_cache.clear()
        _runtime_cache[t] = r
    return r


def is_user_function(f: Any) -> bool:
    return type(f) is types.FunctionType and _func_code(f).co_filename == SANDBOX_FILENAME


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name[:2] == "__" and name[-2:] == "__"


def _definer(mro, name: str):
    for c in mro:
        try:
            if name in _type_dict(c):
                return c
        except TypeError:
            continue
    return None


_BUILTIN_MODULES = frozenset({"builtins"})


def _has_host_bases(mro) -> bool:
    """A class other than sandbox classes and builtins (object, Exception, dict ...)."""
    for c in mro:
        if not is_user_class(c) and getattr(c, "__module__", None) not in _BUILTIN_MODULES:
            return True
    return False


def _host_instance_attrs(obj, t, name):
    """{name} when ``obj`` already holds ``name`` although the sandbox never wrote it on
    this type (it was set by host code), else an empty tuple."""
    if not _has_host_bases(t.__mro__):
        return ()
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return ()
    return (name,) if name in d else ()


def _deny(obj: Any, name: str, why: str = "") -> StAttributeDenied:
    try:
        owner = obj.__name__ if isinstance(obj, (type, types.ModuleType)) else type(obj).__name__
    except Exception:  # noqa: BLE001
        owner = type(obj).__name__
    kind = "module" if isinstance(obj, types.ModuleType) else ("class" if isinstance(obj, type) else "object")
    msg = f"access to attribute {name!r} of {kind} {owner!r} is not allowed in the sandbox"
    if why:
        msg += f" ({why})"
    return StAttributeDenied(msg, name=name)


# ----------------------------------------------------------------- SafeType
class _SafeTypeMeta(type):
    """Metaclass of the sandbox's ``type``: one-argument calls only.

    Each session has its own ``type`` (``make_safe_type``) so that ``type(obj)`` of an
    instance of a ``constructable=False`` grant returns the non-constructable stand-in
    rather than the real class."""

    def __call__(cls, *args, **kwargs):
        base = cls.__dict__.get("_st_base")
        if base is cls:
            if len(args) == 1 and not kwargs:
                r = type(args[0])
                if r is type or isinstance(r, _SafeTypeMeta) or r is _SafeTypeMeta:
                    return cls
                p = cls._st_proxies.get(r)
                if p is not None:
                    return p
                if issubclass(r, type):
                    # a metaclass: a stand-in of the real one when the policy grants
                    # it (usable in class statements, not callable), else this
                    # sandbox's own type (whose three-argument form is refused)
                    ok = cls.__dict__.get("_st_meta_ok")
                    return ok(r) if ok is not None else cls
                if runtime_opaque(r):
                    return cls  # the runtime's own classes are not handed out
                return r
            raise StCallDenied(
                "type() with three arguments (dynamic class creation) is not "
                "allowed in the sandbox; use a class statement"
            )
        raise StCallDenied("custom metaclasses are not supported in the sandbox")

    def __instancecheck__(cls, inst):
        if cls.__dict__.get("_st_base") is cls:
            return isinstance(inst, type)
        return False

    def __subclasscheck__(cls, sub):
        if cls.__dict__.get("_st_base") is cls:
            return isinstance(sub, type) and issubclass(sub, type)
        return type.__subclasscheck__(cls, sub)

    def __repr__(cls):
        return "<class 'type'>" if cls.__dict__.get("_st_base") is cls else type.__repr__(cls)


def make_safe_type(real_to_proxy: dict | None = None) -> type:
    """A sandbox ``type``: ``type(x)`` works, ``type(name, bases, ns)`` and metaclasses
    derived from it raise StCallDenied."""
    st = _SafeTypeMeta(
        "type",
        (),
        {
            "__doc__": "type(object) -> the object's type (dynamic class creation is not available)",
            "__module__": "builtins",
            "__qualname__": "type",
            "_st_proxies": dict(real_to_proxy or {}),
        },
    )
    type.__setattr__(st, "_st_base", st)
    return st


def _no_construct_proxy(C: type):
    """Stand-in for a ``constructable=False`` class: isinstance/issubclass and member
    access work (the gate reads members from the real class); calling it does not."""

    class _NoConstructMeta(type):
        def __call__(cls, *a, **k):
            raise StCallDenied(f"{C.__name__} cannot be constructed in the sandbox (constructable=False)")

        def __instancecheck__(cls, inst):
            return isinstance(inst, C)

        def __subclasscheck__(cls, sub):
            return isinstance(sub, type) and issubclass(sub, C)

        def __repr__(cls):
            return repr(C)

    return _NoConstructMeta(
        C.__name__, (), {"__doc__": C.__doc__, "__module__": C.__module__, "__qualname__": C.__qualname__}
    )


def _meta_proxy(M: type):
    """Stand-in for a host metaclass (``abc.ABCMeta``, ``enum.EnumMeta`` ...) read by
    sandboxed code: isinstance/issubclass and member reads work, ``metaclass=`` in a
    class statement uses the real one, but calling it (``M(name, bases, ns)``: a class
    built outside a class statement, from a namespace the sandbox wrote, unmarked as
    sandbox-defined) is refused."""

    class _MetaProxyMeta(type):
        _st_meta_of = M

        def __call__(cls, *a, **k):
            raise StCallDenied(
                f"the metaclass {M.__name__} cannot be called in the sandbox; "
                f"write a class statement (class X(metaclass={M.__name__}))"
            )

        def __instancecheck__(cls, inst):
            return isinstance(inst, M)

        def __subclasscheck__(cls, sub):
            return isinstance(sub, type) and issubclass(sub, M)

        def __repr__(cls):
            return repr(M)

    return _MetaProxyMeta(
        M.__name__, (), {"__doc__": M.__doc__, "__module__": M.__module__, "__qualname__": M.__qualname__}
    )


class ExecToken:
    """Liveness of one exec's per-exec modules: revoked when the exec returns."""

    __slots__ = ("alive", "what")

    def __init__(self, what: str):
        self.alive = True
        self.what = what


class ExecRef:
    """A value given through a per-exec module (``modules=``): usable while that exec
    runs, refused afterwards, wherever sandboxed code kept it. Attribute reads go
    through the gate on the value and hand back refs for what they return that is
    not plain data; calls and operators check liveness first. What a call returns
    is a result and stays the sandbox's."""

    __slots__ = ("_st_target", "_st_token")

    def __init__(self, *a, **k):
        raise StCallDenied("this object cannot be constructed in the sandbox")

    def __call__(self, *args, **kwargs):
        return _ref_live(self)(*[_unref(a) for a in args], **{k: _unref(v) for k, v in kwargs.items()})

    def __repr__(self):
        tok = _REF_TOKEN(self)
        if not tok.alive:
            return f"<revoked value of {tok.what}>"
        return repr(_REF_TARGET(self))

    def __str__(self):
        tok = _REF_TOKEN(self)
        return str(_REF_TARGET(self)) if tok.alive else repr(self)

    def __hash__(self):
        return hash(_ref_live(self))

    def __eq__(self, other):
        return _ref_live(self) == _unref(other)

    def __ne__(self, other):
        return _ref_live(self) != _unref(other)

    def __bool__(self):
        return bool(_ref_live(self))

    def __len__(self):
        return len(_ref_live(self))

    def __iter__(self):
        return iter(_ref_live(self))

    def __next__(self):
        return next(_ref_live(self))

    def __contains__(self, item):
        return _unref(item) in _ref_live(self)

    def __getitem__(self, key):
        return _ref_live(self)[_unref(key)]

    def __setitem__(self, key, value):
        _ref_live(self)[_unref(key)] = _unref(value)

    def __delitem__(self, key):
        del _ref_live(self)[_unref(key)]

    def __enter__(self):
        return _getattr_as(_ref_live(self), "__enter__", self)()

    def __exit__(self, *exc):
        return _getattr_as(_ref_live(self), "__exit__", self)(*exc)

    async def __aenter__(self):
        return await _getattr_as(_ref_live(self), "__aenter__", self)()

    async def __aexit__(self, *exc):
        return await _getattr_as(_ref_live(self), "__aexit__", self)(*exc)


def _getattr_as(real, name, shown):
    """getattr(real, name) for a stand-in ``shown``: an AttributeError names the
    stand-in (``AttributeError.obj`` would hand out the real object)."""
    if real is shown:
        return getattr(real, name)
    err = None
    try:
        return getattr(real, name)
    except AttributeError as e:
        err = AttributeError(*e.args, name=name, obj=shown)
    raise err


_REF_TARGET = ExecRef.__dict__["_st_target"].__get__
_REF_TOKEN = ExecRef.__dict__["_st_token"].__get__
_SET_TARGET = ExecRef.__dict__["_st_target"].__set__
_SET_TOKEN = ExecRef.__dict__["_st_token"].__set__
_PLAIN_DATA = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    tuple,
    list,
    dict,
    set,
    frozenset,
    range,
    slice,
)


def _ref_live(r):
    tok = _REF_TOKEN(r)
    if not tok.alive:
        raise StCallDenied(f"{tok.what} is gone: it was given for one exec only")
    return _REF_TARGET(r)


def _unref(v):
    return _ref_live(v) if type(v) is ExecRef else v


def make_ref(v, token: ExecToken):
    r = object.__new__(ExecRef)
    _SET_TARGET(r, v)
    _SET_TOKEN(r, token)
    return r


def _exec_class_proxy(C: type, token: ExecToken, construct):
    """Stand-in for a class given through ``modules=``: construction, isinstance and
    member reads while the exec runs; construction refused afterwards."""

    class _ExecClassMeta(type):
        _st_exec_class = True

        def __call__(cls, *a, **k):
            if not token.alive:
                raise StCallDenied(f"{token.what} is gone: it was given for one exec only")
            return construct(C)(*[_unref(x) for x in a], **{n: _unref(v) for n, v in k.items()})

        def __instancecheck__(cls, inst):
            return isinstance(_unref(inst) if token.alive else inst, C)

        def __subclasscheck__(cls, sub):
            return isinstance(sub, type) and issubclass(sub, C)

        def __repr__(cls):
            return repr(C)

    return _ExecClassMeta(
        C.__name__, (), {"__doc__": C.__doc__, "__module__": C.__module__, "__qualname__": C.__qualname__}
    )


class _MatchVals:
    """Holder of a match statement's hoisted values (read by plain attribute loads)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


# ----------------------------------------------------------------------- gate
class Gate:
    """Attribute policy for one session.

    ``module_rule`` resolves modules to grants; the session supplies per-exec modules
    through ``exec_modules`` (module object -> None, meaning "every non-dunder name").
    """

    def __init__(self, policy: Any, tick: Any) -> None:
        self.policy = policy
        self._tick = tick
        self.cls_grants: dict[type, Any] = {}
        self.proxies: dict[type, type] = {}
        self.exposed_classes: dict[str, type] = {}
        for g in policy.classes.values():
            self.cls_grants[g.cls] = g
            if g.constructable:
                self.exposed_classes[g.name] = g.cls
            else:
                p = _no_construct_proxy(g.cls)
                self.proxies[p] = g.cls
                self.exposed_classes[g.name] = p
        self.module_grants: dict[int, tuple[types.ModuleType, Any]] = {}
        for g in policy.modules.values():
            self.module_grants[id(g.module)] = (g.module, g)
        self.recursive_grants = [g for g in policy.modules.values() if g.recursive]
        self._module_alias: dict[int, tuple[types.ModuleType, str]] = {}
        # type(f) of a function is a non-constructable stand-in: the real class would
        # turn any code object the sandbox finds (in a granted module's data) into a
        # callable function
        for real in (types.FunctionType,):
            p = _no_construct_proxy(real)
            self.proxies[p] = real
        self.SafeType = make_safe_type({real: p for p, real in self.proxies.items()})
        type.__setattr__(self.SafeType, "_st_meta_ok", self.metaclass_for)
        self.session_modules: dict[int, types.ModuleType] = {}  # synthetic parents (session-long)
        self.exec_modules: dict[int, types.ModuleType] = {}  # per-exec modules
        self._fast_read: dict[type, set] = {}
        self._user_written: dict[type, set] = {}
        self._fast_write: dict[type, set] = {}
        self._class_read: dict[type, dict] = {}
        self._match_guards: dict[tuple, type] = {}
        self._subst: dict[int, tuple[Any, Any]] = {}
        self._module_subst: dict[int, tuple[Any, Any]] = {}  # module attributes of any type
        self._meta_ok: dict[type, bool] = {}
        self._exec_classes: dict[type, tuple] = {}
        self.meta_proxies: dict[type, type] = {}  # stand-in -> host metaclass
        self._meta_proxy_of: dict[type, type] = {}
        self._shared: set[int] | None = None  # ids of granted modules' module-level objects
        self._shared_types: set[type] = set()
        self._build_substitutions()
        self.ga = self._make_ga()

    # ----------------------------------------------------------- substitutions
    def add_substitutions(self, pairs) -> None:
        """More (real, stand-in or None to refuse) pairs for values read from granted
        modules and builtins (a VirtualFS's file functions)."""
        for real, repl in pairs:
            entry = (real, _DENY if repl is None else repl)
            self._subst[id(real)] = entry
            self._module_subst[id(real)] = entry
        self._fast_read.clear()

    def _build_substitutions(self):
        deny = _DENY
        for n in (
            "eval",
            "exec",
            "compile",
            "__import__",
            "globals",
            "locals",
            "vars",
            "breakpoint",
            "input",
            "open",
            "help",
            "exit",
            "quit",
            "memoryview",
            "dir",
        ):
            obj = getattr(builtins, n, None)
            if obj is not None:
                self._subst[id(obj)] = (obj, deny)
        self._subst[id(builtins.getattr)] = (builtins.getattr, self.getattr)
        self._subst[id(builtins.hasattr)] = (builtins.hasattr, self.hasattr)
        self._subst[id(builtins.setattr)] = (builtins.setattr, self.setattr)
        self._subst[id(builtins.delattr)] = (builtins.delattr, self.delattr)
        self._subst[id(builtins.__build_class__)] = (builtins.__build_class__, deny)
        self._subst[id(type)] = (type, self.SafeType)
        self._subst[id(_SafeTypeMeta)] = (_SafeTypeMeta, self.SafeType)
        self._subst[id(string.Formatter)] = (string.Formatter, self.SafeFormatter)
        op = sys.modules.get("operator")
        if op is not None:
            self._subst[id(op.attrgetter)] = (op.attrgetter, self.attrgetter)
            self._subst[id(op.methodcaller)] = (op.methodcaller, self.methodcaller)
        for mod_name, attrs in (
            ("sys", ("_getframe", "settrace", "setprofile", "exit")),
            ("inspect", ("currentframe", "stack", "trace")),
            ("gc", ("get_objects", "get_referrers", "get_referents")),
            ("os", ("system", "popen", "execv", "execve", "fork", "kill")),
        ):
            m = sys.modules.get(mod_name)
            for a in attrs:
                obj = getattr(m, a, None) if m is not None else None
                if obj is not None:
                    self._subst[id(obj)] = (obj, deny)
        # granted stdlib helpers that read or write attributes, build classes or
        # code, or change process-wide state: gated versions (helpers.py)
        from . import helpers

        for real, repl in helpers.substitutions(self):
            entry = (real, deny if repl is None else repl)
            self._subst[id(real)] = entry
            self._module_subst[id(real)] = entry
        self._post_types = frozenset(
            {
                type,
                _SafeTypeMeta,
                types.BuiltinFunctionType,
                types.FunctionType,
                types.MethodType,
                types.ModuleType,
                *OPAQUE_TYPES,
                *_C_DESCRIPTOR_TYPES,
                type(builtins.help) if hasattr(builtins, "help") else type(None),
                type(getattr(builtins, "exit", None)),
            }
        )

    def _post(self, v, obj, name):
        t = type(v)
        if t in _OPAQUE:
            raise _deny(obj, name, "it would expose interpreter internals")
        entry = self._subst.get(id(v))
        if entry is not None and entry[0] is v:
            if entry[1] is _DENY:
                raise _deny(obj, name, f"{getattr(v, '__name__', type(v).__name__)} is not available in the sandbox")
            return entry[1]
        if t in _C_METHOD_TYPES:
            try:
                vname = v.__name__
            except Exception:  # noqa: BLE001
                vname = None
            if vname in SLOT_DENIED:
                raise _deny(obj, name, f"the slot wrapper {vname} reaches past the sandbox's checks")
        if t is types.ModuleType or isinstance(v, types.ModuleType):
            if isinstance(obj, types.ModuleType) and self.module_rule(v, f"{self.module_dotted(obj)}.{name}") is None:
                raise _deny(obj, name, f"module {v.__name__!r} is not granted")
        if t is type or isinstance(v, type):
            if runtime_opaque(v):
                raise _deny(obj, name, "it is part of the sandbox's runtime")
            if (
                issubclass(v, type)
                and v is not type
                and getattr(v, "_st_meta_of", None) is None
                and not issubclass(v, _SafeTypeMeta)
            ):
                return self.meta_proxy(v)  # a host metaclass: usable, not callable
        return v

    # ---------------------------------------------------------- metaclasses
    def metaclass_for(self, M: type):
        """What ``type(C)`` gives sandboxed code for a class whose metaclass is ``M``."""
        if M is type or M is _SafeTypeMeta:
            return self.SafeType
        if getattr(M, "_st_meta_of", None) is not None:
            return M
        return self.meta_proxy(M) if self.metaclass_granted(M) else self.SafeType

    def meta_proxy(self, M: type):
        p = self._meta_proxy_of.get(M)
        if p is None:
            p = self._meta_proxy_of[M] = _meta_proxy(M)
            self.meta_proxies[p] = M
        return p

    def metaclass_granted(self, M: type) -> bool:
        """``M`` (a metaclass) is reachable through the policy: a class grant, the
        metaclass of one, or an attribute of a granted module (or the metaclass of a
        class there) that the grant's filter lets through."""
        if self._meta_ok.get(M):
            return True
        ok = False
        if not (is_user_type(M) or runtime_opaque(M) or issubclass(M, _SafeTypeMeta)):
            if M in self.cls_grants or any(type(c) is M for c in self.cls_grants):
                ok = True
            else:
                for mod in self._granted_modules():
                    for k, v in list(vars(mod).items()):
                        if (v is M or (isinstance(v, type) and type(v) is M)) and self._module_name_ok(mod, k):
                            ok = True
                            break
                    if ok:
                        break
        if ok:
            self._meta_ok[M] = True  # only positive answers: a later import may add one
        return ok

    def _granted_modules(self):
        seen = []
        for m, _g in self.module_grants.values():
            seen.append(m)
        for g in self.recursive_grants:
            root = g.module.__name__ + "."
            for name, m in list(sys.modules.items()):
                if isinstance(m, types.ModuleType) and name.startswith(root) and self.module_rule(m) is not None:
                    seen.append(m)
        return seen

    def build_class(self, func, name, *bases, **kw):
        """``__build_class__`` for sandboxed class statements: a class is made by its
        bases' (or ``metaclass=``'s) metaclass only when that is ``type`` or a host
        metaclass; defining a metaclass, a metaclass written in the sandbox, the
        runtime's stand-ins and non-class metaclasses are refused before the class
        body runs (a custom ``__prepare__`` would otherwise see it)."""
        meta = kw.get("metaclass")
        if meta is self.SafeType:
            kw["metaclass"] = meta = type
        elif meta in self.meta_proxies:
            kw["metaclass"] = meta = self.meta_proxies[meta]
        for b in bases:
            if isinstance(b, type) and (
                issubclass(b, type) or b is self.SafeType or isinstance(b, _SafeTypeMeta) or b in self.meta_proxies
            ):
                raise StCallDenied("defining a metaclass is not supported in the sandbox")
        metas = [] if meta is None else [meta]
        metas.extend(type(b) for b in bases if isinstance(b, type))
        for M in metas:
            if M is type:
                continue
            if not isinstance(M, type):
                raise StCallDenied("metaclass= must be a class in the sandbox")
            if any(type(p) is M for p in self.proxies):
                raise StCallDenied("a class granted with constructable=False cannot be subclassed in the sandbox")
            if getattr(M, "_st_exec_class", False):
                raise StCallDenied(
                    "a class given through modules= cannot be subclassed in the sandbox "
                    "(it is gone when the exec returns); pass it in namespace= instead"
                )
            if getattr(M, "_st_meta_of", None) is not None:
                raise StCallDenied("defining a metaclass is not supported in the sandbox")
            if runtime_opaque(M) or is_user_type(M) or issubclass(M, _SafeTypeMeta):
                raise StCallDenied("custom metaclasses are not supported in the sandbox")
        return builtins.__build_class__(func, name, *bases, **kw)

    # ---------------------------------------------------- per-exec values
    def exec_value(self, v, token: ExecToken):
        """What sandboxed code gets for ``v`` given through a per-exec module."""
        t = type(v)
        if t in _PLAIN_DATA or t is ExecRef or isinstance(v, types.ModuleType):
            return v
        if isinstance(v, type):
            if v in self.cls_grants or v in self.proxies or is_user_type(v):
                return self.exposed_classes.get(getattr(self.cls_grants.get(v), "name", None), v)
            p = _exec_class_proxy(v, token, self.constructor)
            self._exec_classes[p] = (v, token)
            st = self.SafeType._st_proxies
            if v not in st or getattr(type(st[v]), "_st_exec_class", False):
                st[v] = p  # type(instance) is the revocable stand-in too
            return p
        return make_ref(v, token)

    def constructor(self, C):
        """``C`` when sandboxed code may construct it (helpers that build objects)."""
        g = self._grant_for(C.__mro__)[0] if isinstance(C, type) else None
        if g is not None and not g.constructable:
            raise StCallDenied(f"{C.__name__} cannot be constructed in the sandbox (constructable=False)")
        if isinstance(C, type) and runtime_opaque(C):
            raise StCallDenied("the sandbox's runtime objects cannot be constructed")
        return C

    # ------------------------------------------------ helpers (helpers.py)
    def dataclass_fields(self, obj):
        import dataclasses

        return [f for f in dataclasses.fields(obj) if self.allows_read(obj, f.name)]

    def copy_refusal(self, o) -> str | None:
        t = type(o)
        if t is ExecRef:
            return "a value given through modules= cannot be copied"
        if runtime_opaque(t):
            return "the sandbox's runtime objects cannot be copied"
        g = self._grant_for(t.__mro__)[0]
        if g is not None and not g.constructable:
            return f"{t.__name__} cannot be constructed in the sandbox (constructable=False)"
        from .helpers import _REDUCE_DUNDERS

        for n in _REDUCE_DUNDERS:
            # the reduce protocol as the sandbox wrote it — in a class statement, or
            # handed to host code that built a class from it (enum's functional API)
            d = _definer(t.__mro__, n)
            if d is None:
                continue
            v = _type_dict(d)[n]
            v = getattr(v, "__func__", v) if isinstance(v, (staticmethod, classmethod)) else v
            if is_user_class(d) or is_user_function(v):
                return f"class {t.__name__} defines {n} in the sandbox, which copy would act on unchecked"
        return None

    _DEEPCOPY_MODULES = frozenset(
        {"datetime", "decimal", "fractions", "uuid", "pathlib", "ipaddress", "re", "enum", "collections", "zoneinfo"}
    )

    def deepcopy_ok(self, t) -> bool:
        """Host types whose deep copy involves only values (or items, walked by the
        caller) — not state the host set on an object."""
        return (getattr(t, "__module__", None) in self._DEEPCOPY_MODULES and not is_user_type(t)) or issubclass(
            t, (list, tuple, set, frozenset, dict)
        )

    @property
    def helper_deepcopy(self):
        import copy as _copy_mod

        from .helpers import _copy

        f = self.__dict__.get("_helper_deepcopy")
        if f is None:
            f = self.__dict__["_helper_deepcopy"] = _copy(self, _copy_mod, deep=True)
        return f

    def exec_done(self):
        """The exec returned: forget the stand-ins of its (now revoked) classes."""
        if self._exec_classes:
            for p in [p for p, (_c, tok) in self._exec_classes.items() if not tok.alive]:
                del self._exec_classes[p]

    def _exec_class(self, obj):
        entry = self._exec_classes.get(obj)
        if entry is None:
            return obj
        C, token = entry
        if not token.alive:
            raise StCallDenied(f"{token.what} is gone: it was given for one exec only")
        return C

    def _read_ref(self, ref, name):
        target = _ref_live(ref)
        err = None
        try:
            v = self.ga(target, name)
        except AttributeError as e:
            if type(e) is not AttributeError:
                raise  # the gate's own refusal names no object
            err = AttributeError(*e.args, name=name, obj=ref)
        if err is not None:
            raise err  # (outside the handler: no __context__ holding the real object)
        return self.exec_value(v, _REF_TOKEN(ref))

    # ----------------------------------------------------- shared host state
    def _shared_ids(self) -> set:
        """ids of the objects held at module level by granted modules (a decimal
        context, a logger, a registry ...): shared with the host, so read-only."""
        if self._shared is None:
            ids, kinds = set(), set()
            for mod in self._granted_modules():
                for v in list(vars(mod).values()):
                    if not isinstance(
                        v,
                        (
                            type,
                            types.ModuleType,
                            types.FunctionType,
                            types.BuiltinFunctionType,
                            str,
                            bytes,
                            int,
                            float,
                            complex,
                            bool,
                            type(None),
                            tuple,
                            frozenset,
                        ),
                    ):
                        ids.add(id(v))
                        kinds.add(type(v))
            self._shared, self._shared_types = ids, kinds
            self._fast_write.clear()
        return self._shared

    # ------------------------------------------------------------- modules
    def module_rule(self, m: types.ModuleType, alias: str | None = None):
        """(kind, grant) for an accessible module, else None.  kind: grant|all.

        A submodule is judged by the most specific grant whose module it lives
        under, by its own name or by the dotted name it was reached through
        (``alias``: ``os.path`` is ``posixpath``; kept for later reads): under a
        non-recursive grant nothing below it is granted, even when an outer grant
        is recursive."""
        mid = id(m)
        if mid in self.exec_modules and self.exec_modules[mid] is m:
            return ("all", None)
        if mid in self.session_modules and self.session_modules[mid] is m:
            return ("all", None)
        entry = self.module_grants.get(mid)
        if entry is not None and entry[0] is m:
            return ("grant", entry[1])
        names = []
        name = getattr(m, "__name__", None)
        if isinstance(name, str) and sys.modules.get(name) is m:
            names.append(name)
        if isinstance(alias, str) and sys.modules.get(alias) is m:
            names.append(alias)
        known = self._module_alias.get(mid)
        if known is not None and known[0] is m and sys.modules.get(known[1]) is m:
            names.append(known[1])
        for name in names:
            g = self._innermost_grant(name)
            if g is None or not g.recursive:
                continue
            root = g.module.__name__
            if self.submodule_allowed(g, name[len(root) + 1 :].split(".")):
                if name != getattr(m, "__name__", None):
                    self._module_alias[mid] = (m, name)
                return ("grant", g)
        return None

    def _innermost_grant(self, dotted: str):
        """The grant of the longest module name that ``dotted`` lives under."""
        best = None
        for gm, g in self.module_grants.values():
            root = getattr(gm, "__name__", None)
            if isinstance(root, str) and dotted.startswith(root + "."):
                if best is None or len(root) > len(best.module.__name__):
                    best = g
        return best

    def module_dotted(self, m: types.ModuleType) -> str:
        """The dotted name a granted submodule was reached by (its own, or its alias)."""
        known = self._module_alias.get(id(m))
        if known is not None and known[0] is m:
            return known[1]
        return m.__name__

    submodule_allowed = staticmethod(_submodule_allowed)

    def _module_name_ok(self, m, name: str) -> bool:
        rule = self.module_rule(m)
        if rule is None:
            return False
        if _is_dunder(name):
            return name in ("__name__", "__doc__", "__version__", "__all__")
        kind, g = rule
        if kind == "all":
            return True
        dotted = self.module_dotted(m)
        quals = (f"{g.name}.{name}", f"{dotted}.{name}")
        if m is not g.module:
            rel = dotted[len(g.module.__name__) :]
            quals += (f"{g.name}{rel}.{name}",)
        return g.filter.allows(name, quals)

    def _read_module(self, m, name):
        ok = self._module_name_ok(m, name)
        if not ok:
            if self.module_rule(m) is None:
                raise _deny(m, name, f"module {getattr(m, '__name__', '?')!r} is not granted")
            raise _deny(m, name, "excluded by the module grant")
        try:
            v = getattr(m, name)
        except AttributeError:
            rule = self.module_rule(m)
            if rule and rule[0] == "grant" and rule[1].recursive and not _is_dunder(name):
                import importlib

                try:
                    v = importlib.import_module(f"{self.module_dotted(m)}.{name}")
                except ImportError:
                    raise AttributeError(f"module {m.__name__!r} has no attribute {name!r}") from None
            else:
                raise
        if isinstance(v, types.ModuleType):
            if self.module_rule(v, f"{self.module_dotted(m)}.{name}") is None:
                raise _deny(m, name, f"module {v.__name__!r} is not granted")
            self._shared = None  # a submodule may have been imported
        entry = self._module_subst.get(id(v))
        if entry is not None and entry[0] is v:
            if entry[1] is _DENY:
                raise _deny(m, name, f"{name} is not available in the sandbox")
            return entry[1]
        if type(v) in self._post_types:
            v = self._post(v, m, name)
        return v

    # ------------------------------------------------------------- decisions
    def _grant_for(self, mro):
        for c in mro:
            g = self.cls_grants.get(c)
            if g is not None:
                return g, c
        return None, None

    @staticmethod
    def _quals(mro, name):
        out = []
        for c in mro:
            out.append(f"{c.__name__}.{name}")
            out.append(f"{c.__module__}.{c.__qualname__}.{name}")
        return out

    def _filter_ok(self, mro, name, definer) -> bool:
        """Class-grant filter for host-defined members (True when no grant applies)."""
        g, _gc = self._grant_for(mro)
        if g is None:
            return not name.startswith("_")
        return g.filter.allows(name, self._quals(mro, name))

    def _member_ok(self, mro, name, user: bool, *, allow_init: bool, inst_type: type | None = None) -> bool:
        """Shared rule for instances, classes and super objects (``mro`` is where lookup
        starts).  ``user``: the object belongs to a sandbox-defined class.  ``inst_type``:
        the type when deciding for an instance."""
        if name in ALWAYS_DENIED or name.startswith(_PREFIX):
            return False
        if _is_dunder(name):
            if name in NEVER_DUNDERS:
                return False
            if name in SAFE_DUNDER_ATTRS or name in SAFE_DUNDER_METHODS:
                return True
            if name == "__init__" and allow_init:
                return True
            if user:
                d = _definer(mro, name)
                return d is not None and is_user_class(d)
            return False
        if user:
            d = _definer(mro, name)
            if d is not None:
                return is_user_class(d) or self._filter_ok(mro, name, d)
            if (
                inst_type is not None
                and name.startswith("_")
                and _has_host_bases(mro)
                and name not in self._user_written.get(inst_type, ())
            ):
                # an instance attribute no class defines: on a sandbox class with host
                # bases it may be host state (set by the host base's __init__); only
                # names the sandbox itself has written on this type are readable
                return False
            return True
        return self._filter_ok(mro, name, None)

    def _instance_ok(self, t: type, name: str, obj: Any = None) -> bool:
        if t in _OPAQUE or runtime_opaque(t):
            return False
        user = is_user_type(t)
        if (
            user
            and obj is not None
            and name[:1] == "_"
            and not _is_dunder(name)
            and name not in self._user_written.get(t, ())
            and _host_instance_attrs(obj, t, name)
        ):
            # a private instance attribute host code set (a host base's __init__):
            # private, even where a sandbox class defines the same name (the
            # instance's value shadows the class attribute)
            return False
        return self._member_ok(t.__mro__, name, user, allow_init=user, inst_type=t)

    def _read_stable(self, mro, name, user: bool) -> bool:
        """The read verdict for ``name`` on objects with this MRO cannot change with
        the contents of the classes' dicts (so it may be cached). Host classes are
        read-only to sandboxed code; on sandbox classes a verdict that depends on
        which class defines the name (dunders, private names next to host bases,
        names a class grant filters) is decided again on every read."""
        if name in _SPECIAL_NAMES:
            return False
        if not user or name in ALWAYS_DENIED or name.startswith(_PREFIX):
            return True
        if _is_dunder(name):
            return (
                name in NEVER_DUNDERS or name in SAFE_DUNDER_ATTRS or name in SAFE_DUNDER_METHODS or name == "__init__"
            )
        if name.startswith("_"):
            return not _has_host_bases(mro)
        return self._grant_for(mro)[0] is None

    def check_read(self, obj, name) -> None:
        """Raise StAttributeDenied unless sandboxed code may read ``obj.name``."""
        if type(name) is not str:
            raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
        if isinstance(obj, types.ModuleType):
            if not self._module_name_ok(obj, name):
                raise _deny(obj, name)
            return
        special = self._special_read(obj, name)
        if special is not None:
            return
        if not self._decide_read(obj, name):
            raise _deny(obj, name)

    def allows_read(self, obj, name) -> bool:
        try:
            self.check_read(obj, name)
            return True
        except (AttributeError, TypeError):
            return False

    def _decide_read(self, obj, name) -> bool:
        t = type(obj)
        if t is _SUPER:
            this = _super_thisclass(obj)
            if not is_user_class(this):
                # super(HostClass, obj) skips the host class's own members and its
                # grant's filter: only sandbox classes may be the start of a super()
                return False
            selfcls = _super_selfclass(obj)
            if selfcls is None:
                return name in SAFE_DUNDER_ATTRS
            mro = selfcls.__mro__
            try:
                mro = mro[mro.index(this) + 1 :]
            except ValueError:
                pass
            if name == "__init_subclass__":
                return True  # super().__init_subclass__(**kw): object's no-op classmethod
            return self._member_ok(mro, name, True, allow_init=True)
        if isinstance(obj, type):
            real = self.proxies.get(obj) or self.meta_proxies.get(obj) or obj
            if runtime_opaque(real):
                return False
            if name == "register" and self._host_abc(real):
                return False
            return self._member_ok(real.__mro__, name, is_user_type(real), allow_init=True)
        if t is types.FunctionType:
            if name in ALWAYS_DENIED or name.startswith(_PREFIX):
                return False
            if _is_dunder(name):
                return name in SAFE_DUNDER_ATTRS or name in SAFE_DUNDER_METHODS
            return is_user_function(obj) or not name.startswith("_")
        return self._instance_ok(t, name, obj)

    @staticmethod
    def _host_abc(c) -> bool:
        """A class whose ``register`` changes process-wide state: ``ABCMeta`` itself
        and every abstract base class not defined in the sandbox."""
        abc = sys.modules.get("abc")
        if abc is None:
            return False
        meta = abc.ABCMeta
        return (c is meta or issubclass(c, meta) or isinstance(c, meta)) and not is_user_class(c)

    def _special_read(self, obj, name):
        """Members replaced by gated versions (returns a callable or None)."""
        if name == "format" or name == "format_map":
            t = type(obj)
            if t is _SUPER:
                self_obj = _super_self(obj)
                this = _super_thisclass(obj)
                selfcls = _super_selfclass(obj)
                if selfcls is not None and is_user_class(this) and issubclass(selfcls, str):
                    mro = selfcls.__mro__
                    d = _definer(mro[mro.index(this) + 1 :] if this in mro else mro, name)
                    if d is None or not is_user_class(d):
                        if isinstance(self_obj, str):
                            return self._bound_format(self_obj, name)
                        return self._unbound_format(name)
            elif isinstance(obj, str):
                d = _definer(t.__mro__, name)
                if d is None or not is_user_class(d):
                    return self._bound_format(obj, name)
            elif isinstance(obj, type) and issubclass(obj, str):
                d = _definer(obj.__mro__, name)
                if d is None or not is_user_class(d):
                    return self._unbound_format(name)
        if isinstance(obj, type) and (name == "__init__" or name == "__call__"):
            real = self.proxies.get(obj) or self.meta_proxies.get(obj) or self._exec_class(obj)
            d = _definer(real.__mro__, name)
            if name == "__call__" and d is None:
                # not an instance method of the class: its metaclass's __call__, bound
                # to the real class — its constructor, past constructable=False
                raise _deny(obj, name, "a class's constructor is reached by calling the class")
            if name == "__init__" and d is not None and not is_user_class(d):
                return self._guarded_init(real, d)
        if name == "__new__" and (type(obj) is _SUPER or isinstance(obj, type)):
            if type(obj) is _SUPER and not is_user_class(_super_thisclass(obj)):
                return None
            return self._guarded_new(obj)
        if type(obj) is _SUPER and name in ("__setattr__", "__delattr__"):
            this = _super_thisclass(obj)
            if is_user_class(this) and _super_self(obj) is not None:
                return self._guarded_super_setattr(obj, name)
        return None

    def _slow_read(self, obj, name):
        if type(name) is not str:
            raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
        if name.startswith(_PREFIX):
            raise _deny(obj, name, "reserved name")
        if isinstance(obj, types.ModuleType):
            return self._read_module(obj, name)
        t = type(obj)
        if t is ExecRef:
            return self._read_ref(obj, name)
        special = self._special_read(obj, name)
        if special is not None:
            return special
        if isinstance(obj, type):
            real = self.proxies.get(obj) or self.meta_proxies.get(obj)
            if real is None:
                real = self._exec_class(obj)
            cache = self._class_read.get(obj)
            if cache is None:
                if len(self._class_read) > 4096:
                    self._class_read.clear()
                cache = self._class_read[obj] = {}
            ok = cache.get(name)
            if ok is None:
                ok = self._decide_read(real, name)
                if self._read_stable(real.__mro__, name, is_user_type(real)):
                    cache[name] = ok
            if not ok:
                raise _deny(obj, name)
            v = _getattr_as(real, name, obj)
        else:
            ok = self._decide_read(obj, name)
            if not ok:
                raise _deny(obj, name)
            if t is not _SUPER and t is not types.FunctionType and t not in _OPAQUE:
                if self._read_stable(t.__mro__, name, is_user_type(t)):
                    fast = self._fast_read.get(t)
                    if fast is None:
                        if len(self._fast_read) > 4096:
                            self._fast_read.clear()
                        fast = self._fast_read[t] = set()
                    fast.add(name)
            elif t is types.FunctionType and not name.startswith("_"):
                self._fast_read.setdefault(t, set()).add(name)
            v = getattr(obj, name)
        if type(v) in self._post_types:
            return self._post(v, obj, name)
        return v

    def _make_ga(self):
        fast_get = self._fast_read.get
        post_types = self._post_types
        subst_get = self._subst.get
        opaque = _OPAQUE
        c_descriptors = _C_DESCRIPTOR_TYPES
        post = self._post
        slow = self._slow_read
        _type = type
        _getattr = getattr
        _id = id

        def __st_ga__(obj, name):
            names = fast_get(_type(obj))
            if names is not None and name in names:
                v = _getattr(obj, name)
                tv = _type(v)
                # (the fast path never sees modules, so only substitutions and
                # interpreter internals need checking here)
                if tv in post_types and (tv in opaque or tv in c_descriptors or subst_get(_id(v)) is not None):
                    return post(v, obj, name)
                return v
            return slow(obj, name)

        return __st_ga__

    # -------------------------------------------------------------- writes
    def _decide_write(self, obj, name) -> str | None:
        """None if allowed, else the reason."""
        if type(name) is not str:
            raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
        if name.startswith(_PREFIX):
            return "reserved name"
        if isinstance(obj, types.ModuleType):
            return "modules are read-only in the sandbox"
        t = type(obj)
        if t in _OPAQUE:
            return "interpreter internals"
        if name in ALWAYS_DENIED:
            return "interpreter internals"
        if t is ExecRef or runtime_opaque(t) or (isinstance(obj, type) and runtime_opaque(obj)):
            return "part of the sandbox's runtime"
        if isinstance(obj, type):
            if obj in self.proxies or not is_user_class(obj):
                return "host classes are read-only in the sandbox"
            if _is_dunder(name):
                if name in WRITABLE_DUNDERS:
                    return None
                if name in NEVER_DUNDERS or name in STRUCTURAL_WRITES:
                    return "structural attribute"
                return None
            if name.startswith("_"):
                d = _definer(obj.__mro__, name)
                if d is not None and not is_user_class(d):
                    return "defined by a host class"
            return None
        if t is types.FunctionType:
            if not is_user_function(obj):
                return "host functions are read-only in the sandbox"
            if _is_dunder(name):
                return None if name in WRITABLE_DUNDERS else "structural attribute"
            return None
        if t is _SUPER or t in (types.MethodType, types.BuiltinFunctionType):
            return "read-only object"
        if _is_dunder(name):
            return "dunder attributes cannot be written in the sandbox"
        mro = t.__mro__
        if is_user_type(t):
            d = _definer(mro, name)
            if d is None or is_user_class(d):
                if d is None and name.startswith("_"):
                    if name in _host_instance_attrs(obj, t, name):
                        return "private attribute set by a host class"
                    self._user_written.setdefault(t, set()).add(name)
                return None
            return None if self._filter_ok(mro, name, d) else "not allowed by the class grant"
        if id(obj) in self._shared_ids():
            return "module-level object of a granted module (shared with the host): read-only"
        return (
            None
            if self._filter_ok(mro, name, None)
            else ("private attribute of a host object" if name.startswith("_") else "not allowed by the class grant")
        )

    def _write_slow(self, obj, name):
        why = self._decide_write(obj, name)
        if why is not None:
            raise _deny(obj, name, why)
        t = type(obj)
        if name.startswith("_") and _has_host_bases(t.__mro__):
            return  # decided per instance (host-set private state), never cached
        if isinstance(obj, (type, types.ModuleType)) or t is types.FunctionType:
            return
        if is_user_type(t):
            # on sandbox instances the verdict depends on which class defines the
            # name unless no class grant applies: cache only what cannot change
            if self._grant_for(t.__mro__)[0] is not None:
                return
        else:
            self._shared_ids()
            if t in self._shared_types:
                return  # some instances of this type are module-level shared state
        fast = self._fast_write
        if len(fast) > 4096:
            fast.clear()
        fast.setdefault(t, set()).add(name)

    def _make_sa(self, delete: bool):
        fast_get = self._fast_write.get
        slow = self._write_slow
        _type = type

        if delete:

            def __st_da__(obj, name):
                names = fast_get(_type(obj))
                if names is None or name not in names:
                    slow(obj, name)
                delattr(obj, name)

            return __st_da__

        def __st_sa__(obj, name, value):
            names = fast_get(_type(obj))
            if names is None or name not in names:
                slow(obj, name)
            setattr(obj, name, value)

        return __st_sa__

    # --------------------------------------------------- gated builtins & co
    def getattr(self, obj, name, *default):
        if len(default) > 1:
            raise TypeError(f"getattr expected at most 3 arguments, got {2 + len(default)}")
        if type(name) is not str:
            raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
        if default:
            try:
                return self.ga(obj, name)
            except AttributeError:
                return default[0]
        return self.ga(obj, name)

    def hasattr(self, obj, name):
        if type(name) is not str:
            raise TypeError(f"attribute name must be string, not '{type(name).__name__}'")
        try:
            self.ga(obj, name)
            return True
        except AttributeError:
            return False

    def setattr(self, obj, name, value):
        self.sa(obj, name, value)

    def delattr(self, obj, name):
        self.da(obj, name)

    def _bound_format(self, s: str, which: str):
        fmt = self.SafeFormatter()
        if which == "format":

            def format(*args, **kwargs):  # noqa: A001 - mirrors str.format
                return fmt.vformat(s, args, kwargs)
        else:

            def format(mapping):  # noqa: A001
                return fmt.vformat(s, (), mapping)

            format.__name__ = "format_map"
        format.__doc__ = getattr(str, which).__doc__
        return format

    def _unbound_format(self, which: str):
        gate = self
        if which == "format":

            def format(self, *args, **kwargs):  # noqa: A001
                if not isinstance(self, str):
                    raise TypeError("descriptor 'format' requires a 'str' object")
                return gate.SafeFormatter().vformat(self, args, kwargs)
        else:

            def format(self, mapping):  # noqa: A001
                if not isinstance(self, str):
                    raise TypeError("descriptor 'format_map' requires a 'str' object")
                return gate.SafeFormatter().vformat(self, (), mapping)

            format.__name__ = "format_map"
        return format

    def _guarded_new(self, obj):
        if type(obj) is _SUPER:
            target = obj.__new__
        else:
            target = self.proxies.get(obj, obj).__new__

        def __new__(cls, *args, **kwargs):
            if not (isinstance(cls, type) and is_user_type(cls)):
                raise StCallDenied("__new__ may only construct classes defined in the sandbox")
            return target(cls, *args, **kwargs)

        return __new__

    def _guarded_init(self, real, definer):
        """``HostClass.__init__`` read from a class: initializes only instances of
        sandbox classes (``Base.__init__(self)`` in a sandbox subclass), never an
        existing host object (which would rewrite its private state)."""
        init = _type_dict(definer)["__init__"]

        def __init__(self_, *args, **kwargs):
            if not is_user_type(type(self_)):
                raise StCallDenied(
                    f"{real.__name__}.__init__ may only initialize instances of classes defined in the sandbox"
                )
            return init(self_, *args, **kwargs)

        return __init__

    def _guarded_super_setattr(self, sup, which):
        method = getattr(sup, which)

        def guarded(name, *value):
            if type(name) is not str:
                raise TypeError("attribute name must be string")
            if _is_dunder(name) or name.startswith(_PREFIX):
                raise _deny(_super_self(sup), name, "dunder attributes cannot be written in the sandbox")
            return method(name, *value)

        guarded.__name__ = which
        return guarded

    def attrgetter(self, *attrs):
        """Gated operator.attrgetter."""
        for a in attrs:
            if type(a) is not str:
                raise TypeError("attribute name must be a string")
        paths = [a.split(".") for a in attrs]
        ga = self.ga

        def resolve(obj, path):
            for p in path:
                obj = ga(obj, p)
            return obj

        if len(paths) == 1:
            return lambda obj: resolve(obj, paths[0])
        return lambda obj: tuple(resolve(obj, p) for p in paths)

    def methodcaller(self, name, /, *args, **kwargs):
        """Gated operator.methodcaller."""
        if type(name) is not str:
            raise TypeError("method name must be a string")
        ga = self.ga
        return lambda obj: ga(obj, name)(*args, **kwargs)

    @property
    def SafeFormatter(self):
        gate = self
        cls = getattr(self, "_safe_formatter_cls", None)
        if cls is None:
            import _string

            class SafeFormatter(string.Formatter):
                """string.Formatter whose field lookups go through the attribute gate."""

                def get_field(self, field_name, args, kwargs):
                    first, rest = _string.formatter_field_name_split(field_name)
                    obj = self.get_value(first, args, kwargs)
                    for is_attr, i in rest:
                        obj = gate.ga(obj, i) if is_attr else obj[i]
                    return obj, first

            cls = self._safe_formatter_cls = open_to_sandbox(SafeFormatter)
        return cls

    # ---------------------------------------------------------------- match
    def match_class(self, cls, npos: int, kwd: tuple):
        """Class used in a ``case cls(...)`` pattern: the class itself when the pattern
        reads no attribute, else a guard whose isinstance check gates every attribute
        the pattern will read from the subject."""
        real = self.proxies.get(cls, cls) if isinstance(cls, type) else cls
        if not isinstance(real, type):
            raise TypeError("called match pattern must be a class")
        if npos == 0 and not kwd:
            return cls
        ma = getattr(real, "__match_args__", None)
        if ma is None and npos == 1 and not kwd and real.__flags__ & _MATCH_SELF:
            return real
        key = (real, npos, kwd)
        guard = self._match_guards.get(key)
        if guard is not None:
            return guard
        names = []
        if isinstance(ma, tuple):
            names.extend(ma[:npos])
        names.extend(kwd)
        gate = self

        class _MatchGuardMeta(type):
            def __instancecheck__(g, inst):
                if not isinstance(inst, real):
                    return False
                for n in names:
                    if type(n) is not str:
                        continue  # CPython reports the bad __match_args__ itself
                    try:
                        gate.ga(inst, n)
                    except StAttributeDenied:
                        raise
                    except AttributeError:
                        return False
                return True

        ns = {"__module__": real.__module__, "__qualname__": real.__qualname__}
        if ma is not None:
            ns["__match_args__"] = ma
        guard = _MatchGuardMeta(real.__name__, (), ns)
        if len(self._match_guards) > 1024:
            self._match_guards.clear()
        self._match_guards[key] = guard
        return guard

    # --------------------------------------------------------------- setup
    def finish(self):
        self.sa = self._make_sa(delete=False)
        self.da = self._make_sa(delete=True)
        return self


_DENY = object()


def make_gate(policy, tick) -> Gate:
    return Gate(policy, tick).finish()


__all__ = [
    "Gate",
    "make_gate",
    "make_safe_type",
    "USER_MARK",
    "is_user_class",
    "is_user_type",
    "is_user_function",
    "SAFE_DUNDER_ATTRS",
    "SAFE_DUNDER_METHODS",
    "NEVER_DUNDERS",
    "ALWAYS_DENIED",
    "SANDBOX_FILENAME",
    "_MatchVals",
]
