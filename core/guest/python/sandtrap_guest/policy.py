"""Policy: limits plus the host functions, classes and modules granted to sandboxed code.

A policy is plain data plus references to host objects.  ``to_portable()`` turns it
into a msgpack-able dict in which every grant is named by ``"module:qualname"`` so a
worker process that inherited nothing can re-import it with ``Policy.from_portable``.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import inspect
import keyword
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from .errors import StPolicyNotPortable

PatternSpec = str | Iterable[str] | Callable[[str], bool] | None

_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound=type)

PORTABLE_VERSION = 1


class Patterns:
    """A name filter: a glob, an iterable of globs, or a predicate.

    Globs without a dot match the bare member name; globs with a dot match the
    owner-qualified names (``"Class.member"``, ``"package.module.member"``).
    Predicates receive the bare name only.
    """

    __slots__ = ("spec", "_globs", "_pred")

    def __init__(self, spec: PatternSpec) -> None:
        self.spec = spec
        self._pred: Callable[[str], bool] | None = None
        if spec is None:
            self._globs: tuple[str, ...] = ()
        elif isinstance(spec, str):
            self._globs = (spec,)
        elif callable(spec):
            self._globs = ()
            self._pred = spec
        else:
            globs = tuple(spec)
            for g in globs:
                if not isinstance(g, str):
                    raise TypeError(f"pattern must be a str, got {type(g).__name__}")
            self._globs = globs

    @property
    def portable(self) -> bool:
        return self._pred is None

    def to_list(self) -> list[str]:
        return list(self._globs)

    def matches(self, name: str, qualified: Iterable[str] = ()) -> bool:
        if self._pred is not None:
            return bool(self._pred(name))
        quals = None
        for g in self._globs:
            if "." in g:
                if quals is None:
                    quals = tuple(qualified)
                for q in quals:
                    if fnmatch.fnmatchcase(q, g):
                        return True
            elif fnmatch.fnmatchcase(name, g):
                return True
        return False

    def __repr__(self) -> str:
        return f"Patterns({self.spec!r})"


class Filter:
    """include/exclude pair; a name passes when it matches include and not exclude,
    or when it is one of ``configured`` (members named in a grant's ``configure``:
    explicitly granted, as in the seed)."""

    __slots__ = ("include", "exclude", "configured")

    def __init__(
        self,
        include: PatternSpec | Patterns = "*",
        exclude: PatternSpec | Patterns = "_*",
        configured: Iterable[str] = (),
    ) -> None:
        self.include = include if isinstance(include, Patterns) else Patterns(include)
        self.exclude = exclude if isinstance(exclude, Patterns) else Patterns(exclude)
        self.configured = frozenset(configured)

    def allows(self, name: str, qualified: Iterable[str] = ()) -> bool:
        if name in self.configured:
            return True
        qualified = tuple(qualified)
        return self.include.matches(name, qualified) and not self.exclude.matches(name, qualified)


@dataclass
class MemberSpec:
    """Per-member privileges for a class or module grant's ``configure`` (the seed's
    ``MemberSpec``): a configured member is granted even where the grant's
    include/exclude would refuse it. ``network_access``: at ``isolation="kernel"``
    the worker gets the network (the kernel cannot tell the member's sockets from
    the code's; the code reaches it only through what is granted); at ``"none"``
    and ``"process"`` granted code has the host's network anyway.
    ``host_fs_access``: granted code already reaches the real filesystem at every
    level (a VirtualFS redirects only what sandboxed code itself calls); at
    ``"kernel"`` it would need the host's whole filesystem in the worker, which is
    refused (grant the function with ``policy.fn``: it runs in the host)."""

    host_fs_access: bool = False
    network_access: bool = False

    def __post_init__(self) -> None:
        for k in ("host_fs_access", "network_access"):
            if not isinstance(getattr(self, k), bool):
                raise TypeError(f"MemberSpec.{k} must be a bool")


def _flags(host_fs_access: object, network_access: object) -> None:
    for k, v in (("host_fs_access", host_fs_access), ("network_access", network_access)):
        if not isinstance(v, bool):
            raise TypeError(f"{k} must be a bool")


def _configure(configure: Mapping[str, MemberSpec] | None) -> dict[str, MemberSpec]:
    out: dict[str, MemberSpec] = {}
    for k, v in (configure or {}).items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ValueError(f"configure keys are member names, got {k!r}")
        if not isinstance(v, MemberSpec):
            raise TypeError(f"configure[{k!r}] must be a MemberSpec")
        out[k] = v
    return out


@dataclass
class FnGrant:
    name: str
    fn: Callable[..., Any]
    kind: str = "fn"
    host_fs_access: bool = False
    network_access: bool = False
    host_time: bool = False  # its calls do not count against the exec's timeout (clock.py)

    @property
    def func(self) -> Callable[..., Any]:
        """The granted function (the seed's name for ``fn``)."""
        return self.fn


@dataclass
class ClsGrant:
    name: str
    cls: type
    constructable: bool = True
    filter: Filter = field(default_factory=Filter)
    kind: str = "cls"
    configure: dict[str, MemberSpec] = field(default_factory=dict)
    host_fs_access: bool = False
    network_access: bool = False


@dataclass
class ObjectGrant:
    """A live object granted with ``policy.module(obj, name=...)``: sandboxed code
    gets an ``RpcProxy`` (``import name``) whose methods are the object's public
    callables the filter allows; a call runs in the host (rpc.py)."""

    name: str
    obj: Any
    filter: Filter = field(default_factory=Filter)
    kind: str = "object"
    configure: dict[str, MemberSpec] = field(default_factory=dict)
    host_fs_access: bool = False
    network_access: bool = False

    def surface(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(methods, attributes) the grant allows: public names the filter passes
        (configure'd members whatever it says), read from the object here."""
        from .rpc import public_name

        methods: list[str] = []
        attributes: list[str] = []
        tname = type(self.obj).__name__
        for n in dir(self.obj):
            if not public_name(n) or not self.filter.allows(n, (f"{self.name}.{n}", f"{tname}.{n}")):
                continue
            try:
                v = getattr(self.obj, n)
            except Exception:  # noqa: BLE001 - a property that raises is not part of it
                continue
            (methods if callable(v) else attributes).append(n)
        return tuple(methods), tuple(attributes)


@dataclass
class ModuleGrant:
    name: str
    module: types.ModuleType
    filter: Filter = field(default_factory=Filter)
    recursive: bool = False
    trusted: bool = False
    kind: str = "module"
    configure: dict[str, MemberSpec] = field(default_factory=dict)
    host_fs_access: bool = False
    network_access: bool = False


def _check_grant_name(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError("grant name must be a str")
    parts = name.split(".")
    for p in parts:
        if not p.isidentifier() or keyword.iskeyword(p):
            raise ValueError(f"invalid grant name {name!r}")
        if p.startswith("__st_") or (p.startswith("__") and p.endswith("__")):
            raise ValueError(f"reserved grant name {name!r}")
    return name


def _ref(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}:{getattr(obj, '__qualname__', None)}"


def _resolve(ref: str) -> Any:
    modname, _, qual = ref.partition(":")
    if not modname or not qual:
        raise ValueError(f"malformed reference {ref!r}")
    obj: Any = importlib.import_module(modname)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class PolicyProblem(str):
    """One reason a policy cannot reach a worker (the seed's ``PolicyProblem``): the
    text itself (a str, as ``StPolicyNotPortable.problems`` lists them), with the
    seed's fields ``kind`` (``"live callable"``, ``"unimportable"``, ``"unimportable
    class"``, ``"unimportable module"``, ``"callable filter"``, ``"live-object
    grant"``), ``name`` (the grant), ``detail`` (what is wrong) and ``remedy`` (what
    to do instead)."""

    kind: str
    name: str
    detail: str
    remedy: str

    def __new__(cls, kind: str, name: str, detail: str, remedy: str = "") -> PolicyProblem:
        self = str.__new__(cls, f"{detail}; {remedy}" if remedy else detail)
        self.kind, self.name, self.detail, self.remedy = kind, name, detail, remedy
        return self

    @classmethod
    def of(cls, kind: str, name: str, text: str) -> PolicyProblem:
        """From one of the messages below: ``<detail>; <remedy>`` (or no remedy)."""
        detail, _, remedy = text.partition("; ")
        return cls(kind, name, detail, remedy)

    def __reduce__(self) -> Any:
        return (type(self), (self.kind, self.name, self.detail, self.remedy))


def _callable_kind(f: Any) -> str:
    """How a non-portable function grant fails: it carries host state, or it has no
    importable name."""
    if isinstance(f, functools.partial) or inspect.ismethod(f):
        return "live callable"
    if not isinstance(f, (types.FunctionType, types.BuiltinFunctionType)):
        return "live callable"
    if isinstance(f, types.BuiltinMethodType) and not isinstance(
        getattr(f, "__self__", None), (types.ModuleType, type(None))
    ):
        return "live callable"
    return "unimportable"


def _callable_problem(label: str, f: Any) -> str | None:
    """Why a granted callable cannot cross to a worker by reference (None if it can)."""
    if isinstance(f, functools.partial):
        return f"{label}: functools.partial objects are not portable by reference; grant a module-level function"
    if inspect.ismethod(f):
        return f"{label}: bound method of {type(f.__self__).__name__!s}; grant the class and pass the instance in the namespace"
    if isinstance(f, types.BuiltinMethodType) and not isinstance(
        getattr(f, "__self__", None), (types.ModuleType, type(None))
    ):
        return f"{label}: builtin method bound to a {type(f.__self__).__name__} instance is not portable"
    if not isinstance(f, (types.FunctionType, types.BuiltinFunctionType)):
        return f"{label}: callable instance of {type(f).__name__} is not portable; grant a module-level function"
    return _ref_problem(label, f)


def _ref_problem(label: str, obj: Any) -> str | None:
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None)
    if not mod or not qual:
        return f"{label}: has no importable module:qualname"
    if "<lambda>" in qual:
        return f"{label}: lambda is not importable by name"
    if "<locals>" in qual:
        what = "class" if isinstance(obj, type) else "closure / nested function"
        return f"{label}: {what} defined inside a function ({mod}:{qual}) is not importable"
    if mod == "__main__":
        return f"{label}: defined in __main__ ({qual}); a worker cannot import the host's __main__"
    try:
        resolved = _resolve(f"{mod}:{qual}")
    except Exception as e:  # noqa: BLE001 - report, never raise
        return f"{label}: {mod}:{qual} does not resolve ({type(e).__name__}: {e})"
    if resolved is not obj:
        return f"{label}: {mod}:{qual} resolves to a different object"
    return None


# Modules whose grant hands sandboxed code the interpreter itself, so that the
# Python layer's checks no longer mean anything: refused unless granted with
# ``trusted=True`` (meaningful at isolation="kernel" only, where the kernel holds).
UNTRUSTED_MODULES = {
    "inspect": "inspect.getmembers / getattr_static / getclosurevars read any attribute of any object, "
    "including a function's globals",
    "gc": "gc.get_referrers / get_objects reach every object of the process",
    "sys": "sys.modules holds every module; sys._getframe reaches the runtime's frames",
    "ctypes": "ctypes reads and writes memory",
    "builtins": "builtins holds eval, exec, open and __import__",
    "importlib": "importlib imports any module",
    "pickle": "pickle.loads calls any importable callable",
    "marshal": "marshal.loads builds code objects",
    "copyreg": "copyreg builds objects past their constructors",
    "code": "code.InteractiveInterpreter runs unchecked source",
    "codeop": "codeop compiles unchecked source",
    "runpy": "runpy runs modules and files",
    "pdb": "pdb runs unchecked code and walks frames",
    "bdb": "bdb walks frames",
    "traceback": "traceback.walk_stack hands out the runtime's frames",
    "dis": "dis.get_instructions hands out the code objects of any function",
    "_thread": "_thread.start_new_thread runs code outside every exec",
}


def untrusted_reason(mod_name: str) -> str | None:
    """Why granting ``mod_name`` would hand over the interpreter (None: it does not)."""
    top = mod_name.split(".")[0]
    return UNTRUSTED_MODULES.get(mod_name) or UNTRUSTED_MODULES.get(top)


MIB = 1 << 20
MAX_MEMORY_MB = 1 << 20  # 1 TiB in MiB: a bigger memory_limit is a byte count by mistake


class Policy:
    """Limits and grants for sandboxed code.

    ``timeout`` wall-clock seconds (None: no limit); ``tick_limit`` maximum ticks
    (None: no limit); ``memory_limit`` **megabytes** (MiB, the seed's unit; an int
    or float) of RSS growth allowed during one exec, or ``memory_limit_bytes`` the
    same in bytes (give one of them; None: no limit; ``policy.memory_limit_bytes`` is
    what is enforced, and what crosses to a worker); ``max_stdout`` characters of stdout kept (the tail is kept;
    None: unlimited); ``allow_network`` is carried to worker/kernel levels (the
    in-process level has no network of its own: only grants can reach it);
    ``allow_subprocess``: at ``isolation="kernel"`` the worker may create processes
    and execute programs (``fork``/``clone``/``execve``, as ``subprocess`` and
    ``os.system`` do); without it the kernel refuses them with ``EPERM``, whatever
    is granted. (At ``"process"`` nothing is refused by the kernel; at ``"none"``
    only the Python layer stands between a grant and the host.)

    Where the policy is enforced depends on the sandbox's ``isolation``:
    ``"kernel"`` adds Landlock, seccomp and limits under the Python layer (use it for
    code you do not trust); ``"process"`` only runs it in another process, which
    reads and writes every file the host can and has the network; ``"none"`` runs it
    in the host's own process. See the guest runtime's README for what each level
    guarantees.
    """

    def __init__(
        self,
        timeout: float | None = 30.0,
        tick_limit: int | None = None,
        memory_limit: float | None = None,
        max_stdout: int | None = None,
        allow_network: bool = False,
        allow_subprocess: bool = False,
        *,
        memory_limit_bytes: int | None = None,
        module_root: str = "/",
    ) -> None:
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
                raise ValueError("timeout must be a positive number or None")
            timeout = float(timeout)
        for nm, v in (
            ("tick_limit", tick_limit),
            ("memory_limit_bytes", memory_limit_bytes),
            ("max_stdout", max_stdout),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{nm} must be a non-negative int or None")
        if memory_limit is not None and memory_limit_bytes is not None:
            raise ValueError("give memory_limit (megabytes) or memory_limit_bytes (bytes), not both")
        if memory_limit_bytes is not None and memory_limit_bytes == 0:
            raise ValueError("memory_limit_bytes must be positive or None")
        self.timeout = timeout
        self.tick_limit = tick_limit
        self.memory_limit_bytes = memory_limit_bytes
        if not isinstance(module_root, str) or not module_root.startswith("/"):
            raise ValueError("module_root must be an absolute path inside the VirtualFS")
        # where `import name` looks for name.py in a VirtualFS (the seed's Policy.module_root)
        self.module_root = module_root
        if memory_limit is not None:
            self.memory_limit = memory_limit
        self.max_stdout = max_stdout
        self.allow_network: bool = bool(allow_network)
        self.allow_subprocess: bool = bool(allow_subprocess)
        self.fns: dict[str, FnGrant] = {}
        self.classes: dict[str, ClsGrant] = {}
        self.modules: dict[str, ModuleGrant] = {}
        # live objects granted with policy.module(obj, name=...): reached through proxies
        self.objects: dict[str, ObjectGrant] = {}

    # ------------------------------------------------------------------ grants
    @overload
    def fn(
        self,
        f: _F,
        *,
        name: str | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
        host_time: bool = False,
    ) -> _F: ...
    @overload
    def fn(
        self,
        f: None = None,
        *,
        name: str | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
        host_time: bool = False,
    ) -> Callable[[_F], _F]: ...
    def fn(
        self,
        f: _F | None = None,
        *,
        name: str | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
        host_time: bool = False,
    ) -> _F | Callable[[_F], _F]:
        """Grant a host function under ``name`` (default ``f.__name__``). Decorator-friendly.

        A function grant runs in the host at every level (at the worker levels through
        a host call), with the host's files and network: ``host_fs_access`` and
        ``network_access`` (the seed's) are what it has already, accepted and kept.
        ``host_time=True``: the time its calls take does not count against the exec's
        timeout (the seed's; ``sandtrap_guest.clock``)."""
        _flags(host_fs_access, network_access)
        if not isinstance(host_time, bool):
            raise TypeError("host_time must be a bool")

        def register(func: _F) -> _F:
            if not callable(func):
                raise TypeError("policy.fn expects a callable")
            n = _check_grant_name(name or getattr(func, "__name__", None) or "")
            if "." in n:
                raise ValueError("function grant names cannot be dotted")
            self.fns[n] = FnGrant(
                n, func, host_fs_access=host_fs_access, network_access=network_access, host_time=host_time
            )
            return func

        return register(f) if f is not None else register

    @overload
    def cls(
        self,
        C: _C,
        *,
        name: str | None = None,
        constructable: bool = True,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> _C: ...
    @overload
    def cls(
        self,
        C: None = None,
        *,
        name: str | None = None,
        constructable: bool = True,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> Callable[[_C], _C]: ...
    def cls(
        self,
        C: _C | None = None,
        *,
        name: str | None = None,
        constructable: bool = True,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> _C | Callable[[_C], _C]:
        """Grant a host class. ``include``/``exclude`` filter member access on the class and
        its instances; ``constructable=False`` refuses ``C(...)`` from sandboxed code.
        ``configure`` ({member: MemberSpec}) grants those members whatever the filter
        says, with the spec's privileges; ``host_fs_access``/``network_access`` give
        them to every member (see MemberSpec for what they mean at each level)."""
        _flags(host_fs_access, network_access)
        conf = _configure(configure)

        def register(klass: _C) -> _C:
            if not isinstance(klass, type):
                raise TypeError("policy.cls expects a class")
            n = _check_grant_name(name or klass.__name__)
            if "." in n:
                raise ValueError("class grant names cannot be dotted")
            self.classes[n] = ClsGrant(
                n,
                klass,
                bool(constructable),
                Filter(include, exclude, conf),
                configure=conf,
                host_fs_access=host_fs_access,
                network_access=network_access,
            )
            return klass

        return register(C) if C is not None else register

    @overload
    def module(
        self,
        m: types.ModuleType,
        *,
        name: str | None = None,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        recursive: bool = False,
        trusted: bool = False,
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> types.ModuleType: ...
    @overload
    def module(
        self,
        m: None = None,
        *,
        name: str | None = None,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        recursive: bool = False,
        trusted: bool = False,
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> Callable[[types.ModuleType], types.ModuleType]: ...
    def module(
        self,
        m: types.ModuleType | None = None,
        *,
        name: str | None = None,
        include: PatternSpec = "*",
        exclude: PatternSpec = "_*",
        recursive: bool = False,
        trusted: bool = False,
        configure: Mapping[str, MemberSpec] | None = None,
        host_fs_access: bool = False,
        network_access: bool = False,
    ) -> types.ModuleType | Callable[[types.ModuleType], types.ModuleType]:
        """Grant a module for ``import``. ``recursive=True`` also grants its submodules
        (filters apply to them too). Modules that hand over the interpreter itself
        (``UNTRUSTED_MODULES``: ``inspect``, ``gc``, ``sys``, ``ctypes``, ``pickle`` ...)
        are refused with the reason unless ``trusted=True``, which says you accept that
        the Python layer no longer holds (use it at ``isolation="kernel"``).
        ``configure``, ``host_fs_access``, ``network_access``: as for ``cls``.

        A live object that is not a module (``policy.module(db, name="db")``, the
        seed's form; ``name`` required) stays in the host at every level: ``import
        db`` gives sandboxed code a proxy whose methods are the object's public
        callables that ``include``/``exclude`` allow, each call run here in the host
        with its arguments and result crossing as data (``sandtrap_guest.rpc``).
        Its data attributes do not cross."""
        _flags(host_fs_access, network_access)
        conf = _configure(configure)

        def register(mod: types.ModuleType) -> types.ModuleType:
            if not isinstance(mod, types.ModuleType):
                if isinstance(mod, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
                    raise TypeError(
                        "policy.module expects a module or a live object (grant classes with policy.cls, "
                        "functions with policy.fn)"
                    )
                if name is None:
                    raise ValueError("name is required when registering a live object instance")
                if recursive or trusted:
                    raise ValueError("recursive= and trusted= apply to modules, not to a live object")
                n = _check_grant_name(name)
                if "." in n:
                    raise ValueError("a live object's grant name cannot be dotted")
                self.modules.pop(n, None)
                self.objects[n] = ObjectGrant(
                    n,
                    mod,
                    Filter(include, exclude, conf),
                    configure=conf,
                    host_fs_access=host_fs_access,
                    network_access=network_access,
                )
                return mod
            n = _check_grant_name(name or mod.__name__)
            self.objects.pop(n, None)
            why = untrusted_reason(getattr(mod, "__name__", "") or "")
            if why and not trusted:
                raise ValueError(
                    f"granting {mod.__name__!r} hands sandboxed code the interpreter ({why}); "
                    "pass trusted=True to grant it anyway (only the kernel level then holds)"
                )
            self.modules[n] = ModuleGrant(
                n,
                mod,
                Filter(include, exclude, conf),
                bool(recursive),
                bool(trusted),
                configure=conf,
                host_fs_access=host_fs_access,
                network_access=network_access,
            )
            return mod

        return register(m) if m is not None else register

    @property
    def memory_limit(self) -> float | None:
        """The memory limit in megabytes (MiB): the seed's unit. ``memory_limit_bytes``
        holds it in bytes."""
        b = self.memory_limit_bytes
        if b is None:
            return None
        mb = b / MIB
        return int(mb) if mb.is_integer() else mb

    @memory_limit.setter
    def memory_limit(self, mb: float | None) -> None:
        if mb is None:
            self.memory_limit_bytes = None
            return
        if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
            raise ValueError("memory_limit must be a positive number of megabytes (MiB) or None")
        if mb > MAX_MEMORY_MB:
            raise ValueError(
                f"memory_limit is in megabytes (MiB), the seed's unit: {mb!r} MiB is more than 1 TiB; "
                "for a limit in bytes pass memory_limit_bytes="
            )
        self.memory_limit_bytes = max(1, int(mb * MIB))

    @property
    def grants(self) -> list[FnGrant | ClsGrant | ModuleGrant | ObjectGrant]:
        return [*self.fns.values(), *self.classes.values(), *self.modules.values(), *self.objects.values()]

    # ---------------------------------------------------------- privileges
    def _worker_grants(self) -> list[ClsGrant | ModuleGrant]:
        return [*self.classes.values(), *self.modules.values()]

    def needs_network(self) -> bool:
        """The worker needs the network (the seed's ``needs_network``): ``allow_network``,
        or a class or module grant (or a member it configures) with ``network_access``.
        Function grants run in the host, so theirs needs nothing of the worker."""
        return self.allow_network or any(
            g.network_access or any(m.network_access for m in g.configure.values()) for g in self._worker_grants()
        )

    def needs_host_fs(self) -> bool:
        """A class or module grant (or a member it configures) has ``host_fs_access``
        (the seed's ``needs_host_fs``): at ``isolation="kernel"`` that would take the
        host's whole filesystem into the worker, and is refused there."""
        return any(
            g.host_fs_access or any(m.host_fs_access for m in g.configure.values()) for g in self._worker_grants()
        )

    # ----------------------------------------------------------- introspection
    @property
    def functions(self) -> dict[str, FnGrant]:
        """The function grants by name (the seed's ``policy.functions``; the same dict as
        ``fns``): each has ``name`` and ``func``."""
        return self.fns

    def import_grant(self, dotted: str) -> tuple[ModuleGrant, list[str]] | None:
        """The module grant that ``import dotted`` is judged by and the segments of
        ``dotted`` below its name (``[]`` for the grant itself), or None: the innermost
        grant (longest name) decides, a non-recursive one grants nothing below it, and
        its filters apply to every segment. By name: nothing is imported."""
        if not isinstance(dotted, str) or not dotted or any(not p.isidentifier() for p in dotted.split(".")):
            return None
        g = self.modules.get(dotted)
        if g is not None:
            return g, []
        for g in sorted(self.modules.values(), key=lambda g: -len(g.name)):
            if dotted.startswith(g.name + "."):
                segs = dotted[len(g.name) + 1 :].split(".")
                if not g.recursive or not submodule_allowed(g, segs):
                    return None
                return g, segs
        return None

    def is_import_allowed(self, module_name: str) -> bool:
        """Would ``import module_name`` succeed in a sandbox under this policy (the
        seed's ``is_import_allowed``)? True for a granted module, a granted submodule
        of a recursive grant (imported here to be judged as the sandbox would judge
        it: False if it does not import) and the parent a dotted grant name implies
        (granting ``os.path`` alone makes ``os`` importable, holding only ``path``).
        What is not the policy's is not counted: per-exec ``modules=``, ``main`` and
        the modules of a VirtualFS."""
        if isinstance(module_name, str) and module_name in self.objects:
            return True
        found = self.import_grant(module_name)
        if found is None:
            return isinstance(module_name, str) and any(n.startswith(module_name + ".") for n in self.modules)
        g, segs = found
        if not segs:
            return True
        real = g.module.__name__ + "." + ".".join(segs)
        try:
            mod = importlib.import_module(real)
        except ImportError:
            return False
        return self._gate().module_rule(mod, real) is not None

    def is_attr_allowed(self, obj: object, attr: str) -> bool:
        """May sandboxed code read ``obj.attr`` under this policy (the seed's
        ``is_attr_allowed``)? The sandbox's own attribute gate answers, built from
        this policy alone (a session adds its per-exec modules and its VirtualFS
        stand-ins). A module's attribute is read as the sandbox reads it (a submodule
        that is not granted, or a function the sandbox never gets, is False); other
        objects' attributes are decided by name and type without being read, so a
        value the gate refuses for what it turns out to be (an interpreter internal,
        ``eval`` bound as a class attribute) is refused when read even here True."""
        if not isinstance(attr, str):
            return False
        for og in self.objects.values():
            if og.obj is obj:
                return attr in og.surface()[0]
        gate = self._gate()
        if isinstance(obj, types.ModuleType):
            try:
                gate._read_module(obj, attr)
            except (AttributeError, ImportError):
                return False
            return True
        return bool(gate.allows_read(obj, attr))

    def _gate(self) -> Any:
        key = tuple(self.grants)
        cached = self.__dict__.get("_st_gate")
        if (
            cached is not None
            and len(cached[0]) == len(key)
            and all(a is b for a, b in zip(cached[0], key, strict=True))
        ):
            return cached[1]
        from .gates import Gate

        gate = Gate(self, lambda: None)
        self.__dict__["_st_gate"] = (key, gate)
        return gate

    # ------------------------------------------------------------- portability
    def portability_problems(self, host_fns: bool = False) -> list[PolicyProblem]:
        """Every reason this policy cannot be sent to a worker by reference (empty:
        portable), each a ``PolicyProblem`` (a str with ``kind``, ``name``,
        ``detail``, ``remedy``).

        With ``host_fns`` the fn grants stay in the host (the worker calls back), so any
        callable — closures and bound methods too — is fine."""
        problems: list[PolicyProblem] = []
        if not host_fns:
            for og in self.objects.values():
                problems.append(
                    PolicyProblem(
                        "live-object grant",
                        og.name,
                        f"object {og.name!r}: a live {type(og.obj).__name__} instance stays in the host and is "
                        "reached by calls back to it, which this kind of worker cannot make",
                        "grant its class and pass the instance",
                    )
                )
        for fg in self.fns.values():
            p = None if host_fns else _callable_problem(f"fn {fg.name!r}", fg.fn)
            if p:
                problems.append(PolicyProblem.of(_callable_kind(fg.fn), fg.name, p))
        for cg in self.classes.values():
            p = _ref_problem(f"cls {cg.name!r}", cg.cls)
            if p:
                problems.append(PolicyProblem.of("unimportable class", cg.name, p))
            problems.extend(self._filter_problems(f"cls {cg.name!r}", cg.name, cg.filter))
        for mg in self.modules.values():
            label = f"module {mg.name!r}"
            mname = getattr(mg.module, "__name__", None)
            if mname == "__main__":
                problems.append(
                    PolicyProblem.of(
                        "unimportable module", mg.name, f"{label}: __main__ cannot be imported by a worker"
                    )
                )
            elif not isinstance(mname, str) or sys.modules.get(mname) is not mg.module:
                problems.append(
                    PolicyProblem.of(
                        "unimportable module",
                        mg.name,
                        f"{label}: module {mname!r} is not the one in sys.modules (built at runtime?)",
                    )
                )
            elif getattr(mg.module, "__spec__", None) is None:
                problems.append(
                    PolicyProblem.of(
                        "unimportable module",
                        mg.name,
                        f"{label}: module {mname!r} has no import spec (built at runtime?)",
                    )
                )
            problems.extend(self._filter_problems(label, mg.name, mg.filter))
        return problems

    def check_picklable(self) -> list[PolicyProblem]:
        """The seed's name: every reason this policy cannot reach a worker (empty: it
        can). Nothing crosses by pickle here — grants cross by name and function
        grants stay in the host — so this is ``portability_problems(host_fns=True)``:
        closures, lambdas and bound methods granted with ``policy.fn`` are fine."""
        return self.portability_problems(host_fns=True)

    @staticmethod
    def _filter_problems(label: str, name: str, flt: Filter) -> list[PolicyProblem]:
        out = []
        for which, pat in (("include", flt.include), ("exclude", flt.exclude)):
            if not pat.portable:
                out.append(
                    PolicyProblem.of(
                        "callable filter",
                        name,
                        f"{label}: callable {which} predicate is not portable; use glob strings",
                    )
                )
        return out

    def to_portable(self, host_fns: bool = False) -> dict[str, Any]:
        """A msgpack-able dict (str keys; str/int/float/bool/None/list values).

        With ``host_fns``, fn grants are sent by name only (kind ``host_fn``): the
        worker calls back into the host to run them. Raises StPolicyNotPortable
        listing every problem."""
        problems = self.portability_problems(host_fns)
        if problems:
            raise StPolicyNotPortable(problems)
        grants: list[dict[str, Any]] = []
        for fg in self.fns.values():
            if host_fns:
                # host_time: the host measures the call and the answer says how long
                grants.append({"kind": "host_fn", "name": fg.name, "ref": fg.name, "host_time": fg.host_time})
            else:
                grants.append({"kind": "fn", "name": fg.name, "ref": _ref(fg.fn)})
        for cg in self.classes.values():
            grants.append(
                {
                    "kind": "cls",
                    "name": cg.name,
                    "ref": _ref(cg.cls),
                    "constructable": cg.constructable,
                    "include": cg.filter.include.to_list(),
                    "exclude": cg.filter.exclude.to_list(),
                    **_portable_privileges(cg),
                }
            )
        for mg in self.modules.values():
            grants.append(
                {
                    "kind": "module",
                    "name": mg.name,
                    "ref": mg.module.__name__,
                    "recursive": mg.recursive,
                    "trusted": mg.trusted,
                    "include": mg.filter.include.to_list(),
                    "exclude": mg.filter.exclude.to_list(),
                    **_portable_privileges(mg),
                }
            )
        for og in self.objects.values():
            methods, attributes = og.surface()
            # the object stays here: the worker's proxy calls it back (rpc host calls)
            grants.append(
                {
                    "kind": "object",
                    "name": og.name,
                    "ref": og.name,
                    "methods": list(methods),
                    "attributes": list(attributes),
                }
            )
        return {
            "version": PORTABLE_VERSION,
            "timeout": self.timeout,
            "tick_limit": self.tick_limit,
            "memory_limit_bytes": self.memory_limit_bytes,
            "max_stdout": self.max_stdout,
            # a grant's network_access opens the worker's network (needs_network)
            "allow_network": self.needs_network(),
            "allow_subprocess": self.allow_subprocess,
            "grants": grants,
        }

    @classmethod
    def from_portable(
        cls,
        d: dict[str, Any],
        host_call: Callable[[str, tuple[Any, ...], dict[str, Any]], Any] | None = None,
        rpc_call: Callable[[str, str, tuple[Any, ...], dict[str, Any]], Any] | None = None,
    ) -> Policy:
        """Rebuild a policy from ``to_portable()`` output, re-importing every reference.

        Raises StPolicyNotPortable listing every reference that failed to resolve."""
        if not isinstance(d, dict):
            raise StPolicyNotPortable(["portable policy must be a dict"])
        problems: list[str] = []
        if d.get("version") != PORTABLE_VERSION:
            problems.append(f"unsupported portable policy version {d.get('version')!r}")
        unknown = set(d) - {
            "version",
            "timeout",
            "tick_limit",
            "memory_limit_bytes",
            "max_stdout",
            "allow_network",
            "allow_subprocess",
            "grants",
        }
        if unknown:
            problems.append(f"unknown keys: {sorted(unknown)}")
        try:
            pol = cls(
                timeout=d.get("timeout"),
                tick_limit=d.get("tick_limit"),
                memory_limit_bytes=d.get("memory_limit_bytes"),
                max_stdout=d.get("max_stdout"),
                allow_network=bool(d.get("allow_network", False)),
                allow_subprocess=bool(d.get("allow_subprocess", False)),
            )
        except (TypeError, ValueError) as e:
            problems.append(f"invalid limits: {e}")
            pol = cls()
        grants = d.get("grants", [])
        if not isinstance(grants, list):
            problems.append("grants must be a list")
            grants = []
        for i, g in enumerate(grants):
            if not isinstance(g, dict):
                problems.append(f"grant #{i}: must be a dict")
                continue
            kind, name, ref = g.get("kind"), g.get("name"), g.get("ref")
            label = f"grant #{i} ({kind} {name!r})"
            if not isinstance(name, str) or not isinstance(ref, str):
                problems.append(f"{label}: name and ref must be strings")
                continue
            try:
                if kind == "host_fn":
                    if host_call is None:
                        raise TypeError("host_fn grants need a host_call")
                    pol.fn(_host_proxy(host_call, name), name=name)
                elif kind == "fn":
                    obj = _resolve(ref)
                    if not callable(obj):
                        raise TypeError(f"{ref} is not callable")
                    pol.fn(obj, name=name)
                elif kind == "cls":
                    obj = _resolve(ref)
                    if not isinstance(obj, type):
                        raise TypeError(f"{ref} is not a class")
                    pol.cls(
                        obj,
                        name=name,
                        constructable=bool(g.get("constructable", True)),
                        include=_pat(g.get("include", "*")),
                        exclude=_pat(g.get("exclude", "_*")),
                        **_privileges_from_portable(g),
                    )
                elif kind == "module":
                    mod = importlib.import_module(ref)
                    pol.module(
                        mod,
                        name=name,
                        recursive=bool(g.get("recursive", False)),
                        include=_pat(g.get("include", "*")),
                        exclude=_pat(g.get("exclude", "_*")),
                        trusted=bool(g.get("trusted", False)),
                        **_privileges_from_portable(g),
                    )
                elif kind == "object":
                    if rpc_call is None:
                        raise TypeError("object grants need an rpc_call")
                    from .rpc import GRANT_PREFIX, RpcProxy, public_name

                    ms, ats = g.get("methods"), g.get("attributes")
                    if not all(isinstance(x, list) and all(public_name(n) for n in x) for x in (ms, ats)):
                        raise TypeError("methods and attributes must be lists of public names")
                    _check_grant_name(name)
                    assert isinstance(ms, list) and isinstance(ats, list)
                    proxy = RpcProxy(rpc_call, GRANT_PREFIX + name, tuple(ms), tuple(ats), label=name)
                    pol.objects[name] = ObjectGrant(name, proxy)
                else:
                    problems.append(f"{label}: unknown kind")
            except Exception as e:  # noqa: BLE001 - collect every problem
                problems.append(f"{label}: {type(e).__name__}: {e}")
        if problems:
            raise StPolicyNotPortable(problems)
        return pol

    def __repr__(self) -> str:
        return (
            f"Policy(timeout={self.timeout!r}, tick_limit={self.tick_limit!r}, "
            f"memory_limit_bytes={self.memory_limit_bytes!r}, max_stdout={self.max_stdout!r}, "
            f"allow_network={self.allow_network!r}, allow_subprocess={self.allow_subprocess!r}, "
            f"grants={len(self.grants)})"
        )


def submodule_allowed(g: ModuleGrant, segments: Iterable[str]) -> bool:
    """Every segment below grant ``g`` passes its filter (by the grant's name and the
    module's real dotted name)."""
    path = g.name
    real = g.module.__name__
    for seg in segments:
        quals = (f"{path}.{seg}", f"{real}.{seg}")
        if not g.filter.allows(seg, quals):
            return False
        path, real = f"{path}.{seg}", f"{real}.{seg}"
    return True


def _portable_privileges(g: ClsGrant | ModuleGrant) -> dict[str, Any]:
    if not (g.configure or g.host_fs_access or g.network_access):
        return {}
    return {
        "configure": {
            k: {"host_fs_access": m.host_fs_access, "network_access": m.network_access} for k, m in g.configure.items()
        },
        "host_fs_access": g.host_fs_access,
        "network_access": g.network_access,
    }


def _privileges_from_portable(g: dict[str, Any]) -> dict[str, Any]:
    conf = g.get("configure") or {}
    if not isinstance(conf, dict) or not all(isinstance(v, dict) for v in conf.values()):
        raise TypeError("configure must map member names to {host_fs_access, network_access}")
    return {
        "configure": {
            k: MemberSpec(bool(v.get("host_fs_access", False)), bool(v.get("network_access", False)))
            for k, v in conf.items()
        },
        "host_fs_access": bool(g.get("host_fs_access", False)),
        "network_access": bool(g.get("network_access", False)),
    }


def _host_proxy(host_call: Callable[[str, tuple[Any, ...], dict[str, Any]], Any], name: str) -> Callable[..., Any]:
    def proxy(*args: Any, **kwargs: Any) -> Any:
        return host_call(name, args, kwargs)

    proxy.__name__ = proxy.__qualname__ = name
    return proxy


def _pat(v: object) -> str | tuple[str, ...]:
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise TypeError(f"pattern must be a str or list of str, got {v!r}")


__all__ = [
    "Policy",
    "Patterns",
    "Filter",
    "FnGrant",
    "ClsGrant",
    "ModuleGrant",
    "ObjectGrant",
    "MemberSpec",
    "UNTRUSTED_MODULES",
]
