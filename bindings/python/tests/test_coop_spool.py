"""sandbox(..., spool=): a result's large values as files of msgpack data in a private
directory, read when asked for (the seed's spool=), at every level; and the attacks of
a worker that lies about them (spool_worker.py): it cannot make the host read anything
outside the spool directory — not by a path in a name (the engine ends it), not by a
link, a FIFO, a directory, a hard link, a swapped directory or a false size (the host
refuses the file when the value is asked for)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

import sandtrap._coop as coop
from sandtrap import InvalidArgument, IsolatedFS, Policy, sandbox
from sandtrap._coop import WorkerCrashed
from sandtrap._coop_spool import INLINE_LIMIT, SpoolClosedError, SpooledNamespace
from sandtrap_guest import mp

HERE = str(Path(__file__).resolve().parent)
LEVELS = ["none", "process", "kernel"]
WORKER_LEVELS = ["process", "kernel"]
SECRET = mp.packb("SECRET")  # 7 bytes: a value the host must never read back
SECRET_NAME = "cd" * 16 + ".msgpack"  # a name of the spool's shape, outside the spool

CODE = """\
big = b'x' * 100_000
text = 'y' * 70_000
small = [1, (2, 3)]
class C:
    pass
obj = C()
"""


def spooled_files(sb) -> list[str]:
    return sorted(os.listdir(sb._spool.path))


@pytest.mark.parametrize("level", LEVELS)
def test_large_values_are_spooled_and_read_lazily(level, tmp_path):
    base = tmp_path / "spools"
    base.mkdir()
    with sandbox(Policy(timeout=10), isolation=level, spool=str(base)) as sb:
        spool = sb._spool.path
        assert os.path.dirname(spool) == str(base.resolve())
        assert stat.S_IMODE(os.stat(spool).st_mode) == 0o700
        r = sb.exec(CODE)
        assert r.error is None, r.error
        ns = r.namespace
        assert isinstance(ns, SpooledNamespace)
        assert sorted(ns) == ["C", "big", "obj", "small", "text"] and "big" in ns and len(ns) == 5
        assert sorted(ns.spooled) == ["big", "text"]
        # sizes before anything is read: the values' msgpack encodings
        assert r.sizes["big"] == len(mp.packb(b"x" * 100_000)) and r.sizes["text"] == 70_005
        assert r.sizes["small"] == len(mp.packb([1, [2, 3]])) <= INLINE_LIMIT
        assert len(spooled_files(sb)) == 2  # one file per large value, nothing read yet
        assert ns["big"] == b"x" * 100_000
        assert len(spooled_files(sb)) == 1  # read once: its file is gone, the value kept
        assert ns["big"] == b"x" * 100_000 and ns.get("text") == "y" * 70_000
        assert spooled_files(sb) == []
        # the same data at every level (msgpack, never pickle): a tuple as a list,
        # an instance of a sandbox class as a placeholder
        assert ns["small"] == [1, [2, 3]]
        assert ns["obj"]["__st_placeholder__"] == "C"
        # each result spools its namespace: the names still bound are written again
        r2 = sb.exec("again = 'z' * 80_000")
        assert sorted(r2.namespace.spooled) == ["again", "big", "text"] and len(spooled_files(sb)) == 3
        assert r2.namespace["text"] == "y" * 70_000
    # closing removes the directory; a value never read is gone with it
    assert not os.path.exists(spool)
    with pytest.raises(SpoolClosedError, match="never read"):
        r2.namespace["again"]


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_the_worker_writes_the_files_and_only_there(level, tmp_path):
    p = Policy(timeout=10)
    p.module(os)
    with sandbox(p, isolation=level, spool=True, filesystem=IsolatedFS(tmp_path / "root")) as sb:
        r = sb.exec("import os\npid = os.getpid()\nbig = 'q' * 100_000")
        assert r.error is None, r.error
        assert r.namespace["pid"] != os.getpid()
        (f,) = spooled_files(sb)
        assert os.stat(os.path.join(sb._spool.path, f)).st_size == r.sizes["big"]
        if level == "kernel":
            granted = [g["path"] for g in r.isolation["python"]["granted"]]
            assert sb._spool.path in granted
            rules = {x["path"]: x["access"] for x in r.isolation["landlock"]["fs_rules"]}
            assert rules.get(sb._spool.path) == "rw"
        assert r.namespace["big"] == "q" * 100_000


def test_spool_arguments_are_checked(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(InvalidArgument, match="inside the IsolatedFS root"):
        sandbox(Policy(), isolation="process", filesystem=IsolatedFS(root), spool=str(root))
    with pytest.raises(InvalidArgument, match="not a directory"):
        sandbox(Policy(), spool=str(tmp_path / "missing"))
    with pytest.raises(InvalidArgument, match="spool must be"):
        sandbox(Policy(), spool=3)
    # spool=False (the default): the namespace is a dict, as before
    with sandbox(Policy(), isolation="process") as sb:
        r = sb.exec("big = 'x' * 100_000")
    assert type(r.namespace) is dict and len(r.namespace["big"]) == 100_000


# ------------------------------------------------------------------ attacks
@pytest.fixture
def evil(monkeypatch):
    monkeypatch.setattr(coop, "_WORKER_MODULE", "spool_worker")
    monkeypatch.setattr(coop, "_WORKER_PATH", [HERE])


@pytest.fixture
def secret(tmp_path):
    d = tmp_path / "elsewhere"
    d.mkdir()
    p = d / SECRET_NAME
    p.write_bytes(SECRET)
    return p


def attack(level, tmp_path, code):
    sb = sandbox(Policy(timeout=5), isolation=level, spool=True, filesystem=IsolatedFS(tmp_path / "root"))
    assert sb.exec("ok\nx = 1").error is None
    return sb, sb.exec(code)


@pytest.mark.parametrize("level", WORKER_LEVELS)
@pytest.mark.parametrize("name", ["../" + SECRET_NAME, "/etc/passwd", "x/" + SECRET_NAME, "cd" * 16 + ".pkl", ""])
def test_a_name_that_is_not_a_spool_file_ends_the_worker(evil, level, tmp_path, name):
    sb, r = attack(level, tmp_path, f"name {name}")
    with sb:
        assert isinstance(r.error, WorkerCrashed), r.error
        assert "not a spool file name" in str(r.error) or "must be" in str(r.error), r.error
        assert dict(r.namespace) == {}
        r = sb.exec("ok\ny = 2")
        assert r.error is None and r.restarted and dict(r.namespace) == {"y": 2}


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_a_symlink_to_a_file_outside_is_not_followed(evil, level, tmp_path, secret):
    sb, r = attack(level, tmp_path, f"symlink {secret}")
    with sb:
        assert r.error is None and r.sizes == {"v": 7}
        with pytest.raises(ValueError, match="not one the writer made"):
            r.namespace["v"]
    assert secret.read_bytes() == SECRET


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_a_fifo_or_a_directory_is_refused_without_blocking(evil, level, tmp_path):
    for mode in ("fifo", "subdir"):
        sb, r = attack(level, tmp_path, mode)
        with sb:
            t = time.monotonic()
            with pytest.raises(ValueError, match="not a regular file"):
                r.namespace["v"]
            assert time.monotonic() - t < 1.0


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_a_false_size_is_refused(evil, level, tmp_path):
    sb, r = attack(level, tmp_path, "size")
    with sb, pytest.raises(ValueError, match="5 were announced"):
        r.namespace["v"]


def test_a_hard_link_to_a_file_outside_is_refused(evil, tmp_path, secret):
    # at "process" the worker is unconfined and can link a file of this user's (at
    # "kernel" Landlock refuses to link a file from outside the writable directories)
    sb, r = attack("process", tmp_path, f"hardlink {secret}")
    with sb, pytest.raises(ValueError, match="2 links"):
        r.namespace["v"]


def test_a_swapped_spool_directory_changes_nothing(evil, tmp_path, secret):
    # the worker moves the directory away and puts a link to another in its place:
    # the host opens names below the directory it made (a descriptor), never the path
    sb, r = attack("process", tmp_path, f"swap {secret}")
    with sb:
        assert os.path.islink(sb._spool.path)
        with pytest.raises(ValueError, match="is gone"):
            r.namespace["v"]


@pytest.mark.parametrize("level", WORKER_LEVELS)
def test_spooled_values_from_a_sandbox_that_spools_nothing_end_the_worker(evil, level, tmp_path):
    with sandbox(Policy(timeout=5), isolation=level, filesystem=IsolatedFS(tmp_path / "root")) as sb:
        r = sb.exec("unasked")
    assert isinstance(r.error, WorkerCrashed) and "spools nothing" in str(r.error), r.error
