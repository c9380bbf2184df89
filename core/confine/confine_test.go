package confine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/confine"
	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/landlock"
)

// TestRefusesWithoutProcTask runs this test binary inside a sandbox that cannot
// read /proc: confining must then refuse with an error, not kill the process
// (psx would SIGKILL the whole host on an unreadable /proc/self/task).
func TestRefusesWithoutProcTask(t *testing.T) {
	if os.Getenv("SANDTRAP_NOPROC_CHILD") != "" {
		rs, err := landlock.Build(kernel.Probe().LandlockABI, landlock.Spec{Readable: []string{"/usr"}})
		if err != nil {
			t.Fatal(err)
		}
		err = confine.Apply(confine.Plan{LandlockFD: rs.FD})
		if err == nil || !strings.Contains(err.Error(), "/proc/self/task") {
			t.Fatalf("want a refusal naming /proc/self/task, got %v", err)
		}
		t.Log("refused ok: " + err.Error())
		return
	}
	if kernel.Probe().LandlockABI == 0 {
		t.Skip("no Landlock")
	}
	self, _ := filepath.Abs(os.Args[0])
	sb, err := engine.NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", filepath.Dir(self)}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res := sb.Run(&engine.RunRequest{Argv: []string{self, "-test.run", "^TestRefusesWithoutProcTask$", "-test.v"},
		Env: map[string]string{"SANDTRAP_NOPROC_CHILD": "1"}, StdinFD: -1, StdoutFD: -1, Timeout: 60})
	if !res.Success || !strings.Contains(string(res.Stdout), "refused ok") {
		t.Fatalf("child: %+v\n%s\n%s", res.Error, res.Stdout, res.Stderr)
	}
}
