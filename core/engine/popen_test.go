package engine

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// popen starts argv with the given stdio modes and returns the response.
func popen(t *testing.T, sb *Sandbox, argv []string, stdio map[string]any) map[string]any {
	t.Helper()
	req := map[string]any{"op": "popen", "argv": argv}
	for k, v := range stdio {
		req[k] = v
	}
	m, kind := request(t, sb, req)
	if kind != "" {
		t.Fatalf("popen %v: %s %v", argv, kind, m["error"])
	}
	return m
}

func fdFile(t *testing.T, m map[string]any, k string) *os.File {
	t.Helper()
	n, ok := m[k].(int64)
	if !ok {
		v, ok8 := m[k].(int8)
		if !ok8 {
			// msgpack gives the smallest int type
			switch x := m[k].(type) {
			case uint8:
				n = int64(x)
			case uint16:
				n = int64(x)
			case int16:
				n = int64(x)
			case int32:
				n = int64(x)
			case uint32:
				n = int64(x)
			default:
				t.Fatalf("%s: no fd in %v", k, m)
			}
		} else {
			n = int64(v)
		}
	}
	f := os.NewFile(uintptr(n), k)
	t.Cleanup(func() { f.Close() })
	return f
}

func waitProc(t *testing.T, sb *Sandbox, m map[string]any, timeout any) map[string]any {
	t.Helper()
	r, kind := request(t, sb, map[string]any{"op": "process_wait", "process": m["process"], "timeout": timeout})
	if kind != "" {
		t.Fatalf("process_wait: %s %v", kind, r["error"])
	}
	return r
}

func resultOf(t *testing.T, w map[string]any) map[string]any {
	t.Helper()
	if w["done"] != true {
		t.Fatalf("not done: %v", w)
	}
	return w["result"].(map[string]any)
}

func TestPopenCatRoundTrip(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"cat"}, map[string]any{"stdin": "piped", "stdout": "piped", "stderr": "capture"})
	in, out := fdFile(t, m, "stdin"), fdFile(t, m, "stdout")
	if m["stderr"] != nil {
		t.Fatalf("captured stderr has no fd: %v", m)
	}
	// pid is the program's (pid 1, sandtrap-init, is its parent)
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%v/cmdline", m["pid"])); string(b) != "cat\x00" || m["pid"] == m["init_pid"] {
		t.Fatalf("pid %v is %q (init_pid %v)", m["pid"], b, m["init_pid"])
	}
	buf := make([]byte, 5)
	for _, line := range []string{"one\n", "two\n"} { // line by line: each comes back before the next is sent
		if _, err := in.WriteString(line); err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadFull(out, buf[:len(line)])
		if err != nil || string(buf[:n]) != line {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
	}
	in.Close()
	if rest, _ := io.ReadAll(out); len(rest) != 0 {
		t.Fatalf("after EOF: %q", rest)
	}
	res := resultOf(t, waitProc(t, sb, m, nil))
	if res["reason"] != "exited" || res["success"] != true {
		t.Fatalf("%v", res)
	}
	// the result is handed out once
	if _, kind := request(t, sb, map[string]any{"op": "process_wait", "process": m["process"]}); kind != KindInvalidRequest {
		t.Fatalf("second wait: %q", kind)
	}
}

func TestPopenWaitTimeoutAndPoll(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"sleep", "30"}, nil)
	start := time.Now()
	if w := waitProc(t, sb, m, 0.2); w["done"] != false {
		t.Fatalf("%v", w)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("wait(0.2) took %v", d)
	}
	if w := waitProc(t, sb, m, 0); w["done"] != false {
		t.Fatalf("poll: %v", w)
	}
	for i := 0; i < 3; i++ { // idempotent
		if r, kind := request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]}); kind != "" {
			t.Fatalf("kill: %v %s", r, kind)
		}
	}
	res := resultOf(t, waitProc(t, sb, m, 5))
	if res["reason"] != "killed" || res["success"] != false || res["error"].(map[string]any)["kind"] != KindKilled {
		t.Fatalf("%v", res)
	}
}

// Kill during a blocked read unblocks it, and the whole tree dies — setsid
// daemons too.
func TestPopenKillUnblocksReadAndKillsTree(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("sleep %d", 6000+os.Getpid()%1000)
	m := popen(t, sb, []string{"sh", "-c", "(setsid sh -c '" + marker + "' &); " + marker}, map[string]any{"stdout": "piped"})
	out := fdFile(t, m, "stdout")
	got := make(chan error, 1)
	go func() {
		_, err := out.Read(make([]byte, 10))
		got <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(survivors(marker)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(survivors(marker)); n < 2 {
		t.Fatalf("%d sleeps started", n)
	}
	select {
	case err := <-got:
		t.Fatalf("read returned before kill: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	select {
	case err := <-got:
		if err != io.EOF {
			t.Fatalf("read: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("kill did not unblock the read")
	}
	res := resultOf(t, waitProc(t, sb, m, 5))
	if res["reason"] != "killed" {
		t.Fatalf("%v", res)
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Fatalf("%v survived kill", pids)
	}
}

func TestPopenCloseKillsTree(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("sleep %d", 7000+os.Getpid()%1000)
	popen(t, sb, []string{"sh", "-c", "(setsid sh -c '" + marker + "' &); " + marker}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(survivors(marker)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { sb.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the process")
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Fatalf("%v survived close", pids)
	}
}

func TestPopenStartFailuresAreErrors(t *testing.T) {
	sb := newSB(t, nil)
	for _, c := range []struct {
		argv []string
		kind string
	}{{[]string{"no-such-program-xyz"}, KindNotFound}, {[]string{"/no/such/file"}, KindNotFound}, {[]string{"/etc/passwd"}, KindSpawn}} {
		r, kind := request(t, sb, map[string]any{"op": "popen", "argv": c.argv, "stdout": "piped"})
		if kind != c.kind {
			t.Fatalf("%v: %s %v", c.argv, kind, r)
		}
	}
	_, kind := request(t, sb, map[string]any{"op": "popen", "argv": []string{"true"}, "stdout": "bogus", "stdin": "capture", "stderr": int64(999999)})
	if kind != KindInvalidRequest {
		t.Fatalf("bad modes: %s", kind)
	}
	r, _ := request(t, sb, map[string]any{"op": "popen", "argv": []string{"true"}, "stdout": "bogus", "stdin": "capture", "stderr": int64(999999)})
	probs := r["error"].(map[string]any)["problems"].([]any)
	if len(probs) != 3 {
		t.Fatalf("want a problem per stream: %v", probs)
	}
}

func TestPopenCaptureNullFDAndData(t *testing.T) {
	sb := newSB(t, nil)
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := popen(t, sb, []string{"sh", "-c", "cat; echo err >&2; echo toNull >&2"}, map[string]any{
		"stdin": []byte("fed\n"), "stdout": int64(f.Fd()), "stderr": "capture"})
	res := resultOf(t, waitProc(t, sb, m, 10))
	if res["success"] != true || string(res["stderr"].([]byte)) != "err\ntoNull\n" || len(res["stdout"].([]byte)) != 0 {
		t.Fatalf("%v", res)
	}
	b, _ := os.ReadFile(f.Name())
	if string(b) != "fed\n" {
		t.Fatalf("the fd got %q", b)
	}
	m = popen(t, sb, []string{"sh", "-c", "echo x; echo y >&2; read v; echo got$v"}, map[string]any{"stdin": "null", "stdout": "capture", "stderr": "null"})
	res = resultOf(t, waitProc(t, sb, m, 10))
	if string(res["stdout"].([]byte)) != "x\ngot\n" || len(res["stderr"].([]byte)) != 0 {
		t.Fatalf("%v", res)
	}
}

func TestResultReasons(t *testing.T) {
	sb := newSB(t, map[string]any{"max_cpu_time": 0.5})
	for _, c := range []struct {
		argv   []string
		reason string
		signal int
	}{
		{[]string{"true"}, "exited", 0},
		{[]string{"sh", "-c", "exit 3"}, "exited", 0},
		{[]string{"sh", "-c", "kill -TERM $$"}, "signaled", 15},
		{[]string{"sh", "-c", "while :; do :; done"}, "cpu_time_limit", 0},
		{[]string{"no-such-program-xyz"}, "not_found", 0},
	} {
		res := run(sb, c.argv...)
		if res.Reason != c.reason || (c.signal != 0 && (res.Signal == nil || *res.Signal != c.signal)) {
			t.Fatalf("%v: reason %q signal %v error %v", c.argv, res.Reason, res.Signal, res.Error)
		}
	}
	res := sb.Run(&RunRequest{Argv: []string{"sleep", "10"}, StdinFD: -1, StdoutFD: -1, Timeout: 0.2})
	if res.Reason != "timeout" {
		t.Fatalf("timeout: %q", res.Reason)
	}
	// serialized
	b := Encode(res)
	var m map[string]any
	msgpack.Unmarshal(b, &m)
	if m["reason"] != "timeout" {
		t.Fatalf("%v", m)
	}
}

// withArg lists the processes with marker among their arguments.
func withArg(marker string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "\x00"+marker+"\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// treeCPUTicks is the utime+stime of every process with marker among its arguments.
func treeCPUTicks(marker string) int {
	total := 0
	for _, pid := range withArg(marker) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		total += u + s
	}
	return total
}

func TestPopenPauseStopsCPUAndResumeContinues(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("spin%d", os.Getpid())
	// two spinning processes, one in a session of its own
	script := "(setsid sh -c 'while :; do :; done' " + marker + " &); while :; do :; done"
	m := popen(t, sb, []string{"sh", "-c", script, marker}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(withArg(marker)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	r, kind := request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
	if kind != "" || r["paused"] != true {
		t.Fatalf("pause: %v %s", r, kind)
	}
	before := treeCPUTicks(marker)
	time.Sleep(500 * time.Millisecond)
	during := treeCPUTicks(marker) - before
	if during > 1 {
		t.Fatalf("paused, the tree used %d ticks in 0.5 s", during)
	}
	if w := waitProc(t, sb, m, 0); w["paused"] != true {
		t.Fatalf("%v", w)
	}
	if _, kind := request(t, sb, map[string]any{"op": "process_resume", "process": m["process"]}); kind != "" {
		t.Fatal(kind)
	}
	before = treeCPUTicks(marker)
	time.Sleep(500 * time.Millisecond)
	after := treeCPUTicks(marker) - before
	t.Logf("CPU ticks (1/100 s) in 0.5 s: paused %d, resumed %d", during, after)
	if after < 3 { // a loaded machine gives it little CPU; stopped, none
		t.Fatalf("resumed, the tree used only %d ticks in 0.5 s", after)
	}
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	if res := resultOf(t, waitProc(t, sb, m, 5)); res["reason"] != "killed" {
		t.Fatalf("%v", res)
	}
	if pids := withArg(marker); len(pids) > 0 {
		t.Fatalf("%v survived", pids)
	}
}

// A paused run can be killed.
func TestPopenKillWhilePaused(t *testing.T) {
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"sleep", "30"}, nil)
	request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	if res := resultOf(t, waitProc(t, sb, m, 5)); res["reason"] != "killed" {
		t.Fatalf("%v", res)
	}
}

// create/start: the program is made (its pid known, confined) but does not exec
// until process_start.
func TestPopenParkedUntilStart(t *testing.T) {
	dir := t.TempDir()
	sbw := newSB(t, map[string]any{"fs_writable": []any{dir}})
	mark := dir + "/ran"
	m := popen(t, sbw, []string{"sh", "-c", "echo x > " + mark}, map[string]any{"start": false, "stdout": "capture"})
	if m["parked"] != true {
		t.Fatalf("%v", m)
	}
	// the pid is the parked program's: a child of pid 1 that has not exec'd (still
	// sandtrap-init's image)
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%v/cmdline", m["pid"]))
	if m["pid"] == m["init_pid"] || strings.Contains(string(b), "sh") {
		t.Fatalf("pid %v (init %v) cmdline %q", m["pid"], m["init_pid"], b)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the parked program ran")
	}
	if w := waitProc(t, sbw, m, 0); w["parked"] != true || w["done"] != false {
		t.Fatalf("%v", w)
	}
	if r, kind := request(t, sbw, map[string]any{"op": "process_start", "process": m["process"]}); kind != "" || r["started"] != true {
		t.Fatalf("start: %v %s", r, kind)
	}
	res := resultOf(t, waitProc(t, sbw, m, 10))
	if res["success"] != true {
		t.Fatalf("%v", res)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatal("started, it did not run")
	}
	// start of a started process, of an ordinary one: clear errors
	m2 := popen(t, sbw, []string{"sleep", "30"}, nil)
	if r, kind := request(t, sbw, map[string]any{"op": "process_start", "process": m2["process"]}); kind != KindInvalidRequest || !strings.Contains(fmt.Sprint(r["error"]), "not parked") {
		t.Fatalf("%v %s", r, kind)
	}
	// a parked program killed never runs
	m3 := popen(t, sbw, []string{"sh", "-c", "echo y > " + mark + "3"}, map[string]any{"start": false})
	request(t, sbw, map[string]any{"op": "process_kill", "process": m3["process"]})
	if res := resultOf(t, waitProc(t, sbw, m3, 10)); res["reason"] != "killed" {
		t.Fatalf("%v", res)
	}
	if _, err := os.Stat(mark + "3"); err == nil {
		t.Fatal("a killed parked program ran")
	}
	request(t, sbw, map[string]any{"op": "process_kill", "process": m2["process"]})
}

// A gather: named producers feed one consumer, the last on its stdin, the others on
// fds 3, 4, …, named by SANDTRAP_GATHER; each under its own policy.
func TestPipelineGather(t *testing.T) {
	prod := newSB(t, nil)
	cons := newSB(t, nil)
	Register(prod)
	defer Unregister(prod)
	r, kind := request(t, cons, map[string]any{"op": "pipeline",
		"gather": []any{
			map[string]any{"name": "code", "argv": []string{"echo", "print(1)"}, "sandbox": prod.ID()},
			map[string]any{"name": "more", "argv": []string{"echo", "extra"}, "sandbox": prod.ID()},
			map[string]any{"name": "data", "argv": []string{"echo", "1 2 3"}, "sandbox": prod.ID()},
		},
		"stages": []any{map[string]any{"argv": []string{"sh", "-c", `echo "$SANDTRAP_GATHER"; cat <&3; cat <&4; cat; for fd in 5 6 7 8 9 10; do if ( true <&$fd ) 2>/dev/null; then echo open $fd; fi; done`}}},
	})
	if kind != "" {
		t.Fatalf("%s %v", kind, r)
	}
	want := "code:3,more:4,data:0\nprint(1)\nextra\n1 2 3\n"
	if out := string(r["stdout"].([]byte)); !strings.HasPrefix(out, want) || r["success"] != true || len(r["stages"].([]any)) != 4 {
		t.Fatalf("%q success %v failed %v error %v", out, r["success"], r["failed_stage"], r["error"])
	} else if rest := strings.TrimPrefix(out, want); rest != "" { // nothing beyond 0-4
		t.Fatalf("the consumer holds more: %q", rest)
	}
	// problems: one stage, a bad name, twice a name
	_, kind = request(t, cons, map[string]any{"op": "pipeline", "gather": []any{map[string]any{"name": "1x", "argv": []string{"true"}}},
		"stages": []any{map[string]any{"argv": []string{"cat"}}}})
	if kind != KindInvalidRequest {
		t.Fatal(kind)
	}
	// a failing producer fails the gather, named
	r, _ = request(t, cons, map[string]any{"op": "pipeline",
		"gather": []any{map[string]any{"name": "a", "argv": []string{"sh", "-c", "exit 4"}}, map[string]any{"name": "b", "argv": []string{"true"}}},
		"stages": []any{map[string]any{"argv": []string{"cat"}}}})
	if r["success"] != false || r["failed_stage"] != int8(0) || r["reason"] != "stage_failed" {
		t.Fatalf("%v", r)
	}
}

func TestPipelineStdoutToFD(t *testing.T) {
	sb := newSB(t, nil)
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, kind := request(t, sb, map[string]any{"op": "pipeline", "stdout": int64(f.Fd()),
		"stages": []any{map[string]any{"argv": []string{"echo", "hi"}}, map[string]any{"argv": []string{"tr", "a-z", "A-Z"}}}})
	if kind != "" || r["success"] != true || len(r["stdout"].([]byte)) != 0 {
		t.Fatalf("%s %v", kind, r)
	}
	if b, _ := os.ReadFile(f.Name()); string(b) != "HI\n" {
		t.Fatalf("%q", b)
	}
}
