"""The fast paths (issue 19's benchmarks) keep their meaning: the compiled-code cache
(one rewrite+compile per source, per echo mode and await mode; errors never cached;
the policy is still judged at run time by each session), the collector paused only
around a snapshot's or a restore's data, and a restore's objects built as before."""

import gc
import os

import pytest

from sandtrap_guest import GuestSession, Policy, StImportDenied
from sandtrap_guest import rewriter as rw
from sandtrap_guest import session as session_mod


@pytest.fixture
def counted(monkeypatch):
    session_mod._compiled_cached.cache_clear()
    calls = []
    real = rw.rewrite

    def counting(source, **kw):
        calls.append(source)
        return real(source, **kw)

    monkeypatch.setattr(rw, "rewrite", counting)
    return calls


def test_the_same_source_is_rewritten_once(counted):
    s = GuestSession(Policy())
    code = "total = 0\nfor i in range(10):\n    total += i\n"
    for _ in range(5):
        assert s.exec(code).namespace["total"] == 45
    assert counted.count(code) == 1
    # another session shares it; each runs in its own namespace
    s2 = GuestSession(Policy())
    assert s2.exec(code).namespace["total"] == 45 and counted.count(code) == 1
    # echo and await modes are compiled apart (the rewrite differs)
    assert s.exec("1 + 1", echo="last").stdout == "2\n"
    assert s.exec("1 + 1").stdout == ""
    assert counted.count("1 + 1") == 2


def test_errors_are_not_cached_and_stay_exact(counted):
    s = GuestSession(Policy())
    for _ in range(3):
        r = s.exec("x = (")
        assert isinstance(r.error, SyntaxError)
    assert counted.count("x = (") == 3
    r = s.exec("__import__('os')")
    assert type(r.error).__name__ == "StValidationError"


def test_a_cached_code_is_judged_by_each_session_s_policy(counted):
    code = "import os\nsep = os.sep"
    granted = Policy()
    granted.module(os)
    assert GuestSession(granted).exec(code).namespace["sep"] == "/"
    r = GuestSession(Policy()).exec(code)  # the same code object, a policy without os
    assert isinstance(r.error, StImportDenied), r.error
    assert counted.count(code) == 1


def test_big_sources_are_not_kept(counted):
    code = "x = 1\n" + "#" * (70 * 1024)
    s = GuestSession(Policy())
    s.exec(code)
    s.exec(code)
    assert counted.count(code) == 2


@pytest.mark.parametrize("enabled", [True, False])
def test_snapshot_and_restore_leave_the_collector_as_they_found_it(enabled):
    s = GuestSession(Policy())
    s.exec(
        "class C:\n    def __init__(self, i):\n        self.i = i\n        self.tags = [i]\nitems = [C(i) for i in range(50)]"
    )
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        snap = s.snapshot()
        assert gc.isenabled() is enabled
        s2 = GuestSession(Policy())
        assert s2.restore(snap).error is None
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    r = s2.exec("t = sum(o.i for o in items)\nsame = items[3].tags is items[4].tags\nitems[0].tags.append(9)")
    assert r.namespace["t"] == sum(range(50)) and r.namespace["same"] is False
    # the restored containers are copies: the state is not changed by the sandbox
    assert snap["data"]["items"]["cols"]["tags"][0] == [0]  # (50 of one class: columns)


def test_restore_still_refuses_reserved_and_dunder_attributes():
    s = GuestSession(Policy())
    s.exec("class C:\n    pass\n")
    state = s.snapshot()
    obj = {"__st_obj__": "C", "state": {"ok": 1, "__class__": "x", rw.RESERVED_PREFIX + "x": 2}}
    state["data"] = {"a": obj, "b": obj, "c": {"__st_obj__": "C", "state": {"ok": 2}}}
    s2 = GuestSession(Policy())
    assert s2.restore(state).error is None
    r = s2.exec("a_ok = a.ok\nc_ok = c.ok")
    assert r.namespace["a_ok"] == 1 and r.namespace["c_ok"] == 2, r.error
    # the second object with the same names takes the checked (fast) path: the same verdict
    assert vars(r.namespace["a"]) == vars(r.namespace["b"]) == {"ok": 1}


def test_cyclic_garbage_is_still_collected_across_snapshots_and_restores():
    # what the collector pause does after a snapshot or restore must leave the
    # collector's own schedule running: a loop of them with sandbox code making a
    # cycle each time keeps only a few of those cycles alive (moving everything made
    # to the oldest generation with gc.freeze()/unfreeze() reset the young count every
    # time, so no collection ever ran and all 300 stayed)
    s = GuestSession(Policy())
    s.exec("class C:\n    def __init__(self, i):\n        self.tags = [i]\nitems = [C(i) for i in range(1000)]")
    gc.collect()
    for _ in range(300):
        s2 = GuestSession(Policy())
        assert s2.restore(s.snapshot()).error is None
        assert s2.exec("class Zed:\n    pass\nz = Zed()\nz.me = [z] * 100\n").error is None
        s2.release()
    alive = sum(1 for o in gc.get_objects() if type(o).__name__ == "Zed")
    assert alive < 100, alive


def test_a_restored_source_is_parsed_once_per_process(monkeypatch):
    import ast

    from sandtrap_guest import state as state_mod

    src = (
        "import math\nclass K:\n    pass\n@staticmethod\ndef g():\n    return 1\nif True:\n    def h():\n        pass\n"
    )
    import math

    def pol():
        p = Policy()
        p.module(math)
        return p

    s = GuestSession(pol())
    assert s.exec(src + "k = K()\n").error is None
    snap = s.snapshot()
    parsed = []  # the recorder's parses only (state.py's ast)

    class CountingAst:
        def __getattr__(self, name):
            return getattr(ast, name)

        def parse(self, source, *a, **k):
            parsed.append(source)
            return ast.parse(source, *a, **k)

    monkeypatch.setattr(state_mod, "ast", CountingAst())
    recs, counts = [], []
    for _ in range(3):
        s2 = GuestSession(pol())
        assert s2.restore(snap).error is None
        recs.append((dict(s2._recorder.defs), set(s2._recorder.decorated), list(s2._recorder.imports)))
        counts.append(parsed.count(snap["source"]))
    assert counts == [1, 1, 1], counts  # the first restore parses it, the next ones not
    assert (
        recs[0]
        == recs[1]
        == recs[2]
        == (
            {"K": "class K:\n    pass\n", "g": "@staticmethod\ndef g():\n    return 1\n"},
            {"g"},
            ["import math"],
        )
    )
    assert s2.snapshot()["source"] == snap["source"]
    big = "def f():\n    pass\n" + "#" * (70 * 1024)
    GuestSession(Policy()).exec(big)
    GuestSession(Policy()).exec(big)
    assert parsed.count(big) == 2  # over 64 KiB: not kept


def test_a_closed_session_leaves_nothing_behind():
    """Sessions made, used (help() of a granted builtin included) and dropped do not
    accumulate: a weak-keyed table from ticking wrappers to the functions they call
    kept every session alive (its values held their sessions), ~520 objects each."""

    def one():
        s = GuestSession(Policy())
        s.exec("x = [abs(-i) for i in range(10)]\nclass A: pass\na = A()\nhelp(len)")
        del s

    for _ in range(30):
        one()
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(200):
        one()
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 2000, f"{grown} objects more after 200 sessions"
