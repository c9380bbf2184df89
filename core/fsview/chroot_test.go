package fsview

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Resolve follows symlinks as the target sees them: inside the root, across the
// chroot's mounts, ".." never above /. A symlink naming a host path resolves to
// that path under the root, never to the host's.
func TestChrootResolveStaysInside(t *testing.T) {
	root, host, mnt := t.TempDir(), t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "work"), 0o755)
	os.MkdirAll(filepath.Join(root, host), 0o755) // the host path, inside the root
	os.WriteFile(filepath.Join(host, "secret"), nil, 0o644)
	os.WriteFile(filepath.Join(root, host, "secret"), nil, 0o644)
	os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644)
	os.Symlink(host, filepath.Join(root, "abs"))
	os.Symlink(strings.Repeat("../", 10)+strings.TrimPrefix(host, "/"), filepath.Join(root, "rel"))
	os.Symlink("/etc", filepath.Join(mnt, "toetc")) // inside a mount: from the chroot's /
	os.Symlink("loop", filepath.Join(root, "loop"))
	c := NewChroot(root)
	if in, err := c.Add(ChrootMount{Inside: "/work", Host: mnt}); err != nil || in != "/work" {
		t.Fatal(in, err)
	}
	for p, want := range map[string]string{
		"/abs/secret":        filepath.Join(root, host, "secret"),
		"/rel/secret":        filepath.Join(root, host, "secret"),
		"/../../etc":         filepath.Join(root, "etc"),
		"/work/f":            filepath.Join(mnt, "f"),
		"/work/toetc":        filepath.Join(root, "etc"),
		"/work/../work/../":  root,
		"/etc/../work/../..": root,
	} {
		_, got, err := c.Resolve(p)
		if err != nil || got != want {
			t.Errorf("%s: %s %v, want %s", p, got, err, want)
		}
	}
	if _, _, err := c.Resolve("/loop"); err != ErrLoop {
		t.Errorf("a symlink loop: %v", err)
	}
	if _, err := c.Add(ChrootMount{Inside: "/nowhere", Host: mnt}); err == nil {
		t.Error("a mount point missing inside was accepted")
	}
}
