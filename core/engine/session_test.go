package engine

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/guest"
	"github.com/sandtrap/sandtrap/core/template"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"
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

// The guest runtime's worker (core/guest/python) is a template program: a fork of it
// must land in the asking sandbox's cgroup, answer frames, and die with its session.
func TestTemplateFork(t *testing.T) {
	guestDir, err := guest.Dir() // the embedded guest runtime, as the bindings use it
	if err != nil {
		t.Fatal(err)
	}
	sb := newSB(t, map[string]any{"max_memory": int64(512 << 20), "max_processes": 16,
		"fs_readable": []any{"/usr", "/lib", "/bin", guestDir},
		"env":         map[string]any{"PYTHONPATH": guestDir, "PYTHONDONTWRITEBYTECODE": "1"}})
	start, _ := msgpack.Marshal(map[string]any{"op": "template", "policy": map[string]any{
		"version": 1, "timeout": 30.0, "grants": []any{}}})
	open := func() (any, int) {
		t.Helper()
		r, kind := request(t, sb, map[string]any{"op": "session_open",
			"argv": []any{"/usr/bin/python3", "-S", "-m", "sandtrap_guest.worker"}, "template": start})
		if kind != "" {
			t.Fatalf("open: %v", r)
		}
		// a fork is a fresh worker: it is sent init
		f, _ := msgpack.Marshal(map[string]any{"op": "init", "policy": map[string]any{
			"version": 1, "timeout": 30.0, "grants": []any{}}})
		ri, _ := request(t, sb, map[string]any{"op": "session_send", "session": r["session"], "frame": f, "timeout": 20.0})
		var m map[string]any
		if err := msgpack.Unmarshal(ri["frame"].([]byte), &m); err != nil || m["op"] != "ready" {
			t.Fatalf("init: %v", ri)
		}
		return r["session"], template.Kept()
	}
	exec := func(id any, code string) map[string]any {
		t.Helper()
		f, _ := msgpack.Marshal(map[string]any{"op": "exec", "code": code})
		r, _ := request(t, sb, map[string]any{"op": "session_send", "session": id, "frame": f, "timeout": 20.0})
		var m map[string]any
		if err := msgpack.Unmarshal(r["frame"].([]byte), &m); err != nil {
			t.Fatalf("exec %q: %v", code, r)
		}
		return m
	}
	a, n1 := open()
	b, n2 := open()
	if n1 != n2 {
		t.Fatalf("a second open of the same configuration started a second template (%d -> %d)", n1, n2)
	}
	if r := exec(a, "x = 6 * 7"); r["op"] != "result" || r["namespace"].(map[string]any)["x"] != int8(42) {
		t.Fatalf("exec: %v", r)
	}
	if sb.cg == nil {
		t.Skip("no cgroup on this machine: the forks' cgroup membership is not testable")
	}
	members := sb.cg.Pids()
	if len(members) != 2 {
		t.Fatalf("the sandbox's cgroup holds %v, want the two forks", members)
	}
	// each fork's parent is the template, which is not in this sandbox's cgroup
	for _, pid := range members {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		var ppid int
		for _, line := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(line, "PPid:") {
				fmt.Sscan(strings.TrimPrefix(line, "PPid:"), &ppid)
			}
		}
		if ppid == 0 || slices.Contains(members, ppid) {
			t.Fatalf("fork %d has parent %d", pid, ppid)
		}
	}
	// closing a session kills its fork
	request(t, sb, map[string]any{"op": "session_close", "session": b})
	if got := sb.cg.Pids(); len(got) != 1 {
		t.Fatalf("after closing one session the cgroup holds %v", got)
	}
	// a killed template is replaced at the next open
	for _, h := range template.Templates() {
		if g := h.Group(); g != nil {
			for _, pid := range g.Pids() {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	time.Sleep(100 * time.Millisecond)
	c, _ := open()
	if r := exec(c, "y = 1"); r["op"] != "result" {
		t.Fatalf("exec after the template died: %v", r)
	}
}

// Ending a template ends its forks (they live in its pid namespace): more
// configurations than template.MaxTemplates must not evict a template that has live forks.
func TestTemplateEvictionSparesLiveForks(t *testing.T) {
	guestDir, err := guest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", guestDir},
		"env": map[string]any{"PYTHONPATH": guestDir, "PYTHONDONTWRITEBYTECODE": "1"}})
	var ids []any
	for i := 0; i < template.MaxTemplates+2; i++ {
		start, _ := msgpack.Marshal(map[string]any{"op": "template", "policy": map[string]any{
			"version": 1, "timeout": 30.0 + float64(i), "grants": []any{}}})
		r, kind := request(t, sb, map[string]any{"op": "session_open",
			"argv": []any{"/usr/bin/python3", "-S", "-m", "sandtrap_guest.worker"}, "template": start})
		if kind != "" {
			t.Fatalf("open %d: %v", i, r)
		}
		ids = append(ids, r["session"])
	}
	for i, id := range ids {
		f, _ := msgpack.Marshal(map[string]any{"op": "init", "policy": map[string]any{"version": 1, "grants": []any{}}})
		r, _ := request(t, sb, map[string]any{"op": "session_send", "session": id, "frame": f, "timeout": 20.0})
		if r["ended"] == true {
			t.Fatalf("fork %d died when later configurations came: %v", i, r["reason"])
		}
	}
	sb.Close()
	time.Sleep(50 * time.Millisecond)
	// with no live forks left, the next new configuration evicts down to the cap
	sb2 := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", guestDir},
		"env": map[string]any{"PYTHONPATH": guestDir, "PYTHONDONTWRITEBYTECODE": "1"}})
	start, _ := msgpack.Marshal(map[string]any{"op": "template", "policy": map[string]any{
		"version": 1, "timeout": 99.0, "grants": []any{}}})
	if r, kind := request(t, sb2, map[string]any{"op": "session_open",
		"argv": []any{"/usr/bin/python3", "-S", "-m", "sandtrap_guest.worker"}, "template": start}); kind != "" {
		t.Fatalf("open: %v", r)
	}
	n := template.Kept()
	if n > template.MaxTemplates+2 {
		t.Fatalf("%d templates kept", n)
	}
}

// A fork waits in a cgroup the engine staged for it; the next sandbox takes that
// cgroup over (no ~10 ms join on its path). Its limits must be that sandbox's, for
// the fork and for runs started later from the sandbox's zygote.
func TestTemplateForkAdoptsTheStagedCgroup(t *testing.T) {
	guestDir, err := guest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	pol := map[string]any{"max_processes": 12, "fs_readable": []any{"/usr", "/lib", "/bin", guestDir},
		"env": map[string]any{"PYTHONPATH": guestDir, "PYTHONDONTWRITEBYTECODE": "1"}}
	start, _ := msgpack.Marshal(map[string]any{"op": "template", "policy": map[string]any{
		"version": 1, "timeout": 7.0, "grants": []any{}}})
	open := func(sb *Sandbox) {
		t.Helper()
		r, kind := request(t, sb, map[string]any{"op": "session_open",
			"argv": []any{"/usr/bin/python3", "-S", "-m", "sandtrap_guest.worker"}, "template": start})
		if kind != "" {
			t.Fatalf("open: %v", r)
		}
	}
	first := newSB(t, pol)
	if first.cg == nil {
		t.Skip("no cgroup on this machine")
	}
	open(first) // the template's next spare now waits in a staged cgroup
	first.Close()
	time.Sleep(100 * time.Millisecond)
	sb := newSB(t, pol)
	own := sb.group()
	open(sb)
	if sb.group() == own {
		t.Fatalf("the sandbox kept its own cgroup: the staged one was not taken over")
	}
	if got := sb.group().Pids(); len(got) != 1 {
		t.Fatalf("the sandbox's cgroup holds %v, want its fork", got)
	}
	res := run(sb, "/bin/sh", "-c", "for i in $(seq 30); do sleep 0.3 & done; wait")
	if res.Success {
		t.Fatalf("30 processes ran under max_processes 12 in the adopted cgroup")
	}
}
