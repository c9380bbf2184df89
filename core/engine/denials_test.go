package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runs "github.com/sandtrap/sandtrap/core/run"
	"golang.org/x/sys/unix"
)

// denyScript makes denied calls: flock of a read-only file, an inotify watch
// outside the policy, a connect to a host net_allow does not name, and N connects to
// distinct addresses (the cap).
const denyScript = `
import ctypes, errno, fcntl, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def name(e): return errno.errorcode.get(e, str(e))
act = sys.argv[1]
if act == "flock":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH); print("OK")
    except OSError as e: print(name(e.errno))
elif act == "inotify":
    fd = libc.inotify_init1(0)
    r = libc.inotify_add_watch(fd, sys.argv[2].encode(), 0xfff)
    print("OK" if r >= 0 else name(ctypes.get_errno()))
elif act == "connect":
    s = socket.socket(); s.settimeout(2)
    r = s.connect_ex((sys.argv[2], int(sys.argv[3])))
    print(name(r) if r else "OK")
elif act == "many":
    n, distinct = int(sys.argv[2]), sys.argv[3] == "1"
    s = socket.socket()
    t = time.perf_counter()
    for i in range(n):
        s.connect_ex(("10.99.%d.%d" % ((i >> 8) & 255, i & 255), 1 + (i >> 16)) if distinct else ("10.99.0.1", 1))
    print("%.6f" % (time.perf_counter() - t))
`

func denyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "deny.py"), []byte(denyScript), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ro.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func denySandbox(t *testing.T, dir string) *Sandbox {
	return mustSandbox(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}, "timeout": 60.0,
		"net_allow": []any{"127.0.0.1:9"}})
}

func findDenial(r *Result, syscall, errno, sub string) *Denial {
	for i, d := range r.Denials {
		if d.Syscall == syscall && d.Errno == errno && strings.Contains(d.Path+d.Address, sub) {
			return &r.Denials[i]
		}
	}
	return nil
}

// TestDenialsReported: each refusal of the supervisor reaches the run's result with
// its syscall, path or address, errno and count; the sources say what is reported.
func TestDenialsReported(t *testing.T) {
	dir := denyDir(t)
	sb := denySandbox(t, dir)
	py := filepath.Join(dir, "deny.py")
	cases := []struct {
		argv           []string
		out, sc, errno string
		sub            string
	}{
		{[]string{"flock", filepath.Join(dir, "ro.txt")}, "EACCES", "flock", "EACCES", filepath.Join(dir, "ro.txt")},
		{[]string{"inotify", "/etc"}, "EACCES", "inotify_add_watch", "EACCES", "/etc"},
		{[]string{"connect", "10.1.2.3", "80"}, "EACCES", "connect", "EACCES", "10.1.2.3:80"},
	}
	for _, c := range cases {
		r := run(sb, append([]string{sysPython, py}, c.argv...)...)
		if got := strings.TrimSpace(string(r.Stdout)); got != c.out {
			t.Errorf("%v: %q, want %s (%s)", c.argv, got, c.out, r.Stderr)
			continue
		}
		d := findDenial(r, c.sc, c.errno, c.sub)
		if d == nil {
			t.Errorf("%v: no %s %s denial naming %s in %+v", c.argv, c.sc, c.errno, c.sub, r.Denials)
			continue
		}
		if d.Count != 1 || d.Source != SourceSupervisor || d.ErrnoNr != 13 {
			t.Errorf("%v: %+v", c.argv, *d)
		}
		if r.DenialsSources[SourceSupervisor] != "reported" || !strings.HasPrefix(r.DenialsSources[SourceLandlock], "not reported") ||
			!strings.HasPrefix(r.DenialsSources[SourceSeccomp], "not reported") {
			t.Errorf("sources: %v", r.DenialsSources)
		}
		if len(r.Denials) != 1 {
			t.Errorf("%v: want exactly its own denial, got %+v", c.argv, r.Denials)
		}
	}
	// an allowed run reports none
	r := run(sb, sysPython, py, "connect", "127.0.0.1", "9")
	if len(r.Denials) != 0 {
		t.Errorf("an allowed connect reported %+v", r.Denials)
	}
}

// TestDenialsPerRun: concurrent runs of one sandbox (one supervisor) each get their
// own denials, never another's.
func TestDenialsPerRun(t *testing.T) {
	dir := denyDir(t)
	sb := denySandbox(t, dir)
	const n = 6
	res := make([]*Result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// run i makes 50*(i+1) denied connects to its own address
			script := fmt.Sprintf("import socket\ns=socket.socket()\nfor _ in range(%d): s.connect_ex(('10.7.0.%d', 80))\n", 50*(i+1), i+1)
			res[i] = run(sb, sysPython, "-c", script)
		}(i)
	}
	wg.Wait()
	for i, r := range res {
		if !r.Success {
			t.Fatalf("run %d: %+v %s", i, r.Error, r.Stderr)
		}
		if len(r.Denials) != 1 {
			t.Errorf("run %d: want one entry, got %+v", i, r.Denials)
			continue
		}
		d := r.Denials[0]
		if want := fmt.Sprintf("10.7.0.%d:80", i+1); !strings.Contains(d.Address, want) || d.Count != 50*(i+1) {
			t.Errorf("run %d: %+v, want %d of %s", i, d, 50*(i+1), want)
		}
	}
}

// TestDenialsCap: 1e5 denied calls to distinct addresses keep 256 entries and count
// the rest; 1e4 to one address are one entry. The log's cost is logged.
func TestDenialsCap(t *testing.T) {
	dir := denyDir(t)
	sb := denySandbox(t, dir)
	py := filepath.Join(dir, "deny.py")
	const n = 100000
	start := time.Now()
	r := run(sb, sysPython, py, "many", fmt.Sprint(n), "1")
	wall := time.Since(start)
	if !r.Success {
		t.Fatalf("%+v %s", r.Error, r.Stderr)
	}
	total := r.DenialsDropped
	for _, d := range r.Denials {
		total += d.Count
	}
	if len(r.Denials) != 256 || total != n || r.DenialsDropped != n-256 {
		t.Errorf("%d entries, %d dropped, %d counted; want 256, %d, %d", len(r.Denials), r.DenialsDropped, total, n-256, n)
	}
	r1 := run(sb, sysPython, py, "many", fmt.Sprint(n/10), "0")
	if len(r1.Denials) != 1 || r1.Denials[0].Count != n/10 || r1.DenialsDropped != 0 {
		t.Errorf("one address: %+v dropped %d", r1.Denials, r1.DenialsDropped)
	}
	t.Logf("1e5 denied connects to distinct addresses: %s s in the program (%v wall); 1e4 to one address: %s s",
		strings.TrimSpace(string(r.Stdout)), wall, strings.TrimSpace(string(r1.Stdout)))

	// The log's cost: CPU time of this process (the supervisor) and of the run per
	// denied call, with the per-run log and with the sandbox's log only, interleaved
	// (CPU time, not wall time: the machine is shared).
	runs.NoAttribution = true
	plain := denySandbox(t, dir)
	run(plain, "/bin/true") // its zygote (and supervisor) start without attribution
	runs.NoAttribution = false
	const m = 10000
	var cpu [2]time.Duration
	for i := 0; i < 3; i++ {
		for j, s := range []*Sandbox{sb, plain} {
			before := selfCPU()
			r := run(s, sysPython, py, "many", fmt.Sprint(m), "0")
			cpu[j] += selfCPU() - before + time.Duration((r.Usage.CPUUserS+r.Usage.CPUSysS)*float64(time.Second))
			if want := map[bool]int{true: 1, false: 0}[s == sb]; len(r.Denials) != want {
				t.Errorf("attributed=%v: %+v", s == sb, r.Denials)
			}
		}
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 3 / m / 1000 }
	t.Logf("CPU per denied call (supervisor + program): %.2f µs with the per-run log, %.2f µs without (%+.1f%%)",
		per(cpu[0]), per(cpu[1]), 100*(per(cpu[0])/per(cpu[1])-1))
}

// selfCPU is this process's CPU time so far (the supervisor's goroutines and the test).
func selfCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
