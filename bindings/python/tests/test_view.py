"""The copy-on-write workdir from Python: changes, dry runs, branch actions."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from conftest import SYS_RO

from sandtrap import BranchAction, Change, CommitResult, DryRunResult, InvalidRequest, PolicyError, Sandbox


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode() + oct(p.lstat().st_mode).encode())
        if p.is_symlink():
            h.update(str(p.readlink()).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def view_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one directory for the module: the broad-grant vectors carve every entry
    # beside the way down to their own temp directory (1024 rules at most)
    d = tmp_path_factory.mktemp("view")
    os.chmod(d, 0o755)
    return d


@pytest.fixture
def workdir(view_tmp: Path, request: pytest.FixtureRequest) -> Path:
    w = view_tmp / request.node.name
    (w / "dir").mkdir(parents=True)
    (w / "edit.txt").write_text("old\n")
    (w / "gone.txt").write_text("bye\n")
    (w / "dir" / "a").write_text("a\n")
    return w


SCRIPT = 'cd "$W" && echo new > added && echo more >> edit.txt && rm gone.txt && mv dir renamed'
WANT = [
    Change("A", "added"),
    Change("D", "dir"),
    Change("D", "dir/a"),
    Change("M", "edit.txt"),
    Change("D", "gone.txt"),
    Change("A", "renamed"),
    Change("A", "renamed/a"),
]


def test_dry_run_lists_changes_and_leaves_the_workdir_identical(workdir: Path) -> None:
    before = tree_hash(workdir)
    with Sandbox(fs_readable=SYS_RO, fs_writable=[workdir], workdir=workdir, env={"W": str(workdir)}) as sb:
        r = sb.dry_run(["sh", "-c", SCRIPT])
    assert isinstance(r, DryRunResult)
    assert r.success and r.exit_code == 0 and r.error is None, r
    assert r.changes == WANT
    assert r.result.branch == "aborted"
    assert tree_hash(workdir) == before


def test_commit_on_exit_by_default(workdir: Path) -> None:
    with Sandbox(fs_readable=SYS_RO, fs_writable=[workdir], workdir=workdir, env={"W": str(workdir)}) as sb:
        r = sb.run(["sh", "-c", SCRIPT])
    assert r.success and r.branch == "committed" and r.changes == WANT
    assert sorted(r.committed, key=lambda c: c.path) == WANT  # in the order applied: deletions first
    assert (workdir / "added").read_text() == "new\n"
    assert (workdir / "edit.txt").read_text() == "old\nmore\n"
    assert not (workdir / "gone.txt").exists() and (workdir / "renamed" / "a").exists()


def test_abort_on_error_by_default(workdir: Path) -> None:
    before = tree_hash(workdir)
    with Sandbox(fs_readable=SYS_RO, fs_writable=[workdir], workdir=workdir, env={"W": str(workdir)}) as sb:
        r = sb.run(["sh", "-c", SCRIPT + "; exit 1"])
    assert not r.success and r.branch == "aborted" and r.changes == WANT
    assert tree_hash(workdir) == before


def test_keep_then_commit_or_abort(workdir: Path) -> None:
    before = tree_hash(workdir)
    with Sandbox(
        fs_readable=SYS_RO,
        fs_writable=[workdir],
        workdir=workdir,
        env={"W": str(workdir)},
        on_exit=BranchAction.KEEP,
        on_error=BranchAction.KEEP,
    ) as sb:
        r = sb.run(["sh", "-c", SCRIPT])
        assert r.branch == "kept" and r.branch_id
        assert tree_hash(workdir) == before
        sb.abort(r)
        with pytest.raises(InvalidRequest):
            sb.commit(r)  # gone
        r2 = sb.run(["sh", "-c", SCRIPT + "; exit 2"])  # on_error keep
        assert r2.branch == "kept"
        c = sb.commit(r2)
        assert (
            isinstance(c, CommitResult)
            and c.success
            and sorted(c.committed, key=lambda c: c.path) == WANT
            and c.commit_refused == []
        )
    assert (workdir / "added").read_text() == "new\n"


def test_branch_actions_are_checked() -> None:
    with pytest.raises(PolicyError) as ei:
        Sandbox(fs_readable=SYS_RO, workdir="/tmp", on_exit="merge")
    assert ei.value.problems[0].field == "on_exit" and "merge" in ei.value.problems[0].message


def test_dry_run_without_a_workdir_is_refused() -> None:
    with Sandbox(fs_readable=SYS_RO) as sb, pytest.raises(InvalidRequest) as ei:
        sb.dry_run(["true"])
    assert "workdir" in str(ei.value)


def test_max_disk_is_a_quota_on_the_workdir(workdir: Path) -> None:
    with Sandbox(fs_readable=SYS_RO, fs_writable=[workdir], workdir=workdir, max_disk="1M") as sb:
        r = sb.dry_run(["sh", "-c", f'for i in $(seq 400); do echo x > "{workdir}/f$i" || exit 1; done'])
    assert not r.success and r.error is not None and r.error.kind == "disk_limit", r
