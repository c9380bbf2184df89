//go:build sandtrap_testhook

package engine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A chroot that cannot be had fails closed, allow_degraded or not (the run would
// see the host's root): without a view of the sandbox's own.
func TestChrootFailsClosed(t *testing.T) {
	if os.Getenv("SANDTRAP_CHROOT_CHILD") != "" {
		root, _ := chrootFS(t)
		_, err := NewFromMap(chrootPolicy(root, map[string]any{"allow_degraded": true}))
		if err == nil || err.(*Error).Kind != KindIsolation || !strings.Contains(err.Error(), "a chroot needs a mount namespace of the sandbox's own") {
			t.Fatalf("want isolation_unavailable naming the mount namespace: %v", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestChrootFailsClosed$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDTRAP_TEST_DISABLE=view", "SANDTRAP_CHROOT_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("%v\n%s", err, out)
	}
}
