"""Grants (fn / cls / module), their filters, and policy portability."""

import json
import math
import types

import portable_helpers as ph
import pytest

from sandtrap_guest import GuestSession, Policy, StAttributeDenied, StCallDenied, StImportDenied, StPolicyNotPortable


def test_fn_grant_forms():
    pol = Policy()

    @pol.fn
    def add(a, b):
        return a + b

    @pol.fn(name="mul")
    def _multiply(a, b):
        return a * b

    pol.fn(ph.double)
    pol.fn(ph.double, name="twice")
    r = GuestSession(pol).exec("x = (add(1, 2), mul(2, 3), double(4), twice(5))")
    assert r.error is None, r.traceback
    assert r.namespace["x"] == (3, 6, 8, 10)
    assert add(1, 1) == 2  # the decorator returns the function itself
    assert set(r.namespace) == {"x"}  # grants are not user names


def test_granted_function_internals_are_gated():
    pol = Policy()
    pol.fn(ph.double)
    for code in ("double.__globals__", "double.__wrapped__", "double.__code__"):
        r = GuestSession(pol).exec(code)
        assert type(r.error) is StAttributeDenied, code


def test_cls_grant_construct_and_filters():
    pol = Policy()
    pol.cls(ph.Counter, include=("incr", "get_*", "value"))
    r = GuestSession(pol).exec("c = Counter(5)\nc.incr()\nv = c.get_value()\nw = c.value\nok = isinstance(c, Counter)")
    assert r.error is None, r.traceback
    assert (r.namespace["v"], r.namespace["w"], r.namespace["ok"]) == (6, 6, True)
    for code, bad in (
        ("Counter().reset()", "reset"),
        ("Counter()._secret", "_secret"),
        ("Counter.reset", "reset"),
        ("Counter().value = 3\nCounter().reset", "reset"),
    ):
        r = GuestSession(pol).exec(code)
        assert type(r.error) is StAttributeDenied and bad in str(r.error), (code, r.error)


def test_cls_grant_exclude_and_private_opt_in():
    pol = Policy()
    pol.cls(ph.Counter, exclude=("reset",))  # "_*" no longer excluded
    r = GuestSession(pol).exec("s = Counter()._secret")
    assert r.error is None and r.namespace["s"] == "hidden"
    assert type(GuestSession(pol).exec("Counter().reset()").error) is StAttributeDenied
    assert type(GuestSession(pol).exec("Counter().__dict__").error) is StAttributeDenied  # dunders stay shut


def test_cls_not_constructable():
    pol = Policy()
    pol.cls(ph.Service, constructable=False, include=("query", "describe"))
    svc = ph.Service()
    sess = GuestSession(pol)
    r = sess.exec(
        "rows = service.query('select 1')\nd = service.describe()\nok = isinstance(service, Service)",
        namespace={"service": svc},
    )
    assert r.error is None, r.traceback
    assert r.namespace["rows"] == [("row", "select 1")] and r.namespace["ok"] is True
    assert svc.calls == ["select 1"]
    for code in (
        "Service()",
        "type(service)()",
        "class S(type(service)):\n    pass\nS()",
        "Service.__new__(Service)",
        "object.__new__(type(service))",
    ):
        r = sess.exec(code)
        assert type(r.error) is StCallDenied, (code, r.error)
    for code in ("service.token", "service._internal()", "service.calls"):
        r = sess.exec(code)
        assert type(r.error) is StAttributeDenied, (code, r.error)


def test_host_classes_and_objects_are_protected():
    pol = Policy()
    pol.cls(ph.Counter)
    sess = GuestSession(pol)
    assert type(sess.exec("Counter.incr = print").error) is StAttributeDenied
    assert type(sess.exec("Counter().incr.__func__").error) is StAttributeDenied
    r = sess.exec("c = Counter()\nc.value = 10\nv = c.incr()")  # public state of an instance: allowed
    assert r.error is None and r.namespace["v"] == 11


def test_user_subclass_of_granted_class():
    pol = Policy()
    pol.cls(ph.Counter, include=("incr", "value"))
    r = GuestSession(pol).exec("""
class Mine(Counter):
    def __init__(self):
        super().__init__(1)
        self._extra = 5
    def bump(self):
        return self.incr() + self._extra
m = Mine()
out = m.bump()
""")
    assert r.error is None, r.traceback
    assert r.namespace["out"] == 7
    r = GuestSession(pol).exec("class Mine(Counter):\n    pass\nMine()._secret")
    assert type(r.error) is StAttributeDenied  # host-defined private data stays private
    r = GuestSession(pol).exec(
        "class Mine(Counter):\n    def __init__(self):\n        super().__init__()\n"
        "        self._secret = 'mine'\nm = Mine()"
    )
    assert type(r.error) is StAttributeDenied  # nor can it be overwritten after the fact
    r = GuestSession(pol).exec("class Mine(Counter):\n    pass\nMine().reset()")
    assert type(r.error) is StAttributeDenied  # the grant's include still applies


def test_module_grant_filters_and_values():
    pol = Policy()
    pol.module(math, exclude=("_*", "fsum"))
    sess = GuestSession(pol)
    r = sess.exec("import math\nx = math.floor(2.5)")
    assert r.error is None and r.namespace["x"] == 2
    assert type(sess.exec("import math\nmath.fsum([1])").error) is StAttributeDenied
    assert type(sess.exec("from math import fsum").error) is StImportDenied


def test_grant_name_validation():
    pol = Policy()
    with pytest.raises(ValueError):
        pol.fn(len, name="__st_len")
    with pytest.raises(ValueError):
        pol.fn(len, name="not an identifier")
    with pytest.raises(TypeError):
        pol.cls(len)
    with pytest.raises(TypeError):
        pol.module(len)
    with pytest.raises(ValueError):
        Policy(timeout=-1)
    with pytest.raises(ValueError):
        Policy(tick_limit=-5)


# ------------------------------------------------------------- portability
def test_portable_roundtrip():
    pol = Policy(timeout=3.0, tick_limit=1000, memory_limit_bytes=10_000_000, max_stdout=500, allow_network=True)
    pol.fn(ph.double)
    pol.fn(len, name="length")
    pol.cls(ph.Counter, include=("incr", "get_*"), exclude=("_*",))
    pol.cls(ph.Service, name="Svc", constructable=False)
    pol.module(math, exclude=("_*", "fsum"))
    pol.module(json, recursive=True)
    d = pol.to_portable()
    assert json.loads(json.dumps(d)) == d  # plain data only
    assert {"kind": "fn", "name": "double", "ref": "portable_helpers:double"} in d["grants"]
    assert {"kind": "fn", "name": "length", "ref": "builtins:len"} in d["grants"]
    p2 = Policy.from_portable(d)
    assert p2.to_portable() == d
    assert p2.fns["double"].fn is ph.double and p2.classes["Svc"].cls is ph.Service
    assert p2.classes["Svc"].constructable is False and p2.modules["json"].recursive is True
    r = GuestSession(p2).exec(
        "import math\nx = (double(2), length([1]), Counter(1).incr(), math.floor(1.5))\nmath.fsum"
    )
    assert type(r.error) is StAttributeDenied and r.namespace["x"] == (4, 1, 2, 1)


def test_portability_problems_lists_everything():
    pol = Policy()
    pol.fn(lambda x: x, name="lam")
    pol.fn(ph.make_closure(), name="clo")
    pol.fn(ph.Counter().incr, name="bound")
    pol.fn([].append, name="bound_builtin")
    pol.cls(ph.make_local_class(), name="Local")

    def local_fn():
        pass

    pol.fn(local_fn)
    pol.module(types.ModuleType("runtime_mod"), name="rt")
    pol.cls(ph.Counter, name="C2", include=lambda n: True)
    import functools

    pol.fn(functools.partial(ph.double, 1), name="part")

    class Callable:
        def __call__(self):
            pass

    pol.fn(Callable(), name="callable_instance")
    problems = pol.portability_problems()
    text = "\n".join(problems)
    for name in (
        "'lam'",
        "'clo'",
        "'bound'",
        "'bound_builtin'",
        "'Local'",
        "'local_fn'",
        "'rt'",
        "'C2'",
        "'part'",
        "'callable_instance'",
    ):
        assert name in text, (name, text)
    assert len(problems) == 10
    with pytest.raises(StPolicyNotPortable) as ei:
        pol.to_portable()
    assert ei.value.problems == problems


def test_main_module_refs_are_not_portable():
    pol = Policy()
    fn = types.FunctionType(ph.double.__code__, {}, "main_fn")
    fn.__module__ = "__main__"
    fn.__qualname__ = "main_fn"
    pol.fn(fn)
    assert any("__main__" in p for p in pol.portability_problems())


def test_from_portable_reports_every_bad_ref():
    d = {
        "version": 1,
        "timeout": 1.0,
        "tick_limit": None,
        "memory_limit_bytes": None,
        "max_stdout": None,
        "allow_network": False,
        "grants": [
            {"kind": "fn", "name": "a", "ref": "portable_helpers:nope"},
            {"kind": "cls", "name": "b", "ref": "portable_helpers:double"},
            {"kind": "module", "name": "c", "ref": "no_such_module_xyz"},
            {"kind": "wat", "name": "d", "ref": "x:y"},
        ],
    }
    with pytest.raises(StPolicyNotPortable) as ei:
        Policy.from_portable(d)
    assert len(ei.value.problems) == 4
    with pytest.raises(StPolicyNotPortable):
        Policy.from_portable({"version": 99})


# ------------------------------------------------------------- memory units
def test_memory_limit_is_megabytes_and_memory_limit_bytes_is_bytes():
    assert Policy(memory_limit=256).memory_limit_bytes == 256 << 20
    assert Policy(memory_limit=0.5).memory_limit_bytes == 512 << 10
    p = Policy(memory_limit_bytes=10_000_000)
    assert p.memory_limit_bytes == 10_000_000 and p.memory_limit == 10_000_000 / (1 << 20)
    assert Policy(memory_limit_bytes=64 << 20).memory_limit == 64
    assert Policy().memory_limit is None and Policy().memory_limit_bytes is None
    # the portable form (what a worker and the engine read) is bytes, under its own name
    assert Policy(memory_limit=3).to_portable()["memory_limit_bytes"] == 3 << 20
    assert "memory_limit" not in Policy(memory_limit=3).to_portable()
    assert Policy.from_portable(Policy(memory_limit=3).to_portable()).memory_limit == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"memory_limit": 256 << 20}, "memory_limit is in megabytes"),  # a byte count by mistake
        ({"memory_limit": 0}, "positive number of megabytes"),
        ({"memory_limit": -1}, "positive number of megabytes"),
        ({"memory_limit": True}, "positive number of megabytes"),
        ({"memory_limit": 1, "memory_limit_bytes": 1 << 20}, "not both"),
        ({"memory_limit_bytes": 0}, "memory_limit_bytes must be positive"),
        ({"memory_limit_bytes": 1.5}, "memory_limit_bytes must be a non-negative int"),
    ],
)
def test_memory_limit_units_are_never_ambiguous(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Policy(**kwargs)
