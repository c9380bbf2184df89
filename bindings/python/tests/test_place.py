"""Placement (issue 21): num_cpus, cpu_cores' cgroup, no_supervisor, from Python.
gpu_devices is tested with stand-in nodes in core/engine/place_test.go (its device
directory is the test hook's, read when the engine starts)."""

from __future__ import annotations

import os

import pytest
from conftest import IS_ROOT, SYS_RO, SYSTEM_PYTHON, have_python_in_sandbox

import sandtrap

RO = [*SYS_RO, "/proc", "/sys"]


def _allowed() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def test_num_cpus_is_what_the_run_sees() -> None:
    if not have_python_in_sandbox():
        pytest.skip("no system python3")
    code = "import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))"
    with sandtrap.Sandbox(fs_readable=RO, num_cpus=1, clean_env=True, allow_degraded=not IS_ROOT) as sb:
        rep = sb.isolation()["process"]
        assert rep["num_cpus"] == 1 and rep["cpu_cores"] == _allowed()[:1], rep
        r = sb.run(["sh", "-c", "nproc; grep -c ^processor /proc/cpuinfo"])
        nproc, cpuinfo = r.stdout.decode().split()
        assert nproc == "1", r.stderr
        py = sb.run([SYSTEM_PYTHON, "-c", code])
        if "/proc/cpuinfo" in rep.get("cpu_files", []):
            assert cpuinfo == "1"
        if "/sys/devices/system/cpu/online" in rep.get("cpu_files", []):
            # glibc's sysconf(_SC_NPROCESSORS_ONLN) reads the online file
            assert py.stdout.split() == [b"1", b"1"], py.stderr
        else:
            assert py.stdout.split()[1] == b"1", py.stderr


def test_num_cpus_above_what_the_host_gives_is_refused() -> None:
    n = len(_allowed())
    with pytest.raises(sandtrap.PolicyError) as e:
        sandtrap.Sandbox(fs_readable=SYS_RO, num_cpus=n + 1)
    assert e.value.problems[0].field == "num_cpus"
    assert f"{n + 1} is more than the {n} CPUs" in str(e.value)
    with pytest.raises(sandtrap.PolicyError, match="num_cpus"):
        sandtrap.Sandbox(fs_readable=SYS_RO, num_cpus=0)


def test_num_cpus_bounds_cpu_time() -> None:
    """Two busy processes for 1.5 s under num_cpus=1: at most about one CPU-second
    per second of wall time (measured by the run's rusage)."""
    if len(_allowed()) < 2:
        pytest.skip("needs two CPUs")
    # two busy shells (no forks in the loop: all of it is CPU time)
    burn = "for i in 1 2; do timeout 1.5 sh -c 'while :; do :; done' & done; wait"
    with sandtrap.Sandbox(fs_readable=SYS_RO, num_cpus=1) as sb:
        r = sb.run(["sh", "-c", burn])
        used, wall = r.usage["cpu_user_s"] + r.usage["cpu_sys_s"], r.usage["wall_s"]
        print(f"num_cpus=1, two busy processes: {used:.2f} CPU-s in {wall:.2f} s")
        assert wall >= 1.4 and used <= wall * 1.1 + 0.1, (used, wall)


def test_cpu_cores_uses_the_cpuset_where_the_host_has_one() -> None:
    with sandtrap.Sandbox(fs_readable=SYS_RO, cpu_cores=_allowed()[:1]) as sb:
        via = sb.isolation()["process"]["cpu_via"]
    probe_cg = sandtrap.probe().get("cgroup")
    if IS_ROOT and probe_cg:
        assert via.startswith("cpuset_cgroup_v"), via
    if not IS_ROOT:
        assert via == "sched_setaffinity", via


def test_no_supervisor_has_no_supervisor() -> None:
    if not have_python_in_sandbox():
        pytest.skip("no system python3")
    watch = (
        "import ctypes; l = ctypes.CDLL(None, use_errno=True); fd = l.inotify_init1(0);"
        "print(l.inotify_add_watch(fd, b'/usr', 1) >= 0, ctypes.get_errno())"
    )
    with sandtrap.Sandbox(fs_readable=SYS_RO) as sb:
        assert sb.run([SYSTEM_PYTHON, "-c", watch]).stdout.split() == [b"True", b"0"]
        assert "inotify_add_watch" in sb.isolation()["seccomp"]["supervised"]
    with sandtrap.Sandbox(fs_readable=SYS_RO, no_supervisor=True) as sb:
        # refused by the filter itself: EPERM, where a supervisor would have judged
        assert sb.run([SYSTEM_PYTHON, "-c", watch]).stdout.split() == [b"False", b"1"]
        sc = sb.isolation()["seccomp"]
        assert sc["no_supervisor"] is True and not sc.get("supervised") and "inotify_add_watch" in sc["refused"]


def test_no_supervisor_refuses_what_needs_one_by_name() -> None:
    with pytest.raises(sandtrap.PolicyError) as e:
        sandtrap.Sandbox(
            fs_readable=SYS_RO, no_supervisor=True, net_allow=["10.0.0.0/8:22"], http_allow=["GET example.com/*"]
        )
    fields = {p.field for p in e.value.problems}
    assert fields == {"net_allow", "http_allow"}, e.value.problems
    assert all("no_supervisor" in p.message for p in e.value.problems)
    with pytest.raises(sandtrap.PolicyError) as e:
        sandtrap.Sandbox(fs_readable=SYS_RO, no_supervisor=True, policy_fn=lambda event, ctx: None)
    assert [(p.field, p.message) for p in e.value.problems] == [
        ("policy_fn", "needs the syscall supervisor, which no_supervisor turns off")
    ]
    # handlers given per run: the engine refuses them
    with (
        sandtrap.Sandbox(fs_readable=SYS_RO, no_supervisor=True) as sb,
        pytest.raises(sandtrap.SandtrapError, match="no_supervisor"),
    ):
        sb.run_with_handlers(["/bin/true"], [("openat", sandtrap.Handler())])
