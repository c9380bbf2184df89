"""Fail-closed validation and rewriting of sandboxed Python source.

Every AST node type the sandbox accepts has an entry in ``_HANDLERS``; any other
node type (``TypeAlias``, template strings, whatever a future Python adds) is
rejected with :class:`StValidationError`.  Every handler also declares the node
fields it understands: a node carrying a non-empty field the handler does not
know about is rejected too, so a new field in a new Python release cannot slip
through unvisited.

The rewrite:

* ``obj.attr`` (load)       -> ``__st_ga__(obj, 'attr')``
* ``obj.attr = v``          -> ``__st_sa__(obj, 'attr', v)``  (temporaries for tuple
  targets, ``for``/``with`` targets and augmented assignment)
* ``del obj.attr``          -> ``__st_da__(obj, 'attr')``
* ``import a.b`` / ``from a import b`` -> assignments from ``__st_import__`` /
  ``__st_importfrom__``
* loop bodies, function bodies: an inlined checkpoint
  ``if not (__st_n__ := __st_n__ - 1): __st_chk__()`` (the countdown never goes
  below zero: whoever arms it writes at least 1) (``nonlocal __st_n__`` is
  declared in every function body); loops directly in a class body call
  ``__st_tick__()`` instead
* comprehension steps: ``if (__st_n__ := __st_n__ - 1) or __st_chk__()`` as the
  first condition of every ``for`` clause, or ``if __st_tick__()`` where an
  assignment expression is not allowed (class bodies, lambdas, comprehension
  iterables)
* lambda bodies: ``__st_tick__() and body``
* bare ``except:`` -> ``except __st_exc__:`` (``Exception``)
* class bodies start with ``__st_user__ = __st_mark__`` (an unforgeable sentinel that
  marks the class as sandbox-defined from the moment it exists, so a base class's
  ``__init_subclass__`` already sees it as user code)
* class patterns and dotted value patterns of ``match`` are hoisted through the
  gate (see ``_MatchHoist``)
* with ``echo``, a final expression statement becomes ``__st_echo__(expr)``

Private-name mangling (``self.__x`` inside ``class A`` -> ``_A__x``) is applied to
attribute names before they become string constants, as the compiler would.

The tick counter ``__st_n__`` is a closure cell shared by all sandboxed code (a
``LOAD_DEREF``/``STORE_DEREF`` per checkpoint instead of a dict store).  For that the
rewritten module body becomes the body of a function nested in another one::

    def __st_outer__():
        __st_n__ = 0                  # never runs: only makes __st_n__ a closure variable
        def __st_main__():
            nonlocal __st_n__
            global <every name the module binds>
            <module body>

The session compiles this, takes ``__st_main__``'s code object (renamed ``<module>``,
see ``session._main_code``) and calls it as a function with the session's counter
cell as its closure and the session namespace as its globals.  Code that never
touches the counter (no loop, function or comprehension: ``x = f(1)``) is left a
plain module body, which compiles faster.  Declaring every bound name
``global`` keeps module semantics (all names live in the namespace, qualnames of
module-level functions and classes stay unqualified); what a function body would
accept but a module body does not (``return``, ``yield``, ``await``, ``nonlocal``) is
rejected with the compiler's own message; a module docstring is stored as
``__doc__``; module-level annotations of names are evaluated (unless ``from __future__
import annotations``) and dropped (sandboxed code cannot read ``__annotations__``);
leading ``from __future__`` imports are hoisted out of the body to the top of the
compiled module (so they act at compile time only; a body with them is always
wrapped).
"""

from __future__ import annotations

import ast
import sys

from .errors import StValidationError

# Helper names injected by the rewriter.  They all look like dunders so the
# compiler never mangles them inside class bodies; user code cannot name them
# because every identifier starting with RESERVED_PREFIX is rejected.
RESERVED_PREFIX = "__st_"
N = "__st_n__"
CHK = "__st_chk__"
TICK = "__st_tick__"
GA = "__st_ga__"
SA = "__st_sa__"
DA = "__st_da__"
IMPORT = "__st_import__"
IMPORTFROM = "__st_importfrom__"
USER = "__st_user__"  # class-body marker: __st_user__ = __st_mark__
MARK = "__st_mark__"
ECHO = "__st_echo__"
EXC = "__st_exc__"
MATCH = "__st_match__"
MATCHCLS = "__st_matchcls__"
OUTER = "__st_outer__"  # module wrapper (see the module docstring)
MAIN = "__st_main__"

# Identifiers user code may never use (as a Name, def/class name, argument,
# alias, global, except target or pattern capture).
DENIED_NAMES = frozenset(
    {
        "__builtins__",
        "__import__",
        "__build_class__",
        "__loader__",
        "__spec__",
        "__file__",
        "__cached__",
        "__package__",
        "__path__",
        "__globals__",
        "__dict__",
        "__code__",
        "__closure__",
        "__self__",
        "__func__",
        "__subclasses__",
        "__bases__",
        "__mro__",
        "__base__",
        "__class__",
    }
)
# Dunders refused in class bodies too, and why.
CLASS_DENIED_NAMES = {
    "__del__": "defining __del__ is not supported in the sandbox (it would run later, in the host's "
    "garbage collector, outside every limit)",
    "__annotations__": "use of '__annotations__' is not allowed in the sandbox (write annotations instead)",
}
# Dunder identifiers allowed outside class bodies.  Inside a class body any other
# dunder (``__slots__``, ``__hash__ = None``, ``__radd__ = __add__`` ...) is a
# plain class attribute and is allowed unless it is in DENIED_NAMES.
ALLOWED_DUNDER_NAMES = frozenset(
    {
        "__name__",
        "__doc__",
        "__debug__",
        "__all__",
        "__version__",
        "__author__",
    }
)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def mangle(class_name: str | None, name: str) -> str:
    """CPython's private-name mangling."""
    if class_name is None or not name.startswith("__") or name.endswith("__") or "." in name:
        return name
    stripped = class_name.lstrip("_")
    if not stripped:
        return name
    return f"_{stripped}{name}"


def _name(id_: str, ctx=None) -> ast.Name:
    return ast.Name(id=id_, ctx=ctx or ast.Load())


def _call(fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=_name(fn), args=list(args), keywords=[])


def _const(v) -> ast.Constant:
    return ast.Constant(value=v)


def _decrement() -> ast.NamedExpr:
    return ast.NamedExpr(target=_name(N, ast.Store()), value=ast.BinOp(left=_name(N), op=ast.Sub(), right=_const(1)))


def _checkpoint_stmt(loc: ast.AST, inline: bool = True) -> ast.stmt:
    if not inline:
        # class bodies: no assignment to the closure counter from a class scope
        return _locate(ast.Expr(value=_call(TICK)), loc)
    node = ast.If(
        test=ast.UnaryOp(op=ast.Not(), operand=_decrement()),
        body=[ast.Expr(value=_call(CHK))],
        orelse=[],
    )
    return _locate(node, loc)


def _locate(node: ast.AST, loc: ast.AST):
    """Give a freshly built ``node`` ``loc``'s position; its location-less children
    inherit it from ``ast.fix_missing_locations`` at the end of the rewrite."""
    return ast.copy_location(node, loc)


# Constant parts of the module wrapper, shared by every rewritten tree (the compiler
# only reads them; building AST nodes is a noticeable part of a small exec).
_AT = {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0}
_NO_ARGS = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
_NONLOCAL_N = ast.Nonlocal(names=[N], **_AT)
_INIT_N = ast.Assign(targets=[ast.Name(id=N, ctx=ast.Store(), **_AT)], value=ast.Constant(value=0, **_AT), **_AT)


def _has_docstring(body: list[ast.stmt]) -> bool:
    return (
        bool(body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    )


class _Scope:
    __slots__ = ("kind", "class_name")

    def __init__(self, kind: str, class_name: str | None):
        self.kind = kind  # module | function | class | lambda | comp
        self.class_name = class_name  # for private-name mangling


class Rewriter:
    """One-shot validator + rewriter for a parsed module."""

    def __init__(
        self, source: str = "", echo: bool | str = False, filename: str = "<sandbox>", allow_await: bool = False
    ):
        self.source_lines = source.splitlines()
        # aexec: top-level await, async for and async with (the body becomes a coroutine)
        self.allow_await = allow_await
        self.top_await = False
        self.echo = echo_mode(echo)
        self.filename = filename
        self.future_annotations = False
        self.uses_n = False  # an inlined checkpoint was emitted (the body needs the cell)
        # every identifier seen (check_ident) or made up (temporaries): a superset of
        # the names the module body binds, all declared global in the wrapper
        self.names: set[str] = set()
        self.scopes: list[_Scope] = [_Scope("module", None)]
        self.comp_iter_depth = 0
        self._tmp = 0
        self._loc: tuple[int, int] = (1, 0)

    # ------------------------------------------------------------ utilities
    def error(self, msg: str, node: ast.AST | None = None) -> StValidationError:
        lineno, col = self._loc
        if node is not None and getattr(node, "lineno", None) is not None:
            lineno, col = node.lineno, node.col_offset
        text = self.source_lines[lineno - 1] if 0 < lineno <= len(self.source_lines) else None
        return StValidationError(msg, lineno, col, text)

    def tmp(self) -> str:
        self._tmp += 1
        name = f"__st_t{self._tmp}__"
        self.names.add(name)
        return name

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def nearest_code_scope(self) -> str:
        for s in reversed(self.scopes):
            if s.kind != "comp":
                return s.kind
        return "module"

    def mangle(self, name: str) -> str:
        return mangle(self.scope.class_name, name)

    def checkpoint(self, loc: ast.AST) -> ast.stmt:
        """The checkpoint at the start of a loop body or function body: inlined on the
        closure counter, or a ``__st_tick__()`` call directly in a class body."""
        if self.nearest_code_scope() == "class":
            return _checkpoint_stmt(loc, inline=False)
        self.uses_n = True
        return _checkpoint_stmt(loc)

    def module_level_error(self, msg: str, node: ast.AST) -> SyntaxError:
        """What the compiler says about ``node`` at module level, which it would accept
        in the function body the module is wrapped in."""
        lineno, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
        end_lineno, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        return SyntaxError(
            msg,
            (
                self.filename,
                lineno,
                None if col is None else col + 1,
                None,
                end_lineno,
                None if end_col is None else end_col + 1,
            ),
        )

    def check_ident(self, name: str | None, node: ast.AST, *, binding_in_class: bool = False):
        if name is None:
            return
        self.names.add(name)
        if name.startswith(RESERVED_PREFIX):
            raise self.error(f"identifier {name!r} uses the reserved prefix {RESERVED_PREFIX!r}", node)
        if name in DENIED_NAMES:
            raise self.error(f"use of {name!r} is not allowed in the sandbox", node)
        if _is_dunder(name) and name not in ALLOWED_DUNDER_NAMES:
            if not (binding_in_class or self.scope.kind == "class"):
                raise self.error(f"use of {name!r} is not allowed in the sandbox", node)
            if name in CLASS_DENIED_NAMES:
                raise self.error(CLASS_DENIED_NAMES[name], node)

    def check_attr_name(self, name: str, node: ast.AST):
        if name.startswith(RESERVED_PREFIX):
            raise self.error(f"attribute {name!r} uses the reserved prefix {RESERVED_PREFIX!r}", node)

    # --------------------------------------------------------------- driver
    def visit(self, node: ast.AST):
        spec = _HANDLERS.get(type(node))
        if spec is None:
            raise self.error(f"unsupported syntax: {type(node).__name__}", node)
        handler, known = spec
        for f in node._fields:
            if f not in known:
                v = getattr(node, f, None)
                if v not in (None, [], ()):
                    raise self.error(f"unsupported syntax: {type(node).__name__}.{f}", node)
        if getattr(node, "lineno", None) is not None:
            self._loc = (node.lineno, node.col_offset)
        return handler(self, node)

    def expr(self, node):
        return None if node is None else self.visit(node)

    def exprs(self, nodes):
        return [self.visit(n) for n in nodes]

    def stmts(self, nodes) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for n in nodes:
            if not isinstance(n, ast.stmt):
                raise self.error(f"unsupported syntax: {type(n).__name__}", n)
            resumes = self.scope.kind == "function" and _resumes(n)
            r = self.visit(n)
            if resumes:
                # a resumption point (yield, await): the code after it may run when the
                # host resumes or finalizes a generator after the exec, so it checks
                # first (StOutsideExec): at the start of every block the statement
                # leads into, and after it
                for st in r:
                    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        continue  # its body is another scope, with its own entry check
                    for f in _BLOCK_FIELDS:
                        block = getattr(st, f, None)
                        if f in st._fields and isinstance(block, list):
                            block.insert(0, self.checkpoint(n))
                    for h in getattr(st, "handlers", None) or ():
                        h.body.insert(0, self.checkpoint(n))
                    for c in getattr(st, "cases", None) or ():
                        c.body.insert(0, self.checkpoint(n))
                out.extend(r)
                out.append(self.checkpoint(n))
            else:
                out.extend(r)
        return out

    def annotation(self, node):
        """An annotation, with every string in it that a host could evaluate as code
        (``typing.get_type_hints``, ``functools.singledispatch``) rewritten like
        sandboxed code: such a string is otherwise run unchecked by the host's
        ``eval``. A string that is a plain name, does not parse as an expression or
        that the rewrite leaves unchanged is kept verbatim."""
        node = self.expr(node)
        if node is not None:
            self._annotation_strings(node, 0)
        return node

    def _annotation_strings(self, node, depth: int):
        """The strings in type positions of an annotation: the annotation itself, the
        arguments of a subscription (``List["X"]``), the operands of ``|``. (Strings
        passed to calls are not evaluated by typing.)"""
        todo = [node]
        while todo:
            c = todo.pop()
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                c.value = self._annotation_string(c.value, c, depth)
            elif isinstance(c, ast.Subscript):
                todo.append(c.slice)
            elif isinstance(c, (ast.Tuple, ast.List)):
                todo.extend(c.elts)
            elif isinstance(c, ast.BinOp) and isinstance(c.op, ast.BitOr):
                todo.extend((c.left, c.right))

    def _annotation_string(self, text: str, where: ast.AST, depth: int) -> str:
        if depth > 20:
            raise self.error("string annotation nested too deeply", where)
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return text  # not an expression: an evaluation could only fail
        if isinstance(tree.body, ast.Name):
            self.check_ident(tree.body.id, where)
            return text
        before = ast.dump(tree.body)
        sub = Rewriter(text, filename=self.filename)
        sub.scopes = [_Scope("module", None)]
        try:
            body = sub.visit(tree.body)
            sub._annotation_strings(body, depth + 1)
        except StValidationError as e:
            raise self.error(f"string annotation {text!r}: {e.message}", where) from None
        if ast.dump(body) == before:
            return text
        return ast.unparse(ast.fix_missing_locations(body))

    def rewrite_module(self, tree: ast.Module) -> ast.Module:
        if not isinstance(tree, ast.Module):
            raise self.error("only modules can be executed")
        body = tree.body
        # echo "last": only a final expression statement echoes; "all": every
        # expression statement of the module body (never one nested in a block). A
        # leading docstring followed by other statements is never echoed; a program
        # that is only a string literal echoes it, like a notebook cell.
        echo_last = self.echo != "none" and bool(body) and isinstance(body[-1], ast.Expr)
        docstring = _has_docstring(body) and not (echo_last and len(body) == 1)
        echoed = {len(body) - 1} if echo_last else set()
        if self.echo == "all":
            echoed |= {i for i, st in enumerate(body) if isinstance(st, ast.Expr) and not (i == 0 and docstring)}
        # ``from __future__`` imports at the start of the module (after the docstring)
        # go to the top of the compiled module; any other one stays where it is and the
        # compiler rejects it as it would in a module.
        n_future = int(docstring)
        while (
            n_future < len(body)
            and isinstance(body[n_future], ast.ImportFrom)
            and body[n_future].module == "__future__"
            and not body[n_future].level
        ):
            n_future += 1
        futures: list[ast.stmt] = []
        new_body: list[ast.stmt] = []
        for i, st in enumerate(body):
            if i in echoed:
                self.visit(st)  # field check of the Expr node itself
                new_body.append(_locate(ast.Expr(value=_locate(_call(ECHO, st.value), st)), st))
            elif i == 0 and docstring:
                self.visit(st)
                self.names.add("__doc__")
                new_body.append(_locate(ast.Assign(targets=[_name("__doc__", ast.Store())], value=st.value), st))
            elif i < n_future:
                futures.extend(self.stmts([st]))
                if any(a.name == "annotations" for a in st.names):
                    self.future_annotations = True
            else:
                new_body.extend(self.stmts([st]))
        tree.body = futures + new_body
        tree.type_ignores = []
        ast.fix_missing_locations(tree)
        if self.allow_await and not self.top_await:
            self.top_await = _has_top_level_async(new_body)
        if self.uses_n or futures or self.top_await:
            tree.body = futures + [self._wrap_module(new_body)]
        # else: nothing in the code touches the counter (no loop, function or
        # comprehension; lambdas and builtins tick through __st_tick__), so the
        # body stays a plain module body, which compiles faster than the wrapper.
        # (With ``from __future__`` imports the body is always wrapped: they then
        # only act at compile time, as the wrapper's body cannot hold them.)
        return tree

    def _wrap_module(self, body: list[ast.stmt]) -> ast.stmt:
        """``def __st_outer__(): __st_n__ = 0; def __st_main__(): <body>`` with
        ``nonlocal __st_n__`` and ``global`` for every name the body binds.  (The
        wrapper's nodes get their positions here: running fix_missing_locations over
        them is a noticeable part of a small exec.)"""
        at = _AT
        # ``self.names`` holds every identifier of the module, not only the ones its
        # body binds: declaring the others global is harmless (a name the body only
        # reads is global already; a nested scope's own binding of a name is unaffected
        # by a declaration in an enclosing scope).
        names = sorted(self.names - {N})
        pre: list[ast.stmt] = [_NONLOCAL_N]
        if names:
            pre.append(ast.Global(names=names, **at))
        main = (ast.AsyncFunctionDef if self.top_await else ast.FunctionDef)(
            name=MAIN,
            args=_NO_ARGS,
            body=pre + (body or [ast.Pass(**at)]),
            decorator_list=[],
            returns=None,
            type_comment=None,
            **at,
        )
        return ast.FunctionDef(
            name=OUTER, args=_NO_ARGS, body=[_INIT_N, main], decorator_list=[], returns=None, type_comment=None, **at
        )

    # ---------------------------------------------------------- statements
    def _body_prelude(self, body: list[ast.stmt], loc: ast.AST, kind: str) -> list[ast.stmt]:
        """Docstring (kept first), then ``nonlocal __st_n__`` and the function entry
        checkpoint, or the class marker."""
        pre: list[ast.stmt] = []
        rest = body
        if _has_docstring(body):
            pre.append(body[0])
            rest = body[1:]
        if kind == "function":
            self.uses_n = True
            pre.append(_locate(ast.Nonlocal(names=[N]), loc))
            pre.append(_checkpoint_stmt(loc))
        else:
            pre.append(_locate(ast.Assign(targets=[_name(USER, ast.Store())], value=_name(MARK)), loc))
        return pre + rest

    def v_FunctionDef(self, node):
        self.check_ident(node.name, node, binding_in_class=self.scope.kind == "class")
        node.decorator_list = self.exprs(node.decorator_list)
        self.visit_arguments_outer(node.args)
        node.returns = self.annotation(node.returns)
        self.scopes.append(_Scope("function", self.scope.class_name))
        saved_iter, self.comp_iter_depth = self.comp_iter_depth, 0
        try:
            self.visit_arguments_inner(node.args)
            body = self.stmts(node.body)
        finally:
            self.scopes.pop()
            self.comp_iter_depth = saved_iter
        node.body = self._body_prelude(body, node, "function")
        return [node]

    v_AsyncFunctionDef = v_FunctionDef

    def visit_arguments_outer(self, a: ast.arguments):
        """Defaults and annotations are evaluated in the enclosing scope."""
        self.visit(a)  # field check only
        a.defaults = self.exprs(a.defaults)
        a.kw_defaults = [None if d is None else self.visit(d) for d in a.kw_defaults]
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                self.visit(arg)
                arg.annotation = self.annotation(arg.annotation)

    def visit_arguments_inner(self, a: ast.arguments):
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                self.check_ident(arg.arg, arg)

    def v_ClassDef(self, node):
        self.check_ident(node.name, node, binding_in_class=self.scope.kind == "class")
        node.decorator_list = self.exprs(node.decorator_list)
        node.bases = self.exprs(node.bases)
        for kw in node.keywords:
            self.visit(kw)
        self.scopes.append(_Scope("class", node.name))
        saved_iter, self.comp_iter_depth = self.comp_iter_depth, 0
        try:
            body = self.stmts(node.body)
        finally:
            self.scopes.pop()
            self.comp_iter_depth = saved_iter
        node.body = self._body_prelude(body, node, "class")
        return [node]

    def v_Return(self, node):
        if self.scope.kind == "module":
            raise self.module_level_error("'return' outside function", node)
        node.value = self.expr(node.value)
        return [node]

    def v_Delete(self, node):
        out: list[ast.stmt] = []

        def one(t):
            if isinstance(t, (ast.Tuple, ast.List)):
                for e in t.elts:
                    one(e)
            elif isinstance(t, ast.Name):
                self.check_ident(t.id, t)
                out.append(_locate(ast.Delete(targets=[t]), node))
            elif isinstance(t, ast.Subscript):
                out.append(
                    _locate(
                        ast.Delete(
                            targets=[ast.Subscript(value=self.visit(t.value), slice=self.visit(t.slice), ctx=ast.Del())]
                        ),
                        t,
                    )
                )
            elif isinstance(t, ast.Attribute):
                self.check_attr_name(t.attr, t)
                out.append(_locate(ast.Expr(value=_call(DA, self.visit(t.value), _const(self.mangle(t.attr)))), t))
            else:
                raise self.error(f"unsupported delete target: {type(t).__name__}", t)

        for t in node.targets:
            one(t)
        return out

    def _needs_temp(self, t) -> bool:
        return any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) for n in ast.walk(t))

    def rewrite_target(self, t, posts: list[ast.stmt], temps: list[str]):
        """Rewrite an assignment target; attribute stores become temporaries plus a
        gated ``__st_sa__`` appended to ``posts``."""
        if isinstance(t, ast.Name):
            self.check_ident(t.id, t)
            return t
        if isinstance(t, ast.Subscript):
            return ast.copy_location(
                ast.Subscript(value=self.visit(t.value), slice=self.visit(t.slice), ctx=ast.Store()), t
            )
        if isinstance(t, ast.Attribute):
            self.check_attr_name(t.attr, t)
            tmp = self.tmp()
            temps.append(tmp)
            posts.append(
                _locate(ast.Expr(value=_call(SA, self.visit(t.value), _const(self.mangle(t.attr)), _name(tmp))), t)
            )
            return ast.copy_location(_name(tmp, ast.Store()), t)
        if isinstance(t, (ast.Tuple, ast.List)):
            t.elts = [self.rewrite_target(e, posts, temps) for e in t.elts]
            return t
        if isinstance(t, ast.Starred):
            t.value = self.rewrite_target(t.value, posts, temps)
            return t
        raise self.error(f"unsupported assignment target: {type(t).__name__}", t)

    def _cleanup(self, temps: list[str], loc) -> list[ast.stmt]:
        """Temporaries outside functions would linger in the namespace / class dict."""
        if not temps or self.nearest_code_scope() == "function":
            return []
        return [_locate(ast.Delete(targets=[_name(t, ast.Del()) for t in temps]), loc)]

    def v_Assign(self, node):
        value = self.visit(node.value)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            t = node.targets[0]
            self.check_attr_name(t.attr, t)
            call = _call(SA, self.visit(t.value), _const(self.mangle(t.attr)), value)
            return [_locate(ast.Expr(value=_locate(call, node)), node)]
        if not any(self._needs_temp(t) for t in node.targets):
            posts: list[ast.stmt] = []
            node.targets = [self.rewrite_target(t, posts, []) for t in node.targets]
            node.value = value
            return [node]
        tmp = self.tmp()
        out: list[ast.stmt] = [ast.copy_location(ast.Assign(targets=[_name(tmp, ast.Store())], value=value), node)]
        temps = [tmp]
        for t in node.targets:
            posts: list[ast.stmt] = []
            nt = self.rewrite_target(t, posts, temps)
            out.append(ast.copy_location(ast.Assign(targets=[nt], value=_name(tmp)), node))
            out.extend(posts)
        out.extend(self._cleanup(temps, node))
        return out

    def v_AugAssign(self, node):
        t = node.target
        self.visit(node.op)
        if isinstance(t, ast.Name):
            self.check_ident(t.id, t)
            node.value = self.visit(node.value)
            return [node]
        if isinstance(t, ast.Subscript):
            node.target = ast.copy_location(
                ast.Subscript(value=self.visit(t.value), slice=self.visit(t.slice), ctx=ast.Store()), t
            )
            node.value = self.visit(node.value)
            return [node]
        if isinstance(t, ast.Attribute):
            self.check_attr_name(t.attr, t)
            attr = _const(self.mangle(t.attr))
            t_obj, t_val = self.tmp(), self.tmp()
            out = [
                ast.Assign(targets=[_name(t_obj, ast.Store())], value=self.visit(t.value)),
                ast.Assign(targets=[_name(t_val, ast.Store())], value=_call(GA, _name(t_obj), attr)),
                ast.AugAssign(target=_name(t_val, ast.Store()), op=node.op, value=self.visit(node.value)),
                ast.Expr(value=_call(SA, _name(t_obj), _const(attr.value), _name(t_val))),
            ]
            out = [_locate(s, node) for s in out]
            return out + self._cleanup([t_obj, t_val], node)
        raise self.error(f"unsupported augmented assignment target: {type(t).__name__}", t)

    def _module_annassign(self, node) -> list[ast.stmt]:
        """``x: T = v`` / ``a[i]: T = v`` at module level, where the module body is a
        function body (``global x`` plus an annotation would not compile): the value is
        assigned, then the annotation is evaluated, as at module level, and dropped
        (sandboxed code cannot read ``__annotations__``)."""
        out: list[ast.stmt] = []
        if node.value is not None:
            out.append(_locate(ast.Assign(targets=[node.target], value=node.value), node))
        elif isinstance(node.target, ast.Subscript):
            # ``a[i]: T`` evaluates ``a`` and ``i`` (no subscription)
            out.append(_locate(ast.Expr(value=node.target.value), node))
            out.append(_locate(ast.Expr(value=node.target.slice), node))
        if not self.future_annotations:
            out.append(_locate(ast.Expr(value=node.annotation), node))
        return out or [_locate(ast.Pass(), node)]

    def v_AnnAssign(self, node):
        t = node.target
        if isinstance(t, ast.Name):
            self.check_ident(t.id, t)
            node.annotation = self.annotation(node.annotation)
            node.value = self.expr(node.value)
            if self.scope.kind == "module":
                return self._module_annassign(node)
            return [node]
        if isinstance(t, ast.Subscript):
            node.target = ast.copy_location(
                ast.Subscript(value=self.visit(t.value), slice=self.visit(t.slice), ctx=ast.Store()), t
            )
            node.annotation = self.annotation(node.annotation)
            node.value = self.expr(node.value)
            if self.scope.kind == "module":
                return self._module_annassign(node)
            return [node]
        if isinstance(t, ast.Attribute):
            self.check_attr_name(t.attr, t)
            self.annotation(node.annotation)  # validated; not evaluated for attribute targets
            obj = self.visit(t.value)
            if node.value is None:
                return [ast.copy_location(ast.Expr(value=obj), node)]
            return [
                ast.copy_location(
                    ast.Expr(
                        value=ast.copy_location(
                            _call(SA, obj, _const(self.mangle(t.attr)), self.visit(node.value)), node
                        )
                    ),
                    node,
                )
            ]
        raise self.error(f"unsupported annotated target: {type(t).__name__}", t)

    def v_For(self, node):
        node.iter = self.visit(node.iter)
        posts: list[ast.stmt] = []
        temps: list[str] = []
        node.target = self.rewrite_target(node.target, posts, temps)
        body = self.stmts(node.body)
        node.body = [self.checkpoint(node), *posts, *body]
        node.orelse = self.stmts(node.orelse)
        # (a for-target temporary is not deleted afterwards: the loop may not have run)
        return [node]

    v_AsyncFor = v_For

    def v_While(self, node):
        node.test = self.visit(node.test)
        node.body = [self.checkpoint(node), *self.stmts(node.body)]
        node.orelse = self.stmts(node.orelse)
        return [node]

    def v_If(self, node):
        node.test = self.visit(node.test)
        node.body = self.stmts(node.body)
        node.orelse = self.stmts(node.orelse)
        return [node]

    def v_With(self, node):
        posts: list[ast.stmt] = []
        temps: list[str] = []
        for item in node.items:
            self.visit(item)  # field check
            item.context_expr = self.visit(item.context_expr)
            if item.optional_vars is not None:
                item.optional_vars = self.rewrite_target(item.optional_vars, posts, temps)
        node.body = [*posts, *self.stmts(node.body)]
        return [node] + self._cleanup(temps, node)

    v_AsyncWith = v_With

    def v_Raise(self, node):
        node.exc = self.expr(node.exc)
        node.cause = self.expr(node.cause)
        return [node]

    def v_Try(self, node):
        node.body = self.stmts(node.body)
        for h in node.handlers:
            self.visit(h)
        node.orelse = self.stmts(node.orelse)
        if node.finalbody:
            # a finally block runs when a generator is closed, also by the host's
            # garbage collector after the exec: it checks first
            node.finalbody = [self.checkpoint(node.finalbody[0]), *self.stmts(node.finalbody)]
        return [node]

    v_TryStar = v_Try

    def v_ExceptHandler(self, node):
        if node.type is None:
            # bare ``except:`` catches Exception only, never the sandbox's limit errors
            node.type = ast.copy_location(_name(EXC), node)
        else:
            node.type = self.visit(node.type)
        self.check_ident(node.name, node)
        node.body = [self.checkpoint(node), *self.stmts(node.body)]
        return node

    def v_Assert(self, node):
        node.test = self.visit(node.test)
        node.msg = self.expr(node.msg)
        return [node]

    def v_Import(self, node):
        out = []
        for a in node.names:
            self.visit(a)
            if a.name.startswith(RESERVED_PREFIX) or any(p.startswith(RESERVED_PREFIX) for p in a.name.split(".")):
                raise self.error(f"module name {a.name!r} uses the reserved prefix", node)
            if a.asname:
                self.check_ident(a.asname, node)
                target, leaf = a.asname, True
            else:
                target, leaf = a.name.split(".")[0], False
                self.check_ident(target, node)
            out.append(
                ast.copy_location(
                    ast.Assign(targets=[_name(target, ast.Store())], value=_call(IMPORT, _const(a.name), _const(leaf))),
                    node,
                )
            )
        return [_locate(o, node) for o in out]

    def v_ImportFrom(self, node):
        if node.level:
            raise self.error("relative imports are not supported in the sandbox", node)
        mod = node.module or ""
        if mod == "__future__":
            for a in node.names:
                self.visit(a)
            return [node]
        if any(p.startswith(RESERVED_PREFIX) for p in mod.split(".")):
            raise self.error(f"module name {mod!r} uses the reserved prefix", node)
        names, targets = [], []
        for a in node.names:
            self.visit(a)
            if a.name == "*":
                raise self.error("'from ... import *' is not supported in the sandbox", node)
            self.check_attr_name(a.name, node)
            tgt = a.asname or a.name
            self.check_ident(tgt, node)
            names.append(_const(a.name))
            targets.append(_name(tgt, ast.Store()))
        stmt = ast.Assign(
            targets=[ast.Tuple(elts=targets, ctx=ast.Store())],
            value=_call(IMPORTFROM, _const(mod), ast.Tuple(elts=names, ctx=ast.Load())),
        )
        return [_locate(stmt, node)]

    def v_Global(self, node):
        for n in node.names:
            self.check_ident(n, node)
        return [node]

    def v_Nonlocal(self, node):
        if self.scope.kind == "module":
            raise self.module_level_error("nonlocal declaration not allowed at module level", node)
        return self.v_Global(node)

    def v_Expr(self, node):
        node.value = self.visit(node.value)
        return [node]

    def v_simple_stmt(self, node):
        return [node]

    # ---------------------------------------------------------------- match
    def v_Match(self, node):
        node.subject = self.visit(node.subject)
        hoist = _MatchHoist(self)
        for case in node.cases:
            self.visit(case)  # field check
            case.pattern = hoist.pattern(case.pattern)
            case.guard = self.expr(case.guard)
            case.body = self.stmts(case.body)
        out = []
        if hoist.items:
            out.append(
                _locate(
                    ast.Assign(
                        targets=[_name(hoist.var, ast.Store())],
                        value=ast.Call(func=_name(MATCH), args=[], keywords=hoist.items),
                    ),
                    node,
                )
            )
        out.append(node)
        if hoist.items and self.nearest_code_scope() != "function":
            out.append(_locate(ast.Delete(targets=[_name(hoist.var, ast.Del())]), node))
        return out

    # ---------------------------------------------------------- expressions
    def v_leaf(self, node):
        return node

    def v_Name(self, node):
        self.check_ident(node.id, node)
        return node

    def v_Attribute(self, node):
        self.check_attr_name(node.attr, node)
        if not isinstance(node.ctx, ast.Load):
            raise self.error("attribute assignment is not supported in this position", node)
        call = _call(GA, self.visit(node.value), _const(self.mangle(node.attr)))
        return ast.copy_location(call, node)

    def v_Subscript(self, node):
        if isinstance(node.ctx, ast.Del):
            raise self.error("delete is not supported in this position", node)
        node.value = self.visit(node.value)
        node.slice = self.visit(node.slice)
        return node

    def v_Starred(self, node):
        node.value = self.visit(node.value)
        return node

    def v_elts(self, node):
        node.elts = self.exprs(node.elts)
        return node

    def v_Dict(self, node):
        node.keys = [None if k is None else self.visit(k) for k in node.keys]
        node.values = self.exprs(node.values)
        return node

    def v_BoolOp(self, node):
        self.visit(node.op)
        node.values = self.exprs(node.values)
        return node

    def v_BinOp(self, node):
        self.visit(node.op)
        node.left = self.visit(node.left)
        node.right = self.visit(node.right)
        return node

    def v_UnaryOp(self, node):
        self.visit(node.op)
        node.operand = self.visit(node.operand)
        return node

    def v_Compare(self, node):
        for op in node.ops:
            self.visit(op)
        node.left = self.visit(node.left)
        node.comparators = self.exprs(node.comparators)
        return node

    def v_IfExp(self, node):
        node.test = self.visit(node.test)
        node.body = self.visit(node.body)
        node.orelse = self.visit(node.orelse)
        return node

    def v_Call(self, node):
        node.func = self.visit(node.func)
        node.args = self.exprs(node.args)
        for kw in node.keywords:
            self.visit(kw)
        return node

    def v_keyword(self, node):
        if node.arg is not None:
            self.check_attr_name(node.arg, node)
        node.value = self.visit(node.value)
        return node

    def v_Lambda(self, node):
        self.visit_arguments_outer(node.args)
        self.scopes.append(_Scope("lambda", self.scope.class_name))
        saved_iter, self.comp_iter_depth = self.comp_iter_depth, 0
        try:
            self.visit_arguments_inner(node.args)
            body = self.visit(node.body)
        finally:
            self.scopes.pop()
            self.comp_iter_depth = saved_iter
        node.body = ast.copy_location(
            ast.BoolOp(op=ast.And(), values=[ast.copy_location(_call(TICK), node), body]), node
        )
        return node

    def v_NamedExpr(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error("unsupported assignment-expression target", node)
        self.check_ident(node.target.id, node.target)
        node.value = self.visit(node.value)
        return node

    def _comprehension(self, node, elt_fields: tuple[str, ...]):
        inline = False
        for i, g in enumerate(node.generators):
            self.visit(g)  # field check
            # No assignment expression may appear in any comprehension iterable, so
            # comprehensions nested inside one fall back to the call-based tick.
            self.comp_iter_depth += 1
            try:
                g.iter = self.visit(g.iter)  # the first one runs in the enclosing scope
            finally:
                self.comp_iter_depth -= 1
            if i == 0:
                inline = self.comp_iter_depth == 0 and self.nearest_code_scope() in ("module", "function")
                self.scopes.append(_Scope("comp", self.scope.class_name))
            if not isinstance(g.target, (ast.Name, ast.Tuple, ast.List, ast.Starred)) or any(
                isinstance(n, (ast.Attribute, ast.Subscript)) for n in ast.walk(g.target)
            ):
                raise self.error("comprehension targets must be plain names", g.target)
            for n in ast.walk(g.target):
                if isinstance(n, ast.Name):
                    self.check_ident(n.id, n)
            g.ifs = self.exprs(g.ifs)
            if inline:
                self.uses_n = True
                tick = ast.BoolOp(op=ast.Or(), values=[_decrement(), _call(CHK)])
            else:
                tick = _call(TICK)
            g.ifs.insert(0, _locate(tick, g.target))
        try:
            for f in elt_fields:
                setattr(node, f, self.visit(getattr(node, f)))
        finally:
            self.scopes.pop()
        return node

    def v_ListComp(self, node):
        return self._comprehension(node, ("elt",))

    v_SetComp = v_ListComp
    v_GeneratorExp = v_ListComp

    def v_DictComp(self, node):
        return self._comprehension(node, ("key", "value"))

    def v_value(self, node):
        node.value = self.expr(node.value)
        return node

    def v_yield_await(self, node):
        if self.scope.kind == "module" and self.allow_await and isinstance(node, ast.Await):
            self.top_await = True
            return self.v_value(node)
        if self.scope.kind == "module":
            what = "await" if isinstance(node, ast.Await) else "yield"
            raise self.module_level_error(f"'{what}' outside function", node)
        return self.v_value(node)

    def v_JoinedStr(self, node):
        node.values = self.exprs(node.values)
        return node

    def v_FormattedValue(self, node):
        node.value = self.visit(node.value)
        node.format_spec = self.expr(node.format_spec)
        return node

    def v_Slice(self, node):
        node.lower = self.expr(node.lower)
        node.upper = self.expr(node.upper)
        node.step = self.expr(node.step)
        return node

    def v_check_only(self, node):
        return node

    def v_alias(self, node):
        return node


class _MatchHoist:
    """Evaluates a match statement's class and dotted-value patterns through the gate
    before the ``match`` runs, and replaces them by attributes of a private object.

    ``case mod.Point(x, y=z)`` becomes ``case __st_mvK__.c0(x, y=z)`` where ``c0`` is
    either the class itself (builtins that match themselves) or a guard class whose
    ``__instancecheck__`` runs the attribute gate on every attribute the pattern will
    read (``__match_args__`` positions and keyword names) for the actual subject.
    Values are evaluated eagerly, once, when the ``match`` statement starts.
    """

    def __init__(self, rw: Rewriter):
        self.rw = rw
        rw._tmp += 1
        self.var = f"__st_mv{rw._tmp}__"
        rw.names.add(self.var)
        self.items: list[ast.keyword] = []

    def _hoist(self, key: str, value: ast.expr) -> ast.Attribute:
        self.items.append(ast.keyword(arg=key, value=value))
        return ast.Attribute(value=_name(self.var), attr=key, ctx=ast.Load())

    def _dotted(self, node) -> bool:
        return isinstance(node, ast.Name) or (isinstance(node, ast.Attribute) and self._dotted(node.value))

    def pattern(self, p):
        rw = self.rw
        spec = _HANDLERS.get(type(p))
        if spec is None:
            raise rw.error(f"unsupported pattern: {type(p).__name__}", p)
        rw.visit(p)  # field check (handler is a no-op)
        if isinstance(p, ast.MatchValue):
            if isinstance(p.value, ast.Attribute):
                if not self._dotted(p.value):
                    raise rw.error("unsupported value pattern", p)
                value = rw.visit(p.value)
                p.value = ast.copy_location(self._hoist(f"v{len(self.items)}", value), p)
            else:
                self._literal(p.value)
            return p
        if isinstance(p, ast.MatchSingleton):
            return p
        if isinstance(p, ast.MatchSequence):
            p.patterns = [self.pattern(q) for q in p.patterns]
            return p
        if isinstance(p, ast.MatchMapping):
            keys = []
            for k in p.keys:
                if isinstance(k, ast.Attribute):
                    keys.append(ast.copy_location(self._hoist(f"v{len(self.items)}", rw.visit(k)), k))
                else:
                    self._literal(k)
                    keys.append(k)
            p.keys = keys
            p.patterns = [self.pattern(q) for q in p.patterns]
            rw.check_ident(p.rest, p)
            return p
        if isinstance(p, ast.MatchClass):
            if not self._dotted(p.cls):
                raise rw.error("unsupported class pattern", p)
            for a in p.kwd_attrs:
                rw.check_attr_name(a, p)
            cls_expr = rw.visit(p.cls)
            guard = ast.Call(
                func=_name(MATCHCLS),
                args=[
                    cls_expr,
                    _const(len(p.patterns)),
                    ast.Tuple(elts=[_const(a) for a in p.kwd_attrs], ctx=ast.Load()),
                ],
                keywords=[],
            )
            # ``__st_matchcls__(cls, npos, kwd)`` returns the class or a gate-checking guard
            p.cls = ast.copy_location(self._hoist(f"c{len(self.items)}", guard), p)
            p.patterns = [self.pattern(q) for q in p.patterns]
            p.kwd_patterns = [self.pattern(q) for q in p.kwd_patterns]
            return p
        if isinstance(p, ast.MatchStar):
            rw.check_ident(p.name, p)
            return p
        if isinstance(p, ast.MatchAs):
            rw.check_ident(p.name, p)
            if p.pattern is not None:
                p.pattern = self.pattern(p.pattern)
            return p
        if isinstance(p, ast.MatchOr):
            p.patterns = [self.pattern(q) for q in p.patterns]
            return p
        raise rw.error(f"unsupported pattern: {type(p).__name__}", p)

    def _literal(self, v):
        for n in ast.walk(v):
            if not isinstance(
                n, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.JoinedStr)
            ):
                raise self.rw.error("unsupported literal pattern", v)


_BLOCK_FIELDS = ("body", "orelse", "finalbody")
_NESTED_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _resumes(stmt: ast.stmt) -> bool:
    """``stmt``'s own expressions (not its nested blocks or scopes) hold a yield or
    an await: execution may resume inside it."""
    todo = [v for f, v in ast.iter_fields(stmt) if f not in _BLOCK_FIELDS and f not in ("handlers", "cases")]
    while todo:
        n = todo.pop()
        if isinstance(n, list):
            todo.extend(n)
            continue
        if not isinstance(n, ast.AST) or isinstance(n, (ast.stmt, *_NESTED_SCOPES)):
            continue
        if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        todo.extend(ast.iter_child_nodes(n))
    return False


def _ops():
    return [
        ast.Load,
        ast.Store,
        ast.Del,
        ast.And,
        ast.Or,
        ast.Add,
        ast.Sub,
        ast.Mult,
        ast.MatMult,
        ast.Div,
        ast.Mod,
        ast.Pow,
        ast.LShift,
        ast.RShift,
        ast.BitOr,
        ast.BitXor,
        ast.BitAnd,
        ast.FloorDiv,
        ast.Invert,
        ast.Not,
        ast.UAdd,
        ast.USub,
        ast.Eq,
        ast.NotEq,
        ast.Lt,
        ast.LtE,
        ast.Gt,
        ast.GtE,
        ast.Is,
        ast.IsNot,
        ast.In,
        ast.NotIn,
    ]


R = Rewriter
_HANDLERS: dict[type, tuple] = {
    # statements
    ast.FunctionDef: (R.v_FunctionDef, {"name", "args", "body", "decorator_list", "returns", "type_comment"}),
    ast.AsyncFunctionDef: (R.v_AsyncFunctionDef, {"name", "args", "body", "decorator_list", "returns", "type_comment"}),
    ast.ClassDef: (R.v_ClassDef, {"name", "bases", "keywords", "body", "decorator_list"}),
    ast.Return: (R.v_Return, {"value"}),
    ast.Delete: (R.v_Delete, {"targets"}),
    ast.Assign: (R.v_Assign, {"targets", "value", "type_comment"}),
    ast.AugAssign: (R.v_AugAssign, {"target", "op", "value"}),
    ast.AnnAssign: (R.v_AnnAssign, {"target", "annotation", "value", "simple"}),
    ast.For: (R.v_For, {"target", "iter", "body", "orelse", "type_comment"}),
    ast.AsyncFor: (R.v_AsyncFor, {"target", "iter", "body", "orelse", "type_comment"}),
    ast.While: (R.v_While, {"test", "body", "orelse"}),
    ast.If: (R.v_If, {"test", "body", "orelse"}),
    ast.With: (R.v_With, {"items", "body", "type_comment"}),
    ast.AsyncWith: (R.v_AsyncWith, {"items", "body", "type_comment"}),
    ast.Match: (R.v_Match, {"subject", "cases"}),
    ast.Raise: (R.v_Raise, {"exc", "cause"}),
    ast.Try: (R.v_Try, {"body", "handlers", "orelse", "finalbody"}),
    ast.Assert: (R.v_Assert, {"test", "msg"}),
    ast.Import: (R.v_Import, {"names"}),
    ast.ImportFrom: (R.v_ImportFrom, {"module", "names", "level"}),
    ast.Global: (R.v_Global, {"names"}),
    ast.Nonlocal: (R.v_Nonlocal, {"names"}),
    ast.Expr: (R.v_Expr, {"value"}),
    ast.Pass: (R.v_simple_stmt, set()),
    ast.Break: (R.v_simple_stmt, set()),
    ast.Continue: (R.v_simple_stmt, set()),
    # expressions
    ast.BoolOp: (R.v_BoolOp, {"op", "values"}),
    ast.NamedExpr: (R.v_NamedExpr, {"target", "value"}),
    ast.BinOp: (R.v_BinOp, {"left", "op", "right"}),
    ast.UnaryOp: (R.v_UnaryOp, {"op", "operand"}),
    ast.Lambda: (R.v_Lambda, {"args", "body"}),
    ast.IfExp: (R.v_IfExp, {"test", "body", "orelse"}),
    ast.Dict: (R.v_Dict, {"keys", "values"}),
    ast.Set: (R.v_elts, {"elts"}),
    ast.ListComp: (R.v_ListComp, {"elt", "generators"}),
    ast.SetComp: (R.v_SetComp, {"elt", "generators"}),
    ast.DictComp: (R.v_DictComp, {"key", "value", "generators"}),
    ast.GeneratorExp: (R.v_GeneratorExp, {"elt", "generators"}),
    ast.Await: (R.v_yield_await, {"value"}),
    ast.Yield: (R.v_yield_await, {"value"}),
    ast.YieldFrom: (R.v_yield_await, {"value"}),
    ast.Compare: (R.v_Compare, {"left", "ops", "comparators"}),
    ast.Call: (R.v_Call, {"func", "args", "keywords"}),
    ast.FormattedValue: (R.v_FormattedValue, {"value", "conversion", "format_spec"}),
    ast.JoinedStr: (R.v_JoinedStr, {"values"}),
    ast.Constant: (R.v_leaf, {"value", "kind"}),
    ast.Attribute: (R.v_Attribute, {"value", "attr", "ctx"}),
    ast.Subscript: (R.v_Subscript, {"value", "slice", "ctx"}),
    ast.Starred: (R.v_Starred, {"value", "ctx"}),
    ast.Name: (R.v_Name, {"id", "ctx"}),
    ast.List: (R.v_elts, {"elts", "ctx"}),
    ast.Tuple: (R.v_elts, {"elts", "ctx"}),
    ast.Slice: (R.v_Slice, {"lower", "upper", "step"}),
    # helpers visited for their field check only (their parents do the work)
    ast.comprehension: (R.v_check_only, {"target", "iter", "ifs", "is_async"}),
    ast.ExceptHandler: (R.v_ExceptHandler, {"type", "name", "body"}),
    ast.arguments: (
        R.v_check_only,
        {"posonlyargs", "args", "vararg", "kwonlyargs", "kw_defaults", "kwarg", "defaults"},
    ),
    ast.arg: (R.v_check_only, {"arg", "annotation", "type_comment"}),
    ast.keyword: (R.v_keyword, {"arg", "value"}),
    ast.alias: (R.v_alias, {"name", "asname"}),
    ast.withitem: (R.v_check_only, {"context_expr", "optional_vars"}),
    ast.match_case: (R.v_check_only, {"pattern", "guard", "body"}),
    ast.MatchValue: (R.v_check_only, {"value"}),
    ast.MatchSingleton: (R.v_check_only, {"value"}),
    ast.MatchSequence: (R.v_check_only, {"patterns"}),
    ast.MatchMapping: (R.v_check_only, {"keys", "patterns", "rest"}),
    ast.MatchClass: (R.v_check_only, {"cls", "patterns", "kwd_attrs", "kwd_patterns"}),
    ast.MatchStar: (R.v_check_only, {"name"}),
    ast.MatchAs: (R.v_check_only, {"pattern", "name"}),
    ast.MatchOr: (R.v_check_only, {"patterns"}),
}
if sys.version_info >= (3, 11):
    _HANDLERS[ast.TryStar] = (R.v_TryStar, {"body", "handlers", "orelse", "finalbody"})
for _op in _ops():
    _HANDLERS[_op] = (R.v_leaf, set())
del R, _op

ALLOWED_NODE_TYPES = frozenset(_HANDLERS)


ECHO_MODES = ("none", "last", "all")


def echo_mode(echo) -> str:
    """The echo mode: "none", "last" (the final expression statement) or "all" (every
    expression statement of the module body); ``True`` is "last", ``False``/``None``
    "none". Anything else is a ValueError (at every isolation level)."""
    if echo is True or echo == "last":
        return "last"
    if echo is False or echo is None or echo == "none":
        return "none"
    if echo == "all":
        return "all"
    raise ValueError(f"Invalid echo option: {echo!r}. Expected one of {ECHO_MODES} (or a bool).")


def _has_top_level_async(body: list[ast.stmt]) -> bool:
    """An ``async for``, ``async with`` or async comprehension in the module body,
    outside every function and class (they make the body a coroutine)."""
    todo: list[ast.AST] = list(body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, (ast.AsyncFor, ast.AsyncWith, ast.Await)):
            return True
        if isinstance(n, ast.comprehension) and n.is_async:
            return True
        todo.extend(ast.iter_child_nodes(n))
    return False


def rewrite(
    source: str, *, echo: bool | str = False, filename: str = "<sandbox>", allow_await: bool = False
) -> ast.Module:
    """Parse, validate and rewrite ``source``. ``allow_await`` (aexec): top-level
    ``await``, ``async for`` and ``async with`` are allowed, and a module body that
    uses them becomes a coroutine function (``rewriter.top_await``).

    Raises SyntaxError (from the parser) or StValidationError."""
    tree = ast.parse(source, filename=filename, mode="exec")
    rw = Rewriter(source, echo=echo, filename=filename, allow_await=allow_await)
    try:
        return rw.rewrite_module(tree)
    except RecursionError:
        raise StValidationError("code is nested too deeply", *rw._loc) from None


__all__ = ["rewrite", "Rewriter", "mangle", "ALLOWED_NODE_TYPES", "RESERVED_PREFIX"]
