package landlock

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A rule path is opened without following a symlink anywhere on it: an entry of an
// expanded directory that someone turned into a symlink (to a denied path) after it
// was listed gets no rule, nor does one that is gone.
func TestOpenRulePathFollowsNoSymlink(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "secret"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "real"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "real", "f"), nil, 0o644))
	must(os.Symlink(filepath.Join(dir, "secret"), filepath.Join(dir, "swapped")))
	must(os.Symlink(dir, filepath.Join(dir, "up")))
	for _, p := range []string{"swapped", "up/real", "up/real/f", "gone"} {
		if fd, err := OpenRulePath(filepath.Join(dir, p)); err != ErrGone {
			if err == nil {
				unix.Close(fd)
			}
			t.Errorf("%s: %v, want ErrGone", p, err)
		}
	}
	for _, p := range []string{"real", "real/f", "secret"} {
		fd, err := OpenRulePath(filepath.Join(dir, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		unix.Close(fd)
	}
}
