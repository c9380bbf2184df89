"""The engine's side of the cooperative worker protocol (core/session) against a deliberately malicious
worker (fake_worker.py: the real worker until an exec, then whatever the exec's code
names). Every fault ends that worker and the call returns WorkerCrashed (or StTimeout
for a worker that overruns) within bounded time; the next exec gets a fresh worker.
Both worker levels: the host side is the same code, the worker's confinement differs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import sandtrap._coop as coop
from sandtrap._coop import IsolatedFS, Policy, WorkerCrashed, WorkerError, sandbox
from sandtrap_guest import StTimeout

HERE = str(Path(__file__).resolve().parent)
LEVELS = ["process", "kernel"]
GRACE = 0.5  # the engine kills a worker this long after its timeout (docs/protocol.md)


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(coop, "_WORKER_MODULE", "fake_worker")
    monkeypatch.setattr(coop, "_WORKER_PATH", [HERE])


def policy(timeout=3.0):
    p = Policy(timeout=timeout)

    @p.fn
    def noop():
        return None

    return p


CRASHES = [
    "deep",
    "garbage",
    "trailing",
    "bad_utf8",
    "not_map",
    "no_op",
    "ready",
    "ticks_str",
    "ticks_bool",
    "namespace_list",
    "namespace_int_name",
    "error_type_int",
    "error_missing",
    "stdout_bytes",
    "call_name_int",
    "call_kwargs_int_keys",
    "call_args_map",
    "error_args_map",
    "error_args_not_list",
    "exit",
]
FS_CRASHES = ["fs_unknown_op", "fs_args_count", "fs_path_bytes", "fs_write_str", "fs_long_path", "fs_args_map"]


@pytest.mark.parametrize("level", LEVELS)
def test_every_protocol_fault_is_a_clean_worker_crash(fake, level, tmp_path):
    with sandbox(policy(), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        assert sb.exec("ok\nx = 1").error is None
        for mode in CRASHES:
            start = time.monotonic()
            r = sb.exec(mode)
            took = time.monotonic() - start
            assert isinstance(r.error, WorkerCrashed), (mode, r.error)
            assert took < 3.0, (mode, took)
            r = sb.exec("ok\ny = 2")  # a fresh worker (the namespace was reset)
            assert r.error is None and r.restarted and r.namespace == {"y": 2}, (mode, r)


@pytest.mark.parametrize("level", LEVELS)
def test_every_virtualfs_frame_fault_is_a_clean_worker_crash(fake, level):
    fs = coop.VirtualFS()
    fs.write("/x", "data")
    with sandbox(policy(), isolation=level, filesystem=fs) as sb:
        assert sb.exec("ok\nx = open('/x').read()").namespace == {"x": "data"}
        for mode in FS_CRASHES:
            r = sb.exec(mode)
            assert isinstance(r.error, WorkerCrashed) and "protocol" in str(r.error), (mode, r.error)
            r = sb.exec("ok\ny = open('/x').read()")
            assert r.error is None and r.restarted and r.namespace == {"y": "data"}, (mode, r)
        # a path that climbs out stays inside the VirtualFS (there is no /etc/hostname in it)
        r = sb.exec("fs_dotdot")
        assert r.namespace["reply"][:2] == ["raise", "FileNotFoundError"], r.namespace


@pytest.mark.parametrize("level", LEVELS)
def test_an_fs_call_without_a_virtualfs_ends_the_worker(fake, level, tmp_path):
    with sandbox(policy(), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("fs_no_vfs")
    assert isinstance(r.error, WorkerCrashed) and "serves no VirtualFS" in str(r.error), r.error


@pytest.mark.parametrize("level", LEVELS)
def test_a_call_flood_does_not_extend_the_deadline(fake, level, tmp_path):
    with sandbox(policy(timeout=1.0), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        start = time.monotonic()
        r = sb.exec("flood")
        took = time.monotonic() - start
        assert isinstance(r.error, StTimeout), r.error
        assert took < 1.0 + GRACE + 1.0, took
        assert sb.exec("ok\nz = 3").namespace == {"z": 3}


@pytest.mark.parametrize("level", LEVELS)
def test_a_silent_worker_is_killed_at_the_timeout(fake, level, tmp_path):
    with sandbox(policy(timeout=1.0), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        start = time.monotonic()
        r = sb.exec("silent")
        took = time.monotonic() - start
        assert isinstance(r.error, StTimeout), r.error
        assert 1.0 <= took < 1.0 + GRACE + 0.5, took


def test_a_worker_cannot_raise_system_exit_in_the_host(fake, tmp_path):
    with sandbox(policy(), isolation="process", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("system_exit")
    assert isinstance(r.error, WorkerError) and r.error.type_name == "SystemExit"


def test_the_real_worker_still_works_with_the_fake_configuration_elsewhere(tmp_path):
    # (the fake worker is its own template: argv differs)
    with sandbox(Policy(timeout=5), isolation="process", filesystem=IsolatedFS(tmp_path)) as sb:
        assert sb.exec("x = 1").namespace == {"x": 1}
    assert coop._WORKER_MODULE is None  # the engine's worker


def test_kernel_fails_closed_when_the_fork_cannot_install_its_layer(monkeypatch, tmp_path):
    # the engine's seccomp layer is part of what a fork is (metadata, locks, IPC,
    # process creation): a fork that cannot install it never serves, whatever
    # allow_degraded says (this kernel has seccomp: the failure is not the kernel's)
    from sandtrap import IsolationUnavailable

    monkeypatch.setattr(coop, "_WORKER_MODULE", "fake_worker_noseccomp")
    monkeypatch.setattr(coop, "_WORKER_PATH", [HERE])
    for degraded in (False, True):
        with (
            sandbox(policy(), isolation="kernel", filesystem=IsolatedFS(tmp_path), allow_degraded=degraded) as sb,
            pytest.raises(IsolationUnavailable, match=r"did not start.*simulated"),
        ):
            sb.exec("ok\nx = 1")
