"""Bad input from Python: every problem named, at once, with the right exception."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SYS_RO

import sandtrap
from sandtrap import InvalidRequest, PolicyError, Sandbox, SandtrapError


def problems_of(exc: pytest.ExceptionInfo[SandtrapError]) -> str:
    return "\n".join(exc.value.problems)


def test_policy_error_lists_every_problem_at_once(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as ei:
        Sandbox(
            fs_readable="/usr",  # a str, not a list
            fs_writable=[b"/tmp"],  # bytes path
            max_memory=1.5,  # float size
            max_processes="10",  # str count
            net_allow_udp="yes",  # not a bool
            env={"A": 1},  # non-str value
            chroot="/",  # unsupported
            fs_readble=["/usr"],  # typo: unknown
            cwd="relative/dir",  # engine: relative
            max_disk="lots",  # engine: bad size
        )
    text = problems_of(ei)
    for needle in (
        "fs_readable",
        "fs_writable",
        "bytes",
        "max_memory",
        "max_processes",
        "net_allow_udp",
        "env",
        "chroot",
        "fs_readble",
        "did you mean fs_readable",
        "relative",
        "max_disk",
    ):
        assert needle in text, (needle, text)
    assert len(ei.value.problems) == 10, text
    assert str(ei.value).startswith("invalid policy (10 problems)")
    # every problem is a (field, message) pair, found in Python or by the engine
    assert sorted(p.field for p in ei.value.problems) == sorted(
        [
            "fs_writable",
            "chroot",
            "fs_readble",
            "fs_readable",
            "max_memory",
            "max_processes",
            "max_disk",
            "net_allow_udp",
            "env",
            "cwd",
        ]
    )
    for p in ei.value.problems:
        assert p == f"{p.field}: {p.message}" and not p.message.startswith(p.field)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, SandtrapError)
    assert ei.value.kind == "invalid_policy" and ei.value.code == -3


def test_engine_validation_lists_every_problem(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(PolicyError) as ei:
        Sandbox(
            fs_readable=["usr", str(missing)],
            max_memory="12Q",
            net_allow=["nope"],
            extra_deny_syscalls=["not a syscall"],
            timeout=-1,
        )
    text = problems_of(ei)
    # a relative path resolves against the working directory: the problem names the absolute path
    assert os.path.join(os.getcwd(), "usr") in text and str(missing) in text and "12Q" in text
    assert "nope" in text and "not a syscall" in text and "timeout" in text
    assert len(ei.value.problems) >= 6


@pytest.mark.parametrize("bad", [b"/usr", Path("/usr").as_posix().encode()])
def test_bytes_paths_are_refused_clearly(bad: bytes) -> None:
    with pytest.raises(PolicyError) as ei:
        Sandbox(fs_readable=[bad])
    assert "bytes path" in str(ei.value) and "os.fsdecode" in str(ei.value)


def test_bytes_cwd_refused() -> None:
    with pytest.raises(PolicyError, match="bytes path"):
        Sandbox(fs_readable=SYS_RO, cwd=b"/tmp")


def test_pathlib_paths_accepted(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("via pathlib")
    os.chmod(tmp_path, 0o755)
    sb = Sandbox(fs_readable=[Path("/usr"), Path("/lib"), Path("/bin"), tmp_path], cwd=tmp_path)
    r = sb.run(["cat", Path("f.txt")])
    assert r.success and r.stdout == b"via pathlib"
    assert sb.policy["fs_readable"][-1] == str(tmp_path)


def test_unknown_field_suggests() -> None:
    with pytest.raises(PolicyError, match="did you mean max_memory"):
        Sandbox(max_mem="1G")  # type: ignore[call-arg]


def test_misspelled_field_is_one_structured_problem() -> None:
    # the same (field, message) list as the engine gives every binding
    # (tests/vectors/problems.json)
    with pytest.raises(PolicyError) as ei:
        Sandbox(fs_readble=["/usr"])  # type: ignore[call-arg]
    assert [(p.field, p.message) for p in ei.value.problems] == [
        ("fs_readble", "unknown field; did you mean fs_readable?")
    ]
    assert str(ei.value) == "invalid policy: fs_readble: unknown field; did you mean fs_readable?"
    assert isinstance(ei.value.problems[0], sandtrap.Problem)


def test_problems_of_a_request_are_structured(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest) as ei:
        ro_sandbox.run(["true"], cwd="relative", timeout=-3)
    assert [(p.field, p.message) for p in ei.value.problems] == [
        ("timeout", "-3 must be a positive number of seconds"),
        ("cwd", 'path "relative" is relative; give an absolute path'),
    ]


def test_positional_arguments_refused() -> None:
    with pytest.raises(PolicyError, match="keyword arguments only"):
        Sandbox(["/usr"])  # type: ignore[misc]


def test_bool_is_not_an_int() -> None:
    with pytest.raises(PolicyError, match="max_processes"):
        Sandbox(max_processes=True)


def test_nul_in_policy_path() -> None:
    with pytest.raises(PolicyError, match="NUL"):
        Sandbox(fs_readable=["/usr\0/x"])


def test_none_means_unset() -> None:
    sb = Sandbox(fs_readable=None, max_memory=None, env=None, timeout=None)
    assert sb.policy == {}
    sb.close()


def test_human_sizes_pass_through() -> None:
    sb = Sandbox(fs_readable=SYS_RO, max_output="1K", max_disk="1.5M")
    r = sb.run(["head", "-c", "5000", "/dev/zero"])
    assert r.success and len(r.stdout) == 1024 and r.stdout_truncated
    sb.close()


# -- run() --------------------------------------------------------------------------------


def test_run_argv_must_be_a_list(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest, match="not a single str"):
        ro_sandbox.run("ls -l")  # type: ignore[arg-type]


def test_run_empty_argv(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest, match="empty"):
        ro_sandbox.run([])


def test_run_nul_in_argv(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest) as ei:
        ro_sandbox.run(["echo", "a\0b", b"c\0d"])
    assert "argv: element 1 contains a NUL byte" in str(ei.value)
    assert "argv: element 2 contains a NUL byte" in str(ei.value)
    assert [p.field for p in ei.value.problems] == ["argv", "argv"]
    assert ei.value.kind == "invalid_request" and ei.value.code == -2


def test_run_every_problem_at_once(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest) as ei:
        ro_sandbox.run(["echo", 3], timeout="5", stdin=42, env={"A": 1}, cwd=b"/tmp")  # type: ignore[list-item,arg-type]
    text = "\n".join(ei.value.problems)
    for needle in ("argv: element 1", "timeout", "stdin", "env", "cwd"):
        assert needle in text, (needle, text)
    assert len(ei.value.problems) == 5


def test_run_values_checked_by_engine(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest) as ei:
        ro_sandbox.run(["true"], cwd="relative", timeout=-3)
    text = str(ei.value)
    assert "relative" in text and "timeout" in text


def test_bytes_argv_allowed(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run([b"echo", b"\xffraw"])
    assert r.success and r.stdout == b"\xffraw\n"


def test_missing_program_is_a_result(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run(["no-such-program-xyz"])
    assert not r.success and r.exit_code is None
    assert r.error is not None and r.error.kind == "not_found"
    assert "no-such-program-xyz" in str(r.error)


def test_exec_denied_is_a_result(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho escaped\n")
    script.chmod(0o755)
    sb = Sandbox(fs_readable=SYS_RO)
    r = sb.run([str(script)])
    assert not r.success and r.error is not None and r.error.kind == "spawn_failed"
    assert b"escaped" not in r.stdout


def test_pipeline_errors(ro_sandbox: Sandbox) -> None:
    with pytest.raises(InvalidRequest):
        ro_sandbox.cmd("ls")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        sandtrap.Pipeline("not a command")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="timeout"):
        (ro_sandbox.cmd(["true"]) | ro_sandbox.cmd(["true"])).run(timeout="1")  # type: ignore[arg-type]


def test_closed_sandbox() -> None:
    sb = Sandbox(fs_readable=SYS_RO)
    sb.close()
    sb.close()  # idempotent
    assert sb.closed
    with pytest.raises(sandtrap.SandboxClosed):
        sb.run(["true"])
    with pytest.raises(sandtrap.SandboxClosed):
        sb.cmd(["true"]).run()


def test_isolation_unavailable_or_degraded_is_explicit() -> None:
    # rules by destination need the supervisor, which confine() does not have:
    # refused before anything is applied, the process is left as it was
    sb = Sandbox(fs_readable=SYS_RO, net_allow=["127.0.0.1:443"])
    assert sb.isolation()["net"]["supervised"] is True
    with pytest.raises(sandtrap.IsolationUnavailable) as ei:
        sandtrap.confine(sb)
    assert ei.value.kind == "isolation_unavailable" and ei.value.code == -4
    assert "supervisor" in str(ei.value)
    sb.close()
    # a host name that does not resolve is the policy's fault, not the kernel's
    with pytest.raises(sandtrap.PolicyError) as pe:
        Sandbox(fs_readable=SYS_RO, net_allow=["no-such-host.invalid:443"])
    assert "does not resolve" in str(pe.value)
    assert pe.value.problems[0].field == "net_allow"
