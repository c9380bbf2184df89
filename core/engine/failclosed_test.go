//go:build sandtrap_testhook

package engine

import (
	"os"
	"os/exec"
	"testing"
)

// (Built with the sandtrap_testhook tag only, as `make test-go` does: the hook that
// makes features look absent is not in the shipped library.)

// TestFailClosed runs the test binary again with SANDTRAP_TEST_DISABLE (read once
// per process) and checks that a missing protection refuses, or with
// allow_degraded runs and says so.
func TestFailClosed(t *testing.T) {
	if os.Getenv("SANDTRAP_FAILCLOSED_CHILD") != "" {
		failClosedChild(t)
		return
	}
	for _, feature := range []string{"landlock", "seccomp", "pidns,cgroup"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestFailClosed$", "-test.v")
		cmd.Env = append(os.Environ(), "SANDTRAP_TEST_DISABLE="+feature, "SANDTRAP_FAILCLOSED_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", feature, err, out)
		}
	}
}

func failClosedChild(t *testing.T) {
	disabled := os.Getenv("SANDTRAP_TEST_DISABLE")
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}})
	if err == nil || err.(*Error).Kind != KindIsolation {
		t.Fatalf("%s disabled: want isolation_unavailable, got %v", disabled, err)
	}
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}, "allow_degraded": true})
	if err != nil {
		t.Fatalf("allow_degraded: %v", err)
	}
	defer sb.Close()
	res := run(sb, "echo", "ran")
	if !res.Success || len(res.Isolation.Degraded) == 0 || len(res.Isolation.Disabled) == 0 {
		t.Fatalf("degraded run: %+v %+v", res.Error, res.Isolation)
	}
	switch disabled {
	case "landlock":
		if res.Isolation.Landlock != nil {
			t.Fatal("landlock reported as applied")
		}
	case "seccomp":
		if res.Isolation.Seccomp != nil {
			t.Fatal("seccomp reported as applied")
		}
	default:
		if res.Isolation.TreeKill != "process_group" {
			t.Fatalf("tree kill %q", res.Isolation.TreeKill)
		}
	}
	t.Logf("%s disabled: degraded=%v", disabled, res.Isolation.Degraded)
}
