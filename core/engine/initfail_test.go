//go:build sandtrap_testhook

package engine

import (
	"testing"
)

// A step of sandtrap-init that fails reaches the run's result with the step and
// its errno (SANDTRAP_TEST_FAIL_INIT, read at each zygote start): one of the
// zygote's own confinement (its seccomp filter) and one of pid 1's (its
// parent-death signal) are both isolation_unavailable, never a bare "zygote is
// gone".
func TestInitFailureReported(t *testing.T) {
	for _, c := range []struct{ letter, msg string }{
		{"B", "starting /bin/true failed at zygote (loading the seccomp filter): operation not permitted"},
		{"K", "isolation unavailable: the run failed at setting its parent-death signal: operation not permitted"},
	} {
		t.Run(c.letter, func(t *testing.T) {
			t.Setenv("SANDTRAP_TEST_FAIL_INIT", c.letter)
			sb := newSB(t, nil)
			res := sb.Run(&RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1})
			if res.Error == nil || res.Error.Kind != KindIsolation || res.Error.Message != c.msg {
				t.Fatalf("result %+v", res.Error)
			}
		})
	}
}

// A chroot's /dev of each run's own that pid 1 cannot mount fails the run:
// isolation_unavailable naming the step, never a run without them.
func TestChrootDevMountFailureFailsClosed(t *testing.T) {
	root, _ := chrootFS(t)
	t.Setenv("SANDTRAP_TEST_FAIL_INIT", "T")
	sb := mustSandbox(t, chrootPolicy(root, nil))
	res := sb.Run(&RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1})
	if res.Error == nil || res.Error.Kind != KindIsolation || res.Error.Message != "isolation unavailable: the run failed at mounting its /dev/pts and /dev/shm: operation not permitted" {
		t.Fatalf("result %+v", res.Error)
	}
}
