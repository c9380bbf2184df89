package engine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestConfine confines a child test process (irreversible), then checks that the
// process itself and a later, permissive run are both held.
func TestConfine(t *testing.T) {
	if os.Getenv("SANDTRAP_CONFINE_CHILD") != "" {
		confineChild(t)
		return
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestConfine$", "-test.v")
	cmd.Env = append(os.Environ(), "SANDTRAP_CONFINE_CHILD="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "confined ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func confineChild(t *testing.T) {
	tmp := os.Getenv("SANDTRAP_CONFINE_CHILD")
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib"}, "fs_writable": []any{tmp}})
	if err != nil {
		t.Fatal(err)
	}
	// a permissive sandbox built before confining
	wide, err := NewFromMap(map[string]any{"fs_readable": []any{"/"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Confine(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile("/etc/hostname"); !os.IsPermission(err) {
		t.Fatalf("host read /etc/hostname after confine: %v", err)
	}
	if err := os.WriteFile(tmp+"/ok", []byte("x"), 0o644); err != nil {
		t.Fatalf("write in the allowed dir: %v", err)
	}
	res := run(wide, "/usr/bin/cat", "/etc/hostname")
	if res.Success || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Fatalf("a permissive run after confine read /etc/hostname: %+v %q", res.Error, res.Stderr)
	}
	if err := sb.Confine(false); err != nil { // stacking
		t.Fatalf("second confine: %v", err)
	}
	t.Log("confined ok")
}
