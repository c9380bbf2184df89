"""The keyword arguments of Sandbox are typed from the engine's schema (PolicyOptions,
generated into _fields.py): a type checker refuses a misspelled field, a wrongly typed
value and a field sandtrap does not support, before the program runs. The argv of
run(), arun(), cmd() and reduce() is an ArgSequence: a list or tuple of arguments, but
not one string (``run("ls")``, which Sequence[str] would accept). Both mypy --strict
and pyright refuse each mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import sandtrap
from sandtrap._fields import FIELDS, PolicyOptions

USE = """\
from sandtrap import Sandbox

ok = Sandbox(fs_readable=["/usr"], max_memory="1G", timeout=2.5, env={"A": "b"}, allow_degraded=True)
typo = Sandbox(fs_readble=["/usr"])
wrong = Sandbox(max_processes="10")
wrong_kind = Sandbox(num_cpus="2")
"""


# argv: a list, a tuple and any Sequence[str] pass; a single str or bytes does not
USE_ARGV = """\
from collections.abc import Sequence

from sandtrap import Sandbox

sb = Sandbox(fs_readable=["/usr"])
args: Sequence[str] = ["ls", "-l"]
ok = [sb.run(["ls", "-l"], timeout=5), sb.run(("ls",)), sb.run(args), sb.cmd(["ls"]).run()]
one_string = sb.run("ls")
one_command = sb.cmd("ls -l")
one_reducer = sb.reduce("wc", sb.fork(2))
one_bytes = sb.run(b"ls")
"""
ARGV_ERRORS = ["8", "9", "10", "11"]


def _checker_env() -> dict[str, str]:
    """The environment that lets a checker find this sandtrap (installed, or a checkout)."""
    env = dict(os.environ)
    pkg_root = Path(sandtrap.__file__).resolve().parents[1]
    if "site-packages" not in pkg_root.parts:  # a checkout on PYTHONPATH
        env["MYPYPATH"] = str(pkg_root)
        env["PYTHONPATH"] = os.pathsep.join([str(pkg_root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _mypy(tmp_path: Path, source: str) -> tuple[list[str], str]:
    src = tmp_path / "use.py"
    src.write_text(source)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
         "--cache-dir", str(tmp_path / "cache"), str(src)],
        capture_output=True, text=True, env=_checker_env(), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    out = r.stdout + r.stderr
    return [line for line in out.splitlines() if ": error:" in line], out


def _pyright(tmp_path: Path, source: str) -> tuple[list[str], str]:
    """pyright's errors as "line: message" (its first line), and all it printed."""
    src = tmp_path / "use.py"
    src.write_text(source)
    r = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, str(src)],
        capture_output=True, text=True, env=_checker_env(), cwd=tmp_path, timeout=600,
    )  # fmt: skip
    out = r.stdout + r.stderr
    try:
        diags = json.loads(r.stdout)["generalDiagnostics"]
    except (ValueError, KeyError):
        raise AssertionError(f"pyright did not run (is it installed? make test-python installs it):\n{out}") from None
    errors = [
        f"{d['range']['start']['line'] + 1}: {d['message'].splitlines()[0]}" for d in diags if d["severity"] == "error"
    ]
    return errors, out


def test_policy_options_are_the_schema_fields() -> None:
    assert list(PolicyOptions.__annotations__) == list(FIELDS)
    assert PolicyOptions.__optional_keys__ == frozenset(FIELDS)


def test_mypy_strict_refuses_the_mistakes(tmp_path: Path) -> None:
    errors, out = _mypy(tmp_path, USE)
    assert [line.split(":")[1] for line in errors] == ["4", "5", "6"], out
    assert 'Unexpected keyword argument "fs_readble"' in errors[0] and 'did you mean "fs_readable"' in errors[0], out
    assert '"max_processes"' in errors[1] and '"int | None"' in errors[1], textwrap.indent(out, "  ")
    assert '"num_cpus"' in errors[2] and '"int | None"' in errors[2], out


def test_mypy_strict_refuses_a_string_for_argv(tmp_path: Path) -> None:
    errors, out = _mypy(tmp_path, USE_ARGV)
    assert [line.split(":")[1] for line in errors] == ARGV_ERRORS, out
    assert 'Argument 1 to "run" of "Sandbox" has incompatible type "str"; expected "ArgSequence[' in errors[0], out
    assert 'Argument 1 to "cmd" of "Sandbox" has incompatible type "str"' in errors[1], out
    assert 'Argument 1 to "reduce" of "Sandbox" has incompatible type "str"' in errors[2], out
    assert 'Argument 1 to "run" of "Sandbox" has incompatible type "bytes"' in errors[3], out


def test_pyright_refuses_the_same_mistakes(tmp_path: Path) -> None:
    errors, out = _pyright(tmp_path, USE)
    assert [e.split(":")[0] for e in errors] == ["4", "5", "6"], out
    assert 'No parameter named "fs_readble"' in errors[0], out
    assert '"Literal[\'10\']" cannot be assigned to parameter "max_processes"' in errors[1], out
    assert '"Literal[\'2\']" cannot be assigned to parameter "num_cpus"' in errors[2], out
    errors, out = _pyright(tmp_path, USE_ARGV)
    assert [e.split(":")[0] for e in errors] == ARGV_ERRORS, out
    for e, fn in zip(errors, ["run", "cmd", "reduce", "run"], strict=True):
        assert f'cannot be assigned to parameter "argv" of type "Argv" in function "{fn}"' in e, out
