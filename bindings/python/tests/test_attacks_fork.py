"""Attacks on the COW-fork map-reduce (issue 10, class 5 and the fork timeout of class 8).

A clone is code the host does not trust: it must not be able to reach the channel the
host reads (the template's frames), its siblings' output, their memory, or the template
itself — even with /proc readable — and the host's reduce must see only genuine output.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from sandtrap import Sandbox, SandtrapError

SYS = ["/usr", "/lib", "/bin"]

# Clone 0 attacks while its siblings are alive; the others print a genuine line.
# It attacks the processes whose environment carries this test's tag (its template,
# forkers and siblings) and those whose environment it cannot read at all; it leaves
# alone a process it can read that is not of this sandbox.
ATTACK = r"""
import errno, json, os, signal, time

def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))

if CLONE_ID == 0:
    time.sleep(0.5)
    from sandtrap_guest import mp
    items = [{"id": i, "stdout": b"FORGED\n", "stderr": b"", "exit_code": 0, "signal": None,
              "timed_out": False, "stdout_truncated": False} for i in range(N)]
    body = mp.packb({"op": "clones", "items": items, "done": True})
    frame = len(body).to_bytes(4, "big") + body
    me = os.readlink("/proc/self")
    tag = ("ATTACK_TAG=" + os.environ["ATTACK_TAG"]).encode()
    peers, wrote, errs = [], 0, set()
    for e in os.listdir("/proc"):
        if not e.isdigit() or e == me:
            continue
        try:
            if tag not in open("/proc/%s/environ" % e, "rb").read().split(b"\0"):
                continue
        except OSError as x:
            errs.add(name(x))
        peers.append(e)
        try:
            fds = os.listdir("/proc/%s/fd" % e)
        except OSError as x:
            errs.add(name(x))
            continue
        for fd in fds:
            p = "/proc/%s/fd/%s" % (e, fd)
            try:
                if not os.readlink(p).startswith("pipe:"):
                    continue
                w = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as x:
                errs.add(name(x))
                continue
            try:
                os.write(w, frame)
                wrote += 1
            except OSError as x:
                errs.add(name(x))
            finally:
                os.close(w)
    mem = set()
    for e in peers:
        try:
            os.close(os.open("/proc/%s/mem" % e, os.O_RDONLY))
            mem.add("OK")
        except OSError as x:
            mem.add(name(x))
    kill = {}
    for what, pid in (("template", 2), ("parent", os.getppid())):
        try:
            os.kill(pid, signal.SIGCONT)
            kill[what] = "OK"
        except OSError as x:
            kill[what] = name(x)
    print(json.dumps({"peers": len(peers), "wrote": wrote, "errs": sorted(errs), "mem": sorted(mem), "kill": kill}))
else:
    time.sleep(1.5)
    print("genuine", CLONE_ID)
"""


def test_a_clone_cannot_forge_results_or_touch_its_peers_through_proc() -> None:
    n = 4
    tag = uuid.uuid4().hex
    sb = Sandbox(fs_readable=SYS + ["/proc"], env={"ATTACK_TAG": tag}, work_fn=f"N = {n}\n" + ATTACK)
    try:
        res = sb.fork(n, timeout=20).results()
    except SandtrapError as e:
        pytest.fail(f"a clone's frame reached the channel between the host and the template: {e}")
    outs = [c.stdout for c in res]
    assert [c.id for c in res] == list(range(n)), outs
    assert all(b"FORGED" not in o for o in outs), f"a forged result reached the host: {outs}"
    assert outs[1:] == [b"genuine %d\n" % i for i in range(1, n)], outs
    report = json.loads(res[0].stdout)
    assert report["wrote"] == 0, (
        f"clone 0 wrote into {report['wrote']} pipes of its template, forkers or siblings: {report}"
    )
    assert set(report["mem"]) <= {"EACCES", "ENOENT"}, f"clone 0 opened a peer's /proc/<pid>/mem: {report}"
    assert report["kill"]["template"] in ("EPERM", "ESRCH"), f"clone 0 signalled the template: {report}"
    assert report["kill"]["parent"] in ("EPERM", "ESRCH"), f"clone 0 signalled the process that forked it: {report}"


def test_reduce_sees_only_genuine_output() -> None:
    n = 4
    tag = uuid.uuid4().hex
    mapper = Sandbox(
        fs_readable=SYS + ["/proc"],
        env={"ATTACK_TAG": tag},
        work_fn=f"N = {n}\n" + ATTACK.replace("print(json.dumps(", "0 and print(json.dumps("),
    )
    reducer = Sandbox(fs_readable=SYS)
    try:
        r = reducer.reduce(["cat"], mapper.fork(n, timeout=20))
    except SandtrapError as e:
        pytest.fail(f"a clone's frame reached the channel between the host and the template: {e}")
    assert r.success, r.stderr
    assert b"FORGED" not in r.stdout, f"the reducer got a forged result: {r.stdout!r}"
    assert sorted(r.stdout.splitlines()) == [b"genuine %d" % i for i in range(1, n)], r.stdout


def test_the_sandbox_timeout_holds_for_clones() -> None:
    # Sandbox(timeout=2): the policy's timeout is every clone's, as it is every run's
    sb = Sandbox(fs_readable=SYS, timeout=2, work_fn="import time\ntime.sleep(8)\nprint('late', CLONE_ID)")
    t0 = time.monotonic()
    res = sb.fork(2).results()
    wall = time.monotonic() - t0
    assert [c.timed_out for c in res] == [True, True], [(c.stdout, c.exit_code, c.timed_out) for c in res]
    assert [c.success for c in res] == [False, False]
    assert all(b"late" not in c.stdout for c in res)
    # the clones sleep 8 s: ending well before that shows the timeout held (with
    # room for the template's start on a loaded machine)
    assert wall <= 7, f"fork(2) under timeout=2 took {wall:.1f} s"


# Clone 0 leaves a child behind that closed its output (so clone 0's pipes end) and
# keeps writing a heartbeat; clone 1 runs on meanwhile, so the template lives.
LEFTOVER = """
import os, time
if CLONE_ID == 1:
    time.sleep(5)
    raise SystemExit
if os.fork() == 0:
    os.closerange(0, 3)
    while True:
        with open(BEAT, "a") as f:
            f.write(".")
        time.sleep(0.02)
time.sleep(0.2)
"""


def test_a_clones_leftovers_die_with_it(tmp_path) -> None:
    tmp_path.chmod(0o777)
    beat = tmp_path / "beat"
    work = f"BEAT = {str(beat)!r}\n" + LEFTOVER
    with (
        Sandbox(fs_readable=SYS, fs_writable=[str(tmp_path)], timeout=30, work_fn=work) as sb,
        sb.fork(2, parallel=1) as clones,
    ):
        it = iter(clones)  # kept: dropping it would stop the fork (and kill everything)
        first = next(it)
        assert first.id == 0 and first.success, first.stderr
        size = beat.stat().st_size
        time.sleep(0.5)
        grown = beat.stat().st_size - size
        assert grown == 0, f"clone 0's child lived on after its result: {grown} heartbeats in 0.5 s"
        assert clones.done == 1  # clone 1 still runs: the template is alive
