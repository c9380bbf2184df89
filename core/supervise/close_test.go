//go:build linux

package supervise

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sc "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// every trapped call of the child, as (op, errno) on a fresh sandbox state
func trappedCalls(t *testing.T, sb *sandbox) map[string]syscall.Errno {
	got := map[string]syscall.Errno{}
	fd := sb.open(t, filepath.Join(sb.rw, "f"), unix.O_RDWR)
	got["flock"] = sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno
	got["fcntl"] = sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: unix.F_OFD_SETLK, Arg2: unix.F_WRLCK}).Errno
	s := int(sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM}).Val)
	got["listen"] = sb.do(t, req{Op: "listen", FD: s, Arg: 8}).Errno
	ifd := sb.inotify(t)
	got["inotify_add_watch"] = sb.do(t, req{Op: "watch", FD: ifd, Path: sb.rw, Arg: watchMask}).Errno
	return got
}

func TestCloseFailsClosed(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rwf := filepath.Join(sb.rw, "f")
	host := hostOpen(t, rwf, unix.O_RDONLY)
	must(t, unix.Flock(host, unix.LOCK_EX))
	fd := sb.open(t, rwf, unix.O_RDONLY)
	waiting := sb.async(req{Op: "flock", FD: fd, Arg: unix.LOCK_EX})
	time.Sleep(50 * time.Millisecond)

	var wg sync.WaitGroup // Close is safe concurrently and more than once
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); sb.sup.Close() }()
	}
	wg.Wait()
	select {
	case a := <-waiting:
		if a.Errno != unix.ENOSYS {
			t.Fatalf("the call waiting at Close got %s, want ENOSYS", errnoName(a.Errno))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the call waiting at Close is still waiting")
	}
	must(t, unix.Flock(host, unix.LOCK_UN))
	if flockHeld(t, rwf) {
		t.Fatal("the waiting call got the lock")
	}
	for op, e := range trappedCalls(t, sb) {
		if e != unix.ENOSYS {
			t.Errorf("%s after Close: %s, want ENOSYS", op, errnoName(e))
		}
	}
}

// Close while calls stream in: every call is answered (its result, or ENOSYS).
func TestCloseWhileHandling(t *testing.T) {
	for i := 0; i < 5; i++ {
		sb := newSandbox(t, sandboxOpts{})
		ifd := sb.inotify(t)
		done := sb.async(req{Op: "race_watch", FD: ifd, Path: filepath.Join(sb.rw, "d"), B: filepath.Join(sb.no, "d"), N: 100000, Arg: watchMask})
		time.Sleep(time.Duration(5+10*i) * time.Millisecond)
		sb.sup.Close()
		select {
		case a := <-done:
			if a.Vals[2] == 0 {
				t.Fatalf("no call failed after Close: %v", a.Vals)
			}
			t.Logf("%d watched, %d EACCES, %d after Close", a.Vals[0], a.Vals[1], a.Vals[2])
		case <-time.After(20 * time.Second):
			t.Fatal("calls hang after Close")
		}
	}
}

const supervisorEnv = "SUPERVISE_TEST_SUPERVISOR"

// runSupervisor is the helper process of TestKilledSupervisorFailsClosed: it serves
// fd 3, then waits to be killed.
func runSupervisor(spec string) int {
	var cfg Config
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		return 2
	}
	if _, err := Start(3, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("serving")
	time.Sleep(time.Hour)
	return 0
}

// The supervisor's process is SIGKILLed (a host crash): the kernel releases the
// listener, and the calls waiting and every later trapped call fail with ENOSYS.
func TestKilledSupervisorFailsClosed(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{handOff: true})
	cfg, _ := json.Marshal(Config{Allowed: []string{sb.ro, sb.rw}, ListenNeedsBind: true})
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), supervisorEnv+"="+string(cfg))
	listener := os.NewFile(uintptr(sb.listener), "listener")
	helper.ExtraFiles = []*os.File{listener}
	out, err := helper.StdoutPipe()
	must(t, err)
	must(t, helper.Start())
	listener.Close() // the helper holds the only copy
	buf := make([]byte, 16)
	if n, _ := out.Read(buf); !strings.HasPrefix(string(buf[:n]), "serving") {
		helper.Process.Kill()
		t.Fatalf("the helper does not serve: %q", buf[:n])
	}
	// served by the helper
	rof := filepath.Join(sb.ro, "f")
	fd := sb.open(t, rof, unix.O_RDONLY)
	if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno; e != unix.EACCES {
		t.Fatalf("before the kill: %s, want EACCES", errnoName(e))
	}
	rwf := filepath.Join(sb.rw, "f")
	host := hostOpen(t, rwf, unix.O_RDONLY)
	must(t, unix.Flock(host, unix.LOCK_EX))
	rw := sb.open(t, rwf, unix.O_RDONLY)
	waiting := sb.async(req{Op: "flock", FD: rw, Arg: unix.LOCK_EX})
	time.Sleep(50 * time.Millisecond)

	helper.Process.Kill()
	helper.Wait()
	select {
	case a := <-waiting:
		if a.Errno != unix.ENOSYS {
			t.Fatalf("the waiting call got %s, want ENOSYS", errnoName(a.Errno))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the waiting call still waits after the supervisor died")
	}
	if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno; e != unix.ENOSYS {
		t.Fatalf("after the kill: %s, want ENOSYS", errnoName(e))
	}
	for op, e := range trappedCalls(t, sb) {
		if e != unix.ENOSYS {
			t.Errorf("%s after the kill: %s, want ENOSYS", op, errnoName(e))
		}
	}
}

func TestDenials(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rof := filepath.Join(sb.ro, "f")
	fd := sb.open(t, rof, unix.O_RDONLY)
	for i := 0; i < 3; i++ {
		sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB})
	}
	s := int(sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM}).Val)
	sb.do(t, req{Op: "listen", FD: s, Arg: 8})
	ifd := sb.inotify(t)
	sb.do(t, req{Op: "watch", FD: ifd, Path: filepath.Join(sb.no, "d"), Arg: watchMask})
	sb.do(t, req{Op: "watch", FD: ifd, Path: filepath.Join(sb.rw, "missing"), Arg: watchMask}) // ENOENT: the kernel's answer, no denial
	sb.do(t, req{Op: "flock", FD: 999, Arg: unix.LOCK_EX})                                     // EBADF: likewise
	want := []Denial{
		{Syscall: "flock", Detail: rof, Errno: unix.EACCES, Count: 3},
		{Syscall: "listen", Detail: "0.0.0.0:0 (not bound: listen would autobind a port)", Errno: unix.EACCES, Count: 1},
		{Syscall: "inotify_add_watch", Detail: filepath.Join(sb.no, "d"), Errno: unix.EACCES, Count: 1},
	}
	got := sb.sup.Denials()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("denials\n got %v\nwant %v", got, want)
	}
}

func TestDenialLogIsCapped(t *testing.T) {
	var l denialLog
	for i := 0; i < maxDenials+44; i++ {
		l.add("inotify_add_watch", fmt.Sprintf("/p/%d", i), unix.EACCES)
	}
	l.add("flock", strings.Repeat("x", 10000), unix.EACCES)
	got := l.list()
	if len(got) != maxDenials+1 {
		t.Fatalf("%d entries, want %d and the overflow", len(got), maxDenials)
	}
	if last := got[len(got)-1]; last.Syscall != "*" || last.Count != 45 {
		t.Fatalf("overflow entry %+v, want 45 more", last)
	}
	l2 := denialLog{}
	l2.add("flock", strings.Repeat("x", 10000), unix.EACCES)
	if d := l2.list()[0].Detail; len(d) > maxDenialDetail+8 {
		t.Fatalf("a detail of %d bytes was kept", len(d))
	}
}

// Traps is what a filter can be built from: known names, masked 32-bit comparisons
// for C-int arguments, a handler for every trapped call.
func TestTraps(t *testing.T) {
	names := map[string]bool{}
	for _, h := range handlers {
		names[h.name] = true
	}
	for _, tr := range Traps(Config{ListenNeedsBind: true}) {
		if _, err := sc.GetSyscallFromName(tr.Syscall); err != nil {
			t.Errorf("%s: %v", tr.Syscall, err)
		}
		if !names[tr.Syscall] {
			t.Errorf("%s is trapped but has no handler", tr.Syscall)
		}
		if tr.Arg >= 0 && (tr.Mask != 0xffffffff || len(tr.Values) == 0) {
			t.Errorf("%s: arg %d mask %#x values %v", tr.Syscall, tr.Arg, tr.Mask, tr.Values)
		}
	}
}

// A supervisor that stops for any reason but Close (here Abort, as a loop error
// would) tells OnFail — the engine kills the sandbox with it — and fails every later
// trapped call closed.
func TestAbortFailsClosed(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	fd := sb.open(t, filepath.Join(sb.rw, "f"), unix.O_RDWR)
	if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno; e != 0 {
		t.Fatalf("before: %s", errnoName(e))
	}
	failed := make(chan struct{}, 2)
	sb.sup.OnFail(func() { failed <- struct{}{} })
	sb.sup.Abort("test")
	select {
	case <-failed:
	case <-time.After(3 * time.Second):
		t.Fatal("OnFail was not called")
	}
	<-sb.sup.loopDone
	for i := 0; sb.sup.fd >= 0 && i < 300 && !closedFD(sb.sup); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	for op, e := range trappedCalls(t, sb) {
		if e != unix.ENOSYS {
			t.Errorf("%s after the abort: %s, want ENOSYS", op, errnoName(e))
		}
	}
	if !sb.denied("aborted: test") {
		t.Errorf("the abort is not recorded: %+v", sb.sup.Denials())
	}
	sb.sup.Close() // still fine
	if len(failed) != 0 {
		t.Error("OnFail called twice")
	}
	// Close alone is no failure
	sb2 := newSandbox(t, sandboxOpts{})
	sb2.sup.OnFail(func() { t.Error("OnFail called on Close") })
	sb2.sup.Close()
}

func closedFD(s *Supervisor) bool {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.wake < 0
}

// An allowed path removed on the host after the sandbox was built (an entry of an
// expanded directory) allows nothing, and does not stop the supervisor from starting.
func TestAllowedPathGone(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{cfgFor: func(sb *sandbox) Config {
		return Config{Allowed: []string{sb.ro, sb.rw, filepath.Join(sb.rw, "gone-since-the-build")}, ListenNeedsBind: true}
	}})
	fd := sb.open(t, filepath.Join(sb.rw, "f"), unix.O_RDWR)
	if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno; e != 0 {
		t.Fatalf("flock: %s", errnoName(e))
	}
}
