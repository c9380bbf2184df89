//go:build sandtrap_testhook

package kernel

import (
	"os"
	"strconv"
	"strings"
)

// testDisabled reads SANDTRAP_TEST_DISABLE, a test hook that makes features look
// absent ("landlock,seccomp,cgroup,pidns,view"). It can only take protections away,
// so a request that needs them fails closed unless allow_degraded. It exists only in
// builds with the sandtrap_testhook tag (the tests' library, build/testhook/): the
// shipped library reads no such variable.
func testDisabled() map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.Split(os.Getenv("SANDTRAP_TEST_DISABLE"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			out[f] = true
		}
	}
	return out
}

// TestFailInit reads SANDTRAP_TEST_FAIL_INIT, a test hook that makes one step of
// sandtrap-init fail with EPERM (a letter of wire.h's ST_STEP_*, e.g. "B": the
// zygote's seccomp filter), so that tests see how each failure is reported. It
// exists only in builds with the sandtrap_testhook tag, as testDisabled.
func TestFailInit() uint32 {
	v := os.Getenv("SANDTRAP_TEST_FAIL_INIT")
	if len(v) != 1 {
		return 0
	}
	return uint32(v[0])
}

// testLandlockABI reads SANDTRAP_TEST_LANDLOCK_ABI, a test hook that makes the
// kernel's Landlock ABI look lower than it is (1-7; 0 or unset: as it is), so that
// tests see each protection missing. Only in the testhook build, as testDisabled.
func testLandlockABI() int {
	n, err := strconv.Atoi(strings.TrimSpace(os.Getenv("SANDTRAP_TEST_LANDLOCK_ABI")))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
