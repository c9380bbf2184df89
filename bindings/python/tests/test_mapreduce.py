"""COW-fork map-reduce: the seed page's example and the properties issue 5 names."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from sandtrap import PolicyError, Sandbox, SpawnFailed

HERE = str(Path(__file__).resolve().parent)
SYS = ["/usr", "/lib", "/bin"]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "numbers.txt").write_text(" ".join(str(i) for i in range(100)))
    return d


def mapper(data_dir: Path, **kw) -> Sandbox:
    import fork_helpers  # imported from this directory by the template too

    return Sandbox(
        fs_readable=SYS + [HERE, str(data_dir)],
        env={"DATA_DIR": str(data_dir)},
        init_fn=kw.pop("init_fn", fork_helpers.init),
        work_fn=kw.pop("work_fn", fork_helpers.work),
        **kw,
    )


def test_seed_example(data_dir: Path) -> None:
    clones = mapper(data_dir).fork(4)
    reducer = Sandbox(fs_readable=SYS)
    result = reducer.reduce(["python3", "-c", "import sys; print(sum(int(l) for l in sys.stdin))"], clones)
    assert result.success, result.stderr
    assert result.stdout == b"4950\n"


def test_clones_have_ids_and_their_own_stdout_in_order(data_dir: Path) -> None:
    import fork_helpers

    res = mapper(data_dir, work_fn=fork_helpers.misbehave).fork(6, timeout=2).results()
    assert [c.id for c in res] == list(range(6))
    assert res[0].stdout == b"ok 0 0\n" and res[0].success
    assert res[1].exit_code == 1 and b"clone 1 fails" in res[1].stderr
    assert res[2].signal == 9 and res[2].exit_code is None
    assert res[3].timed_out and not res[3].success
    assert res[4].stdout == b"ok 4 4\n" and res[5].stdout == b"ok 5 5\n"


def test_clones_inherit_the_confinement(data_dir: Path) -> None:
    import fork_helpers

    res = mapper(data_dir, work_fn=fork_helpers.escape).fork(2).results()
    assert [c.stdout for c in res] == [b"EACCES\n", b"EACCES\n"]


def test_reducer_cannot_read_the_data(data_dir: Path) -> None:
    reducer = Sandbox(fs_readable=SYS)
    r = reducer.reduce(["cat", str(data_dir / "numbers.txt")], mapper(data_dir).fork(1))
    assert not r.success and b"Permission denied" in r.stderr


def test_big_outputs_do_not_deadlock(data_dir: Path) -> None:
    import fork_helpers

    res = mapper(data_dir, work_fn=fork_helpers.flood, max_output="16M").fork(3).results()
    assert [len(c.stdout) for c in res] == [10 << 20] * 3


def test_many_clones_bounded_fds_and_progress(data_dir: Path) -> None:
    import fork_helpers

    before = len(os.listdir("/proc/self/fd"))
    clones = mapper(data_dir, work_fn=fork_helpers.trivial).fork(300)
    seen = []
    for c in clones:  # as they finish
        seen.append(c.id)
    assert sorted(seen) == list(range(300))
    assert [c.stdout for c in clones.results()][:3] == [b"0\n", b"1\n", b"2\n"]
    assert len(os.listdir("/proc/self/fd")) <= before + 2


def test_source_strings(data_dir: Path) -> None:
    sb = Sandbox(fs_readable=SYS, init_fn="base = 40", work_fn="print(base + CLONE_ID)")
    assert [c.stdout for c in sb.fork(3).results()] == [b"40\n", b"41\n", b"42\n"]


def test_lambdas_and_closures_are_refused_at_construction() -> None:
    def local(cid):
        return cid

    with pytest.raises(PolicyError) as e:
        Sandbox(fs_readable=SYS, init_fn=lambda: None, work_fn=local)
    assert "init_fn" in str(e.value) and "work_fn" in str(e.value) and "closure" in str(e.value)


def test_the_engine_grants_what_the_template_imports(data_dir: Path) -> None:
    # the module of a function passed by reference, the interpreter, the guest
    # runtime: granted by the engine (not by the user), and reported
    import fork_helpers

    clones = Sandbox(fs_readable=SYS, work_fn=fork_helpers.trivial).fork(2)
    assert [c.stdout for c in clones.results()] == [b"0\n", b"1\n"]
    py = clones.isolation["python"]
    assert py["interpreter"] == sys.executable
    granted = {g["path"]: g["why"] for g in py["granted"]}
    assert "function" in granted[HERE], granted
    assert any("guest runtime" in why for why in granted.values()), granted
    assert clones.isolation["landlock"]["abi"] >= 1


def test_a_failing_init_names_what_failed() -> None:
    import fork_fail_import

    with pytest.raises(SpawnFailed) as e:
        Sandbox(fs_readable=SYS, init_fn="raise ValueError('boom')", work_fn="print(1)").fork(1)
    assert str(e.value).startswith("init_fn failed in the template: ValueError: boom"), e.value
    # only work_fn given: its module fails to import in the template
    with pytest.raises(SpawnFailed) as e:
        Sandbox(fs_readable=SYS, env={"FAIL_IMPORT": "1"}, work_fn=fork_fail_import.work).fork(1)
    assert str(e.value).startswith("work_fn could not be loaded in the template: ImportError: refused"), e.value
    assert "init_fn" not in str(e.value)


VENV_SCRIPT = """\
import json
import sys

import sandtrap  # at the top, as scripts do: loaded again in the template (__mp_main__)
from sandtrap import Sandbox


def init():
    global data
    data = list(range(100))


def work(cid):
    print(sum(data[cid::4]))


if __name__ == "__main__":
    mapper = Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"], init_fn=init, work_fn=work)
    clones = mapper.fork(4)
    res = clones.results()
    print(json.dumps({"out": [c.stdout.decode() for c in res], "err": [c.stderr.decode() for c in res],
                      "python": clones.isolation["python"]}))
"""


def test_map_reduce_from_a_virtual_environment(tmp_path: Path) -> None:
    # issue 12: a venv (pyvenv.cfg, its site-packages) and a script importing sandtrap at
    # its top, with the seed's fs_readable: the engine grants the venv and the base
    # interpreter's prefix, and says so
    import shutil
    import subprocess

    import msgpack

    import sandtrap
    import sandtrap_guest
    from sandtrap import _native

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    for pkg in (sandtrap, sandtrap_guest, msgpack):  # "installed" in the venv
        src = Path(pkg.__file__).resolve().parent
        shutil.copytree(src, site / src.name, ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    script = tmp_path / "job.py"
    script.write_text(VENV_SCRIPT)
    _native.lib()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["SANDTRAP_LIB"] = str(_native.lib_path())
    p = subprocess.run(
        [str(venv / "bin" / "python"), str(script)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["out"] == ["1200\n", "1225\n", "1250\n", "1275\n"], out
    granted = {g["path"]: g["why"] for g in out["python"]["granted"]}
    assert str(venv) in granted and "pyvenv.cfg" in granted[str(venv)], granted
    assert str(tmp_path) in granted, granted  # the script's directory (__main__)


def test_clone_exit_status_stdin_and_environment() -> None:
    work = (
        "import os, sys\n"
        "assert sys.stdin.read() == ''\n"  # not the template's frame channel
        "print(os.environ['CLONE_ID'])\n"
        "if CLONE_ID == 1: sys.exit()\n"
        "if CLONE_ID == 2: sys.exit(4)\n"
        "if CLONE_ID == 3: sys.exit('bye')\n"
    )
    res = Sandbox(fs_readable=SYS, work_fn=work).fork(4).results()
    assert [c.stdout for c in res] == [b"0\n", b"1\n", b"2\n", b"3\n"]
    assert [c.exit_code for c in res] == [0, 0, 4, 1]
    assert res[3].stderr == b"bye\n" and res[0].stderr == b""


def test_clones_come_as_they_finish() -> None:
    sb = Sandbox(fs_readable=SYS, work_fn="import time\nif CLONE_ID == 0: time.sleep(3)\nprint(CLONE_ID)")
    t0 = time.monotonic()
    clones = sb.fork(20)
    it = iter(clones)
    first = next(it)
    assert first.id != 0 and time.monotonic() - t0 < 2.5
    rest = list(it)
    assert sorted([first.id] + [c.id for c in rest]) == list(range(20))
    assert clones.results()[0].stdout == b"0\n"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: one forker")
def test_clones_are_forked_on_every_cpu() -> None:
    # one forker per CPU, each an os.fork() of the template, forks its share of the clones
    res = Sandbox(fs_readable=SYS, work_fn="import os, time\ntime.sleep(0.05)\nprint(os.getppid())").fork(40).results()
    assert all(c.success for c in res)
    assert len({c.stdout for c in res}) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("limit", [2, 3, 5])
def test_fork_within_a_process_limit(limit: int) -> None:
    # the template, its forkers and the clones all count; with room for one process
    # besides the template, the template forks the clones itself
    sb = Sandbox(fs_readable=SYS, max_processes=limit, work_fn="print(CLONE_ID)")
    res = sb.fork(12).results()
    assert [c.stdout for c in res] == [b"%d\n" % i for i in range(12)], [c.stderr for c in res if not c.success]


def test_cancel_stops_forking(tmp_path: Path) -> None:
    import threading

    work = f"import time\nopen({str(tmp_path)!r} + '/' + str(CLONE_ID), 'w').close()\ntime.sleep(0.1)\nprint(CLONE_ID)"
    sb = Sandbox(fs_readable=SYS, fs_writable=[str(tmp_path)], work_fn=work)
    t0 = time.monotonic()
    clones = sb.fork(1000, parallel=2)
    threading.Timer(0.5, clones.cancel).start()
    res = clones.results()
    assert clones.cancelled and time.monotonic() - t0 < 5
    started = len(os.listdir(tmp_path))
    time.sleep(1)
    assert len(os.listdir(tmp_path)) == started and started < 100, started  # nothing went on
    assert len(res) <= started and all(c.success for c in res)


def test_closing_clones_early_stops_the_template() -> None:
    sb = Sandbox(fs_readable=SYS, work_fn="import time\ntime.sleep(0.05)\nprint(CLONE_ID)")
    clones = sb.fork(200, parallel=2)
    first = next(iter(clones))
    clones.close()  # the engine kills the template: no batch after the one taken
    assert first.success and clones.cancelled and len(clones.results()) < 10
    assert sb.run(["true"]) is not None  # the mapper is still usable
