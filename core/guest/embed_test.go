package guest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirHoldsTheRuntime(t *testing.T) {
	d, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"__init__.py", "worker.py", "session.py", "mp.py"} {
		if _, err := os.Stat(filepath.Join(d, "sandtrap_guest", f)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
