"""Host objects reached by method calls: the seed's ``RpcProxyMarker`` and proxies.

A host object never enters the sandbox. Sandboxed code gets an ``RpcProxy``; each
method call on it is a call into the host — at the worker levels an ``rpc`` host
call through the engine (docs/protocol.md, "host calls"), at ``"none"`` a direct
call — with the arguments and the result crossing as data (``wire.to_wire``), never
pickle. The host decides what a call may reach: the target must be one it serves
(an ``rpc_handlers`` key, or a live object granted with ``policy.module(obj,
name=...)``), the method a public name of the declared surface. The proxy's own
checks (the surface, no ``_`` names, no attribute writes) only give sandboxed code a
clear error early; the host's are the ones that hold.

Two ways to a proxy:

* ``RpcProxyMarker(target, methods=..., attributes=...)`` as a value of ``namespace=``
  or of a ``modules=`` entry: the call reaches ``rpc_handlers[target](method, args,
  kwargs)`` in the host (the seed's form; ``rpc_surface(obj, policy)`` builds the
  surface from a live object).
* ``policy.module(obj, name="db")`` with an object that is not a module: ``import db``
  gives a proxy whose methods are the object's public callables the grant's
  ``include``/``exclude`` allow; a call runs ``getattr(obj, method)(*args,
  **kwargs)`` in the host, at every level.

Data attributes do not cross (a read would copy, and a write would be lost): a
declared attribute is an ``AttributeError`` saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RPC_KEY = "__st_rpc__"  # a marker on the wire: {RPC_KEY: target, "methods": [...]|None, "attributes": [...]|None}
GRANT_PREFIX = "grant:"  # the target of a live-object grant: "grant:<name>"
MAX_NAME = 200


@dataclass
class RpcProxyMarker:
    """A stand-in for a host object, given in ``namespace=`` or ``modules=``: the
    sandbox gets a proxy whose method calls reach ``rpc_handlers[target]`` in the host
    as ``handler(method, args, kwargs)``. ``methods``: the names the proxy may call
    (None: any public name; the handler decides); ``attributes``: data attributes,
    declared so reading one says why it does not cross. ``wrapper`` and
    ``init_args`` (the seed's typed wrapper imported in the worker) are not offered:
    code run in the worker outside the sandbox's checks is what this design avoids."""

    target: str
    wrapper: str | None = None
    init_args: tuple[Any, ...] = field(default_factory=tuple)
    methods: tuple[str, ...] | None = None
    attributes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target or len(self.target) > MAX_NAME:
            raise ValueError("RpcProxyMarker.target must be a non-empty str")
        if self.target.startswith(GRANT_PREFIX):
            raise ValueError(f"RpcProxyMarker.target must not start with {GRANT_PREFIX!r} (live-object grants)")
        if self.wrapper is not None or self.init_args:
            raise ValueError(
                "RpcProxyMarker(wrapper=...) is not offered: it would run host code in the worker outside the "
                "sandbox's checks; wrap the proxy in sandboxed code instead (a class defined in the exec)"
            )
        self.methods = _names("methods", self.methods)
        self.attributes = _names("attributes", self.attributes)


def _names(what: str, v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    if isinstance(v, str) or not all(isinstance(n, str) and public_name(n) for n in v):
        raise ValueError(f"RpcProxyMarker.{what} must be public identifiers (no leading '_')")
    return tuple(v)


def public_name(n: object) -> bool:
    return isinstance(n, str) and n.isascii() and n.isidentifier() and not n.startswith("_") and len(n) <= MAX_NAME


def rpc_surface(obj: Any, policy: Any = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A host object's public surface as ``(methods, attributes)`` (the seed's
    ``rpc_surface``), narrowed to what ``policy.is_attr_allowed`` permits when a
    policy is given. Names starting with ``_`` are left out; an attribute that raises
    when read is skipped."""
    methods: list[str] = []
    attributes: list[str] = []
    for name in dir(obj):
        if not public_name(name):
            continue
        if policy is not None and not policy.is_attr_allowed(obj, name):
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # noqa: BLE001 - a property that raises is not part of it
            continue
        (methods if callable(value) else attributes).append(name)
    return tuple(methods), tuple(attributes)


def marker_to_wire(m: RpcProxyMarker) -> dict[str, Any]:
    return {
        RPC_KEY: m.target,
        "methods": None if m.methods is None else list(m.methods),
        "attributes": None if m.attributes is None else list(m.attributes),
    }


def marker_from_wire(v: Any) -> tuple[str, tuple[str, ...] | None, tuple[str, ...] | None] | None:
    """(target, methods, attributes) of a marker as it came over the wire (or a
    marker object, at ``"none"``); None for any other value."""
    if type(v) is RpcProxyMarker:
        return v.target, v.methods, v.attributes
    if type(v) is not dict or RPC_KEY not in v:
        return None
    t, ms, at = v.get(RPC_KEY), v.get("methods"), v.get("attributes")
    if not isinstance(t, str) or set(v) - {RPC_KEY, "methods", "attributes"}:
        return None
    if not _names_ok(ms) or not _names_ok(at):
        return None
    return t, None if ms is None else tuple(ms), None if at is None else tuple(at)


def _names_ok(x: Any) -> bool:
    return x is None or (isinstance(x, (list, tuple)) and all(public_name(n) for n in x))


Caller = Callable[[str, str, "tuple[Any, ...]", "dict[str, Any]"], Any]


class RpcProxy:
    """What sandboxed code holds for a host object: ``proxy.method(*args)`` calls the
    host. Attribute writes and ``_`` names are refused; data attributes do not cross."""

    __slots__ = ("_st_call", "_st_target", "_st_methods", "_st_attributes", "_st_label")
    _st_open = True  # sandboxed code may use it (gates.runtime_opaque)

    def __init__(
        self,
        call: Caller,
        target: str,
        methods: tuple[str, ...] | None = None,
        attributes: tuple[str, ...] | None = None,
        label: str | None = None,
    ) -> None:
        object.__setattr__(self, "_st_call", call)
        object.__setattr__(self, "_st_target", target)
        object.__setattr__(self, "_st_methods", methods)
        object.__setattr__(self, "_st_attributes", attributes)
        object.__setattr__(self, "_st_label", label or target)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        attrs = object.__getattribute__(self, "_st_attributes")
        methods = object.__getattribute__(self, "_st_methods")
        label = object.__getattribute__(self, "_st_label")
        if attrs is not None and name in attrs:
            raise AttributeError(
                f"{name!r} is a data attribute of the host object {label!r}: only method calls cross to the host "
                f"(a read would be a copy, a write would be lost); expose a method that returns it "
                f"(e.g. get_{name}())"
            )
        if methods is not None and name not in methods:
            raise AttributeError(
                f"{name!r} is not part of the host object {label!r}'s surface "
                f"(available: {', '.join(sorted(methods)) or 'nothing'})"
            )
        call = object.__getattribute__(self, "_st_call")
        target = object.__getattribute__(self, "_st_target")

        def bound(*args: Any, **kwargs: Any) -> Any:
            return call(target, name, args, kwargs)

        bound.__name__ = bound.__qualname__ = name
        return bound

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"cannot set {name!r}: this is a proxy for the host object "
            f"{object.__getattribute__(self, '_st_label')!r}, so the assignment would be lost; "
            f"expose a method that performs the update (e.g. set_{name}(value))"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete {name!r} of a proxy for a host object")

    def __dir__(self) -> list[str]:
        ms = object.__getattribute__(self, "_st_methods")
        return sorted(ms or ())

    def __repr__(self) -> str:
        return f"RpcProxy(target={object.__getattribute__(self, '_st_label')!r})"


def call_object_grant(policy: Any, target: str, method: Any, args: Any, kwargs: Any) -> Any:
    """Run a proxy's call of a live-object grant here, in the host: the grant must
    exist and ``method`` be a method of its surface (``ObjectGrant.surface``); the
    arguments are data (as they came), the result is returned as data. Raises
    ``AttributeError`` for a name the grant does not give, ``LookupError`` for an
    unknown target."""
    from .wire import to_wire

    name = target[len(GRANT_PREFIX) :] if isinstance(target, str) and target.startswith(GRANT_PREFIX) else None
    og = policy.objects.get(name) if name is not None else None
    if og is None or type(og.obj) is RpcProxy:
        raise LookupError(f"no host object {target!r}")
    if not public_name(method) or method not in og.surface()[0]:
        raise AttributeError(f"{method!r} is not a method the grant {name!r} gives")
    if (
        not isinstance(args, (list, tuple))
        or not isinstance(kwargs, dict)
        or not all(isinstance(k, str) for k in kwargs)
    ):
        raise TypeError("arguments must be a list and a dict with str keys")
    return to_wire(getattr(og.obj, method)(*args, **kwargs))


__all__ = ["RpcProxyMarker", "RpcProxy", "rpc_surface", "RPC_KEY", "GRANT_PREFIX"]
