package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// deniedTree is a host directory everyone may read, to be mounted in a chroot:
// a secret, a public file, a relative symlink to the secret, a directory nest
// (a mount point for a nested mount) holding files of its own.
func deniedTree(t *testing.T, secret string) string {
	t.Helper()
	d := t.TempDir()
	os.Chmod(d, 0o755)
	os.Mkdir(filepath.Join(d, "nest"), 0o755)
	for p, c := range map[string]string{"secret": secret + "\n", "pub": "public\n", "nest/under": "hidden-by-mount\n"} {
		if err := os.WriteFile(filepath.Join(d, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("secret", filepath.Join(d, "alias")); err != nil {
		t.Fatal(err)
	}
	return d
}

// A path of fs_denied that lies under a mount of the chroot stays denied
// although a grant covers a tree above the mount (the chroot's / here, or the
// mount that holds a nested one): Landlock's rules are made on the host's
// inodes, and a rule on a directory covers every file whose path, walked up in
// the target's view, reaches it — across mount points. The rules are built on
// the view (landlock.Spec.View): the walk from a granted tree down to a denied
// path follows the chroot's mounts, so the mount's other entries get rules of
// their own and the grant above is split off. Each attempt — cat, Python's
// open, listing the directory that holds it, an absolute symlink planted in the
// root, a relative one beside it in the mount — answers EACCES. (Before the
// rule builder followed the view, every one of them read the secret: the rule
// on the chroot's root covered the mount.)
func TestChrootDeniedUnderAMount(t *testing.T) {
	const secret = "MOUNTED-SECRET"
	read := `cat /work/secret; python3 -c 'print(open("/work/secret").read())'; ls /work; cat /link; cat /work/alias; cat /work/pub`
	for _, c := range []struct {
		name   string
		policy func(root, src, other string) map[string]any
		script string
		out    string // stdout
		denied int    // "Permission denied" in stderr
	}{
		{"rw mount under a readable root", func(root, src, _ string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": src}, "fs_denied": []any{"/work/secret"}})
		}, read, "public\n", 5},
		{"ro mount under a readable root", func(root, src, _ string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_mount_ro": map[string]any{"/usr": "/usr", "/work": src}, "fs_denied": []any{"/work/secret"}})
		}, read, "public\n", 5},
		{"rw mount under a writable root", func(root, src, _ string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": src}, "fs_writable": []any{"/"}, "fs_denied": []any{"/work/secret"}})
		}, read + `; echo x > /work/secret`, "public\n", 6},
		{"denied named through a symlink of the view", func(root, src, _ string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": src}, "fs_denied": []any{"/link"}})
		}, read, "public\n", 5},
		// /work/nest is a mount inside the mount /work: the grant of /work (a
		// mount is a grant) covers it as the root does
		{"nested mount", func(root, src, other string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": src, "/work/nest": other}, "fs_denied": []any{"/work/nest/secret"}})
		}, `cat /work/nest/secret; python3 -c 'print(open("/work/nest/secret").read())'; ls /work/nest; cat /work/nest/alias; cat /work/nest/pub; cat /work/pub; cat /work/secret`,
			"public\npublic\n" + secret + "\n", 4},
		{"nested mount, no grant but the mounts", func(root, src, other string) map[string]any {
			return chrootPolicy(root, map[string]any{"fs_readable": []any{"/etc"}, "fs_mount": map[string]any{"/work": src, "/work/nest": other}, "fs_denied": []any{"/work/nest/secret"}})
		}, `cat /work/nest/secret; python3 -c 'print(open("/work/nest/secret").read())'; ls /work/nest; cat /work/nest/alias; cat /work/nest/pub`,
			"public\n", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, _ := chrootFS(t)
			src, other := deniedTree(t, secret), deniedTree(t, secret)
			os.Symlink("/work/secret", filepath.Join(root, "link"))
			sb := mustSandbox(t, c.policy(root, src, other))
			res := shRun(sb, c.script, false)
			out, errs := string(res.Stdout), string(res.Stderr)
			if out != c.out {
				t.Fatalf("stdout %q, want %q (stderr %s)", out, c.out, errs)
			}
			if n := strings.Count(errs, "Permission denied"); n != c.denied {
				t.Fatalf("want %d EACCES, got %d: %s", c.denied, n, errs)
			}
			if strings.Contains(errs, "No such file") {
				t.Fatalf("a path of the attack is missing: %s", errs)
			}
		})
	}
}

// fs_denied names paths inside the chroot: the host path of a mounted file,
// which the view does not show, is refused as a path the chroot lacks — never
// taken as naming nothing (the denial would be silently lost).
func TestChrootDeniedByHostPath(t *testing.T) {
	root, _ := chrootFS(t)
	src := deniedTree(t, "S")
	_, err := NewFromMap(chrootPolicy(root, map[string]any{"fs_mount": map[string]any{"/work": src}, "fs_denied": []any{src + "/secret"}}))
	if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), "fs_denied: "+src+"/secret: no such file or directory in the chroot") {
		t.Fatalf("want the host path refused: %v", err)
	}
}
