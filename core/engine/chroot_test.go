package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// chrootFS makes a root directory everyone may read: empty /usr, /dev, /proc,
// /work, /etc (with one file), /tmp, the merged-/usr links (bin, lib, lib64,
// sbin), and a host directory outside it with a secret that symlinks planted in
// the root point at (out: absolute, up: relative, climbing past the root).
func chrootFS(t *testing.T) (root, secretDir string) {
	t.Helper()
	root, secretDir = t.TempDir(), t.TempDir()
	for _, d := range []string{root, secretDir} {
		os.Chmod(d, 0o755)
	}
	for _, d := range []string{"usr", "dev", "proc", "work", "etc", "tmp", "ro"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for l, to := range map[string]string{"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin",
		"out": secretDir, "up": strings.Repeat("../", 12) + strings.TrimPrefix(secretDir, "/")} {
		if err := os.Symlink(to, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "etc", "where"), []byte("inside\n"), 0o644)
	os.WriteFile(filepath.Join(secretDir, "secret"), []byte("SECRET\n"), 0o644)
	return root, secretDir
}

// chrootPolicy: the host's /usr mounted read-only at /usr (the root has only an
// empty one), everything inside readable.
func chrootPolicy(root string, extra map[string]any) map[string]any {
	m := map[string]any{"chroot": root, "fs_mount_ro": map[string]any{"/usr": "/usr"},
		"fs_readable": []any{"/"}, "env": map[string]any{"PATH": "/bin:/usr/bin"}, "timeout": 30.0}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// The seed's example: a host directory mounted at /work read-write (a mount is a
// grant), cwd inside it, programs found by PATH inside the chroot.
func TestChrootSeedExample(t *testing.T) {
	root, _ := chrootFS(t)
	work := t.TempDir()
	os.Chmod(work, 0o777)
	os.WriteFile(filepath.Join(work, "task.py"), []byte("import os\nprint('cwd', os.getcwd())\nopen('out.txt', 'w').write('done')\n"), 0o644)
	sb := mustSandbox(t, map[string]any{"chroot": root, "fs_mount": map[string]any{"/work": work},
		"fs_mount_ro": map[string]any{"/usr": "/usr"}, "fs_readable": []any{"/usr", "/bin", "/lib", "/etc"}, "cwd": "/work"})
	res := sb.Run(&RunRequest{Argv: []string{"python3", "task.py"}, StdinFD: -1, StdoutFD: -1})
	if !res.Success || string(res.Stdout) != "cwd /work\n" {
		t.Fatalf("%+v %q %s", res.Error, res.Stdout, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(work, "out.txt")); err != nil || string(b) != "done" {
		t.Fatalf("the write to the mount did not reach the host: %q %v", b, err)
	}
	// the report: the view inside the chroot
	var view []string
	for _, m := range res.Isolation.View {
		view = append(view, m.Path+":"+m.Mode)
	}
	for _, want := range []string{"/:ro", "/usr:ro", "/work:rw", "/dev/null:dev", "/proc:hidden"} {
		if !strings.Contains(strings.Join(view, " "), want) {
			t.Errorf("the view %v lacks %s", view, want)
		}
	}
}

// Nothing leads out of the root: "..", a symlink planted in the root (absolute,
// or relative climbing past it), /proc/self/root and /proc/1/root (the run's
// own proc), the host path itself. Each answers ENOENT: the host's tree is not
// in the sandbox's mount namespace at all (pivot_root, the old root detached).
func TestChrootHasNoWayOut(t *testing.T) {
	root, secret := chrootFS(t)
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"fs_readable": []any{"/", "/proc"}, "env": map[string]any{"PATH": "/bin", "S": secret}}))
	res := shRun(sb, `for p in /out/secret /up/secret /../../..$S/secret $S/secret /proc/self/root$S/secret /proc/1/root$S/secret /proc/self/cwd/../../..$S/secret; do
  cat "$p" 2>&1 || true
done
cat /etc/where; readlink /proc/self/root; cd /..; pwd`, false)
	got := string(res.Stdout)
	if strings.Contains(got, "SECRET") {
		t.Fatalf("a path led out of the chroot: %s", got)
	}
	// (pid 1, sandtrap's, does not let the target read its root: EACCES)
	if n := strings.Count(got, "No such file or directory"); n != 6 || !strings.Contains(got, "/proc/1/root"+secret+"/secret: Permission denied") {
		t.Fatalf("want 6 ENOENT and /proc/1/root denied: %s %s", got, res.Stderr)
	}
	if !strings.HasSuffix(got, "inside\n/\n/\n") {
		t.Fatalf("the root is not the chroot: %q", got)
	}
}

// A grant names a path inside the chroot, resolved in the view: a symlink planted
// in the root that points at a host path resolves inside the root (where nothing
// is, here), so the grant cannot reach the host's directory.
func TestChrootGrantThroughASymlinkStaysInside(t *testing.T) {
	root, _ := chrootFS(t)
	_, err := NewFromMap(chrootPolicy(root, map[string]any{"fs_readable": []any{"/out"}}))
	if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), "/out: no such file or directory in the chroot") {
		t.Fatalf("want the grant of /out resolved inside the root: %v", err)
	}
}

// fs_mount_ro is read-only at the mount: writes, creation, metadata changes fail
// with EROFS even where fs_writable grants them (Landlock alone would allow them).
func TestChrootReadOnlyMount(t *testing.T) {
	root, _ := chrootFS(t)
	ro := t.TempDir()
	os.Chmod(ro, 0o777)
	os.WriteFile(filepath.Join(ro, "f"), []byte("orig\n"), 0o666)
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"fs_mount_ro": map[string]any{"/usr": "/usr", "/ro": ro},
		"fs_writable": []any{"/ro"}}))
	res := shRun(sb, `echo x > /ro/f; echo x > /ro/new; chmod 600 /ro/f; touch -d 2001-01-01 /ro/f; rm /ro/f; mkdir /ro/d; cat /ro/f`, false)
	// (chmod: EPERM, the file being the host's root's: the kernel checks the
	// owner before the mount)
	if n := strings.Count(string(res.Stderr), "Read-only file system"); n != 5 || !strings.Contains(string(res.Stderr), "chmod: changing permissions of '/ro/f'") {
		t.Fatalf("want 5 EROFS and chmod refused, got %d: %s", n, res.Stderr)
	}
	if string(res.Stdout) != "orig\n" {
		t.Fatalf("the read-only mount is not readable: %q", res.Stdout)
	}
	ents, _ := os.ReadDir(ro)
	if b, _ := os.ReadFile(filepath.Join(ro, "f")); string(b) != "orig\n" || len(ents) != 1 {
		t.Fatalf("the host's directory changed: %q %v", b, ents)
	}
}

// /dev is sandtrap's: the harmless devices work, nothing can be made in it (no
// device node, no file), and the run cannot mount (over /dev or anywhere).
func TestChrootDevAndNoMounts(t *testing.T) {
	root, _ := chrootFS(t)
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"fs_readable": []any{"/", "/proc"}}))
	res := shRun(sb, `echo x > /dev/null && head -c 8 /dev/urandom | wc -c && head -c 3 /dev/zero | wc -c && echo x > /dev/stdout
mknod /dev/sda b 8 0; mknod /tmp/null c 1 3; touch /dev/new; ln -s /x /dev/l
mount -t tmpfs none /dev; mount -t tmpfs none /tmp; mount --bind /usr /tmp
ls /dev/sda /dev/new 2>&1 | wc -l`, false)
	if string(res.Stdout) != "8\n3\nx\n2\n" {
		t.Fatalf("%q %s", res.Stdout, res.Stderr)
	}
	errs := string(res.Stderr)
	if strings.Count(errs, "Read-only file system") != 4 {
		t.Fatalf("want EROFS for mknod, touch, ln in /dev and mknod in /tmp: %s", errs)
	}
	if strings.Count(errs, "mount: ") != 3 || strings.Contains(errs, "mount: /dev: ") && !strings.Contains(errs, "permission denied") && !strings.Contains(errs, "must be superuser") {
		t.Fatalf("want every mount refused: %s", errs)
	}
}

// The PATH is searched inside the chroot: a program that only the host has is
// not found.
func TestChrootPathIsInside(t *testing.T) {
	root, _ := chrootFS(t)
	hostBin := t.TempDir()
	os.Chmod(hostBin, 0o755)
	os.WriteFile(filepath.Join(hostBin, "hostonly"), []byte("#!/bin/sh\necho host\n"), 0o755)
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"env": map[string]any{"PATH": hostBin + ":/bin"}}))
	res := sb.Run(&RunRequest{Argv: []string{"hostonly"}, StdinFD: -1, StdoutFD: -1})
	if res.Error == nil || res.Error.Kind != KindNotFound {
		t.Fatalf("a host-only program ran: %+v %q", res.Error, res.Stdout)
	}
	res = sb.Run(&RunRequest{Argv: []string{hostBin + "/hostonly"}, StdinFD: -1, StdoutFD: -1})
	if res.Success {
		t.Fatalf("a host path ran: %q", res.Stdout)
	}
}

// Policy problems: mounts without a chroot, a mount point missing inside, a mode
// suffix, a grant inside /dev other than its devices, a root without /dev.
func TestChrootProblems(t *testing.T) {
	root, _ := chrootFS(t)
	bare := t.TempDir()
	for _, c := range []struct {
		m    map[string]any
		want string
	}{
		{map[string]any{"fs_mount": map[string]any{"/work": "/tmp"}}, "fs_mount: mounts are made inside a chroot"},
		{chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/nowhere": "/tmp"}}), "fs_mount: /nowhere: no such file or directory in the chroot"},
		{chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": "/tmp:ro"}}), "a mapping takes no mode suffix"},
		{chrootPolicy(root, map[string]any{"fs_readable": []any{"/dev/sda"}}), "fs_readable: /dev/sda: /dev inside a chroot is sandtrap's"},
		{chrootPolicy(root, map[string]any{"fs_mount_ro": map[string]any{"/etc/where": "/etc"}}), "not a directory"},
		{map[string]any{"chroot": bare}, "has no directory dev"},
	} {
		_, err := NewFromMap(c.m)
		if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: want %q, got %v", c.m, c.want, err)
		}
	}
}

// A root host that switches the run's user lays the chroot out in a mount
// namespace alone (no user namespace of the sandbox's): the same view. (uid needs
// a root host: as another user the policy is refused, TestProblems.)
func TestChrootAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uid needs a root host")
	}
	root, secret := chrootFS(t)
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"uid": int64(65534), "gid": int64(65534), "env": map[string]any{"PATH": "/bin", "S": secret}}))
	res := shRun(sb, `id -u; cat /etc/where; cat $S/secret /out/secret; echo x > /usr/x`, false)
	if string(res.Stdout) != "65534\ninside\n" || strings.Count(string(res.Stderr), "No such file or directory") != 2 || !strings.Contains(string(res.Stderr), "Read-only file system") {
		t.Fatalf("%q %s", res.Stdout, res.Stderr)
	}
}

// A chroot's /dev is listable and holds only sandtrap's: the harmless nodes,
// the links into /proc/self/fd, ptmx, and pts and shm of the run's own. A pty
// works (Python's pty.openpty, script(1) running a command on one, with its
// /dev/pts/N), POSIX semaphores work (multiprocessing's Lock, in /dev/shm), and
// neither the host's ptys nor its /dev/shm are there: a file the host put in
// its /dev/shm is not seen, one the run puts in its own does not reach the
// host, and the run's /dev/pts lists only the ptys it opened (each run a devpts
// instance of its own: a second run sees none of the first's).
func TestChrootDevPtsAndShm(t *testing.T) {
	root, _ := chrootFS(t)
	if _, err := os.Stat("/usr/bin/script"); err != nil {
		t.Skip("script(1) missing")
	}
	marker := filepath.Join("/dev/shm", "sandtrap-host-"+filepath.Base(root))
	if err := os.WriteFile(marker, []byte("host"), 0o644); err != nil {
		t.Skipf("no host /dev/shm: %v", err)
	}
	defer os.Remove(marker)
	// two ptys of the host's, open while the run lists its /dev/pts
	for i := 0; i < 2; i++ {
		f, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
		if err != nil {
			t.Skipf("no host pty: %v", err)
		}
		defer f.Close()
	}
	if host, _ := os.ReadDir("/dev/pts"); len(host) < 3 {
		t.Fatalf("the host's ptys are not in its /dev/pts: %v", host)
	}
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"env": map[string]any{"PATH": "/bin:/usr/bin", "M": filepath.Base(marker)}}))
	res := shRun(sb, `ls /dev | tr '\n' ' '; echo
python3 -c '
import os, pty
m, s = pty.openpty()
os.write(s, b"via-pty\n")
print(os.read(m, 100).decode().strip(), os.ttyname(s), sorted(os.listdir("/dev/pts")))
'
script -qc 'tty; echo on-a-pty' /dev/null
python3 -c '
import multiprocessing as mp
l = mp.Lock(); l.acquire(); l.release(); print("semaphore ok")
'
ls /dev/shm | tr '\n' ' '; echo
echo run > /dev/shm/run-file && ls /dev/shm; cat /dev/shm/$M`, false)
	got := string(res.Stdout)
	want := "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n" +
		"via-pty /dev/pts/0 ['0', 'ptmx']\n/dev/pts/0\r\non-a-pty\r\nsemaphore ok\n\nrun-file\n"
	if got != want {
		t.Fatalf("stdout %q\nwant   %q\nstderr %s", got, want, res.Stderr)
	}
	if !strings.Contains(string(res.Stderr), "/dev/shm/"+filepath.Base(marker)+": No such file or directory") {
		t.Fatalf("the host's /dev/shm file: %s", res.Stderr)
	}
	if _, err := os.Stat("/dev/shm/run-file"); err == nil {
		os.Remove("/dev/shm/run-file")
		t.Fatalf("the run's /dev/shm is the host's")
	}
	// a second run: a devpts and a tmpfs of its own (nothing of the first's)
	res = shRun(sb, `ls /dev/pts /dev/shm | tr '\n' ' '`, false)
	if string(res.Stdout) != "/dev/pts: ptmx  /dev/shm: " {
		t.Fatalf("a second run sees %q %s", res.Stdout, res.Stderr)
	}
	var view []string
	for _, m := range res.Isolation.View {
		view = append(view, m.Path+":"+m.Mode)
	}
	for _, w := range []string{"/dev/pts:own", "/dev/shm:own"} {
		if !strings.Contains(strings.Join(view, " "), w) {
			t.Errorf("the view %v lacks %s", view, w)
		}
	}
}

// /dev/shm is a tmpfs of max_disk bytes (64 MiB without): writing past it
// fails with ENOSPC (files of 100 KB each, under the per-file RLIMIT_FSIZE
// that max_disk also sets).
func TestChrootDevShmSize(t *testing.T) {
	root, _ := chrootFS(t)
	const script = `
import os
st = os.statvfs("/dev/shm")
print(st.f_blocks * st.f_frsize)
try:
    for i in range(30):
        with open("/dev/shm/f%d" % i, "wb") as f:
            f.write(b"x" * 100000)
    print("wrote 3 MB")
except OSError as e:
    print(e.strerror)
`
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{"max_disk": "1M"}))
	res := sb.Run(&RunRequest{Argv: []string{"python3", "-c", script}, StdinFD: -1, StdoutFD: -1})
	if string(res.Stdout) != "1048576\nNo space left on device\n" {
		t.Fatalf("%q %s", res.Stdout, res.Stderr)
	}
	sb = mustSandbox(t, chrootPolicy(root, nil))
	res = sb.Run(&RunRequest{Argv: []string{"python3", "-c", script}, StdinFD: -1, StdoutFD: -1})
	if string(res.Stdout) != "67108864\nwrote 3 MB\n" {
		t.Fatalf("%q %s", res.Stdout, res.Stderr)
	}
}

// A copy-on-write workdir inside a chroot (a path inside it, here an fs_mount):
// each run's pid 1 lays the overlay over it in the run's view; a dry run lists
// every change (as outside a chroot) and leaves the host directory identical; a
// run that commits applies them to the host directory; a path of fs_denied
// inside the workdir stays denied through the overlay (read, and a write that
// would make a copy of it in the upper layer).
func TestChrootCOWWorkdir(t *testing.T) {
	root, _ := chrootFS(t)
	wd := cowTree(t)
	os.Chmod(wd, 0o777)
	before := treeHash(t, wd)
	pol := func(extra map[string]any) map[string]any {
		m := map[string]any{"fs_mount": map[string]any{"/work": wd}, "workdir": "/work", "env": map[string]any{"PATH": "/bin", "W": "/work"}}
		for k, v := range extra {
			m[k] = v
		}
		return chrootPolicy(root, m)
	}
	sb := mustSandbox(t, pol(nil))
	res := shRun(sb, changeScript, true)
	if !res.Success {
		t.Fatalf("run: %+v %q %s", res.Error, res.Stdout, res.Stderr)
	}
	if !reflect.DeepEqual(res.Changes, wantChanges) {
		t.Fatalf("changes:\n got %v\nwant %v", res.Changes, wantChanges)
	}
	if res.Branch != "aborted" || treeHash(t, wd) != before {
		t.Fatalf("the dry run changed the workdir (%s)", res.Branch)
	}
	denied := mustSandbox(t, pol(map[string]any{"fs_denied": []any{"/work/dir/a"}}))
	res = shRun(denied, `cat /work/dir/a; echo x >> /work/dir/a; cat /work/dir/b`, true)
	if string(res.Stdout) != "b\n" || strings.Count(string(res.Stderr), "Permission denied") != 2 || len(res.Changes) != 0 {
		t.Fatalf("fs_denied inside the workdir: %q %s %v", res.Stdout, res.Stderr, res.Changes)
	}
	res = shRun(sb, `echo committed > /work/new.txt`, false)
	if !res.Success || res.Branch != "committed" {
		t.Fatalf("%+v %q %s", res.Error, res.Branch, res.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "new.txt")); err != nil || string(b) != "committed\n" {
		t.Fatalf("the commit did not reach the host directory: %q %v", b, err)
	}
	// a workdir of the root's own tree (no mount), writable by fs_writable
	os.Chmod(filepath.Join(root, "tmp"), 0o777)
	sb = mustSandbox(t, chrootPolicy(root, map[string]any{"workdir": "/tmp", "fs_writable": []any{"/tmp"}}))
	res = shRun(sb, `echo in-root > /tmp/r && cat /tmp/r`, true)
	if !res.Success || string(res.Stdout) != "in-root\n" || fmt.Sprint(res.Changes) != "[{A r}]" {
		t.Fatalf("%+v %q %s %v", res.Error, res.Stdout, res.Stderr, res.Changes)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp", "r")); err == nil {
		t.Fatal("the dry run wrote the root's /tmp")
	}
	// a mount inside the workdir: its overlay would show what lies under the
	// mount point instead, so the policy is refused
	other := t.TempDir()
	_, err := NewFromMap(pol(map[string]any{"fs_mount": map[string]any{"/work": wd, "/work/dir": other}}))
	if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), "workdir: /work holds the mount /work/dir") {
		t.Fatalf("want a mount inside the workdir refused: %v", err)
	}
}

// fs_storage inside a chroot cannot be had (the chroot does not show the host
// directory where each run's pid 1 makes its layer): isolation_unavailable
// naming why, never a layer elsewhere.
func TestChrootCOWStorageRefused(t *testing.T) {
	root, _ := chrootFS(t)
	wd, store := cowTree(t), t.TempDir()
	_, err := NewFromMap(chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": wd}, "workdir": "/work", "fs_storage": store}))
	if err == nil || err.(*Error).Kind != KindIsolation || !strings.Contains(err.Error(), "fs_storage inside a chroot") {
		t.Fatalf("want isolation_unavailable: %v", err)
	}
}
