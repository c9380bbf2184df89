"""The `sandtrap` binary as a user runs it: SANDTRAP_CLI (make test-cli sets it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = os.environ.get("SANDTRAP_CLI", str(ROOT / "build" / "sandtrap"))
PY = "/usr/bin/python3"
# what a system program needs to start
SYSTEM = [p for p in ("/usr", "/lib", "/lib64", "/bin", "/etc") if os.path.exists(p)]
R = [a for p in SYSTEM for a in ("-r", p)]


def sandtrap(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, timeout: float = 60, cwd=None):
    """Runs the CLI; returns the CompletedProcess (stdout and stderr as text)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run(
        [CLI, *args],
        input=stdin,
        check=False,
        capture_output=True,
        timeout=timeout,
        env=e,
        cwd=cwd,
    )


@pytest.fixture(autouse=True)
def _cli_exists():
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"no sandtrap binary at {CLI}: run make cli (or set SANDTRAP_CLI)")


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """A config and runtime dir of the test's own."""
    cfg, run = tmp_path / "config", tmp_path / "run"
    (cfg / "sandtrap" / "profiles").mkdir(parents=True)
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return cfg / "sandtrap" / "profiles"
