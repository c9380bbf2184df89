"""The keyword arguments of Sandbox are typed from the engine's schema (PolicyOptions,
generated into _fields.py): a type checker refuses a misspelled field, a wrongly typed
value and a field sandtrap does not support, before the program runs."""

from __future__ import annotations

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
unsupported = Sandbox(chroot="/")
"""


def test_policy_options_are_the_schema_fields() -> None:
    assert list(PolicyOptions.__annotations__) == list(FIELDS)
    assert PolicyOptions.__optional_keys__ == frozenset(FIELDS)


def test_mypy_strict_refuses_the_mistakes(tmp_path: Path) -> None:
    src = tmp_path / "use.py"
    src.write_text(USE)
    env = dict(os.environ)
    pkg_root = Path(sandtrap.__file__).resolve().parents[1]
    if "site-packages" not in pkg_root.parts:  # a checkout on PYTHONPATH
        env["MYPYPATH"] = str(pkg_root)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--follow-imports=silent",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(src),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    out = r.stdout + r.stderr
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["4", "5", "6"], out
    assert 'Unexpected keyword argument "fs_readble"' in errors[0] and 'did you mean "fs_readable"' in errors[0], out
    assert '"max_processes"' in errors[1] and '"int | None"' in errors[1], textwrap.indent(out, "  ")
    assert 'Unexpected keyword argument "chroot"' in errors[2], out
