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


COLS_CODE = (
    "class P:\n    def __init__(self, i):\n        self.i = i\n        self.name = 'p' + str(i)\n"
    "        self.tags = [i, None]\n        self.f = i / 2\n"
    "class Q:\n    pass\n"
    "ps = [P(i) for i in range(20)]\n"
    "few = [P(i) for i in range(3)]\n"  # under COLS_MIN: one marker each
    "mixed = [P(i) for i in range(19)] + [Q()]\n"
    "odd = [P(i) for i in range(20)]\nodd[5].extra = 1\n"  # two layouts
    "nest = [P(i) for i in range(20)]\nfor o in nest:\n    o.peer = P(-1)\n"
    "big = [P(i) for i in range(20)]\nbig[7].i = 2 ** 70\n"
    "cyc = [P(i) for i in range(20)]\ncyc[0].tags = cyc\n"
)


def test_a_list_of_one_class_is_kept_as_columns_and_rebuilt_the_same():
    s = GuestSession(pol())
    assert s.exec(COLS_CODE).error is None
    snap = s.snapshot()
    assert snap["version"] == 2 and json.loads(json.dumps(snap)) == snap
    d = snap["data"]
    assert d["ps"] == {
        "__st_cols__": "P",
        "n": 20,
        "cols": {
            "i": list(range(20)),
            "name": [f"p{i}" for i in range(20)],
            "tags": [[i, None] for i in range(20)],
            "f": [i / 2 for i in range(20)],
        },
    }
    assert d["few"][0] == {"__st_obj__": "P", "state": {"i": 0, "name": "p0", "tags": [0, None], "f": 0.0}}
    assert isinstance(d["mixed"], list) and d["mixed"][19] == {"__st_obj__": "Q", "state": {}}
    assert isinstance(d["odd"], list) and d["odd"][5]["state"]["extra"] == 1
    assert d["nest"]["cols"]["peer"][3] == {
        "__st_obj__": "P",
        "state": {"i": -1, "name": "p-1", "tags": [-1, None], "f": -0.5},
    }
    assert "big" in snap["dropped"] and "cyc" in snap["dropped"]  # out of range / a cycle: as before
    s2 = GuestSession(pol())
    assert s2.restore(snap).error is None
    r = s2.exec(
        "got = [[(o.i, o.name, o.tags, o.f, type(o) is P) for o in ps[:2]], len(ps), len(few), type(mixed[19]).__name__,\n"
        "       odd[5].extra, nest[4].peer.i, type(nest[4].peer) is P, ps[0].tags is ps[1].tags]"
    )
    assert r.error is None, r.error
    assert r.namespace["got"] == [
        [(0, "p0", [0, None], 0.0, True), (1, "p1", [1, None], 0.5, True)],
        20,
        3,
        "Q",
        1,
        -1,
        True,
        False,
    ]
    assert s2.exec("ps[0].tags.append(9)").error is None
    assert snap["data"]["ps"]["cols"]["tags"][0] == [0, None]  # the state's lists were copied


def test_columns_run_no_object_code_and_are_checked_like_objects():
    import decimal

    p = pol()
    p.cls(decimal.Decimal)
    s = GuestSession(p)
    state = {
        "version": 2,
        "source": "log = []\nclass P:\n    def __init__(self):\n        log.append('init')\n"
        "    def __setattr__(self, k, v):\n        log.append('set')\n"
        "class S:\n    __slots__ = ('a',)\nclass Sub(Decimal):\n    pass\n",
        "data": {
            "ps": {"__st_cols__": "P", "n": 2, "cols": {"a": [1, 2], "__class__": [3, 4], "__st_x": [5, 6]}},
            "host": {"__st_cols__": "Decimal", "n": 1, "cols": {"a": [1]}},  # not a class the source defined
            "sub": {"__st_cols__": "Sub", "n": 1, "cols": {"a": [1]}},  # a sandbox class on a host base
            "short": {"__st_cols__": "P", "n": 3, "cols": {"a": [1]}},  # a count its columns do not have
            "empty": {"__st_cols__": "P", "n": 10**9, "cols": {}},  # no columns to bound the count
            "slots": {"__st_cols__": "S", "n": 1, "cols": {"a": [1]}},
            "badname": {"__st_cols__": ["P"], "n": 1, "cols": {"a": [1]}},
        },
    }
    assert s.restore(state).error is None
    r = s.exec(
        "x = (log, [p.a for p in ps], [type(p).__name__ for p in ps],\n     host, sub, short, empty, slots, badname)"
    )
    assert r.error is None, r.error
    assert r.namespace["x"] == ([], [1, 2], ["P", "P"], None, None, None, None, None, None)
    assert [sorted(object.__getattribute__(p, "__dict__")) for p in s._ns["ps"]] == [["a"], ["a"]]


def test_a_version_1_state_still_restores_and_other_versions_are_refused():
    import pytest

    s = GuestSession(pol())
    obj = {"__st_obj__": "P", "state": {"v": 1}}
    state = {"version": 1, "source": "class P:\n    pass\n", "data": {"ps": [obj] * 20}, "dropped": []}
    assert s.restore(state).error is None
    assert s.exec("x = [p.v for p in ps]").namespace["x"] == [1] * 20
    for v in (0, 3, True, "2", 2.0):
        with pytest.raises(ValueError, match="unsupported state version"):
            GuestSession(pol()).restore({**state, "version": v})
