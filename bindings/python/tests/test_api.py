"""The package surface: results, pipelines, lifetime, version, packaging."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SYS_RO, open_fds

import sandtrap
import sandtrap_guest
from sandtrap import ErrorInfo, Result, Sandbox


def test_version() -> None:
    """One version (the repository's VERSION file) for the package, the library it
    loaded, the guest runtime and the CLI."""
    version = (Path(__file__).resolve().parents[3] / "VERSION").read_text().strip()
    assert sandtrap.__version__ == version
    assert sandtrap.library_version() == version
    assert sandtrap_guest.__version__ == version
    p = subprocess.run([sys.executable, "-m", "sandtrap", "--version"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == version


def test_probe_cli() -> None:
    p = subprocess.run([sys.executable, "-m", "sandtrap", "--probe"], capture_output=True, text=True)
    assert p.returncode == 0 and '"landlock_abi"' in p.stdout


def test_typed_package_and_shipped_library() -> None:
    pkg = Path(sandtrap.__file__).parent
    assert (pkg / "py.typed").is_file()
    from sandtrap import _native

    _native.lib()
    if not os.environ.get("SANDTRAP_LIB"):
        assert _native.lib_path() is not None


def test_guest_runtime_importable() -> None:
    if importlib.util.find_spec("sandtrap_guest") is None:
        pytest.skip("sandtrap_guest not shipped (core/guest/python missing at build time)")
    import sandtrap_guest  # noqa: F401


def test_result_fields(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert isinstance(r, Result)
    assert (r.success, r.exit_code, r.signal) == (False, 3, None)
    assert r.stdout == b"out\n" and r.stderr == b"err\n"
    assert not r.stdout_truncated and not r.stderr_truncated
    assert r.error is None and not r.timed_out and not r.cancelled
    assert isinstance(r.isolation, dict) and "seccomp" in r.isolation
    assert isinstance(r.usage, dict) and r.usage["wall_s"] >= 0
    assert r.stages == []


def test_signal(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run(["sh", "-c", "kill -TERM $$"])
    assert r.signal == 15 and r.exit_code is None and not r.success


def test_error_info_str() -> None:
    e = ErrorInfo("timeout", "timed out after 1s")
    assert str(e) == "timed out after 1s" and e.kind == "timeout"


def test_timeout(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run(["sleep", "10"], timeout=0.3)
    assert r.timed_out and not r.success
    assert r.error is not None and r.error.kind == "timeout"
    assert r.usage["wall_s"] < 5


def test_policy_timeout_default() -> None:
    with Sandbox(fs_readable=SYS_RO, timeout=0.3) as sb:
        assert sb.run(["sleep", "10"]).timed_out
        assert sb.run(["sleep", "0"], timeout=5).success


def test_stdin_env_cwd(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    with Sandbox(fs_readable=SYS_RO + [str(tmp_path)], env={"A": "policy", "B": "b"}) as sb:
        assert sb.run(["tr", "a-z", "A-Z"], stdin=b"bytes").stdout == b"BYTES"
        assert sb.run(["tr", "a-z", "A-Z"], stdin="str").stdout == b"STR"
        assert sb.run(["cat"], stdin=bytearray(b"ba")).stdout == b"ba"
        r = sb.run(["sh", "-c", "echo $A $B"], env={"A": "run"})
        assert r.stdout == b"run b\n"
        assert sb.run(["pwd"], cwd=tmp_path).stdout == f"{tmp_path}\n".encode()


def test_clean_env() -> None:
    with Sandbox(fs_readable=SYS_RO, clean_env=True, env={"ONLY": "1"}) as sb:
        names = sorted(line.split("=")[0] for line in sb.run(["env"]).stdout.decode().splitlines())
        assert "ONLY" in names and "PATH" in names and "HOME" not in names


def test_inherits_current_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDTRAP_TEST_LATE_VAR", "late")
    with Sandbox(fs_readable=SYS_RO) as sb:
        assert sb.run(["sh", "-c", "echo $SANDTRAP_TEST_LATE_VAR"]).stdout == b"late\n"


def test_max_output_per_run(ro_sandbox: Sandbox) -> None:
    r = ro_sandbox.run(["head", "-c", "100", "/dev/zero"], max_output=10)
    assert len(r.stdout) == 10 and r.stdout_truncated


def test_isolation_report(ro_sandbox: Sandbox) -> None:
    iso = ro_sandbox.isolation()
    assert iso["no_new_privs"] is True
    assert iso["landlock"] is not None and iso["seccomp"] is not None


def test_pipeline_stages_and_stderr(ro_sandbox: Sandbox) -> None:
    other = Sandbox(fs_readable=SYS_RO)
    pipe = (
        ro_sandbox.cmd(["sh", "-c", "echo one; echo e1 >&2"])
        | other.cmd(["sh", "-c", "cat; echo e2 >&2"])
        | ro_sandbox.cmd(["tr", "a-z", "A-Z"])
    )
    assert isinstance(pipe, sandtrap.Pipeline) and len(pipe) == 3
    r = pipe.run()
    assert r.stdout == b"ONE\n" and r.success
    assert [s.stderr for s in r.stages] == [b"e1\n", b"e2\n", b""]
    assert r.stages[0].stdout == b""  # only the last stage's stdout is captured
    other.close()


def test_pipeline_stdin_and_timeout(ro_sandbox: Sandbox) -> None:
    r = (ro_sandbox.cmd(["cat"]) | ro_sandbox.cmd(["tr", "a-z", "A-Z"])).run(stdin=b"piped")
    assert r.stdout == b"PIPED"
    r = (ro_sandbox.cmd(["sleep", "10"]) | ro_sandbox.cmd(["cat"])).run(timeout=0.3)
    assert r.stages[0].timed_out


def test_pipeline_composition(ro_sandbox: Sandbox) -> None:
    a, b, c = (ro_sandbox.cmd(["cat"]) for _ in range(3))
    p1 = (a | b) | c
    p2 = a | (b | c)
    assert len(p1) == len(p2) == 3
    assert p1.run(stdin="x").stdout == b"x"


def test_command_runs_alone(ro_sandbox: Sandbox) -> None:
    assert ro_sandbox.cmd(["echo", "hi"]).run().stdout == b"hi\n"


def test_context_manager_and_gc_free_the_handle() -> None:
    Sandbox(fs_readable=SYS_RO).run(["true"])  # warm up the engine's own fds
    gc.collect()
    before = open_fds()
    for _ in range(20):
        with Sandbox(fs_readable=SYS_RO) as sb:
            sb.run(["true"])
        Sandbox(fs_readable=SYS_RO).run(["true"])  # dropped without close(): __del__
    gc.collect()
    assert open_fds() - before == set()


def test_close_waits_for_runs_in_flight() -> None:
    import threading

    sb = Sandbox(fs_readable=SYS_RO)
    out: list[Result] = []
    t = threading.Thread(target=lambda: out.append(sb.run(["sleep", "0.5"])))
    t.start()
    import time

    time.sleep(0.2)
    sb.close()
    t.join()
    assert out and out[0].success


def test_cancel_all(ro_sandbox: Sandbox) -> None:
    import threading
    import time

    out: list[Result] = []
    t = threading.Thread(target=lambda: out.append(ro_sandbox.run(["sleep", "30"])))
    t.start()
    deadline = time.monotonic() + 5
    while ro_sandbox.cancel() == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    t.join(10)
    assert out and out[0].cancelled and out[0].error is not None and out[0].error.kind == "cancelled"


def test_repr(ro_sandbox: Sandbox) -> None:
    assert "fs_readable" in repr(ro_sandbox)
    assert "echo" in repr(ro_sandbox.cmd(["echo"]) | ro_sandbox.cmd(["cat"]))


def test_cooperative_sandbox_is_exported() -> None:
    with sandtrap.sandbox(sandtrap.Policy(timeout=5)) as sb:
        r = sb.exec("x = 1 + 1")
    assert r.namespace == {"x": 2} and r.error is None
    with pytest.raises(sandtrap.InvalidArgument):
        sandtrap.sandbox(isolation="vm")


def test_uid_gid_needs_root_or_runs_as_user(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        with pytest.raises(sandtrap.PolicyError, match="root"):
            Sandbox(fs_readable=SYS_RO, uid=65534, gid=65534)
        return
    with Sandbox(fs_readable=SYS_RO, uid=65534, gid=65534) as sb:
        assert sb.run(["id", "-u"]).stdout == b"65534\n"


def test_pickle_roundtrip_rebuilds_from_policy(tmp_path: Path) -> None:
    import pickle

    with Sandbox(fs_readable=SYS_RO, env={"K": "v"}, timeout=5) as sb:
        clone = pickle.loads(pickle.dumps(sb))
        assert clone is not sb and clone.policy == sb.policy
        assert clone.run(["sh", "-c", "echo $K"]).stdout == b"v\n"
        clone.close()
