//go:build sandtrap_testhook

package engine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A copy-on-write workdir that cannot be had fails closed, allow_degraded or
// not (a workdir written in place would make a dry run real): without a view of
// the sandbox's own at build, and when a run's pid 1 cannot mount its overlay.
func TestCOWFailsClosed(t *testing.T) {
	if mode := os.Getenv("SANDTRAP_COW_CHILD"); mode != "" {
		cowFailClosedChild(t, mode)
		return
	}
	for _, c := range []struct{ mode, env string }{{"view", "SANDTRAP_TEST_DISABLE=view"}, {"mount", "SANDTRAP_TEST_FAIL_INIT=V"}} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestCOWFailsClosed$", "-test.v")
		cmd.Env = append(os.Environ(), c.env, "SANDTRAP_COW_CHILD="+c.mode)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c.mode, err, out)
		}
	}
}

func cowFailClosedChild(t *testing.T, mode string) {
	wd := cowTree(t)
	before := treeHash(t, wd)
	m := cowPolicy(wd, map[string]any{"allow_degraded": true})
	sb, err := NewFromMap(m)
	if mode == "view" {
		if err == nil || err.(*Error).Kind != KindIsolation || !strings.Contains(err.Error(), "a copy-on-write workdir (it needs a view of the sandbox's own") {
			t.Fatalf("want isolation_unavailable naming the view: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res := shRun(sb, `echo x > "`+wd+`/new"`, false)
	if res.Error == nil || res.Error.Kind != KindIsolation || !strings.Contains(res.Error.Message, "mounting its copy-on-write workdir") {
		t.Fatalf("want isolation_unavailable at the overlay's mount: %+v", res.Error)
	}
	if treeHash(t, wd) != before {
		t.Fatal("the workdir changed")
	}
}
