package engine

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
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
	// its zygote (and a session's program) started before confining too
	if res := run(wide, "/usr/bin/cat", "/etc/hostname"); !res.Success {
		t.Fatalf("read before confine: %+v %q", res.Error, res.Stderr)
	}
	open, kind := request(t, wide, map[string]any{"op": "session_open", "argv": []any{"/usr/bin/python3", "-c", echoServer}})
	if kind != "" {
		t.Fatalf("session: %v", open)
	}
	// a run in flight could not be killed after confine (Landlock scopes signals):
	// confine stops it
	inflight := make(chan *Result, 1)
	go func() { inflight <- run(wide, "/usr/bin/sleep", "30") }()
	time.Sleep(200 * time.Millisecond)
	if err := sb.Confine(false); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-inflight:
		if r.Success {
			t.Fatalf("the run in flight succeeded: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a run in flight at confine() kept running")
	}
	// a session that started before confining ends at its next frame: the frame is
	// not delivered, and the response says why
	r, _ := request(t, wide, map[string]any{"op": "session_send", "session": open["session"], "frame": []byte("x"), "timeout": 10.0})
	if r["ended"] != true || r["confined"] != true {
		t.Fatalf("a pre-confine session kept running: %v", r)
	}
	if _, err := os.ReadFile("/etc/hostname"); !os.IsPermission(err) {
		t.Fatalf("host read /etc/hostname after confine: %v", err)
	}
	if err := os.WriteFile(tmp+"/ok", []byte("x"), 0o644); err != nil {
		t.Fatalf("write in the allowed dir: %v", err)
	}
	// a sandbox built before confine runs under a new plan: no view can be mounted
	// any more, so metadata changes and locks through a descriptor are refused
	// instead (and the report says so); it holds the host's confinement
	res := run(wide, "/usr/bin/cat", "/etc/hostname")
	if res.Success || !strings.Contains(string(res.Stderr), "Permission denied") ||
		!strings.Contains(strings.Join(res.Isolation.NotApplied, ";"), "confined itself") {
		t.Fatalf("a permissive run after confine read /etc/hostname: %+v %q %v", res.Error, res.Stderr, res.Isolation.NotApplied)
	}
	res = run(wide, "/usr/bin/python3", "-c", "import os, fcntl\nfd = os.open('/usr/bin/cat', os.O_RDONLY)\n"+
		"for f in (lambda: os.fchmod(fd, 0o755), lambda: fcntl.flock(fd, fcntl.LOCK_SH)):\n"+
		"    try:\n        f(); print('OK')\n    except OSError as e:\n        print(e.errno)")
	if got := strings.Fields(string(res.Stdout)); len(got) != 2 || got[0] != "1" || got[1] != "1" {
		t.Fatalf("fchmod/flock of a read-only file after confine: %q %q", res.Stdout, res.Stderr)
	}
	// and so does one built after it
	wide2, err := NewFromMap(map[string]any{"fs_readable": []any{"/"}})
	if err != nil {
		t.Fatal(err)
	}
	if res = run(wide2, "/usr/bin/cat", "/etc/hostname"); res.Success || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Fatalf("a new permissive sandbox after confine read /etc/hostname: %+v %q", res.Error, res.Stderr)
	}
	if err := sb.Confine(false); err != nil { // stacking
		t.Fatalf("second confine: %v", err)
	}
	t.Log("confined ok")
}
