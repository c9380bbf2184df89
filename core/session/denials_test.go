package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
)

// denyWork makes clone i refused i times by each of: the supervisor's connect rule
// (a destination net_allow does not name), the supervisor's inotify rule (a path
// outside the policy) — both half from the clone itself and half from a child it
// forks — and Landlock (an open outside the policy, which the supervisor never sees).
// Then the child tries to leave the clone's session and process group.
const denyWork = `
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
i = CLONE_ID
def refuse(k):
    s = socket.socket(); s.settimeout(1)
    assert s.connect_ex(("10.77.%d.%d" % (i, k), 80)) == 13
    s.close()
    fd = libc.inotify_init1(0)
    assert libc.inotify_add_watch(fd, b"/etc", 0xfff) == -1 and ctypes.get_errno() == 13
    os.close(fd)
    try:
        open("/etc/hostname").close(); raise SystemExit("the open outside the policy worked")
    except PermissionError:
        pass
for k in range(i // 2):
    refuse(k)
pid = os.fork()
if pid == 0:
    for k in range(i // 2, i):
        refuse(k)
    # not a group or session leader: only the clone's seccomp layer refuses these
    for f in (os.setsid, lambda: os.setpgid(0, 0)):
        try:
            f(); print("left")
        except PermissionError:
            print("EPERM")
    sys.stdout.flush()
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
`

func forkAll(t *testing.T, sb *engine.Sandbox, req map[string]any) (map[int64]map[string]any, map[string]any) {
	t.Helper()
	resp, kind := call(t, sb, req)
	got := map[int64]map[string]any{}
	for kind == "" && resp["call"] != nil {
		c := resp["call"].(map[string]any)
		for _, it := range c["items"].([]any) {
			m := it.(map[string]any)
			got[num(m["id"])] = m
		}
		resp, kind = call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"]})
	}
	if kind != "" || resp["done"] != true {
		t.Fatalf("fork: %q %v", kind, resp)
	}
	return got, resp
}

// TestForkDenialsPerClone: 16 clones, clone i refused i connects and i inotify
// watches (half of them by a child of the clone): each clone's item counts exactly
// its own, the Landlock refusals are in none, and no clone can leave its session.
func TestForkDenialsPerClone(t *testing.T) {
	sb, err := engine.NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"},
		"net_allow": []any{"127.0.0.1:9"}, "timeout": 60.0})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	const n = 16
	got, final := forkAll(t, sb, map[string]any{"op": "fork", "n": n, "interpreter": python, "work_src": denyWork})
	if len(got) != n {
		t.Fatalf("%d clones", len(got))
	}
	sessions := map[int64]bool{}
	for i := int64(0); i < n; i++ {
		it := got[i]
		if s := num(it["session"]); s <= 0 || sessions[s] {
			t.Errorf("clone %d: session %v (zero, or another clone's)", i, it["session"])
		} else {
			sessions[s] = true
		}
		if num(it["exit_code"]) != 0 || string(it["stdout"].([]byte)) != "EPERM\nEPERM\n" {
			t.Errorf("clone %d: exit %v, stdout %q, stderr %s", i, it["exit_code"], it["stdout"], it["stderr"])
		}
		ds, ok := it["denials"].([]any)
		if !ok {
			t.Errorf("clone %d: no denials list", i)
		}
		counts := map[string]int64{}
		for _, d := range ds {
			m := d.(map[string]any)
			where := fmt.Sprint(m["address"], m["path"])
			if m["syscall"] == "connect" && !strings.Contains(where, fmt.Sprintf("10.77.%d.", i)) {
				t.Errorf("clone %d got another clone's denial: %v", i, m)
			}
			counts[m["syscall"].(string)] += num(m["count"])
		}
		want := map[string]int64{}
		if i > 0 {
			want = map[string]int64{"connect": i, "inotify_add_watch": i}
		}
		if fmt.Sprint(counts) != fmt.Sprint(want) || num(it["denials_dropped"]) != 0 {
			t.Errorf("clone %d: denials %v, want %v (%v)", i, counts, want, ds)
		}
	}
	if src, _ := final["denials_sources"].(map[string]any); src["supervisor"] != "reported" {
		t.Errorf("denials_sources %v", final["denials_sources"])
	}
}

// TestForkCloneLeftoversAreKilled: clone 0 leaves a child behind (one that closed
// its output, so the clone's pipes end) that writes a heartbeat; once clone 0's
// result is in — while clone 1 still runs, so the template lives — the heartbeat
// has stopped: the child was killed with its clone's session.
func TestForkCloneLeftoversAreKilled(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	beat := filepath.Join(dir, "beat")
	sb, err := engine.NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"},
		"fs_writable": []any{dir}, "timeout": 60.0})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	work := fmt.Sprintf(`
import os, time
if CLONE_ID == 1:
    time.sleep(5)
    raise SystemExit
if os.fork() == 0:
    os.closerange(0, 3)
    while True:
        with open(%q, "a") as f:
            f.write(".")
        time.sleep(0.02)
time.sleep(0.2)
`, beat)
	resp, kind := call(t, sb, map[string]any{"op": "fork", "n": 2, "parallel": 1, "interpreter": python, "work_src": work})
	if kind != "" || resp["call"] == nil {
		t.Fatalf("fork: %q %v", kind, resp)
	}
	items := resp["call"].(map[string]any)["items"].([]any)
	if len(items) != 1 || num(items[0].(map[string]any)["id"]) != 0 {
		t.Fatalf("first batch: %v", items)
	}
	size := func() int64 {
		st, err := os.Stat(beat)
		if err != nil {
			t.Fatalf("no heartbeat: %v", err)
		}
		return st.Size()
	}
	a := size()
	time.Sleep(500 * time.Millisecond)
	if b := size(); b != a {
		t.Fatalf("clone 0's child lived on after its result: heartbeat %d -> %d bytes in 0.5 s", a, b)
	}
	call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": resp["call"].(map[string]any)["id"], "abort": true})
}
