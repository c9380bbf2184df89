"""Issue 19's bugs at the in-process level (the binding's test_coop_surface.py runs
them at every level): C code importing at call time, os.path through a recursive
grant, nested grants, echo modes, exception arguments."""

import email
import email.mime
import os
import time

import pytest

from sandtrap_guest import GuestSession, Policy, StImportDenied
from sandtrap_guest.wire import error_to_wire


def run(code, policy=None, **kw):
    return GuestSession(policy or Policy(), **kw).exec(code)


def test_c_code_imports_at_call_time():
    # time.strptime imports _strptime from C (PyImport_Import reads the calling
    # frame's builtins['__import__']): KeyError('__import__') before the fix
    p = Policy()
    p.module(time)
    r = run("import time\ny = time.strptime('2021', '%Y').tm_year", p)
    assert r.error is None, r.traceback
    assert r.namespace["y"] == 2021


def test_numpy_reduction_imports_at_call_time():
    np = pytest.importorskip("numpy")
    p = Policy()
    p.module(np, recursive=True)
    r = run("import numpy as np\ns = int(np.arange(3).sum())\nm = float(np.arange(4).mean())", p)
    assert r.error is None, r.traceback
    assert r.namespace["s"] == 3 and r.namespace["m"] == 1.5


@pytest.mark.parametrize(
    "code",
    [
        "import os\nx = os.path.join('a', 'b')",
        "import os.path\nx = os.path.join('a', 'b')",
        "from os.path import join\nx = join('a', 'b')",
        "from os import path\nx = path.join('a', 'b')",
        "import os.path as p\nx = p.join('a', 'b')",
    ],
)
def test_recursive_os_grants_os_path(code):
    p = Policy()
    p.module(os, recursive=True)
    r = run(code, p)
    assert r.error is None, r.traceback
    assert r.namespace["x"] == "a/b"


def test_os_path_not_granted_without_recursive():
    p = Policy()
    p.module(os)
    r = run("import os.path", p)
    assert type(r.error) is StImportDenied


def test_nested_grants_inner_non_recursive_hides_its_submodules():
    p = Policy()
    p.module(email, recursive=True)
    p.module(email.mime, name="email.mime")
    sess = GuestSession(p)
    # the outer recursive grant still grants its other submodules
    r = sess.exec("import email.utils\nx = email.utils.quote('a\"b')")
    assert r.error is None, r.traceback
    assert r.namespace["x"] == 'a\\"b'
    r = sess.exec("import email.mime.text")
    assert type(r.error) is StImportDenied and "email.mime.text" in str(r.error)
    r = sess.exec("from email.mime import text")
    assert type(r.error) is StImportDenied


def test_nested_grants_inner_recursive_inside_outer_non_recursive():
    p = Policy()
    p.module(email)
    p.module(email.mime, name="email.mime", recursive=True)
    r = run("from email.mime.text import MIMEText\nx = MIMEText('hi')['Content-Type']", p)
    assert r.error is None, r.traceback
    assert r.namespace["x"].startswith("text/plain")
    assert type(run("import email.utils", p).error) is StImportDenied


def test_echo_all_echoes_every_top_level_expression():
    code = '"""doc"""\n1 + 1\nx = 5\nx * 2\nif True:\n    7\nprint("p")\nx'
    assert run(code, echo="all").stdout == "2\n10\np\n5\n"
    assert run(code, echo="last").stdout == "p\n5\n"
    assert run(code, echo="none").stdout == "p\n"
    assert run(code, echo=True).stdout == "p\n5\n"
    sess = GuestSession(Policy())
    assert sess.exec("1\n2", echo="all").stdout == "1\n2\n"  # per exec
    assert sess.exec("1\n2").stdout == ""


@pytest.mark.parametrize("bad", ["All", "yes", 1, 0, "", []])
def test_invalid_echo_is_a_value_error(bad):
    with pytest.raises(ValueError, match="Invalid echo option"):
        GuestSession(Policy(), echo=bad)
    with pytest.raises(ValueError, match="Invalid echo option"):
        GuestSession(Policy()).exec("1", echo=bad)


def test_error_args_cross_the_wire():
    r = run("d = {}\nd['k']")
    assert type(r.error) is KeyError and r.error.args == ("k",)
    w = error_to_wire(r.error, r.traceback, r.error_message)
    assert w["args"] == ["k"] and w["message"] == "'k'"
    r = run("class E(Exception):\n    pass\nraise E('x')")
    assert "args" not in error_to_wire(r.error, r.traceback, r.error_message)  # sandbox-defined: not sent
    r = run("raise ValueError('a', 2, None, object())")
    assert "args" not in error_to_wire(r.error, r.traceback, r.error_message)  # not scalars only
