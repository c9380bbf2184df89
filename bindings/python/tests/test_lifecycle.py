"""Lifecycle (issue 16, second part): pause by the run's cgroup v2 freezer, which no
SIGCONT undoes (SIGSTOP fallback reported), send_signal, fork/reduce iterators,
checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import SYS_RO

from sandtrap import CAPTURE, ExitReason, InvalidRequest, Sandbox


@pytest.fixture
def sb():
    with Sandbox(fs_readable=SYS_RO, timeout=60) as s:
        yield s


def _tree(root: int) -> list[int]:
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        try:
            for t in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{t}/children") as f:
                    stack += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


def _ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def _comms(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                out.append(f.read().strip())
        except OSError:
            out.append("")
    return out


def _freezer_expected() -> bool:
    # root here: the host's cgroup v2 (pure, or the hybrid /sys/fs/cgroup/unified)
    return os.geteuid() == 0 and any(" - cgroup2 " in line for line in open("/proc/self/mountinfo"))


SPIN = "while :; do kill -CONT -1 2>/dev/null; done"


def test_freezer_pause_holds_against_sigcont(sb: Sandbox) -> None:
    """Processes that SIGCONT each other, and SIGCONT to each from outside: frozen,
    none runs (the SIGSTOP design is undone by one SIGCONT: the test below)."""
    p = sb.popen(["sh", "-c", f"(sh -c '{SPIN}' &); (sh -c '{SPIN}' &); {SPIN}"])
    if not _freezer_expected():
        pytest.skip(f"no cgroup v2 freezer here: pause is {p.pause_via} ({p.pause_note})")
    assert p.pause_via == "freezer" and p.pause_note is None
    # the tree settles at init + three spinners (the subshells that start two exit)
    deadline, last = time.monotonic() + 5, None
    while time.monotonic() < deadline:
        pids = _tree(p.init_pid)
        if len(pids) == 4 and pids == last:
            break
        last = pids
        time.sleep(0.01)
    p.pause()
    for pid in pids[1:]:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    t0 = _ticks(pids)
    time.sleep(0.5)
    frozen = _ticks(pids) - t0
    p.resume()
    t0 = _ticks(pids)
    time.sleep(0.5)
    resumed = _ticks(pids) - t0
    print(f"CPU ticks in 0.5 s: frozen (SIGCONT inside and out) {frozen}, resumed {resumed}")
    assert frozen <= 1 and resumed >= 3
    p.pause()
    p.kill()  # a frozen tree still dies
    assert p.wait().reason is ExitReason.KILLED
    assert all(not os.path.exists(f"/proc/{pid}") for pid in pids)


def test_sigstop_fallback_reported_and_undone_by_sigcont() -> None:
    hook = os.environ.get("SANDTRAP_TESTHOOK_LIB")
    if not hook:
        pytest.skip("needs the library built with the test hook (SANDTRAP_TESTHOOK_LIB)")
    code = f"""
import os, signal, time
from sandtrap import Sandbox
from test_lifecycle import _tree, _ticks
with Sandbox(fs_readable={SYS_RO!r}, timeout=60) as sb:
    p = sb.popen(["sh", "-c", "while :; do :; done"])
    print("VIA", p.pause_via, "freezer" in (p.pause_note or ""))
    time.sleep(0.1)
    pids = _tree(p.init_pid)
    p.pause()
    t0 = _ticks(pids); time.sleep(0.3); print("STOPPED", _ticks(pids) - t0)
    for pid in pids[1:]:
        os.kill(pid, signal.SIGCONT)
    time.sleep(0.05)
    t0 = _ticks(pids); time.sleep(0.3); print("AFTER_SIGCONT", _ticks(pids) - t0)
    p.kill()
"""
    env = dict(os.environ, SANDTRAP_TEST_DISABLE="freezer", SANDTRAP_LIB=hook, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=os.path.dirname(__file__)
    )
    assert "VIA sigstop True" in out.stdout, out.stdout + out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert int(lines["STOPPED"]) <= 1, out.stdout
    assert int(lines["AFTER_SIGCONT"]) >= 2, out.stdout  # the weakness the freezer removes


def test_send_signal_leader_tree_and_refusals(sb: Sandbox) -> None:
    p = sb.popen(["sh", "-c", "trap 'echo term; exit 3' TERM; while :; do sleep 0.02; done"], stdout=CAPTURE)
    time.sleep(0.15)
    assert p.send_signal(signal.SIGTERM) == 1
    r = p.wait()
    assert r.exit_code == 3 and b"term" in r.stdout
    assert p.send_signal(signal.SIGTERM) == 0  # ended: reaches nothing
    q = sb.spawn(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    deadline = time.monotonic() + 20  # both sleeps exec'd (a loaded machine is slow to)
    while _comms(_tree(q.init_pid)).count("sleep") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _comms(_tree(q.init_pid))[1:].count("sleep") == 2, _comms(_tree(q.init_pid))
    for bad in (0, signal.SIGSTOP, signal.SIGCONT, signal.SIGTSTP, 65):
        with pytest.raises(InvalidRequest):
            q.send_signal(bad)
    assert sb.send_signal(signal.SIGKILL, tree=True) == 3
    r = sb.wait()
    assert r.reason is ExitReason.SIGNALED and r.signal == signal.SIGKILL


# -- fork(): clones as they finish, progress, leaving early kills the rest ---------


def _comm(tmp_path) -> str:
    return f"stc{abs(hash(str(tmp_path))) % 10**9}"[:15]


def _forker(tmp_path) -> Sandbox:
    # each clone names itself (comm) so the host can find it, and notes it started
    work = (
        "import ctypes, os, time\n"
        f"ctypes.CDLL(None).prctl(15, {_comm(tmp_path).encode()!r}, 0, 0, 0)\n"
        f"open({str(tmp_path)!r} + '/' + str(CLONE_ID), 'w').close()\n"
        "if CLONE_ID > 0:\n    time.sleep(30)\n"
        "print(CLONE_ID)\n"
    )
    return Sandbox(fs_readable=SYS_RO, fs_writable=[str(tmp_path)], work_fn=work)


def _clone_pids(tmp_path) -> list[int]:
    """The host pids of the clones that started (their comm)."""
    want, out = _comm(tmp_path), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() == want:
                        out.append(int(d))
            except OSError:
                pass
    return out


def _started(tmp_path) -> int:
    return len(os.listdir(tmp_path))


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
        except OSError:
            pass
    return out


def _wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    end = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < end:
        time.sleep(0.02)
    return _alive(pids)


def test_fork_iterates_as_clones_finish_and_break_kills_the_rest(tmp_path) -> None:
    with _forker(tmp_path) as mapper:
        clones = mapper.fork(4, parallel=4)
        assert clones.done <= 1 and clones.n == 4  # the first batch may be in already
        for c in clones:
            assert c.id == 0 and c.stdout == b"0\n"
            assert clones.done >= 1
            end = time.monotonic() + 10
            while _started(tmp_path) < 2 and time.monotonic() < end:
                time.sleep(0.02)
            pids = _clone_pids(tmp_path)
            assert pids, "no sleeping clone runs"
            break
        assert _wait_gone(pids) == [], "clones outlived the loop left early"
        assert clones.done == 1


def test_async_for_and_cancel_kill_the_remaining_clones(tmp_path) -> None:
    async def main() -> None:
        with _forker(tmp_path) as mapper:
            got = []

            async def consume() -> None:
                async for c in mapper.afork(4, parallel=4):
                    got.append(c.id)

            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            tk = asyncio.create_task(ticker())
            task = asyncio.create_task(consume())
            end = time.monotonic() + 20
            while not got and time.monotonic() < end:
                await asyncio.sleep(0.02)
            assert got == [0]
            while _started(tmp_path) < 2 and time.monotonic() < end:
                await asyncio.sleep(0.02)
            pids = _clone_pids(tmp_path)
            assert pids, "no sleeping clone runs"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            tk.cancel()
            assert ticks > 2  # the loop kept running while clones ran (10 ms ticks)
            assert _wait_gone(pids) == [], "clones outlived the cancelled task"

        # async with: breaking out is closed deterministically
        for f in os.listdir(tmp_path):
            os.unlink(os.path.join(tmp_path, f))
        with _forker(tmp_path) as mapper:
            async with mapper.afork(3, parallel=3) as clones:
                async for _c in clones:
                    end = time.monotonic() + 10
                    while _started(tmp_path) < 2 and time.monotonic() < end:
                        await asyncio.sleep(0.02)
                    pids = _clone_pids(tmp_path)
                    assert pids
                    break
            assert _wait_gone(pids) == []

    import asyncio

    asyncio.run(main())


# -- checkpoints: application state, persisted; restore only under the same policy --

CP_PROG = """import os, socket, sys, time
if "SANDTRAP_CHECKPOINT_FD" in os.environ:
    n = int(os.environ["SANDTRAP_CHECKPOINT_SIZE"])
    print("restored:" + os.read(int(os.environ["SANDTRAP_CHECKPOINT_FD"]), n).decode())
    sys.exit(0)
a, b = socket.socketpair()
print("up", flush=True)
time.sleep(30)
"""


def test_checkpoint_save_load_restore(sb: Sandbox, tmp_path) -> None:
    from sandtrap import PIPED, Checkpoint, PolicyError

    p = sb.spawn(["/usr/bin/python3", "-c", CP_PROG], stdout=PIPED)
    assert p.stdout.readline() == b"up\n"
    state = {"step": 7}
    import json

    cp = sb.checkpoint(save_fn=lambda: json.dumps(state).encode())
    assert cp.app_state == b'{"step": 7}' and cp.argv[0] == "/usr/bin/python3"
    whats = " ".join(n["what"] for n in cp.not_captured)
    assert "process images" in whats and "2 socket fd(s)" in whats and "pipe fd(s)" in whats
    assert p.poll() is None  # it runs on
    store = tmp_path / "store"
    path = cp.save("step7", store=store)
    assert sorted(os.listdir(path)) == ["app_state.bin", "checkpoint.json"]
    with pytest.raises(FileExistsError):
        cp.save("step7", store=store)
    assert Checkpoint.list(store=store) == ["step7"]
    with pytest.raises(ValueError):
        Checkpoint.load("../x", store=store)
    sb.kill()
    sb.wait()

    got = []
    cp2 = Checkpoint.load("step7", store=store, restore_fn=got.append)
    assert got == [b'{"step": 7}'] and cp2.name == "step7"
    seen = []
    q = sb.restore(cp2, stdout=CAPTURE, restore_fn=seen.append)
    assert seen == [b'{"step": 7}'] and sb.pid == q.pid
    assert q.wait().stdout == b'restored:{"step": 7}\n'

    # fail closed: another policy; a changed state file
    with Sandbox(fs_readable=SYS_RO + ["/etc"]) as other, pytest.raises(PolicyError, match="another policy"):
        other.restore(cp2)
    (path / "app_state.bin").write_bytes(b'{"step": 8}')
    with pytest.raises(InvalidRequest, match="sha256"):
        sb.restore(path)
    Checkpoint.delete("step7", store=store)
    assert Checkpoint.list(store=store) == []


def test_cancelling_areduce_kills_the_reducer():
    """A reducer started by ``areduce`` dies with the task that awaited it (and the
    same reducer without cancelling runs to its end: the control)."""
    import asyncio

    from conftest import processes_with_cmdline, unique_sleep, wait_no_survivor

    arg, cmdline = unique_sleep()
    reducer = Sandbox(fs_readable=SYS_RO)
    script = f"cat >/dev/null; sleep {arg} & wait"

    async def main() -> None:
        task = asyncio.create_task(reducer.areduce(["/bin/sh", "-c", script], [b"a", b"b"]))
        end = time.monotonic() + 20
        while not processes_with_cmdline(cmdline) and time.monotonic() < end:
            await asyncio.sleep(0.02)
        assert processes_with_cmdline(cmdline), "the reducer's sleep did not start"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancelled areduce returned")

    asyncio.run(main())
    assert wait_no_survivor(cmdline) == []
    r = asyncio.run(reducer.areduce(["/bin/cat"], [b"x", b"y"]))
    assert r.success and r.stdout == b"xy"
    reducer.close()
