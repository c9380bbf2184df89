"""The seed's configuration object: fields as attributes with their defaults,
assignment before the first run, parse_memory_size / memory_bytes, the
Protection enum (allow_degraded by name, disable) and comma lists of ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import PROBE, SYS_RO, SYSTEM_PYTHON, landlock_abi

import sandtrap
from sandtrap import InvalidState, PolicyError, Protection, Sandbox, parse_memory_size, parse_ports
from sandtrap._fields import DEFAULTS, MIN_ABI

# the seed's documented defaults (its full constructor), where sandtrap keeps them
SEED_DEFAULTS = {
    "http_ca": None, "http_key": None, "fs_storage": None, "workdir": None,
    "random_seed": None, "time_start": None, "deterministic_dirs": False, "no_randomize_memory": False,
    "env": {}, "cwd": None, "uid": None, "gid": None, "clean_env": False, "no_huge_pages": False,
    "no_supervisor": False, "fs_readable": (), "fs_writable": (), "fs_denied": (), "chroot": None,
    "fs_mount": {}, "on_exit": "commit", "on_error": "abort", "net_allow_bind": (), "net_allow": (),
    "port_remap": False, "http_ports": (), "http_allow": (), "http_deny": (),
    "extra_allow_syscalls": (), "extra_deny_syscalls": (), "max_memory": None, "max_processes": 64,
    "max_open_files": None, "max_cpu": None, "max_disk": None, "gpu_devices": None, "num_cpus": None,
    "name": None,
}  # fmt: skip


def test_fields_read_as_attributes_with_the_seed_defaults():
    with Sandbox(fs_readable=SYS_RO) as sb:
        for name, want in SEED_DEFAULTS.items():
            if name == "fs_readable":
                continue
            assert getattr(sb, name) == want, name
        # every field of the schema is an attribute (no hand-written list)
        for name, want in DEFAULTS.items():
            if name != "fs_readable":
                assert getattr(sb, name) == (tuple(want) if isinstance(want, tuple) else want), name
        assert sb.fs_readable == tuple(SYS_RO)
        assert sb.allow_degraded is False and sb.disable == () and sb.max_output == 16 << 20
        assert sb.no_coredump is None and sb.cpu_cores == ()
        # on_exit compares equal to the seed's BranchAction.COMMIT
        assert sb.on_exit == sandtrap.BranchAction.COMMIT


def test_values_given_read_back_frozen():
    env = {"A": "1"}
    with Sandbox(fs_readable=SYS_RO, env=env, max_memory="256M", net_allow_bind=[8080, "9000-9001"]) as sb:
        assert sb.env == {"A": "1"} and sb.max_memory == "256M" and sb.net_allow_bind == (8080, "9000-9001")
        env["A"] = "changed"  # the caller's dict is not the sandbox's
        assert sb.env == {"A": "1"}
        with pytest.raises(TypeError):
            sb.env["B"] = "2"  # type: ignore[index]
        assert sb.memory_bytes() == 256 << 20
    with Sandbox(fs_readable=SYS_RO) as sb:
        assert sb.memory_bytes() is None


def test_assignment_before_the_first_run_takes_effect(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    with Sandbox(fs_readable=SYS_RO, clean_env=True) as sb:
        before = sb.id
        sb.env = {"GREETING": "hi"}
        sb.fs_readable = [*SYS_RO, str(tmp_path)]
        assert sb.id != before, "the engine sandbox was not rebuilt"
        assert sb.policy["env"] == {"GREETING": "hi"}
        r = sb.run(["sh", "-c", f'echo "$GREETING"; cat {secret}'])
        assert r.stdout == b"hi\ns3cret", r


def test_assignment_after_the_first_run_is_refused_and_grants_nothing(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    with Sandbox(fs_readable=SYS_RO) as sb:
        assert sb.run(["true"]).success
        with pytest.raises(InvalidState) as e:
            sb.fs_readable = [*SYS_RO, str(tmp_path)]
        assert str(e.value).startswith("fs_readable: the sandbox has been used")
        assert sb.fs_readable == tuple(SYS_RO)
        r = sb.run(["cat", str(secret)])
        assert not r.success and b"s3cret" not in r.stdout and b"Permission denied" in r.stderr, r
    # any use fixes it: isolation() too
    with Sandbox(fs_readable=SYS_RO) as sb:
        sb.isolation()
        with pytest.raises(InvalidState):
            sb.max_processes = 8


def test_an_invalid_assignment_leaves_the_policy_as_it_was():
    with Sandbox(fs_readable=SYS_RO, max_processes=16) as sb:
        ident = sb.id
        with pytest.raises(PolicyError) as e:
            sb.max_processes = -1
        assert [str(p) for p in e.value.problems] == ["max_processes: -1 must be positive"]
        with pytest.raises(PolicyError) as e2:
            sb.chroot = "/srv"  # the seed has it, sandtrap refuses it by name
        assert e2.value.problems[0].field == "chroot"
        assert sb.max_processes == 16 and sb.chroot is None and sb.id == ident
        assert sb.isolation()["limits"].get("max_processes", {"value": 16})["value"] == 16


_FORKS = textwrap.dedent(
    """
    import os, time
    n = 0
    for i in range(100):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        n += 1
    print(n)
    """
)


def test_default_max_processes_holds():
    with Sandbox(fs_readable=SYS_RO) as sb:
        rep = sb.isolation()
        limit = rep["limits"].get("max_processes")
        if limit is None:
            # a kernel that cannot enforce it says so (the default is not asked for)
            assert any(d.startswith("max_processes: the default limit of 64 is not enforced") for d in rep["degraded"])
            pytest.skip("no pids cgroup or RLIMIT_NPROC here: the default limit is reported degraded")
        assert limit["value"] == 64
        r = sb.run([SYSTEM_PYTHON, "-c", _FORKS], timeout=30)
        assert r.success, r
        assert int(r.stdout) < 64, r.stdout
    with Sandbox(fs_readable=SYS_RO, max_processes=0) as sb:
        assert "max_processes" not in sb.isolation()["limits"]
        r = sb.run([SYSTEM_PYTHON, "-c", _FORKS], timeout=30)
        assert r.success and int(r.stdout) == 100, r


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (1048576, 1048576),
        ("1048576", 1048576),
        ("512K", 512 << 10),
        ("512M", 512 << 20),
        ("256m", 256 << 20),
        ("1.5G", 3 << 29),
        ("2GiB", 2 << 30),
        ("1T", 1 << 40),
        (" 64 K ", 64 << 10),
        ("100MB", 100 << 20),
    ],
)
def test_parse_memory_size(given, want):
    assert parse_memory_size(given) == want
    # the engine reads it the same way
    with Sandbox(fs_readable=SYS_RO, max_memory=given) as sb:
        assert sb.memory_bytes() == want
        limit = sb.isolation()["limits"]["max_memory"]
        assert limit["value"] == want


@pytest.mark.parametrize("bad", ["", "M", "-1M", "1.2.3G", "12Q", "ten", True, -5, 1.5])
def test_parse_memory_size_refuses(bad):
    with pytest.raises(PolicyError) as e:
        parse_memory_size(bad)
    assert "is not a size" in str(e.value)
    if isinstance(bad, str):
        with pytest.raises(PolicyError) as e2:
            Sandbox(fs_readable=SYS_RO, max_memory=bad)
        assert "is not a size" in str(e2.value)


def test_protection_enum():
    assert [p.value for p in Protection] == [
        "fs", "fs_refer", "fs_truncate", "net_tcp", "fs_ioctl_dev", "abstract_unix_socket_scope", "signal_scope",
    ]  # fmt: skip
    assert {p.value: p.min_abi for p in Protection} == MIN_ABI
    assert Protection.SIGNAL_SCOPE.min_abi == 6 and Protection.NET_TCP.min_abi == 4 and Protection.FS.min_abi == 1
    with pytest.raises(PolicyError) as e:
        Sandbox(fs_readable=SYS_RO, allow_degraded=["signal"], disable=["fs_everything"])
    assert sorted(str(p) for p in e.value.problems) == [
        'allow_degraded: "signal" is not a protection (fs, fs_refer, fs_truncate, net_tcp, fs_ioctl_dev, '
        "abstract_unix_socket_scope, signal_scope)",
        'disable: "fs_everything" is not a protection (fs, fs_refer, fs_truncate, net_tcp, fs_ioctl_dev, '
        "abstract_unix_socket_scope, signal_scope)",
    ]


def test_disable_turns_one_protection_off():
    if landlock_abi() < 6:
        pytest.skip("needs Landlock ABI 6")
    with Sandbox(fs_readable=SYS_RO, disable=[Protection.SIGNAL_SCOPE]) as sb:
        assert sb.disable == (Protection.SIGNAL_SCOPE,)
        rep = sb.isolation()
        assert rep["protections"]["signal_scope"] == "disabled"
        assert rep["protections"]["abstract_unix_socket_scope"] == "enforced"
        assert rep["landlock"]["scoped"] == ["abstract_unix_socket"]
    with Sandbox(fs_readable=SYS_RO) as sb:
        assert sb.isolation()["landlock"]["scoped"] == ["abstract_unix_socket", "signal"]


_LOW_ABI = textwrap.dedent(
    """
    import json, sys
    from sandtrap import IsolationUnavailable, Protection, Sandbox
    ro = json.loads(sys.argv[1])
    out = {}
    def attempt(name, **kw):
        try:
            with Sandbox(fs_readable=ro, **kw) as sb:
                r = sb.run(["cat", "/etc/hostname"])
                rep = sb.isolation()
                out[name] = {"ok": r.success, "protections": rep["protections"], "degraded": rep["degraded"],
                             "abi": rep["landlock"]["abi"], "scoped": rep["landlock"]["scoped"]}
        except IsolationUnavailable as e:
            out[name] = {"error": str(e)}
    attempt("strict")
    attempt("one", allow_degraded=[Protection.SIGNAL_SCOPE])
    attempt("both", allow_degraded=[Protection.SIGNAL_SCOPE, Protection.ABSTRACT_UNIX_SOCKET_SCOPE])
    attempt("all", allow_degraded=True)
    attempt("net", net_allow=[443], allow_degraded=["signal_scope", "abstract_unix_socket_scope"])
    print(json.dumps(out))
    """
)


def _low_abi(abi: int) -> dict:
    hook = os.environ.get("SANDTRAP_TESTHOOK_LIB")
    if not hook:
        pytest.skip("needs the library built with the test hook (make test-python sets SANDTRAP_TESTHOOK_LIB)")
    if landlock_abi() < 6 or not PROBE.get("seccomp"):
        pytest.skip("needs Landlock ABI 6 and seccomp, to lower")
    env = dict(os.environ, SANDTRAP_TEST_LANDLOCK_ABI=str(abi), SANDTRAP_LIB=hook)
    out = subprocess.run(
        [sys.executable, "-c", _LOW_ABI, json.dumps(SYS_RO)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_allow_degraded_names_exactly_one_protection():
    got = _low_abi(5)
    assert got["strict"] == {
        "error": "isolation unavailable: landlock abstract_unix_socket_scope (kernel ABI 5 < 6); "
        "landlock signal_scope (kernel ABI 5 < 6) (pass allow_degraded to run without it)"
    }
    # degrading one leaves the other required
    assert got["one"] == {
        "error": "isolation unavailable: landlock abstract_unix_socket_scope (kernel ABI 5 < 6) "
        "(pass allow_degraded to run without it)"
    }
    both = got["both"]
    assert both["ok"] and both["abi"] == 5 and both["scoped"] in (None, [])
    assert both["protections"] == {
        "fs": "enforced", "fs_refer": "enforced", "fs_truncate": "enforced", "net_tcp": "not_needed",
        "fs_ioctl_dev": "enforced", "abstract_unix_socket_scope": "degraded", "signal_scope": "degraded",
    }  # fmt: skip
    assert "not applied: landlock signal_scope (kernel ABI 5 < 6)" in both["degraded"]
    assert "not applied: landlock abstract_unix_socket_scope (kernel ABI 5 < 6)" in both["degraded"]
    assert got["all"]["ok"] and got["all"]["protections"]["signal_scope"] == "degraded"
    # network rules on ABI 5 need nothing more
    assert got["net"]["ok"] and got["net"]["protections"]["net_tcp"] == "enforced"


def test_net_tcp_is_required_with_network_rules_below_abi_4():
    got = _low_abi(3)
    assert got["net"] == {
        "error": "isolation unavailable: landlock net_tcp (kernel ABI 3 < 4); landlock fs_ioctl_dev (kernel ABI 3 < 5) "
        "(pass allow_degraded to run without it)"
    }
    assert got["all"]["ok"] and got["all"]["protections"]["fs_ioctl_dev"] == "degraded"
    assert got["all"]["protections"]["net_tcp"] == "not_needed"


def test_comma_lists_of_ports():
    assert parse_ports("22,443") == [22, 443]
    assert parse_ports(["8000-8002,9000", 80]) == [80, 8000, 8001, 8002, 9000]
    with pytest.raises(PolicyError) as e:
        parse_ports(["22,,443"])
    assert [str(p) for p in e.value.problems] == [
        'port \'\': want "N", "LOW-HIGH" or a comma list of them ("22,443,8000-8005")'
    ]
    with Sandbox(fs_readable=SYS_RO, net_allow_bind=["8080,8443"]) as sb:
        assert sb.net_allow_bind == ("8080,8443",)
        if landlock_abi() >= 4:
            assert sb.isolation()["landlock"]["bind_ports"] == [8080, 8443]


_ABSTRACT_CONNECT = textwrap.dedent(
    """
    import errno, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\\0" + sys.argv[1])
        print("connected")
    except OSError as e:
        print(errno.errorcode[e.errno])
    """
)


def test_abstract_unix_scope_holds_unless_disabled():
    """The attack: reach a host process's abstract unix socket from the sandbox.
    The scope refuses it (EPERM); disable=[ABSTRACT_UNIX_SOCKET_SCOPE] really
    turns it off (the connect lands), so the refusal is the scope's."""
    import socket

    if landlock_abi() < 6:
        pytest.skip("needs Landlock ABI 6")
    name = f"sandtrap-config-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(4)
    try:
        with Sandbox(fs_readable=SYS_RO, net_allow_unix=True) as sb:
            r = sb.run([SYSTEM_PYTHON, "-c", _ABSTRACT_CONNECT, name], timeout=30)
            assert r.stdout.strip() == b"EPERM", r
        with Sandbox(fs_readable=SYS_RO, net_allow_unix=True, disable=[Protection.ABSTRACT_UNIX_SOCKET_SCOPE]) as sb:
            assert sb.isolation()["protections"]["abstract_unix_socket_scope"] == "disabled"
            r = sb.run([SYSTEM_PYTHON, "-c", _ABSTRACT_CONNECT, name], timeout=30)
            assert r.stdout.strip() == b"connected", r
    finally:
        srv.close()


def test_the_default_max_processes_is_shared_by_concurrent_runs():
    """Limits are the sandbox's: its concurrent runs share the default 64 too, and a
    run that finds no task left says so."""
    import concurrent.futures

    with Sandbox(fs_readable=SYS_RO) as sb:
        if "max_processes" not in sb.isolation()["limits"]:
            pytest.skip("the default limit is not enforced here")
        # each run holds its tasks (pid 1 and sleep) until the first refusal, however
        # slowly a loaded machine starts them; then the rest are cancelled
        with concurrent.futures.ThreadPoolExecutor(48) as ex:
            futs = [ex.submit(sb.run, ["sleep", "60"], timeout=20) for _ in range(48)]
            for f in concurrent.futures.as_completed(futs, timeout=50):
                if f.exception() is not None or not f.result().success:
                    break
            sb.cancel()
        raised = [f.exception() for f in futs if f.exception() is not None]
        results = [f.result() for f in futs if f.exception() is None]
    # a run that finds no task left: refused (at its pid 1's fork of the program) or
    # failed to spawn (at the zygote's fork of its pid 1), each saying why
    hint = (
        "(max_processes 64: the tasks of this sandbox's runs together; give a larger max_processes, or 0 for none, "
        "to run more at once)"
    )
    refused = [str(e) for e in raised] + [str(r.error) for r in results if not (r.cancelled or r.timed_out)]
    assert refused and any(r.cancelled for r in results), (len(results), refused[:1])
    assert all(isinstance(e, sandtrap.IsolationUnavailable) for e in raised)
    assert all(hint in m for m in refused), refused[0]
