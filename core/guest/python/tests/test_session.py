"""Behaviour of GuestSession: results, namespaces, modules, echo, legit code."""

import math
import threading

import pytest

from sandtrap_guest import ExecResult, GuestSession, Policy, StAttributeDenied, StImportDenied, StValidationError


def run(code, policy=None, **kw):
    return GuestSession(policy or Policy(timeout=10)).exec(code, **kw)


def ok(code, policy=None, **kw):
    r = run(code, policy, **kw)
    assert r.error is None, r.traceback
    return r


# ------------------------------------------------------------------ seed page
def test_seed_quick_start():
    sess = GuestSession(Policy(timeout=5.0, tick_limit=100_000))
    r = sess.exec('total = sum(range(10))\nprint(f"total = {total}")\n')
    assert isinstance(r, ExecResult)
    assert r.stdout == "total = 45\n"
    assert r.namespace == {"total": 45}
    assert r.error is None
    assert r.ticks == 2  # fn calls: sum + print
    assert r.isolation == "none"


def test_seed_handing_code_a_module():
    class DB:
        def query(self, q):
            return [(1,)] if q == "select 1" else []

    db = DB()
    sess = GuestSession(Policy(timeout=5.0, tick_limit=100_000))
    r = sess.exec(
        "import host\nfrom host import db\n\nrows = db.query('select 1')\nv = host.VERSION\n",
        modules={"host": {"db": db, "VERSION": 3}},
    )
    assert r.error is None, r.traceback
    assert r.namespace["rows"] == [(1,)]
    assert r.namespace["v"] == 3
    assert "host" not in r.namespace


def test_seed_namespace_injection():
    r = ok("y = x + 1", namespace={"x": 10})
    assert r.namespace == {"x": 10, "y": 11}


def test_seed_error_handling():
    r = run("x = 1 / 0")
    assert isinstance(r.error, ZeroDivisionError)
    r = run("from os import *")
    assert isinstance(r.error, StValidationError)
    assert r.namespace == {} and r.stdout == "" and r.ticks == 0


# ------------------------------------------------------------ per-exec modules
def test_exec_modules_are_read_only_and_vanish():
    sess = GuestSession(Policy(timeout=5))
    r = sess.exec("import host\nhost.x = 1", modules={"host": {"VERSION": 3}})
    assert type(r.error) is StAttributeDenied and "read-only" in str(r.error)
    r = sess.exec("import host\nv = host.VERSION", modules={"host": {"VERSION": 3}})
    assert r.error is None and r.namespace["v"] == 3
    r = sess.exec("w = v + 1\nimport host")
    assert type(r.error) is StImportDenied
    assert r.namespace["w"] == 4
    r = sess.exec("host.VERSION")
    assert type(r.error) is NameError  # the binding from the earlier call is gone


def test_exec_modules_private_names_are_readable_dunders_not():
    r = run("import m\na = m._token\nb = m.__dict__", modules={"m": {"_token": "x"}})
    assert type(r.error) is StAttributeDenied and "__dict__" in str(r.error)
    assert r.namespace["a"] == "x"


def test_exec_modules_dotted_names():
    r = ok("import pkg.sub\nfrom pkg.sub import v\nw = pkg.sub.v", modules={"pkg.sub": {"v": 7}})
    assert r.namespace["v"] == 7 and r.namespace["w"] == 7


def test_exec_module_bad_arguments_raise_to_host():
    sess = GuestSession(Policy())
    with pytest.raises(ValueError):
        sess.exec("x = 1", modules={"not valid": {}})
    with pytest.raises(TypeError):
        sess.exec("x = 1", modules={"m": 3})
    with pytest.raises(ValueError):
        sess.exec("x = 1", namespace={"__builtins__": {}})
    with pytest.raises(TypeError):
        sess.exec(b"x = 1")


# ------------------------------------------------------------------ namespace
def test_namespace_persists_functions_and_classes():
    sess = GuestSession(Policy(timeout=5))
    assert (
        sess.exec(
            "def sq(x):\n    return x * x\nclass P:\n    def __init__(self, v):\n        self._v = v\n"
            "    def get(self):\n        return self._v\n"
        ).error
        is None
    )
    r = sess.exec("a = sq(7)\nb = P(3).get()")
    assert r.error is None, r.traceback
    assert r.namespace["a"] == 49 and r.namespace["b"] == 3
    assert set(sess.namespace) == {"sq", "P", "a", "b"}


def test_result_namespace_has_only_user_names():
    pol = Policy(timeout=5)
    pol.module(math)
    pol.fn(len, name="length")
    r = ok(
        "import math\nx = length([1, 2])\nfor i in range(2):\n    pass\nclass A:\n    n = [j for j in range(2)]\n"
        "match 3:\n    case int(q):\n        pass\n",
        pol,
    )
    assert set(r.namespace) == {"x", "i", "A", "q"}, r.namespace
    assert "__builtins__" not in r.namespace and "math" not in r.namespace


def test_user_may_shadow_builtins():
    r = ok("print = 42\nx = print")
    assert r.namespace == {"print": 42, "x": 42}


# ---------------------------------------------------------------------- echo
@pytest.mark.parametrize(
    "code,out",
    [
        ("x = 41 + 1\nx", "42\n"),
        ("'done'", "'done'\n"),
        ("print('hi')", "hi\n"),
        ("None", ""),
        ("x = 1", ""),
        ('"""doc"""\nx = 3\nx * 2', "6\n"),
        ("for i in range(2):\n    i", ""),
    ],
)
def test_echo_last_expression(code, out):
    r = GuestSession(Policy(), echo=True).exec(code)
    assert r.error is None, r.traceback
    assert r.stdout == out


def test_echo_off_by_default_and_per_exec_override():
    sess = GuestSession(Policy())
    assert sess.exec("41 + 1").stdout == ""
    assert sess.exec("41 + 1", echo=True).stdout == "42\n"
    assert sess.exec("41 + 1").stdout == ""


def test_echo_goes_through_the_gate():
    r = GuestSession(Policy(), echo=True).exec("(1).__class__")
    assert type(r.error) is StAttributeDenied


# ------------------------------------------------------------- legit Python
def test_user_classes_private_properties_and_super():
    r = ok("""
class Base:
    def __init__(self, v):
        self._v = v
        self.__hidden = v * 10
    @property
    def v(self):
        return self._v
    @v.setter
    def v(self, value):
        self._v = value
    def hidden(self):
        return self.__hidden
    def __repr__(self):
        return f"Base({self._v})"
    def __eq__(self, other):
        return isinstance(other, Base) and other._v == self._v
    def __hash__(self):
        return hash(self._v)

class Child(Base):
    def __init__(self, v, w):
        super().__init__(v)
        self.w = w
    def hidden(self):
        return super().hidden() + 1

c = Child(2, 3)
c.v = 5
out = (c.v, c._v, c.hidden(), c.w, repr(c), c == Child(5, 0), len({c, Child(5, 1)}), c._Base__hidden)
""")
    assert r.namespace["out"] == (5, 5, 21, 3, "Base(5)", True, 1, 20)


def test_dataclass_like_patterns_and_dunders():
    r = ok("""
class Vec:
    __slots__ = ("x", "y")
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y)
    def __iter__(self):
        yield self.x
        yield self.y
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return (self.x, self.y)[i]
    def __post_init__(self):
        pass
v = Vec(1, 2) + Vec(3, 4)
v.__post_init__()
out = (list(v), len(v), v[1], v.__len__(), type(v).__name__, isinstance(v, Vec), type(v) is Vec)
""")
    assert r.namespace["out"] == ([4, 6], 2, 6, 2, "Vec", True, True)


def test_dataclasses_when_granted():
    import dataclasses

    pol = Policy()
    pol.module(dataclasses)
    r = ok(
        """
from dataclasses import dataclass, field, asdict
@dataclass
class P:
    x: int
    y: int = 0
    tags: list = field(default_factory=list)
p = P(1, tags=["a"])
out = (p, asdict(p), P(1) == P(1, 0))
""",
        pol,
    )
    p, d, eq = r.namespace["out"]
    assert (p.x, p.y, p.tags, d, eq) == (1, 0, ["a"], {"x": 1, "y": 0, "tags": ["a"]}, True)


def test_init_subclass_registry_pattern():
    r = ok("""
class Plugin:
    registry = []
    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.kind = cls.__name__.lower()
        Plugin.registry.append(cls)
class Alpha(Plugin):
    pass
names = [p.kind for p in Plugin.registry]
""")
    assert r.namespace["names"] == ["alpha"]


def test_control_flow_exceptions_generators_with():
    r = ok("""
log = []
class CM:
    def __enter__(self):
        log.append("enter")
        return self
    def __exit__(self, et, ev, tb):
        log.append(("exit", et.__name__ if et else None))
        return et is KeyError
def gen(n):
    for i in range(n):
        yield i * i
    return "done"
def deleg():
    r = yield from gen(3)
    log.append(r)
with CM() as c:
    raise KeyError("x")
try:
    try:
        raise ValueError("boom")
    except ValueError as e:
        log.append(str(e))
        raise RuntimeError("again") from e
    finally:
        log.append("finally")
except RuntimeError as e:
    log.append(type(e.__cause__ if False else e).__name__)
else:
    log.append("no")
squares = list(deleg())
total = sum(x for x in range(5) if x % 2)
i = 0
while True:
    i += 1
    if i > 3:
        break
else:
    log.append("never")
for k in range(3):
    if k == 1:
        continue
    log.append(k)
else:
    log.append("for-else")
""")
    assert r.namespace["log"] == [
        "enter",
        ("exit", "KeyError"),
        "boom",
        "finally",
        "RuntimeError",
        "done",
        0,
        2,
        "for-else",
    ]
    assert r.namespace["squares"] == [0, 1, 4] and r.namespace["total"] == 4


def test_comprehensions_lambdas_fstrings_str_methods():
    r = ok("""
words = ["banana", "Apple", "cherry"]
s = sorted(words, key=lambda w: w.lower())
d = {w: len(w) for w in words}
st = {len(w) for w in words}
nested = [[i * j for j in range(3)] for i in range(3)]
flat = [x for row in nested for x in row if x]
fs = f"{s[0]!r:>10}|{d['Apple']:03d}|{3.14159:.2f}"
fmt = "{} {name} {}".format("a", "a", name="n") + "{x[0]}".format_map({"x": [9]}) + "{0.real}".format(5)
joined = "-".join(w.upper().strip() for w in words)
gen_sum = sum(n for n in (len(w) for w in words))
walrus = [y for x in range(5) if (y := x * 2) > 4]
""")
    ns = r.namespace
    assert ns["s"] == ["Apple", "banana", "cherry"]
    assert ns["d"] == {"banana": 6, "Apple": 5, "cherry": 6} and ns["st"] == {5, 6}
    assert ns["flat"] == [1, 2, 2, 4]
    assert ns["fs"] == "   'Apple'|005|3.14"
    assert ns["fmt"] == "a n a95"
    r = run("'{} {0}'.format(1)")  # same rule as str.format
    assert type(r.error) is ValueError
    assert ns["joined"] == "BANANA-APPLE-CHERRY" and ns["gen_sum"] == 17
    assert ns["walrus"] == [6, 8]


def test_match_statement_works():
    r = ok("""
class Point:
    __match_args__ = ("x", "y")
    def __init__(self, x, y):
        self.x, self.y = x, y
def where(p):
    match p:
        case Point(0, 0):
            return "origin"
        case Point(x, 0) | Point(0, x):
            return f"axis {x}"
        case Point(x=x, y=y) if x == y:
            return "diag"
        case [a, *rest]:
            return f"seq {a} {rest}"
        case {"k": v, **kw}:
            return f"map {v} {kw}"
        case int(n) | float(n):
            return f"num {n}"
        case str() as s:
            return f"str {s}"
        case None:
            return "none"
        case _:
            return "other"
out = [where(p) for p in (Point(0, 0), Point(3, 0), Point(2, 2), [1, 2, 3], {"k": 1, "z": 2}, 5, "s", None, 1.5)]
""")
    assert r.namespace["out"] == [
        "origin",
        "axis 3",
        "diag",
        "seq 1 [2, 3]",
        "map 1 {'z': 2}",
        "num 5",
        "str s",
        "none",
        "num 1.5",
    ]


def test_match_value_patterns_through_granted_module():
    import enum

    pol = Policy()
    pol.module(math)
    pol.module(enum)
    r = ok(
        """
import math
from enum import Enum
class Color(Enum):
    RED = 1
    BLUE = 2
def f(v):
    match v:
        case math.pi:
            return "pi"
        case Color.RED:
            return "red"
        case _:
            return "?"
out = [f(math.pi), f(Color.RED), f(Color.BLUE), list(Color.__members__)]
""",
        pol,
    )
    assert r.namespace["out"] == ["pi", "red", "?", ["RED", "BLUE"]]


def test_generators_and_async_def():
    import asyncio

    pol = Policy()
    pol.module(asyncio)
    r = ok(
        """
import asyncio
async def work(n):
    await asyncio.sleep(0)
    return n * 2
async def main():
    results = [await work(i) for i in range(3)]
    async def agen():
        for i in range(2):
            yield i
    got = [x async for x in agen()]
    return results, got
out = asyncio.run(main())
""",
        pol,
    )
    assert r.namespace["out"] == ([0, 2, 4], [0, 1])


def test_import_granted_module_and_filters():
    pol = Policy()
    pol.module(math, include=("sqrt", "pi", "floor"))
    r = ok("import math\nfrom math import floor\na = math.sqrt(16)\nb = floor(math.pi)", pol)
    assert r.namespace["a"] == 4.0 and r.namespace["b"] == 3
    r = GuestSession(pol).exec("import math\nmath.cos(0)")
    assert type(r.error) is StAttributeDenied and "excluded" in str(r.error)
    r = GuestSession(pol).exec("from math import cos")
    assert type(r.error) is StImportDenied


def test_module_grant_under_other_name_and_exclude():
    pol = Policy()
    pol.module(math, name="m", exclude=("_*", "cos"))
    r = GuestSession(pol).exec("import m\nx = m.sin(0)\ny = m.cos(0)")
    assert type(r.error) is StAttributeDenied and r.namespace["x"] == 0.0
    assert type(GuestSession(pol).exec("import math").error) is StImportDenied


def test_recursive_module_grant():
    import json

    pol = Policy()
    pol.module(json, recursive=True)
    r = ok(
        "import json.decoder\nfrom json.decoder import JSONDecoder\nx = json.decoder.JSONDecoder is JSONDecoder\n"
        "y = json.loads('[1]')",
        pol,
    )
    assert r.namespace["x"] is True and r.namespace["y"] == [1]
    pol2 = Policy()
    pol2.module(json, recursive=True, exclude=("_*", "decoder"))
    assert type(GuestSession(pol2).exec("import json.decoder").error) is StImportDenied


def test_dotted_grant_gets_synthetic_parent():
    import os.path

    pol = Policy()
    pol.module(os.path, name="os.path", include=("join", "basename"))
    r = ok("import os.path\nfrom os.path import basename\na = os.path.join('a', 'b')\nb = basename('/x/y')", pol)
    assert r.namespace["a"] == "a/b" and r.namespace["b"] == "y"
    r = GuestSession(pol).exec("import os.path\nos.system")
    assert type(r.error) is AttributeError  # the synthetic parent only holds "path"
    r = GuestSession(pol).exec("import os.path\nos.path.exists")
    assert type(r.error) is StAttributeDenied


def test_stdin_argv_synthetic_sys():
    r = ok(
        "import sys\nargs = sys.argv\nline = input()\nrest = sys.stdin.read()\nsys.stdout.write('w')\n"
        "sys.stderr.write('e')",
        stdin="first\nsecond\n",
        argv=["prog", "-v"],
    )
    assert r.namespace["args"] == ["prog", "-v"]
    assert r.namespace["line"] == "first" and r.namespace["rest"] == "second\n"
    assert r.stdout == "w" and r.stderr == "e"
    assert type(run("input()").error) is EOFError
    assert type(run("import sys").error) is StImportDenied


def test_print_options():
    r = ok("print(1, 2, sep='-', end='!')\nprint()\nprint('a', 'b')")
    assert r.stdout == "1-2!\na b\n"
    assert type(run("print(1, sep=3)").error) is TypeError


def test_errors_have_user_tracebacks():
    r = run("def f(x):\n    return 1 / x\n\ny = f(0)\n")
    assert type(r.error) is ZeroDivisionError
    assert 'File "<sandbox>", line 4, in <module>' in r.traceback
    assert 'File "<sandbox>", line 2, in f' in r.traceback and "return 1 / x" in r.traceback
    frames = []
    tb = r.error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert frames == [("<sandbox>", 4), ("<sandbox>", 2)]


def test_gate_error_points_at_user_line():
    r = run("x = 1\ny = x.__class__\n")
    assert "line 2, in <module>" in r.traceback
    tb = r.error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_filename == "<sandbox>" and tb.tb_lineno == 2


def test_syntax_and_validation_errors_carry_positions():
    r = run("x = (1,\n")
    assert type(r.error) is SyntaxError and r.error.filename == "<sandbox>" and r.ticks == 0
    r = run("x = 1\ny = __builtins__\n")
    assert type(r.error) is StValidationError
    assert (r.error.lineno, r.error.col) == (2, 4)
    assert "line 2" in r.traceback and "^" in r.traceback


def test_compile_time_syntax_errors():
    r = run("return 5")
    assert type(r.error) is SyntaxError


def test_exec_is_not_reentrant_but_sessions_are_independent():
    sess = GuestSession(Policy(timeout=5))
    box = {}
    pol = Policy(timeout=5)

    def reenter():
        try:
            sess.exec("x = 1")
        except RuntimeError as e:
            box["err"] = e
        return 1

    pol.fn(reenter)
    sess2 = GuestSession(pol)
    assert sess2.exec("reenter()").error is None
    sess = sess2
    r = sess.exec("reenter()")
    assert r.error is None and isinstance(box.get("err"), RuntimeError)


def test_cancel_from_another_thread():
    from sandtrap_guest import StCancelled

    sess = GuestSession(Policy(timeout=20))
    t = threading.Timer(0.2, sess.cancel)
    t.start()
    r = sess.exec("while True:\n    pass")
    assert type(r.error) is StCancelled
    # the next exec is not cancelled
    assert sess.exec("x = 1").error is None
