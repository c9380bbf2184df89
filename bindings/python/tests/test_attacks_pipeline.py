"""A pipeline reports any stage that could not start or failed (issue 10, "also
broken"); an upstream stage ended by SIGPIPE is not a failure."""

from __future__ import annotations

from conftest import SYS_RO

from sandtrap import Sandbox


def test_a_first_stage_that_cannot_start_fails_the_pipeline() -> None:
    sb = Sandbox(fs_readable=SYS_RO)
    r = (sb.cmd(["/no/such/program"]) | sb.cmd(["cat"])).run()
    assert not r.success, r
    assert r.error is not None and r.error.kind == "not_found", r.error
    assert "stage 0" in r.error.message, r.error.message


def test_a_failing_middle_stage_fails_the_pipeline() -> None:
    sb = Sandbox(fs_readable=SYS_RO)
    r = (sb.cmd(["echo", "x"]) | sb.cmd(["sh", "-c", "cat >/dev/null; exit 3"]) | sb.cmd(["cat"])).run()
    assert not r.success, (r, [s.exit_code for s in r.stages])


def test_sigpipe_upstream_is_not_a_failure() -> None:
    sb = Sandbox(fs_readable=SYS_RO)
    r = (sb.cmd(["yes"]) | sb.cmd(["head", "-1"])).run()
    assert r.success, (r, [(s.exit_code, s.signal) for s in r.stages])
    assert r.stdout == b"y\n"
