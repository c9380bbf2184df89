"""snapshot()/restore(): the namespace as source plus data."""

import functools
import json

from sandtrap_guest import GuestSession, Policy


def pol():
    p = Policy()
    p.module(functools)
    return p


def test_latest_definition_wins_and_decorators_are_kept():
    s = GuestSession(pol())
    s.exec("def f():\n    return 1\n")
    s.exec(
        "import functools\n@functools.lru_cache(maxsize=None)\ndef f():\n    return 2\nif True:\n    def g():\n        return 3\n"
    )
    snap = s.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert snap["source"].count("def f") == 1 and "@functools.lru_cache" in snap["source"]
    assert "def g" not in snap["source"] and "g" in snap["dropped"]  # not a top-level statement
    s2 = GuestSession(pol())
    assert s2.restore(snap).error is None
    assert s2.exec("x = f()").namespace["x"] == 2


def test_rebound_names_are_data_not_stale_source():
    s = GuestSession(pol())
    s.exec("def f():\n    return 1\nclass C:\n    pass\n")
    s.exec("f = 5\nC = 'text'")
    snap = s.snapshot()
    assert snap["source"] == "" and snap["data"] == {"f": 5, "C": "text"}


def test_objects_and_what_is_dropped():
    s = GuestSession(pol())
    s.exec(
        "class P:\n    def __init__(self, v):\n        self.v = v\n        self._hidden = [v]\n"
        "class S:\n    __slots__ = ('a',)\n"
        "p = P(1)\ns = S()\nnested = [P(2)]\ngen = (i for i in range(2))\nfn = len\n"
    )
    snap = s.snapshot()
    assert snap["data"]["p"] == {"__st_obj__": "P", "state": {"v": 1, "_hidden": [1]}}
    assert snap["data"]["nested"] == [{"__st_obj__": "P", "state": {"v": 2, "_hidden": [2]}}]
    assert snap["dropped"] == ["fn", "gen", "s"]
    s2 = GuestSession(pol())
    s2.restore(snap)
    r = s2.exec("got = (p.v, p._hidden, type(p).__name__, nested[0].v, type(nested[0]) is P)")
    assert r.namespace["got"] == (1, [1], "P", 2, True)


def test_cycles_are_dropped_and_markers_in_sandbox_data_are_not_objects():
    s = GuestSession(pol())
    s.exec("a = []\na.append(a)\nd = {'__st_obj__': 'P'}\nclass P:\n    pass\n")
    snap = s.snapshot()
    assert "a" in snap["dropped"] and "d" in snap["dropped"]


def test_restore_runs_no_object_code():
    s = GuestSession(pol())
    state = {
        "version": 1,
        "source": "log = []\nclass P:\n    def __init__(self):\n        log.append('init')\n"
        "    def __setattr__(self, k, v):\n        log.append('set')\n",
        "data": {},
        "objects": {"p": {"class": "P", "state": {"a": 1}}},
    }
    assert s.restore(state).error is None
    assert s.exec("x = (log, p.a)").namespace["x"] == ([], 1)
