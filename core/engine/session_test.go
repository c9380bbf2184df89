package engine

import (
	"strings"
	"testing"
)

// an echo server speaking length-prefixed frames, uppercasing each
const echoServer = `
import sys
i, o = sys.stdin.buffer, sys.stdout.buffer
while True:
    h = i.read(4)
    if len(h) < 4:
        break
    d = i.read(int.from_bytes(h, "big"))
    if d == b"crash":
        import os; os._exit(3)
    if d == b"hang":
        import time; time.sleep(60)
    d = d.upper()
    o.write(len(d).to_bytes(4, "big") + d); o.flush()
`

func TestSessionFrames(t *testing.T) {
	sb := newSB(t, nil)
	open, kind := request(t, sb, map[string]any{"op": "session_open", "argv": []any{"/usr/bin/python3", "-c", echoServer}})
	if kind != "" {
		t.Fatalf("open: %v", open)
	}
	id := open["session"]
	for _, w := range []string{"hello", "", strings.Repeat("x", 200000)} {
		r, _ := request(t, sb, map[string]any{"op": "session_send", "session": id, "frame": []byte(w), "timeout": 10.0})
		if string(r["frame"].([]byte)) != strings.ToUpper(w) {
			t.Fatalf("frame %q -> %v", w[:min(len(w), 10)], r)
		}
	}
	// a hang is killed at the timeout and ends the session
	r, _ := request(t, sb, map[string]any{"op": "session_send", "session": id, "frame": []byte("hang"), "timeout": 0.3})
	if r["ended"] != true || !strings.Contains(r["reason"].(string), "timed out") {
		t.Fatalf("hang: %v", r)
	}
	if pids := survivors("/usr/bin/python3 -c " + echoServer); len(pids) > 0 {
		t.Fatalf("session program survived: %v", pids)
	}
	_, kind = request(t, sb, map[string]any{"op": "session_send", "session": id, "frame": []byte("x")})
	if kind != KindInvalidRequest {
		t.Fatalf("send to an ended session: kind %q", kind)
	}
	// a crash ends the session with the program's result
	open, _ = request(t, sb, map[string]any{"op": "session_open", "argv": []any{"/usr/bin/python3", "-c", echoServer}})
	r, _ = request(t, sb, map[string]any{"op": "session_send", "session": open["session"], "frame": []byte("crash"), "timeout": 10.0})
	res := r["result"].(map[string]any)
	if r["ended"] != true || res["exit_code"] == nil {
		t.Fatalf("crash: %v", r)
	}
}
