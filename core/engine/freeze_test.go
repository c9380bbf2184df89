//go:build sandtrap_testhook

package engine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"golang.org/x/sys/unix"
)

// spinners starts a run of n processes that spin and, each turn, SIGCONT every
// other process of the run (kill -CONT -1: every member of its pid namespace but
// pid 1 and itself) — a tree that tries to undo a pause from inside.
func spinners(t *testing.T, sb *Sandbox, n int) (map[string]any, string) {
	t.Helper()
	marker := fmt.Sprintf("cont%d_%d", os.Getpid(), time.Now().UnixNano())
	loop := "while :; do kill -CONT -1 2>/dev/null; done"
	script := ""
	for i := 1; i < n; i++ {
		script += "(sh -c '" + loop + "' " + marker + " &); "
	}
	script += loop
	m := popen(t, sb, []string{"sh", "-c", script, marker}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for len(withArg(marker)) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(withArg(marker)); got < n {
		t.Fatalf("%d of %d spinners started", got, n)
	}
	time.Sleep(100 * time.Millisecond)
	t.Cleanup(func() { request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]}) })
	return m, marker
}

// wantVia is how this host pauses a run: the freezer where this process can make
// a cgroup v2 (root here: the hybrid host's /sys/fs/cgroup/unified), else SIGSTOP.
func wantVia(t *testing.T, m map[string]any) string {
	t.Helper()
	_, err := cgroup.FreezerRoot()
	want := "freezer"
	if err != nil {
		want = "sigstop"
		if !strings.Contains(fmt.Sprint(m["pause_note"]), err.Error()) {
			t.Fatalf("SIGSTOP fallback not reported with its reason %q: %v", err, m)
		}
	}
	if m["pause"] != want {
		t.Fatalf("pause via %v, want %s (%v)", m["pause"], want, m)
	}
	return want
}

// The freezer holds against the run itself: processes that SIGCONT each other in a
// loop use no CPU once paused, and SIGCONT sent to every member from outside
// (by anyone able to signal them) resumes none. Under the SIGSTOP fallback the
// same tree undoes the pause (TestPauseSIGSTOPIsUndoneFromInside).
func TestPauseFreezerHoldsAgainstSIGCONT(t *testing.T) {
	sb := newSB(t, nil)
	m, marker := spinners(t, sb, 3)
	if wantVia(t, m) != "freezer" {
		t.Skip("no cgroup v2 freezer for this user: TestPauseSIGSTOPIsUndoneBySIGCONT covers the fallback")
	}
	r, kind := request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
	if kind != "" || r["paused"] != true || r["via"] != "freezer" {
		t.Fatalf("pause: %v %s", r, kind)
	}
	for _, pid := range withArg(marker) {
		unix.Kill(pid, unix.SIGCONT)
	}
	before := treeCPUTicks(marker)
	time.Sleep(500 * time.Millisecond)
	during := treeCPUTicks(marker) - before
	for _, pid := range withArg(marker) {
		if s := procState(pid); s == 'R' {
			t.Fatalf("pid %d runs (state %c) in a frozen run", pid, s)
		}
	}
	t.Logf("frozen, with SIGCONT from inside and outside: %d ticks in 0.5 s", during)
	if during > 1 {
		t.Fatalf("paused by the freezer, the tree used %d ticks in 0.5 s", during)
	}
	if _, kind := request(t, sb, map[string]any{"op": "process_resume", "process": m["process"]}); kind != "" {
		t.Fatal(kind)
	}
	before = treeCPUTicks(marker)
	time.Sleep(500 * time.Millisecond)
	if after := treeCPUTicks(marker) - before; after < 3 {
		t.Fatalf("resumed, the tree used only %d ticks in 0.5 s", after)
	}
	// kill while frozen: the whole tree dies
	request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	if res := resultOf(t, waitProc(t, sb, m, 5)); res["reason"] != "killed" {
		t.Fatalf("%v", res)
	}
	if pids := withArg(marker); len(pids) > 0 {
		t.Fatalf("%v survived a kill while frozen", pids)
	}
}

// The SIGSTOP design (a host without a cgroup v2 freezer, reported: popen's
// "pause": "sigstop"): any SIGCONT resumes a paused run — from a member the stop
// pass has not reached yet, or from any process able to signal its members (here
// the test, as a sibling of the same uid would). The same SIGCONT leaves a frozen
// run frozen (TestPauseFreezerHoldsAgainstSIGCONT).
func TestPauseSIGSTOPIsUndoneBySIGCONT(t *testing.T) {
	cgroup.SetNoFreezer(true)
	defer cgroup.SetNoFreezer(false)
	sb := newSB(t, nil)
	marker := fmt.Sprintf("stop%d_%d", os.Getpid(), time.Now().UnixNano())
	q := popen(t, sb, []string{"sh", "-c", "while :; do :; done", marker}, nil)
	defer request(t, sb, map[string]any{"op": "process_kill", "process": q["process"]})
	if q["pause"] != "sigstop" || !strings.Contains(fmt.Sprint(q["pause_note"]), "freezer") {
		t.Fatalf("fallback not reported: %v", q)
	}
	time.Sleep(100 * time.Millisecond)
	if r, kind := request(t, sb, map[string]any{"op": "process_pause", "process": q["process"]}); kind != "" || r["via"] != "sigstop" {
		t.Fatalf("%v %s", r, kind)
	}
	before := treeCPUTicks(marker)
	time.Sleep(300 * time.Millisecond)
	if d := treeCPUTicks(marker) - before; d > 1 {
		t.Fatalf("SIGSTOPped, the run used %d ticks", d)
	}
	for _, pid := range withArg(marker) {
		unix.Kill(pid, unix.SIGCONT)
	}
	time.Sleep(50 * time.Millisecond)
	before = treeCPUTicks(marker)
	time.Sleep(300 * time.Millisecond)
	d := treeCPUTicks(marker) - before
	t.Logf("SIGSTOP pause, then one SIGCONT: %d ticks in 0.3 s", d)
	if d < 2 {
		t.Fatalf("SIGCONT did not resume a SIGSTOPped run (%d ticks)", d)
	}
}

// The freezer of a run is gone once it ended.
func TestPauseFreezerRemoved(t *testing.T) {
	root, err := cgroup.FreezerRoot()
	if err != nil {
		t.Skip(err)
	}
	sb := newSB(t, nil)
	m := popen(t, sb, []string{"sleep", "30"}, nil)
	wantVia(t, m)
	pid, _ := m["pid"].(int64)
	if v, ok := m["pid"].(uint16); ok {
		pid = int64(v)
	}
	if v, ok := m["pid"].(uint32); ok {
		pid = int64(v)
	}
	dir := freezerOf(t, int(pid))
	if !strings.HasPrefix(dir, root) && sb.Group() == nil {
		t.Fatalf("freezer %s not beneath %s", dir, root)
	}
	request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
	request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
	resultOf(t, waitProc(t, sb, m, 5))
	for i := 0; i < 200; i++ { // removed just after the run ended
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", dir, err)
	}
}

// freezerOf is the cgroup v2 directory of pid.
func freezerOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := cgroup.FreezerRoot()
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			// root is the host's own cgroup; the run's is one level below the mount
			mnt := root
			if own, _ := os.ReadFile("/proc/self/cgroup"); true {
				for _, ol := range strings.Split(string(own), "\n") {
					if op, ok := strings.CutPrefix(ol, "0::"); ok {
						mnt = strings.TrimSuffix(root, strings.TrimSuffix(op, "/"))
					}
				}
			}
			return mnt + p
		}
	}
	t.Fatal("no v2 cgroup")
	return ""
}

// procState is the state letter of /proc/pid/stat (0: gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// BenchmarkPauseResume: one pause and one resume of a run of 4 spinning processes,
// by the freezer and by SIGSTOP; and what the freezer adds to popen + wait of true.
func BenchmarkPauseResume(b *testing.B) {
	for _, via := range []string{"freezer", "sigstop"} {
		b.Run(via, func(b *testing.B) {
			cgroup.SetNoFreezer(via == "sigstop")
			defer cgroup.SetNoFreezer(false)
			t := &testing.T{}
			sb := newSB(t, nil)
			defer sb.Close()
			loop := "while :; do :; done"
			m, kind := request(t, sb, map[string]any{"op": "popen", "argv": []string{"sh", "-c", "(sh -c '" + loop + "' &); (sh -c '" + loop + "' &); (sh -c '" + loop + "' &); " + loop}})
			if kind != "" || m["pause"] != via {
				b.Fatalf("%v %s", m, kind)
			}
			time.Sleep(200 * time.Millisecond)
			b.ResetTimer()
			var pause, resume time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				request(t, sb, map[string]any{"op": "process_pause", "process": m["process"]})
				t1 := time.Now()
				request(t, sb, map[string]any{"op": "process_resume", "process": m["process"]})
				pause += t1.Sub(t0)
				resume += time.Since(t1)
			}
			b.ReportMetric(float64(pause.Microseconds())/float64(b.N), "pause-us")
			b.ReportMetric(float64(resume.Microseconds())/float64(b.N), "resume-us")
			request(t, sb, map[string]any{"op": "process_kill", "process": m["process"]})
		})
		b.Run("popen-true-"+via, func(b *testing.B) {
			cgroup.SetNoFreezer(via == "sigstop")
			defer cgroup.SetNoFreezer(false)
			t := &testing.T{}
			sb := newSB(t, nil)
			defer sb.Close()
			for i := 0; i < b.N; i++ {
				m, kind := request(t, sb, map[string]any{"op": "popen", "argv": []string{"/bin/true"}})
				if kind != "" {
					b.Fatal(kind)
				}
				request(t, sb, map[string]any{"op": "process_wait", "process": m["process"]})
			}
		})
	}
}
