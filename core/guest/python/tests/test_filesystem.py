"""open() under filesystem_root."""

import os

import pytest

from sandtrap_guest import GuestSession, Policy


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    r.mkdir()
    (r / "data.txt").write_text("hello")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", r / "link")
    os.symlink(tmp_path, r / "dirlink")
    return r


def test_open_inside_root(root):
    sess = GuestSession(Policy(), filesystem_root=root)
    r = sess.exec(
        "with open('data.txt') as f:\n    a = f.read()\nwith open('/out.txt', 'w') as f:\n"
        "    f.write('w')\nb = open('/data.txt').read()\nimport_ok = True"
    )
    assert r.error is None, r.traceback
    assert r.namespace["a"] == "hello" and r.namespace["b"] == "hello"
    assert (root / "out.txt").read_text() == "w"


@pytest.mark.parametrize(
    "path", ["../secret.txt", "/../secret.txt", "sub/../../secret.txt", "link", "dirlink/secret.txt"]
)
def test_open_refuses_escape(root, path):
    r = GuestSession(Policy(), filesystem_root=root).exec(f"open({path!r}).read()")
    assert type(r.error) is PermissionError, (path, r.error)


def test_open_refuses_fds_and_openers(root):
    sess = GuestSession(Policy(), filesystem_root=root)
    assert type(sess.exec("open(0)").error) is PermissionError
    assert type(sess.exec("open('data.txt', opener=print)").error) is PermissionError


def test_no_open_without_root():
    assert type(GuestSession(Policy()).exec("open('x')").error) is NameError


def test_bad_root():
    with pytest.raises(ValueError):
        GuestSession(Policy(), filesystem_root="/definitely/not/here")
