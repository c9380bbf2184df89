package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/protocol"
)

// cowTree makes a workdir everyone may read: files, a directory with files, a
// symlink inside it.
func cowTree(t *testing.T) string {
	t.Helper()
	wd := t.TempDir()
	os.Chmod(wd, 0o755)
	for p, c := range map[string]string{"keep.txt": "keep\n", "edit.txt": "old\n", "gone.txt": "bye\n",
		"old-name.txt": "moved\n", "dir/a": "a\n", "dir/b": "b\n", "olddir/x": "x\n", "deldir/y": "y\n", "deldir/sub/z": "z\n"} {
		os.MkdirAll(filepath.Join(wd, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(wd, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("keep.txt", filepath.Join(wd, "link"))
	return wd
}

// treeHash is a hash of every path under dir: type, permission bits, content or
// symlink target.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v", rel, info.Mode())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			s := sha256.Sum256(b)
			line += " " + hex.EncodeToString(s[:])
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	s := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(s[:])
}

func cowPolicy(wd string, extra map[string]any) map[string]any {
	m := map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}, "fs_writable": []any{wd}, "workdir": wd, "timeout": 30.0}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func shRun(sb *Sandbox, script string, dry bool) *Result {
	return sb.Run(&RunRequest{Argv: []string{"/bin/sh", "-c", script}, StdinFD: -1, StdoutFD: -1, DryRun: dry})
}

// the script of the dry-run test: creates, modifies, deletes and renames files
// and a directory
const changeScript = `set -e; cd "$W"
echo new > added.txt
echo new >> edit.txt
rm gone.txt
mv old-name.txt new-name.txt
mkdir newdir; echo n > newdir/n
mv olddir renamed
rm -r deldir
cat keep.txt > /dev/null
`

var wantChanges = []fsview.Change{{Kind: "A", Path: "added.txt"}, {Kind: "D", Path: "deldir"}, {Kind: "D", Path: "deldir/sub"},
	{Kind: "D", Path: "deldir/sub/z"}, {Kind: "D", Path: "deldir/y"}, {Kind: "M", Path: "edit.txt"}, {Kind: "D", Path: "gone.txt"},
	{Kind: "A", Path: "new-name.txt"}, {Kind: "A", Path: "newdir"}, {Kind: "A", Path: "newdir/n"}, {Kind: "D", Path: "old-name.txt"},
	{Kind: "D", Path: "olddir"}, {Kind: "D", Path: "olddir/x"}, {Kind: "A", Path: "renamed"}, {Kind: "A", Path: "renamed/x"}}

func TestDryRunListsEveryChangeAndLeavesTheWorkdirIdentical(t *testing.T) {
	wd := cowTree(t)
	before := treeHash(t, wd)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}}))
	res := shRun(sb, changeScript+`ls; cat edit.txt`, true)
	if !res.Success {
		t.Fatalf("run: %+v %s", res.Error, res.Stderr)
	}
	// the run saw its own writes
	if !strings.Contains(string(res.Stdout), "added.txt") || !strings.Contains(string(res.Stdout), "old\nnew\n") || strings.Contains(string(res.Stdout), "gone.txt") {
		t.Fatalf("the run did not see its changes: %s", res.Stdout)
	}
	if !reflect.DeepEqual(res.Changes, wantChanges) {
		t.Fatalf("changes:\n got %v\nwant %v", res.Changes, wantChanges)
	}
	if res.Branch != "aborted" || res.BranchID != 0 || len(res.Committed) != 0 {
		t.Fatalf("a dry run aborts: %q %d %v", res.Branch, res.BranchID, res.Committed)
	}
	if after := treeHash(t, wd); after != before {
		t.Fatal("the dry run changed the workdir")
	}
	// and through the protocol
	m, kind := request(t, sb, map[string]any{"op": "dry_run", "argv": []any{"/bin/sh", "-c", `echo x > "$W/p"`}})
	if kind != "" || fmt.Sprint(m["changes"]) != "[map[kind:A path:p]]" || m["branch"] != "aborted" {
		t.Fatalf("dry_run op: %v %v", kind, m)
	}
	if after := treeHash(t, wd); after != before {
		t.Fatal("the dry_run op changed the workdir")
	}
}

func TestDryRunNeedsAWorkdir(t *testing.T) {
	sb := newSB(t, nil)
	m, kind := request(t, sb, map[string]any{"op": "dry_run", "argv": []any{"true"}})
	if kind != KindInvalidRequest || !strings.Contains(fmt.Sprint(m), "dry_run needs a sandbox with a workdir") {
		t.Fatalf("%s %v", kind, m)
	}
}

func TestCommitAppliesTheChanges(t *testing.T) {
	wd := cowTree(t)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}}))
	res := shRun(sb, changeScript, false)
	if !res.Success || res.Branch != "committed" {
		t.Fatalf("run: %+v %q %s", res.Error, res.Branch, res.Stderr)
	}
	if !reflect.DeepEqual(res.Changes, wantChanges) || len(res.Committed) != len(wantChanges) || len(res.CommitRefused) != 0 {
		t.Fatalf("changes %v committed %v refused %v", res.Changes, res.Committed, res.CommitRefused)
	}
	// the workdir now is what the run saw: a dry run of the same script on a copy
	want := map[string]string{"added.txt": "new\n", "edit.txt": "old\nnew\n", "new-name.txt": "moved\n", "newdir/n": "n\n",
		"renamed/x": "x\n", "keep.txt": "keep\n", "dir/a": "a\n"}
	for p, c := range want {
		if b, err := os.ReadFile(filepath.Join(wd, p)); err != nil || string(b) != c {
			t.Errorf("%s: %q %v, want %q", p, b, err, c)
		}
	}
	for _, p := range []string{"gone.txt", "old-name.txt", "olddir", "deldir"} {
		if _, err := os.Lstat(filepath.Join(wd, p)); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(wd, "link")); err != nil || l != "keep.txt" {
		t.Errorf("untouched symlink: %q %v", l, err)
	}
	ents, _ := os.ReadDir(wd)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".sandtrap-commit-") {
			t.Errorf("a temporary file was left: %s", e.Name())
		}
	}
}

func TestFailedRunAbortsByDefault(t *testing.T) {
	wd := cowTree(t)
	before := treeHash(t, wd)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}}))
	res := shRun(sb, `echo x > "$W/new"; rm "$W/keep.txt"; exit 3`, false)
	if res.Success || res.Branch != "aborted" || fmt.Sprint(res.Changes) != "[{D keep.txt} {A new}]" {
		t.Fatalf("%v %q %v", res.Success, res.Branch, res.Changes)
	}
	if treeHash(t, wd) != before {
		t.Fatal("an aborted run changed the workdir")
	}
}

func TestTimeoutKilledRunBranches(t *testing.T) {
	for _, action := range []string{"abort", "commit", "keep"} {
		t.Run(action, func(t *testing.T) {
			wd := cowTree(t)
			before := treeHash(t, wd)
			sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}, "on_error": action, "timeout": 1.0}))
			res := shRun(sb, `echo partial > "$W/new"; exec sleep 30`, false)
			if !res.TimedOut || res.Success {
				t.Fatalf("want a timeout: %+v", res)
			}
			if fmt.Sprint(res.Changes) != "[{A new}]" {
				t.Fatalf("changes %v", res.Changes)
			}
			_, err := os.Stat(filepath.Join(wd, "new"))
			switch action {
			case "abort":
				if res.Branch != "aborted" || treeHash(t, wd) != before {
					t.Fatalf("abort: %q, workdir changed: %v", res.Branch, err == nil)
				}
			case "commit":
				if b, _ := os.ReadFile(filepath.Join(wd, "new")); res.Branch != "committed" || string(b) != "partial\n" {
					t.Fatalf("commit: %q %q", res.Branch, b)
				}
			case "keep":
				if res.Branch != "kept" || res.BranchID == 0 || err == nil {
					t.Fatalf("keep: %q %d %v", res.Branch, res.BranchID, err)
				}
				m, kind := request(t, sb, map[string]any{"op": "commit", "branch_id": res.BranchID})
				if b, _ := os.ReadFile(filepath.Join(wd, "new")); kind != "" || string(b) != "partial\n" || fmt.Sprint(m["committed"]) != "[map[kind:A path:new]]" {
					t.Fatalf("commit op: %s %v %q", kind, m, b)
				}
				// once
				if _, kind := request(t, sb, map[string]any{"op": "commit", "branch_id": res.BranchID}); kind != KindInvalidRequest {
					t.Fatalf("a second commit: %s", kind)
				}
			}
		})
	}
}

func TestKeepThenAbort(t *testing.T) {
	wd := cowTree(t)
	before := treeHash(t, wd)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}, "on_exit": "keep"}))
	res := shRun(sb, `echo x > "$W/new"`, false)
	if res.Branch != "kept" || res.BranchID == 0 {
		t.Fatalf("%q %d", res.Branch, res.BranchID)
	}
	if _, kind := request(t, sb, map[string]any{"op": "abort", "branch_id": res.BranchID}); kind != "" {
		t.Fatal(kind)
	}
	if _, kind := request(t, sb, map[string]any{"op": "commit", "branch_id": res.BranchID}); kind != KindInvalidRequest {
		t.Fatalf("commit after abort: %s", kind)
	}
	if treeHash(t, wd) != before {
		t.Fatal("abort changed the workdir")
	}
}

// Landlock's rules are tied to inodes: the overlay's are not the host's, so the
// rules inside the workdir are made on the overlay by the run's pid 1. Without
// that, nothing under the workdir would be writable (the host's inodes' rules
// do not reach the overlay); with a rule on the overlay's root alone, the
// denied file would be readable. (A denied path leaves its directories without
// a rule of their own: nothing can be created in them, with or without a
// workdir; the files beside it keep theirs.)
func TestLandlockCoversTheOverlay(t *testing.T) {
	wd := cowTree(t)
	out := t.TempDir()
	os.Chmod(out, 0o755)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd, "O": out},
		"fs_denied": []any{filepath.Join(wd, "dir", "a")}, "fs_readable": []any{"/usr", "/lib", "/bin", out}}))
	res := shRun(sb, `cd "$W"
echo w >> edit.txt && echo w >> dir/b && echo wrote-allowed
cat dir/a && echo read-denied
cat dir/b > /dev/null && echo read-allowed
echo w > "$O/x" && echo wrote-outside
true`, true)
	got := string(res.Stdout)
	if !strings.Contains(got, "wrote-allowed") || !strings.Contains(got, "read-allowed") {
		t.Fatalf("the workdir's grants do not reach the overlay: %s %s", got, res.Stderr)
	}
	if strings.Contains(got, "read-denied") || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Fatalf("fs_denied inside the workdir was readable: %s %s", got, res.Stderr)
	}
	if strings.Contains(got, "wrote-outside") {
		t.Fatalf("a write outside the workdir passed Landlock: %s", got)
	}
	if fmt.Sprint(res.Changes) != "[{M dir/b} {M edit.txt}]" {
		t.Fatalf("changes %v", res.Changes)
	}
}

// A run shapes its upper layer as it likes: symlinks pointing out of the
// workdir, a directory replaced by a symlink. The commit copies symlinks as
// symlinks and never writes through one.
func TestCommitNeverFollowsPlantedSymlinks(t *testing.T) {
	wd := cowTree(t)
	outside := t.TempDir()
	os.Chmod(outside, 0o777)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd, "O": outside}}))
	res := shRun(sb, `set -e; cd "$W"
ln -s "$O" out
rm -r dir && ln -s "$O" dir
ln -sf "$O/victim" keep.txt`, false)
	if !res.Success || res.Branch != "committed" {
		t.Fatalf("%+v %q %s", res.Error, res.Branch, res.Stderr)
	}
	for _, p := range []string{"out", "dir", "keep.txt"} {
		if l, err := os.Readlink(filepath.Join(wd, p)); err != nil || l != outside && l != outside+"/victim" {
			t.Errorf("%s: %q %v (want a symlink copied as it is)", p, l, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the commit wrote outside the workdir: %v", ents)
	}
}

// Between a run and a later commit the workdir can change under the engine: a
// directory the run wrote into is replaced by a symlink to elsewhere. The
// commit refuses to go through it (O_NOFOLLOW, RESOLVE_NO_SYMLINKS) and writes nothing there.
func TestCommitRefusesASymlinkSwappedInAfterTheRun(t *testing.T) {
	wd := cowTree(t)
	outside := t.TempDir()
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}, "on_exit": "keep"}))
	res := shRun(sb, `echo evil > "$W/dir/planted"`, false)
	if res.Branch != "kept" {
		t.Fatalf("%q %+v", res.Branch, res.Error)
	}
	os.RemoveAll(filepath.Join(wd, "dir"))
	if err := os.Symlink(outside, filepath.Join(wd, "dir")); err != nil {
		t.Fatal(err)
	}
	out, err := sb.Commit(res.BranchID)
	if err != nil || out.Error == nil || out.Error.Kind != protocol.KindCommit || !strings.Contains(out.Error.Message, `entering "dir"`) {
		t.Fatalf("want the commit refused: %v %+v %+v", err, out, out.Error)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the commit wrote through the symlink: %v", ents)
	}
}

// Landlock does not govern metadata: inside the workdir a run can fchmod its
// copy of a file it may only read. Such a change is listed but never committed.
func TestCommitRefusesChangesToReadOnlyPaths(t *testing.T) {
	wd := cowTree(t)
	ro := filepath.Join(wd, "dir")
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", ro}, "net_allow_unix": true}))
	res := sb.Run(&RunRequest{Argv: []string{sysPython, "-c", fmt.Sprintf(`import os
fd = os.open(%q, os.O_RDONLY); os.fchmod(fd, 0o777); print(oct(os.fstat(fd).st_mode))
open(%q, "w").write("allowed")
import socket; socket.socket(socket.AF_UNIX).bind(%q)`, filepath.Join(ro, "a"), filepath.Join(wd, "new"), filepath.Join(wd, "sock"))}, StdinFD: -1, StdoutFD: -1})
	if !res.Success || !strings.Contains(string(res.Stdout), "0o100777") {
		t.Fatalf("%+v %s %s", res.Error, res.Stdout, res.Stderr)
	}
	// and a socket is never committed
	if fmt.Sprint(res.Changes) != "[{M dir/a} {A new} {A sock}]" || fmt.Sprint(res.CommitRefused) != "[{M dir/a} {A sock}]" || fmt.Sprint(res.Committed) != "[{A new}]" {
		t.Fatalf("changes %v refused %v committed %v", res.Changes, res.CommitRefused, res.Committed)
	}
	if st, _ := os.Stat(filepath.Join(ro, "a")); st.Mode().Perm() != 0o644 {
		t.Fatalf("the read-only file's mode was committed: %v", st.Mode())
	}
}

// max_disk is the size of the run's upper layer (a tmpfs): many small files,
// one big file, fallocate and sparse pages all count.
func TestMaxDiskQuotaOnTheWorkdir(t *testing.T) {
	wd := cowTree(t)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"max_disk": "1M"}))
	py := func(code string) *Result {
		return sb.Run(&RunRequest{Argv: []string{sysPython, "-c", "import os, errno\nos.chdir(" + fmt.Sprintf("%q", wd) + ")\n" + code},
			StdinFD: -1, StdoutFD: -1, DryRun: true})
	}
	for name, code := range map[string]string{
		"small_files": "for i in range(1000):\n    with open('f%d' % i, 'w') as f: f.write('x' * 600)",
		"big_file":    "open('big', 'wb').write(b'x' * (2 << 20))",
		"fallocate":   "fd = os.open('fa', os.O_CREAT | os.O_WRONLY); os.posix_fallocate(fd, 0, 2 << 20)",
		"sparse":      "fd = os.open('sp', os.O_CREAT | os.O_WRONLY)\nfor i in range(400):\n    os.pwrite(fd, b'x', i * 65536)",
	} {
		t.Run(name, func(t *testing.T) {
			res := py(code)
			if name == "fallocate" {
				// refused whole: the layer is not full, the run got ENOSPC (the result cannot tell)
				if res.Success || !strings.Contains(string(res.Stderr), "No space left on device") {
					t.Fatalf("want ENOSPC: %+v %s", res.Error, res.Stderr)
				}
				return
			}
			if res.Success || res.Error == nil || res.Error.Kind != protocol.KindDisk || !strings.Contains(string(res.Stderr), "No space left on device") {
				t.Fatalf("want disk_limit and ENOSPC: %+v %s", res.Error, res.Stderr)
			}
		})
	}
	// within the quota: a sparse file far larger than it (its pages count, not its size)
	res := sb.Run(&RunRequest{Argv: []string{sysPython, "-c", fmt.Sprintf("import os\nfd = os.open(%q, os.O_CREAT | os.O_WRONLY); os.pwrite(fd, b'x', 100 << 20)", filepath.Join(wd, "sparse"))},
		StdinFD: -1, StdoutFD: -1})
	if !res.Success || res.Branch != "committed" {
		t.Fatalf("%+v %s", res.Error, res.Stderr)
	}
	st, err := os.Stat(filepath.Join(wd, "sparse"))
	if err != nil || st.Size() != 100<<20+1 || st.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
		t.Fatalf("the committed sparse file: %v %v", st, err)
	}
	if lim := sb.Isolation().Limits["max_disk"]; lim.Via != "tmpfs_quota" {
		t.Fatalf("max_disk report: %+v", lim)
	}
}

// A root host running its target as another user: the view is a mount
// namespace alone (no user namespace of the sandbox's), the overlay keeps its
// xattrs in trusted.overlay.*, the merged root keeps the workdir's owner.
func TestCOWWorkdirWithUIDSwitchAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	wd := cowTree(t)
	os.Chmod(wd, 0o777)
	os.Chmod(filepath.Dir(wd), 0o755)
	os.Chmod(filepath.Join(wd, "deldir"), 0o777)
	os.Chmod(filepath.Join(wd, "deldir", "sub"), 0o777)
	before := treeHash(t, wd)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}, "uid": int64(65534), "gid": int64(65534)}))
	res := shRun(sb, `set -e; cd "$W"; id -u; echo x > new; rm -r deldir; mkdir deldir; echo y > deldir/fresh`, true)
	if !res.Success || !strings.HasPrefix(string(res.Stdout), "65534") {
		t.Fatalf("%+v %s %s", res.Error, res.Stdout, res.Stderr)
	}
	// deldir removed and made anew: an opaque directory (trusted.overlay.opaque)
	if want := "[{M deldir} {A deldir/fresh} {D deldir/sub} {D deldir/sub/z} {D deldir/y} {A new}]"; fmt.Sprint(res.Changes) != want {
		t.Fatalf("changes %v, want %s", res.Changes, want)
	}
	if treeHash(t, wd) != before {
		t.Fatal("the dry run changed the workdir")
	}
}

// A run whose working directory is inside the workdir (the caller's, inherited)
// works in the overlay, not in the directory under it (which no rule covers).
func TestCOWDefaultCwdInsideTheWorkdir(t *testing.T) {
	wd := cowTree(t)
	prev, _ := os.Getwd()
	if err := os.Chdir(wd); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(prev)
	sb := mustSandbox(t, cowPolicy(".", nil))
	res := shRun(sb, `cat keep.txt && echo here > new && ls new`, true)
	if !res.Success || string(res.Stdout) != "keep\nnew\n" || fmt.Sprint(res.Changes) != "[{A new}]" {
		t.Fatalf("%+v %q %s %v", res.Error, res.Stdout, res.Stderr, res.Changes)
	}
	if iso := sb.Isolation(); iso.Workdir != wd || iso.Landlock == nil || !strings.Contains(fmt.Sprint(iso.Landlock.Rules), wd) {
		t.Fatalf("the report names the absolute workdir: %+v", iso.Landlock)
	}
}

// The next run sees what the run before it committed: its overlay is mounted
// when its request arrives, not ahead (an overlay made ahead keeps the dentries
// it looked up — pid 1 opens the rule paths inside the workdir — of the
// workdir as it was: a file a commit replaced would show its old content).
func TestCOWNextRunSeesTheCommit(t *testing.T) {
	wd := cowTree(t)
	sb := mustSandbox(t, cowPolicy(wd, map[string]any{"env": map[string]any{"W": wd}, "fs_denied": []any{filepath.Join(wd, "dir", "a")}}))
	for i, want := range []string{"old\nmore1\n", "old\nmore1\nmore2\n", "old\nmore1\nmore2\nmore3\n"} {
		res := shRun(sb, fmt.Sprintf(`cd "$W" && echo more%d >> edit.txt && cat edit.txt`, i+1), false)
		if !res.Success || string(res.Stdout) != want || res.Branch != "committed" {
			t.Fatalf("run %d: %+v %q %s (want %q)", i+1, res.Error, res.Stdout, res.Stderr, want)
		}
	}
}

// A commit carries what the run gave its files and directories besides their
// data: user.* xattrs (never the overlay's own), mode,
// mtime, and — the engine running as root — the owner (the run's uid as the
// host sees it: 65534 here, when root; the engine's user otherwise).
func TestCommitCarriesMetadata(t *testing.T) {
	wd := cowTree(t)
	os.Chmod(wd, 0o777)
	os.Chmod(filepath.Dir(wd), 0o755)
	extra := map[string]any{"env": map[string]any{"W": wd}}
	wantUID := uint32(os.Geteuid())
	if wantUID == 0 {
		extra["uid"], extra["gid"], wantUID = int64(65534), int64(65534), 65534
	}
	sb := mustSandbox(t, cowPolicy(wd, extra))
	res := sb.Run(&RunRequest{Argv: []string{"/usr/bin/python3", "-c", `
import os
w = os.environ["W"]
with open(w + "/meta", "w") as f:
    f.write("m")
    os.setxattr(f.fileno(), "user.origin", b"sandbox")
    os.chmod(f.fileno(), 0o751)  # (path chmod and set-id bits are refused in a run)
    f.flush()
    os.utime(f.fileno(), (1000000000, 1000000000))
os.mkdir(w + "/mdir", 0o750)
open(w + "/mdir/in", "w").write("i")
fd = os.open(w + "/mdir", os.O_RDONLY)
os.setxattr(fd, "user.dir", b"d")
os.utime(fd, (1100000000, 1100000000))
os.close(fd)
`}, StdinFD: -1, StdoutFD: -1})
	if !res.Success || res.Branch != "committed" {
		t.Fatalf("%+v %q %s", res.Error, res.Branch, res.Stderr)
	}
	for _, c := range []struct {
		name, xattr, val string
		mode             os.FileMode
		mtime            int64
	}{{"meta", "user.origin", "sandbox", 0o751, 1000000000}, {"mdir", "user.dir", "d", 0o750 | os.ModeDir, 1100000000}} {
		p := filepath.Join(wd, c.name)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != c.mode || st.ModTime().Unix() != c.mtime {
			t.Errorf("%s: mode %v mtime %d, want %v %d", c.name, st.Mode(), st.ModTime().Unix(), c.mode, c.mtime)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid != wantUID {
			t.Errorf("%s: owner %d, want %d", c.name, uid, wantUID)
		}
		buf := make([]byte, 64)
		if n, err := syscall.Getxattr(p, c.xattr, buf); err != nil || string(buf[:n]) != c.val {
			t.Errorf("%s: %s = %q %v", c.name, c.xattr, buf[:max(n, 0)], err)
		}
		if n, _ := syscall.Listxattr(p, buf); strings.Contains(string(buf[:max(n, 0)]), "overlay") {
			t.Errorf("%s: the overlay's own xattrs were committed: %q", c.name, buf[:n])
		}
	}
}
