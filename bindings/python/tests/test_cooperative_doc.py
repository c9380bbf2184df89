"""Every Python block of docs/cooperative.md and docs/cooperative/*.md runs as written, each in its own process
(tests/packaging/snippets.py extracts them, as it does for the READMEs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "packaging"))
import snippets  # noqa: E402

DOC = ROOT / "docs" / "cooperative.md"
# the seed's documentation pages, for our package (docs/cooperative/*.md)
PAGES = [DOC, *sorted((ROOT / "docs" / "cooperative").glob("*.md"))]
BLOCKS = [
    (f"{page.relative_to(ROOT)}:{line}", code)
    for page in PAGES
    for line, lang, code in snippets.blocks(page)
    if lang in ("python", "py")
]


def test_the_pages_have_examples():
    names = {p.stem for p in PAGES}
    assert {"policy", "sandbox", "process", "filesystem", "serialization", "security", "roadmap"} <= names
    assert len(BLOCKS) >= 20


@pytest.mark.parametrize("line, code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_example_runs_as_written(line, code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ)
    src = str(Path(__import__("sandtrap").__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    assert p.returncode == 0, f"{line}:\n{p.stdout}\n{p.stderr}"
