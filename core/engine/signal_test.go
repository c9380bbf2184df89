package engine

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// process_signal reaches the leader (a trap in the program runs) or every process
// of the run but its pid 1; stop/continue signals and non-signals are refused.
func TestProcessSignal(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"sh", "-c", `trap 'echo term; exit 3' TERM; while :; do sleep 0.02; done`}, map[string]any{"stdout": "capture"})
	time.Sleep(150 * time.Millisecond)
	r, kind := request(t, sb, map[string]any{"op": "process_signal", "process": m["process"], "signal": 15})
	if kind != "" || fmt.Sprint(r["sent"]) != "1" {
		t.Fatalf("signal: %v %s", r, kind)
	}
	res := resultOf(t, waitProc(t, sb, m, 5))
	if fmt.Sprint(res["exit_code"]) != "3" || !strings.Contains(string(res["stdout"].([]byte)), "term") {
		t.Fatalf("the trap did not run: %v", res)
	}
	// the tree: sh and its two sleeps (pid 1, sandtrap-init, is not signalled)
	dur := fmt.Sprintf("30.%d", os.Getpid())
	m = popen(t, sb, []string{"sh", "-c", "sleep " + dur + " & sleep " + dur + " & wait"}, nil)
	for i := 0; i < 500 && len(withArg(dur)) < 2; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for _, bad := range []any{0, 19, 18, 20, 65, -1} {
		if _, kind := request(t, sb, map[string]any{"op": "process_signal", "process": m["process"], "signal": bad}); kind != KindInvalidRequest {
			t.Fatalf("signal %v: %q, want invalid_request", bad, kind)
		}
	}
	if _, kind := request(t, sb, map[string]any{"op": "process_signal", "process": m["process"], "signal": 15, "to": "all"}); kind != KindInvalidRequest {
		t.Fatalf("to all: %q", kind)
	}
	r, kind = request(t, sb, map[string]any{"op": "process_signal", "process": m["process"], "signal": 9, "to": "tree"})
	if kind != "" || fmt.Sprint(r["sent"]) != "3" {
		t.Fatalf("tree: %v %s", r, kind)
	}
	res = resultOf(t, waitProc(t, sb, m, 5))
	if fmt.Sprint(res["signal"]) != "9" || res["reason"] != "signaled" {
		t.Fatalf("%v", res)
	}
}

// A signal to a run that ended reaches nothing (its pids may belong to others now).
func TestProcessSignalAfterEnd(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"true"}, nil)
	time.Sleep(200 * time.Millisecond)
	r, kind := request(t, sb, map[string]any{"op": "process_signal", "process": m["process"], "signal": 15, "to": "tree"})
	if kind != "" || fmt.Sprint(r["sent"]) != "0" {
		t.Fatalf("%v %s", r, kind)
	}
}
