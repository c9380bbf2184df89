"""The policy's process knobs (issue 21): no_randomize_memory, no_huge_pages,
cpu_cores, no_coredump. Each is checked from inside the run, and each attack on it
(undoing it from inside, or the knob leaking onto the host) is tried."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import SYS_RO, SYSTEM_PYTHON, have_python_in_sandbox

import sandtrap

RO = [*SYS_RO, "/proc"]


def _status(sb: sandtrap.Sandbox, key: str) -> str:
    r = sb.run(["sh", "-c", f"grep '^{key}:' /proc/self/status"])
    assert r.exit_code == 0, r.stderr
    return r.stdout.decode().split(":", 1)[1].strip()


def _stack(sb: sandtrap.Sandbox) -> str:
    r = sb.run(["sh", "-c", "grep -E '\\[stack\\]' /proc/self/maps"])
    assert r.exit_code == 0, r.stderr
    return r.stdout.decode().split()[0]


def test_no_randomize_memory_gives_the_same_layout() -> None:
    with sandtrap.Sandbox(fs_readable=RO, no_randomize_memory=True) as sb:
        assert sb.isolation()["process"]["aslr"] is False
        assert _stack(sb) == _stack(sb)
    with sandtrap.Sandbox(fs_readable=RO) as sb:
        assert sb.isolation()["process"]["aslr"] is True
        # randomized: three runs do not all land at one address
        assert len({_stack(sb) for _ in range(3)}) > 1


def test_the_program_cannot_turn_randomization_off_itself() -> None:
    if not have_python_in_sandbox():
        pytest.skip("no system python3")
    code = "import ctypes, os; print(ctypes.CDLL(None, use_errno=True).personality(0x0040000), ctypes.get_errno())"
    with sandtrap.Sandbox(fs_readable=RO) as sb:
        r = sb.run([SYSTEM_PYTHON, "-c", code])
        assert r.stdout.decode().split() == ["-1", "1"], r.stderr  # EPERM


def test_no_huge_pages_is_the_runs_and_not_the_hosts() -> None:
    mine = Path("/proc/self/status").read_text()
    host_before = re.search(r"THP_enabled:\s*(\d)", mine)
    with sandtrap.Sandbox(fs_readable=RO, no_huge_pages=True) as sb:
        assert _status(sb, "THP_enabled") == "0"
        assert sb.isolation()["process"]["huge_pages"] is False
    host_after = re.search(r"THP_enabled:\s*(\d)", Path("/proc/self/status").read_text())
    # the launcher shares this process's memory until it execs: the flag, a flag of
    # the memory, must not have been set on it
    assert host_before is not None and host_after is not None
    assert host_after.group(1) == host_before.group(1)
    with sandtrap.Sandbox(fs_readable=RO) as sb:
        assert _status(sb, "THP_enabled") == host_before.group(1)


def _allowed() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def test_cpu_cores_pins_the_run_and_cannot_be_widened() -> None:
    cpus = _allowed()
    want = cpus[-1]
    with sandtrap.Sandbox(fs_readable=RO, cpu_cores=[want]) as sb:
        assert _status(sb, "Cpus_allowed_list") == str(want)
        rep = sb.isolation()["process"]
        # a cpuset cgroup where the host's cgroup has one (root here), else the
        # affinity alone, and then sched_setaffinity is refused
        via = rep["cpu_via"]
        assert rep["cpu_cores"] == [want] and via in ("sched_setaffinity", "cpuset_cgroup_v1", "cpuset_cgroup_v2")
        if have_python_in_sandbox():
            r = sb.run(
                [
                    SYSTEM_PYTHON,
                    "-c",
                    f"import os; os.sched_setaffinity(0, {set(cpus)!r}); print(os.sched_getaffinity(0))",
                ]
            )
            if via == "sched_setaffinity":
                assert r.exit_code != 0 and b"PermissionError" in r.stderr, r.stderr
            else:  # the kernel holds the affinity to the cpuset's CPUs
                assert r.exit_code == 0 and r.stdout.strip() == str({want}).encode(), (r.stdout, r.stderr)
            assert _status(sb, "Cpus_allowed_list") == str(want)


def test_cpu_cores_bounds_cpu_time() -> None:
    """Two busy processes for 1.5 s of wall time: pinned to one CPU they get at most
    about one CPU-second per second; unpinned on a machine with two CPUs, more."""
    if len(_allowed()) < 2:
        pytest.skip("needs two CPUs")
    burn = "for i in 1 2; do (end=$(($(date +%s%N)+1500000000)); while [ $(date +%s%N) -lt $end ]; do :; done) & done; wait"

    def cpu(**kw: object) -> tuple[float, float]:
        with sandtrap.Sandbox(fs_readable=RO, **kw) as sb:  # type: ignore[arg-type]
            r = sb.run(["sh", "-c", burn])
            assert r.exit_code == 0, r.stderr
            return r.usage["cpu_user_s"] + r.usage["cpu_sys_s"], r.usage["wall_s"]

    # the control first: unpinned, the two take more than one CPU-second per second
    # (else this machine is too busy for the bound to show anything)
    free, fwall = cpu()
    if free <= fwall * 1.3:
        pytest.skip(f"unpinned, two busy processes used only {free:.2f} CPU-s in {fwall:.2f} s here")
    used, wall = cpu(cpu_cores=[_allowed()[0]])
    assert used <= wall * 1.1 + 0.1, (used, wall, free, fwall)


def test_cpu_cores_refuses_what_this_process_cannot_use() -> None:
    with pytest.raises(sandtrap.PolicyError) as e:
        sandtrap.Sandbox(fs_readable=RO, cpu_cores=[1023])
    assert "cpu_cores" in str(e.value) and "1023" in str(e.value)
    with pytest.raises(sandtrap.PolicyError) as e:
        sandtrap.Sandbox(fs_readable=RO, cpu_cores=["x", 5000, "3-1"])
    assert len(e.value.problems) == 3


def _core_pattern() -> str:
    return Path("/proc/sys/kernel/core_pattern").read_text().strip()


def test_core_dumps_are_off_unless_asked(world_tmp: Path) -> None:
    segv = ["sh", "-c", "ulimit -c; kill -SEGV $$"]
    with sandtrap.Sandbox(fs_readable=RO, fs_writable=[str(world_tmp)], cwd=str(world_tmp)) as sb:
        r = sb.run(segv)
        assert r.stdout.decode().strip() == "0" and r.signal == 11
        assert sb.isolation()["process"]["core_dumps"] == "off"
    with sandtrap.Sandbox(fs_readable=RO, fs_writable=[str(world_tmp)], cwd=str(world_tmp), no_coredump=True) as sb:
        assert sb.run(segv).stdout.decode().strip() == "0"
    assert not any(p.name.startswith("core") for p in world_tmp.iterdir())


def test_core_dumps_when_asked_land_in_a_writable_path_or_are_refused(world_tmp: Path) -> None:
    pattern = _core_pattern()
    kw = dict(fs_readable=RO, fs_writable=[str(world_tmp)], cwd=str(world_tmp), no_coredump=False)
    if pattern.startswith("|"):
        with pytest.raises(sandtrap.PolicyError, match="pipes them to a program"):
            sandtrap.Sandbox(**kw)  # type: ignore[arg-type]
        return
    if pattern.startswith("/"):
        with pytest.raises(sandtrap.PolicyError, match="not under a writable path"):
            sandtrap.Sandbox(**kw)  # type: ignore[arg-type]
        return
    with sandtrap.Sandbox(**kw) as sb:  # type: ignore[arg-type]
        assert sb.isolation()["process"]["core_dumps"] == pattern
        r = sb.run(["sh", "-c", "ulimit -c; kill -SEGV $$"])
        assert r.stdout.decode().strip() != "0" and r.signal == 11
    assert any(p.name.startswith(pattern.split("%")[0] or "core") for p in world_tmp.iterdir()), list(
        world_tmp.iterdir()
    )
