"""VirtualFS backends and the host's side of fs host calls (vfs.serve)."""

import errno
import os

import pytest

from sandtrap_guest import GuestSession, Policy
from sandtrap_guest.vfs import MemoryBackend, VirtualFS, norm, serve


@pytest.mark.parametrize(
    "path, want",
    [("a/b", "/cwd/a/b"), ("/a/../../b", "/b"), ("../../..", "/"), ("/a/./b//c/", "/a/b/c"), (b"/x", "/x")],
)
def test_norm_stays_inside(path, want):
    assert norm(path, "/cwd") == want


def test_norm_refuses_bad_paths():
    with pytest.raises(ValueError):
        norm("/a\0b")
    with pytest.raises(TypeError):
        norm(3)
    with pytest.raises(OSError) as e:
        norm("/" + "a" * 5000)
    assert e.value.errno == errno.ENAMETOOLONG


@pytest.fixture(params=["memory", "directory"])
def fs(request, tmp_path):
    return VirtualFS() if request.param == "memory" else VirtualFS(directory=tmp_path / "d")


def test_backend_semantics(fs):
    b = fs.backend
    fs.write("/a/b/c.txt", "x")
    assert fs.isdir("/a") and fs.isdir("/a/b") and fs.isfile("/a/b/c.txt")
    assert b.stat("/a/b/c.txt")[:2] == ["file", 1] and b.stat("/nope") is None
    assert b.list("/a") == ["b"] and fs.list("/", recursive=True) == ["a", "a/b", "a/b/c.txt"]
    for op, args, err in [
        ("read", ["/nope"], FileNotFoundError),
        ("read", ["/a"], IsADirectoryError),
        ("list", ["/a/b/c.txt"], NotADirectoryError),
        ("mkdir", ["/a"], FileExistsError),
        ("rmdir", ["/a"], OSError),  # not empty
        ("remove", ["/a"], (IsADirectoryError, PermissionError, OSError)),
        ("write", ["/a", b"", False], IsADirectoryError),
        ("write", ["/none/x", b"", False], FileNotFoundError),
    ]:
        with pytest.raises(err):
            serve(b, op, args)
    serve(b, "write", ["/a/b/c.txt", b"y", True])
    assert fs.read("/a/b/c.txt") == b"xy"
    serve(b, "rename", ["/a/b/c.txt", "/moved"])
    assert fs.read("/moved") == b"xy" and not fs.exists("/a/b/c.txt")
    serve(b, "rmdir", ["/a/b"])
    assert fs.list("/a") == []


@pytest.mark.parametrize(
    "op, args, err",
    [
        ("chmod", ["/x"], ValueError),
        ("read", ["/x", "/y"], ValueError),
        ("read", [b"/x"], TypeError),
        ("write", ["/x", "str", False], TypeError),
        ("write", ["/x", b"", 1], TypeError),
        ("read", "/x", ValueError),
    ],
)
def test_serve_checks_what_the_worker_sends(op, args, err):
    with pytest.raises(err):
        serve(MemoryBackend(), op, args)


def test_serve_keeps_paths_inside(tmp_path):
    (tmp_path / "secret").write_text("s")
    fs = VirtualFS(directory=tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        serve(fs.backend, "read", ["/../secret"])
    os.symlink(tmp_path / "secret", tmp_path / "d" / "l")
    with pytest.raises(PermissionError):
        serve(fs.backend, "read", ["/l"])
    with pytest.raises(PermissionError):
        serve(fs.backend, "write", ["/l", b"x", False])
    assert (tmp_path / "secret").read_text() == "s"


def test_state_mapping_and_size_limit():
    state = {"/x": b"1"}
    fs = VirtualFS(state, max_size_mb=1 / 1024)  # 1 KiB
    fs.write("/y", b"2" * 1000)
    assert state == {"/x": b"1", "/y": b"2" * 1000}
    with pytest.raises(OSError) as e:
        fs.write("/z", b"3" * 100)
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(TypeError):
        VirtualFS({"/x": "not bytes"})


def test_files_left_open_are_written_back_at_the_end_of_the_exec():
    fs = VirtualFS()
    sess = GuestSession(Policy(), filesystem=fs)
    r = sess.exec("keep = open('/a.txt', 'w')\nkeep.write('kept')\nb = open('/b.bin', 'ab')\nb.write(b'1')")
    assert r.error is None, r.traceback
    assert fs.read("/a.txt") == b"kept" and fs.read("/b.bin") == b"1"
    r = sess.exec("keep.write('more')")  # closed at the end of the last exec
    assert type(r.error) is ValueError


def test_modes():
    fs = VirtualFS()
    fs.write("/f", "abc")
    sess = GuestSession(Policy(), filesystem=fs)
    r = sess.exec(
        "with open('/f', 'r+') as f:\n    head = f.read(1)\n    f.write('Z')\n"
        "with open('/f', 'a') as f:\n    f.write('!')\n"
        "try:\n    open('/f', 'x')\nexcept FileExistsError:\n    x = 'exists'\n"
        "with open('/g', 'x') as f:\n    f.write('new')\n"
        "try:\n    open('/f', 'rw')\nexcept ValueError:\n    bad = True\n"
    )
    assert r.error is None, r.traceback
    assert r.namespace["head"] == "a" and r.namespace["x"] == "exists" and r.namespace["bad"] is True
    assert fs.read("/f") == b"abcZ!" and fs.read("/g") == b"new"  # as with a real file (read-ahead)
