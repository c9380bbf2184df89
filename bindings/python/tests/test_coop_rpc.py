"""Host objects reached from the sandbox by method calls (the seed's RpcProxyMarker and
rpc_handlers; live objects granted with policy.module(obj, name=...)), at every level:
the object stays in the host, calls cross as data (rpc host calls at the worker
levels), and the host judges every call — attacks by sandboxed code and by a forged
worker (fake_worker.py) included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sandtrap._coop as coop
from sandtrap import IsolatedFS, Policy, RpcProxyMarker, WorkerCrashed, rpc_surface, sandbox
from sandtrap_guest import StAttributeDenied

HERE = str(Path(__file__).resolve().parent)
LEVELS = ["none", "process", "kernel"]
WORKER_LEVELS = ["process", "kernel"]


class Ledger:
    def __init__(self) -> None:
        self.rows: list = []
        self.token = "s3cret"

    def add(self, x):
        self.rows.append(x)
        return len(self.rows)

    def total(self):
        return sum(r for r in self.rows if isinstance(r, int))

    def wipe(self):  # excluded by the grant below
        self.rows.clear()

    def fail(self):
        raise KeyError("missing")

    def _private(self):
        return "private"


def ledger_policy():
    led = Ledger()
    p = Policy(timeout=10)
    p.module(led, name="ledger", exclude=["_*", "wipe"])
    return led, p


@pytest.mark.parametrize("level", LEVELS)
def test_a_live_object_grant_is_called_in_the_host(level, tmp_path):
    led, p = ledger_policy()
    fs = IsolatedFS(tmp_path) if level != "none" else None
    with sandbox(p, isolation=level, filesystem=fs) as sb:
        r = sb.exec("import ledger\na = ledger.add(2)\nb = ledger.add([1, 'x'])\nfrom ledger import total\nt = total()")
        assert r.error is None, r.error
        assert r.namespace["a"] == 1 and r.namespace["b"] == 2 and r.namespace["t"] == 2
        assert led.rows == [2, [1, "x"]]  # the host's object changed: no copy
        # a sandbox-defined instance crosses as data (a placeholder), never as an object
        r = sb.exec("class C:\n    pass\nledger.add(C())")
        assert r.error is None
        assert led.rows[-1]["__st_placeholder__"] == "C"
        # the excluded method, a private one, a data attribute, a write: refused
        for code, err in [
            ("ledger.wipe()", "not part of the host object 'ledger'"),
            ("ledger._private()", "_private"),
            ("ledger.token", "data attribute"),
            ("ledger.token = 'x'", "cannot set 'token'"),
        ]:
            r = sb.exec(code)
            assert isinstance(r.error, AttributeError) and err in str(r.error), (code, r.error)
        assert led.rows and led.token == "s3cret"
        # the host's exception reaches the code as its type
        r = sb.exec("try:\n    ledger.fail()\nexcept KeyError as e:\n    caught = 'yes'")
        assert r.namespace.get("caught") == "yes", r.error


@pytest.mark.parametrize("level", LEVELS)
def test_the_proxy_hands_out_nothing_of_the_host(level, tmp_path):
    """The proxy's internals (its caller, its target) and the bound method's closure
    are the gate's to refuse: reaching them would reach the host's dispatcher."""
    _led, p = ledger_policy()
    with sandbox(p, isolation=level) as sb:
        for code in [
            "import ledger\nledger._st_call",
            "import ledger\ntype(ledger)._st_call.__get__(ledger)",
            "import ledger\nobject.__getattribute__(ledger, '_st_call')",
            "import ledger\nledger.add.__closure__",
            "import ledger\nledger.add.__globals__",
            "import ledger\nledger.__reduce_ex__(2)",
        ]:
            r = sb.exec(code)
            assert isinstance(r.error, (StAttributeDenied, TypeError, AttributeError)), (code, r.error)
            assert "_st_call" not in r.namespace


@pytest.mark.parametrize("level", LEVELS)
def test_rpc_proxy_marker_reaches_its_handler(level):
    calls = []

    def handler(method, args, kwargs):
        calls.append((method, args, kwargs))
        return {"method": method, "n": len(args)}

    with sandbox(Policy(timeout=10), isolation=level, rpc_handlers={"cache": handler}) as sb:
        marker = RpcProxyMarker("cache", methods=("get", "put"), attributes=("size",))
        r = sb.exec("v = c.put('k', [1, 2], ttl=3)\nw = c.get('k')", namespace={"c": marker})
        assert r.error is None, r.error
        assert r.namespace["v"] == {"method": "put", "n": 2}
        assert calls == [("put", ("k", [1, 2]), {"ttl": 3}), ("get", ("k",), {})]
        # the proxy persists across execs; an undeclared method and a data attribute are refused
        r = sb.exec("c.delete('k')")
        assert isinstance(r.error, AttributeError) and "available: get, put" in str(r.error), r.error
        r = sb.exec("c.size")
        assert isinstance(r.error, AttributeError) and "data attribute" in str(r.error), r.error
        assert len(calls) == 2
        # through a per-exec module too
        r = sb.exec("from host import c2\nx = c2.anything(1)", modules={"host": {"c2": RpcProxyMarker("cache")}})
        assert r.error is None and r.namespace["x"] == {"method": "anything", "n": 1}, r.error


def test_rpc_surface_builds_the_declared_surface():
    led, p = ledger_policy()
    methods, attributes = rpc_surface(led)
    assert {"add", "total", "wipe", "fail"} <= set(methods) and attributes == ("rows", "token")
    methods, _ = rpc_surface(led, p)
    assert "wipe" not in methods and "add" in methods


def test_markers_and_handlers_are_checked_at_the_door():
    with pytest.raises(ValueError, match="wrapper"):
        RpcProxyMarker("x", wrapper="mod:Cls")
    with pytest.raises(ValueError, match="public identifiers"):
        RpcProxyMarker("x", methods=("_secret",))
    with pytest.raises(ValueError, match="grant:"):
        RpcProxyMarker("grant:ledger")  # a live-object grant's target is not the embedder's
    with pytest.raises(coop.InvalidArgument, match="rpc_handlers keys"):
        sandbox(Policy(), rpc_handlers={"grant:x": print})
    with sandbox(Policy()) as sb, pytest.raises(coop.InvalidArgument, match="no rpc_handlers entry"):
        sb.exec("x = 1", namespace={"c": RpcProxyMarker("nobody")})
    led = Ledger()
    p = Policy()
    with pytest.raises(ValueError, match="name is required"):
        p.module(led)
    with pytest.raises(TypeError, match=r"policy\.cls"):
        p.module(Ledger, name="L")
    p.module(led, name="ledger")
    assert p.is_import_allowed("ledger") and p.is_attr_allowed(led, "add") and not p.is_attr_allowed(led, "token")
    # a map-reduce template cannot call back: a live object is not portable there
    assert any("live Ledger instance" in s for s in p.portability_problems())
    assert p.portability_problems(host_fns=True) == []


# ------------------------------------------------------------ a forged worker
@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(coop, "_WORKER_MODULE", "fake_worker")
    monkeypatch.setattr(coop, "_WORKER_PATH", [HERE])


def forged(sb, **frame):
    r = sb.exec("rpc\n" + json.dumps(frame))
    assert r.error is None, r.error
    return r.namespace["reply"]


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_the_host_judges_a_forged_workers_calls(fake, level, tmp_path):
    """The worker is hostile: whatever rpc frame it sends, the host calls only a
    served target's declared public methods, and a live object's methods its grant
    allows."""
    led, p = ledger_policy()
    calls = []

    def handler(method, args, kwargs):
        calls.append(method)
        return "ran"

    with sandbox(p, isolation=level, filesystem=IsolatedFS(tmp_path), rpc_handlers={"h": handler}) as sb:
        # a target the host does not serve: the engine refuses it
        assert forged(sb, target="evil", method="q")[:2] == ["raise", "LookupError"]
        # a served target the code was never given a marker for: the host refuses it
        assert forged(sb, target="h", method="q")[:2] == ["raise", "LookupError"]
        assert calls == []
        r = sb.exec("ok\nx = 1", namespace={"c": RpcProxyMarker("h", methods=("q",))})
        assert r.error is None
        assert forged(sb, target="h", method="q") == ["return", None, None, "ran"]
        assert forged(sb, target="h", method="other")[:2] == ["raise", "AttributeError"]
        assert calls == ["q"]
        # the live object: an excluded method, a data attribute, a method of another
        # object's grant name are refused; the host's object is untouched
        for method in ["wipe", "token", "rows"]:
            assert forged(sb, target="grant:ledger", method=method)[:2] == ["raise", "AttributeError"], method
        assert forged(sb, target="grant:nothing", method="add")[:2] == ["raise", "LookupError"]
        led.rows.append(7)
        assert forged(sb, target="grant:ledger", method="total") == ["return", None, None, 7]
        assert led.rows == [7]


RPC_CRASHES = [
    "rpc_private_method",
    "rpc_underscore",
    "rpc_dotted",
    "rpc_method_int",
    "rpc_kwargs_int_keys",
    "rpc_long_target",
]


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_malformed_rpc_frames_end_the_worker(fake, level, tmp_path):
    calls = []
    with sandbox(
        Policy(timeout=5),
        isolation=level,
        filesystem=IsolatedFS(tmp_path),
        rpc_handlers={"h": lambda m, a, k: calls.append(m)},
    ) as sb:
        for mode in RPC_CRASHES:
            r = sb.exec(mode, namespace={"c": RpcProxyMarker("h")})
            assert isinstance(r.error, WorkerCrashed) and "protocol" in str(r.error), (mode, r.error)
    assert calls == []


def test_policy_problems_carry_the_seeds_fields():
    from sandtrap import PolicyProblem, StPolicyNotPortable

    p = Policy()
    p.fn(lambda x: x, name="lam")
    p.fn(Ledger().add, name="bound")
    p.module(Ledger(), name="obj")
    probs = p.portability_problems()
    by_name = {q.name: q for q in probs}
    assert all(isinstance(q, PolicyProblem) and isinstance(q, str) for q in probs)
    assert by_name["lam"].kind == "unimportable" and "lambda" in by_name["lam"].detail
    assert by_name["bound"].kind == "live callable" and "grant the class" in by_name["bound"].remedy
    assert by_name["obj"].kind == "live-object grant"
    # the cooperative sandbox's workers call function grants back: nothing to report
    assert p.check_picklable() == []
    with pytest.raises(StPolicyNotPortable) as ei:
        p.to_portable()
    assert {q.kind for q in ei.value.problems} == {"unimportable", "live callable", "live-object grant"}
