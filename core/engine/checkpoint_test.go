package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The program of the checkpoint tests: restored (SANDTRAP_CHECKPOINT_FD set), it
// prints its state from fd 3; else it holds a socket pair and a file, and waits.
const cpProg = `import os, socket, sys, time
if "SANDTRAP_CHECKPOINT_FD" in os.environ:
    fd = int(os.environ["SANDTRAP_CHECKPOINT_FD"])
    n = int(os.environ["SANDTRAP_CHECKPOINT_SIZE"])
    sys.stdout.write("restored:" + os.read(fd, n + 1).decode() + ":" + sys.argv[1])
    try:
        os.write(fd, b"x")
        print(":writable")
    except OSError:
        print(":read-only")
    sys.exit(0)
a, b = socket.socketpair()
f = open("/usr/bin/python3", "rb")
print("up", flush=True)
time.sleep(30)
`

func TestCheckpointRestore(t *testing.T) {
	sb := newSB(t, nil)
	tmp := t.TempDir()
	m := popen(t, sb, []string{"/usr/bin/python3", "-c", cpProg, "arg1"}, map[string]any{"stdout": "piped"})
	out := fdFile(t, m, "stdout")
	got := ""
	for !strings.HasSuffix(got, "\n") {
		buf := make([]byte, 16)
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("%q %v", got, err)
		}
		got += string(buf[:n])
	}
	if got != "up\n" {
		t.Fatalf("%q", got)
	}
	dir := filepath.Join(tmp, "cp1")
	r, kind := request(t, sb, map[string]any{"op": "checkpoint", "process": m["process"], "dir": dir, "name": "one", "app_state": []byte("state-42")})
	if kind != "" {
		t.Fatalf("checkpoint: %s %v", kind, r["error"])
	}
	// the format: checkpoint.json and app_state.bin
	b, err := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]any
	json.Unmarshal(b, &cp)
	if cp["format"] != "sandtrap-checkpoint/1" || cp["name"] != "one" {
		t.Fatalf("%s", b)
	}
	if st, _ := os.ReadFile(filepath.Join(dir, "app_state.bin")); string(st) != "state-42" {
		t.Fatalf("app_state.bin %q", st)
	}
	// what it could not capture is listed: the image, the socket pair, the file, the pipe
	nc := fmt.Sprint(cp["not_captured"])
	for _, want := range []string{"process images", "2 socket fd(s)", "pipe fd(s)", "file fd(s)"} {
		if !strings.Contains(nc, want) {
			t.Fatalf("not_captured lacks %q: %s", want, nc)
		}
	}
	// the program runs on (the checkpoint paused it only while it looked)
	if w := waitProc(t, sb, m, 0); w["done"] != false || w["paused"] != false {
		t.Fatalf("%v", w)
	}
	// never over another checkpoint
	if _, kind := request(t, sb, map[string]any{"op": "checkpoint", "process": m["process"], "dir": dir}); kind != KindInvalidRequest {
		t.Fatalf("over an existing checkpoint: %q", kind)
	}
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	waitProc(t, sb, m, 5)

	// restore: the program again, its state on fd 3 (sealed: read-only)
	rr, kind := request(t, sb, map[string]any{"op": "restore", "dir": dir, "stdout": "capture"})
	if kind != "" {
		t.Fatalf("restore: %s %v", kind, rr["error"])
	}
	if string(rr["app_state"].([]byte)) != "state-42" {
		t.Fatalf("%v", rr)
	}
	res := resultOf(t, waitProc(t, sb, rr, 10))
	if got := string(res["stdout"].([]byte)); got != "restored:state-42:arg1:read-only\n" {
		t.Fatalf("restored program said %q (%v)", got, res)
	}

	// fail closed: another policy, a changed state, no checkpoint, a bad format
	other := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", "/etc"}})
	if _, kind := request(t, other, map[string]any{"op": "restore", "dir": dir}); kind != KindInvalidPolicy {
		t.Fatalf("restore under another policy: %q", kind)
	}
	os.WriteFile(filepath.Join(dir, "app_state.bin"), []byte("state-43"), 0o600)
	if r, kind := request(t, sb, map[string]any{"op": "restore", "dir": dir}); kind != KindInvalidRequest || !strings.Contains(fmt.Sprint(r["error"]), "sha256") {
		t.Fatalf("tampered state: %q %v", kind, r)
	}
	if _, kind := request(t, sb, map[string]any{"op": "restore", "dir": tmp}); kind != KindNotFound {
		t.Fatalf("no checkpoint: %q", kind)
	}
	os.WriteFile(filepath.Join(dir, "checkpoint.json"), []byte(strings.Replace(string(b), "sandtrap-checkpoint/1", "sandtrap-checkpoint/9", 1)), 0o600)
	if _, kind := request(t, sb, map[string]any{"op": "restore", "dir": dir}); kind != KindInvalidRequest {
		t.Fatalf("unknown format: %q", kind)
	}
	if _, kind := request(t, sb, map[string]any{"op": "restore", "dir": dir, "argv": []string{"sh"}}); kind != KindInvalidRequest {
		t.Fatalf("restore with its own argv: %q", kind)
	}
}

// A checkpoint of a process that ended is refused; nothing is written.
func TestCheckpointOfEndedProcess(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"true"}, nil)
	waitProc(t, sb, m, 5)
	dir := filepath.Join(t.TempDir(), "cp")
	if _, kind := request(t, sb, map[string]any{"op": "checkpoint", "process": m["process"], "dir": dir}); kind != KindInvalidRequest {
		t.Fatalf("%q", kind)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s written", dir)
	}
}
