"""Thread safety: the GIL is released during engine calls, nothing leaks."""

from __future__ import annotations

import gc
import threading
import time

from conftest import SYS_RO, children_of_self, open_fds

import sandtrap
from sandtrap import Sandbox


def _warm() -> None:
    # the engine opens a few fds of its own once (epoll, /dev/null, cgroup dirs…)
    with Sandbox(fs_readable=SYS_RO) as sb:
        sb.run(["/bin/true"])
        (sb.cmd(["/bin/true"]) | sb.cmd(["/bin/true"])).run()
    gc.collect()


def test_64_threads_x_20_runs_no_leaks() -> None:
    _warm()
    fds_before = open_fds()
    kids_before = set(children_of_self())
    threads_before = threading.active_count()

    sb = Sandbox(
        fs_readable=SYS_RO, max_processes=0
    )  # 64 runs at once: more tasks than the default limit, which they share
    errors: list[BaseException] = []
    results: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(64)

    def worker() -> None:
        try:
            start.wait()
            for _ in range(20):
                r = sb.run(["/bin/true"])
                with lock:
                    results.append(r.success)
        except BaseException as e:  # pragma: no cover - reported below
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert len(results) == 64 * 20 and all(results)
    sb.close()
    gc.collect()

    assert open_fds() - fds_before == set(), "file descriptors leaked"
    assert set(children_of_self()) - kids_before == set(), "child processes left behind"
    assert threading.active_count() <= threads_before + 2  # at most our executor threads


def test_gil_released_64_concurrent_sleeps() -> None:
    """64 runs of `sleep 1` on 64 threads overlap: far less than 64 s."""
    sb = Sandbox(
        fs_readable=SYS_RO, max_processes=0
    )  # 64 runs at once: more tasks than the default limit, which they share
    ok: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        r = sb.run(["sleep", "1"])
        with lock:
            ok.append(r.success)

    ticks = 0
    threads = [threading.Thread(target=worker) for _ in range(64)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    # the main thread keeps running Python meanwhile: the GIL is free
    while any(t.is_alive() for t in threads):
        ticks += 1
        time.sleep(0.01)
    wall = time.monotonic() - t0
    assert len(ok) == 64 and all(ok)
    assert wall < 12, f"64 x sleep 1 took {wall:.1f}s: runs did not overlap"
    assert ticks > 50
    sb.close()


def test_many_sandboxes_across_threads() -> None:
    _warm()
    fds_before = open_fds()
    errs: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(5):
                with Sandbox(fs_readable=SYS_RO, env={"I": str(i)}) as sb:
                    r = sb.run(["sh", "-c", "echo $I"])
                    assert r.stdout == f"{i}\n".encode()
                    other = Sandbox(fs_readable=SYS_RO)
                    p = (sb.cmd(["sh", "-c", "echo $I"]) | other.cmd(["cat"])).run()
                    assert p.stdout == f"{i}\n".encode()
                    other.close()
        except BaseException as e:
            errs.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errs, errs[:3]
    gc.collect()
    assert open_fds() - fds_before == set()


def test_close_races_with_runs() -> None:
    """close() while other threads run: runs in flight finish, later ones raise
    SandboxClosed, nothing crashes."""
    for _ in range(5):
        sb = Sandbox(fs_readable=SYS_RO)
        outcomes: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            for _ in range(10):
                try:
                    r = sb.run(["/bin/true"])
                    out = "ok" if r.success else f"fail {r.error}"
                except sandtrap.SandboxClosed:
                    out = "closed"
                with lock:
                    outcomes.append(out)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.02)
        sb.close()
        for t in threads:
            t.join(60)
        assert set(outcomes) <= {"ok", "closed"}, set(outcomes)
