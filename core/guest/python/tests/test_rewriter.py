"""The validator is fail-closed."""

import ast
import sys

import pytest

from sandtrap_guest import GuestSession, Policy, StValidationError
from sandtrap_guest.rewriter import ALLOWED_NODE_TYPES, Rewriter, rewrite


def test_every_ast_node_type_is_either_handled_or_rejected():
    all_nodes = {c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST)}
    # abstract bases and deprecated aliases never appear in parsed trees
    unhandled = all_nodes - ALLOWED_NODE_TYPES
    for node_type in unhandled:
        try:
            node = node_type()
        except TypeError:
            continue
        if type(node) in ALLOWED_NODE_TYPES:  # deprecated aliases (ast.Num() is a Constant)
            continue
        with pytest.raises(StValidationError):
            Rewriter("").visit(node)


def test_unknown_node_is_rejected_with_position():
    class Weird(ast.expr):
        _fields = ()

    tree = ast.parse("x = 1\ny = 2")
    weird = Weird()
    weird.lineno, weird.col_offset = 2, 4
    tree.body[1].value = weird
    with pytest.raises(StValidationError) as ei:
        Rewriter("x = 1\ny = 2").rewrite_module(tree)
    assert (ei.value.lineno, ei.value.col) == (2, 4)
    assert "Weird" in str(ei.value)


def test_unknown_field_on_known_node_is_rejected():
    tree = ast.parse("def f():\n    pass")
    tree.body[0]._fields = tree.body[0]._fields + ("surprise",)
    tree.body[0].surprise = [ast.Name(id="x", ctx=ast.Load())]
    with pytest.raises(StValidationError):
        Rewriter("").rewrite_module(tree)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="type statements need 3.12")
def test_type_alias_statement_rejected():
    r = GuestSession(Policy()).exec("type X = int")
    assert type(r.error) is StValidationError


@pytest.mark.skipif(sys.version_info < (3, 12), reason="generic syntax needs 3.12")
def test_generic_function_syntax_rejected():
    r = GuestSession(Policy()).exec("def f[T](x: T) -> T:\n    return x")
    assert type(r.error) is StValidationError


def test_no_attribute_survives_the_rewrite():
    src = (
        "import math\nclass A:\n    def m(self):\n        self.x = self.y.z\n        del self.w\n"
        "        self.n += 1\n        for self.i in range(2):\n            pass\n        with open as self.f:\n"
        "            pass\n        a, self.b = 1, 2\n        return f'{self.q}'\n"
    )
    tree = rewrite(src)
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert loads == []


def test_helpers_are_unforgeable():
    for code in (
        "__st_ga__",
        "__st_n__ = 0",
        "def __st_x(): pass",
        "import __st_mod",
        "x.__st_y = 1",
        "f(__st_k=1)",
        "global __st_n__",
        "class __st_C: pass",
        "lambda __st_a: 1",
        "try:\n    pass\nexcept E as __st_e:\n    pass",
        "match x:\n    case __st_c:\n        pass",
        "from m import __st_x",
    ):
        with pytest.raises(StValidationError):
            rewrite(code)


def test_bare_except_becomes_except_exception():
    tree = rewrite("try:\n    pass\nexcept:\n    pass")
    handler = next(n for n in ast.walk(tree) if isinstance(n, ast.Try)).handlers[0]
    assert isinstance(handler.type, ast.Name) and handler.type.id == "__st_exc__"


def test_private_names_are_mangled_like_cpython():
    r = GuestSession(Policy()).exec(
        "class _Under:\n    def __init__(self):\n        self.__x = 1\n    def get(self):\n"
        "        return self.__x, getattr(self, '_Under__x')\nout = _Under().get()"
    )
    assert r.error is None, r.traceback
    assert r.namespace["out"] == (1, 1)


def test_deep_nesting_is_a_validation_error_not_a_crash():
    code = "x = " + "[" * 150 + "]" * 150
    r = GuestSession(Policy()).exec(code)
    assert r.error is None or isinstance(r.error, (StValidationError, SyntaxError, RecursionError))
