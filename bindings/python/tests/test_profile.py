"""load_profile / policy_from_dict: thin wrappers of the engine's profile loader."""

from __future__ import annotations

import pytest

import sandtrap
from sandtrap import NotFound, PolicyError, Sandbox, load_profile, policy_from_dict, profile_argv

PROFILE = """
[program]
exec = "/bin/echo"
args = ["from", "profile"]
clean_env = true
env = { A = "1" }

[filesystem]
fs_readable = ["/usr", "/lib"]

[limits]
max_memory = "64M"
timeout = 10
"""


def test_load_and_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    d = tmp_path / "sandtrap" / "profiles"
    d.mkdir(parents=True)
    (d / "echo.toml").write_text(PROFILE)
    prof = load_profile("echo")
    assert prof["filesystem"] == {"fs_readable": ["/usr", "/lib"]}
    assert prof["program"]["exec"] == "/bin/echo"
    assert load_profile(d / "echo.toml") == prof
    kwargs = policy_from_dict(prof)
    assert kwargs == {
        "clean_env": True,
        "env": {"A": "1"},
        "fs_readable": ["/usr", "/lib"],
        "max_memory": "64M",
        "timeout": 10,
    }
    argv = profile_argv(prof)
    assert argv == ["/bin/echo", "from", "profile"]
    r = Sandbox(**kwargs).run(argv)
    assert r.success and r.stdout == b"from profile\n"


def test_every_problem_with_file_line_and_key(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[filesytem]\nx = 1\n[limits]\nmax_memory = [1]\nfs_readable = ["/usr"]\n')
    with pytest.raises(PolicyError) as ei:
        load_profile(str(f))
    probs = ei.value.problems
    assert [(p.line, p.key) for p in probs] == [(1, "filesytem"), (4, "limits.max_memory"), (5, "limits.fs_readable")]
    assert probs[0].field == f"{f}:1: filesytem" and "did you mean [filesystem]" in probs[0].message
    assert "belongs in [filesystem]" in str(ei.value)


def test_policy_from_dict_checks_like_a_file():
    with pytest.raises(PolicyError) as ei:
        policy_from_dict({"limits": {"max_procs": 3}, "config": {"fs_storage": 5}})
    msgs = [p.message for p in ei.value.problems]
    assert any("did you mean max_processes" in m for m in msgs)
    assert any(m.startswith("want a string") for m in msgs)
    assert ei.value.problems[0].field.startswith("<dict>")


def test_missing_profile(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(NotFound, match="no profile is saved yet"):
        load_profile("nope")
    with pytest.raises(NotFound):
        load_profile(str(tmp_path / "none.toml"))


def test_exported():
    assert {"load_profile", "policy_from_dict", "profile_argv"} <= set(sandtrap.__all__)
