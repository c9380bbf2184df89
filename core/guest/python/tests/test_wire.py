"""to_wire: msgpack-able conversion of namespace values."""

import datetime
import json
from collections import OrderedDict, namedtuple

from sandtrap_guest import GuestSession, Policy, error_to_wire, to_wire
from sandtrap_guest.wire import PLACEHOLDER, safe_repr


def is_wire(v):
    if v is None or type(v) in (bool, int, float, str, bytes):
        return type(v) is not int or -(2**63) <= v < 2**64
    if type(v) in (list, tuple):
        return all(is_wire(x) for x in v)
    if type(v) is dict:
        return all(is_wire(k) and is_wire(x) for k, x in v.items())
    return False


def test_scalars_and_containers_pass_through():
    v = {"a": [1, 2.5, "s", b"b", None, True, (1, 2)], 3: {"n": []}}
    assert to_wire(v) == v
    assert type(to_wire((1, [2]))) is tuple


def test_other_values_become_placeholders():
    out = to_wire({"s": {1, 2}, "f": len, "d": datetime.date(2020, 1, 2), "big": 2**80, "c": 1j})
    assert out["s"] == {PLACEHOLDER: "set", "repr": "{1, 2}"}
    assert out["f"][PLACEHOLDER] == "builtin_function_or_method"
    assert out["d"] == {PLACEHOLDER: "date", "repr": "datetime.date(2020, 1, 2)"}
    assert out["big"] == {PLACEHOLDER: "int", "repr": str(2**80)}
    assert out["c"][PLACEHOLDER] == "complex"
    assert is_wire(out)
    json.dumps({k: v for k, v in out.items()})


def test_container_subclasses_and_odd_keys():
    P = namedtuple("P", "x y")
    out = to_wire({"od": OrderedDict(a=1), "p": P(1, 2), frozenset({1}): 1, (1, 2): "t"})
    assert out["od"] == {"a": 1} and out["p"] == (1, 2)
    # keys that msgpack cannot carry as keys (a tuple decodes as an unhashable list)
    # become their repr
    assert "frozenset({1})" in out and out["(1, 2)"] == "t"
    assert is_wire(out)


def test_cycles_and_depth():
    a = [1]
    a.append(a)
    out = to_wire(a)
    assert out[0] == 1 and out[1][PLACEHOLDER] == "list" and "recursive" in out[1]["repr"]
    deep = []
    cur = deep
    for _ in range(200):
        nxt = []
        cur.append(nxt)
        cur = nxt
    assert is_wire(to_wire(deep))


def test_sandbox_objects_never_run_user_code():
    sess = GuestSession(Policy(timeout=2))
    r = sess.exec("""
class Evil:
    def __repr__(self):
        while True:
            pass
    __str__ = __repr__
class EvilList(list):
    def __repr__(self):
        while True:
            pass
e = Evil()
vals = {"e": e, "l": EvilList([1]), "nested": [e, {e}], "cls": Evil}
""")
    assert r.error is None, r.traceback
    out = to_wire(r.namespace)
    assert out["e"] == {PLACEHOLDER: "Evil", "repr": "<__main__.Evil object>"}
    assert out["vals"]["l"][PLACEHOLDER] == "EvilList"
    assert out["vals"]["nested"][1][PLACEHOLDER] == "set"
    assert out["vals"]["cls"][PLACEHOLDER] == "type"
    assert is_wire(out)


def test_safe_repr_is_bounded():
    assert len(safe_repr("x" * 10000)) <= 200
    assert safe_repr(list(range(100))).endswith("...]")


def test_error_to_wire():
    r = GuestSession(Policy()).exec("x = 1\nraise ValueError('bad')")
    d = error_to_wire(r.error, r.traceback)
    assert d["type"] == "ValueError" and d["message"] == "bad" and "line 2" in d["traceback"]
    r = GuestSession(Policy()).exec("x = __builtins__")
    d = error_to_wire(r.error)
    assert d["type"] == "StValidationError" and d["lineno"] == 1 and d["col"] == 4
    assert error_to_wire(None) is None
    assert is_wire(d)


def test_the_accelerated_codec_reads_and_writes_what_the_pure_one_does():
    # the worker swaps in the msgpack C extension when the host's sys.path has it:
    # every value the protocol carries must round-trip the same, across both codecs
    import importlib

    import pytest

    from sandtrap_guest import mp

    importlib.reload(mp)
    pure_pack, pure_unpack = mp.packb, mp.unpackb
    vals = [
        None,
        True,
        False,
        0,
        -1,
        127,
        128,
        -33,
        2**63,
        -(2**63),
        1.5,
        "x",
        "é" * 40,
        b"b" * 300,
        [1, [2]],
        {"a": {"b": [1]}},
        {1: 2},
        "x" * 70000,
        list(range(20)),
        to_wire({"ns": (1, 2)}),
    ]
    packed = [pure_pack(v) for v in vals]
    errors = []
    for bad in (object(), 2**64, {1, 2}):
        with pytest.raises((TypeError, OverflowError)) as e:
            pure_pack(bad)
        errors.append(e.type)
    if not mp.accelerate():
        pytest.skip("the msgpack C extension is not installed")
    try:
        for v, p in zip(vals, packed, strict=True):
            assert mp.unpackb(p) == mp.unpackb(mp.packb(v)) == pure_unpack(mp.packb(v))
        for bad, err in zip((object(), 2**64, {1, 2}), errors, strict=False):
            with pytest.raises(err):
                mp.packb(bad)
    finally:
        importlib.reload(mp)  # other tests use the pure codec
