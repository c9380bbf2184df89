//go:build linux

package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/seccomp"
	"golang.org/x/sys/unix"
)

// fakeRun judges like a host: deny (EACCES) every path containing deny.
type fakeRun struct {
	deny     string
	denyPort int // bind, connect: refused port (0: none)
	asked    atomic.Int64
	done     chan struct{}
	act      *Action
}

func (f *fakeRun) Refused(*Event) (syscall.Errno, string) { return 0, "" }
func (f *fakeRun) Done() <-chan struct{}                  { return f.done }
func (f *fakeRun) Ask(ev *Event, done func(Action))       { done(f.decide(ev)) }
func (f *fakeRun) decide(ev *Event) Action {
	f.asked.Add(1)
	if f.act != nil {
		return *f.act
	}
	if f.deny != "" && (strings.Contains(ev.Path, f.deny) || strings.Contains(ev.Path2, f.deny)) || f.denyPort != 0 && ev.Port == f.denyPort {
		return Action{Kind: ActErrno, Errno: unix.EACCES}
	}
	return Action{Kind: ActContinue}
}

func hostSandbox(t testing.TB, run *fakeRun, syscalls ...string) *sandbox {
	return hostSandboxAllowing(t, run, nil, syscalls...)
}

// hostSandboxAllowing: with calls of the deny list allowed (extra_allow_syscalls).
func hostSandboxAllowing(t testing.TB, run *fakeRun, allow []string, syscalls ...string) *sandbox {
	base, err := seccomp.Compile(seccomp.Config{ExtraAllow: allow})
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandboxWith(t, func(sb *sandbox) Config {
		return Config{Host: &Host{Syscalls: syscalls, Base: base.BPF, RulesetFD: -1}}
	})
	attachHostRun(t, sb, run)
	return sb
}

// attachHostRun attaches the child as run (its pid 1 is the program: noPid1).
func attachHostRun(t testing.TB, sb *sandbox, run HostRun) *RunLog {
	t.Helper()
	pidfd, err := unix.PidfdOpen(sb.cmd.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(pidfd) })
	rl, err := sb.sup.attachHost(&RunLog{nsfd: -1, pidfd: pidfd, pid: sb.cmd.Process.Pid, host: run, noPid1: true})
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// The host judges the supervisor's copy of the path, and the open it allows is
// performed with that copy: a thread flipping the path to a refused one never gets it.
func TestHostOpenRace(t *testing.T) {
	run := &fakeRun{deny: "/no/", done: make(chan struct{})}
	sb := hostSandbox(t, run, "openat")
	r := sb.do(t, req{Op: "race_open", Path: sb.ro + "/f", B: sb.no + "/f", N: 3000})
	if r.Errno != 0 || len(r.Vals) != 3 {
		t.Fatalf("race_open: %v", r)
	}
	ok, reached, failed := r.Vals[0], r.Vals[1], r.Vals[2]
	t.Logf("opened %d, reached the refused file %d, refused %d", ok, reached, failed)
	if reached != 0 {
		t.Fatalf("a racing thread opened the refused file %d times", reached)
	}
	if failed == 0 || ok == 0 {
		t.Fatalf("the race did not happen (opened %d, refused %d)", ok, failed)
	}
}

// The sandbox's own filter answers first: a call it refuses never reaches the host.
func TestHostBuiltinRulesFirst(t *testing.T) {
	run := &fakeRun{done: make(chan struct{})}
	sb := hostSandbox(t, run, "openat", "getppid")
	// a set-uid create: the base filter's EPERM
	if r := sb.do(t, req{Op: "open_mode", Path: sb.rw + "/suid", Arg: unix.O_CREAT | unix.O_WRONLY, Arg2: 0o4755}); r.Errno != unix.EPERM {
		t.Fatalf("set-uid create: %v", errnoName(r.Errno))
	}
	if run.asked.Load() != 0 {
		t.Fatalf("the host was asked about a call the filter refuses")
	}
	if r := sb.do(t, req{Op: "open", Path: sb.ro + "/f"}); r.Errno != 0 {
		t.Fatalf("open: %v", errnoName(r.Errno))
	}
	if run.asked.Load() != 1 {
		t.Fatalf("asked %d times", run.asked.Load())
	}
	run.act = &Action{Kind: ActReturn, Value: 4242}
	if r := sb.do(t, req{Op: "getppid"}); r.Val != 4242 {
		t.Fatalf("getppid: %v", r)
	}
}

// A trapped call is the run's whose pid namespace its caller is in, found as the
// run of a denial is (the attached runs): a call of a namespace no run is attached
// to is refused; one made while a run is being started waits for its attach and
// is then judged by that run; after Detach its calls belong to no run again.
func TestHostCallsFindTheirRunByAttach(t *testing.T) {
	base, err := seccomp.Compile(seccomp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandboxWith(t, func(sb *sandbox) Config {
		return Config{Host: &Host{Syscalls: []string{"openat"}, Base: base.BPF, RulesetFD: -1}}
	})
	if r := sb.do(t, req{Op: "open", Path: sb.ro + "/f"}); r.Errno != unix.EPERM {
		t.Fatalf("a call of no run: %v, want EPERM", errnoName(r.Errno))
	}
	run := &fakeRun{deny: "/no/", done: make(chan struct{})}
	done := sb.sup.Starting()
	ch := sb.async(req{Op: "open", Path: sb.no + "/f"})
	time.Sleep(200 * time.Millisecond)
	select {
	case r := <-ch:
		t.Fatalf("answered before its run was attached: %v", errnoName(r.Errno))
	default:
	}
	rl := attachHostRun(t, sb, run)
	done()
	// (a call may be asked twice: a signal of the child's runtime interrupts it
	// while it waits, and the kernel restarts it as a new call)
	select {
	case r := <-ch:
		if r.Errno != unix.EACCES || run.asked.Load() < 1 {
			t.Fatalf("after attach: %v, asked %d (want EACCES from the run's judge)", errnoName(r.Errno), run.asked.Load())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting call was not judged after attach")
	}
	asked := run.asked.Load()
	if r := sb.do(t, req{Op: "open", Path: sb.ro + "/f"}); r.Errno != 0 || run.asked.Load() <= asked {
		t.Fatalf("attached: %v, asked %d (before: %d)", errnoName(r.Errno), run.asked.Load(), asked)
	}
	sb.sup.Detach(rl)
	time.Sleep(50 * time.Millisecond) // an interrupted copy of a call is judged by now
	asked = run.asked.Load()
	if r := sb.do(t, req{Op: "open", Path: sb.ro + "/f"}); r.Errno != unix.EPERM || run.asked.Load() != asked {
		t.Fatalf("detached: %v, asked %d (before: %d)", errnoName(r.Errno), run.asked.Load(), asked)
	}
}

// An open a judge allowed is performed on a sandbox thread, which waits as the
// kernel would for a FIFO's other end (hostopen.go: openOnThread). That wait ends
// when the other end comes (the open succeeds) and, with nobody to answer any more,
// when the supervisor closes: Close does not wait for ever on a FIFO the sandbox
// made (without unblockFIFO it does).
func TestHostOpenFIFOWaitEnds(t *testing.T) {
	run := &fakeRun{done: make(chan struct{})}
	sb := hostSandbox(t, run, "openat")
	for _, mode := range []int{unix.O_RDONLY, unix.O_WRONLY} {
		p := filepath.Join(sb.rw, fmt.Sprintf("p%d", mode))
		must(t, unix.Mkfifo(p, 0o666))
		ch := sb.async(req{Op: "open", Path: p, Arg: int64(mode)})
		select {
		case r := <-ch:
			t.Fatalf("open(%d) of a FIFO with no other end answered: %v", mode, r)
		case <-time.After(150 * time.Millisecond):
		}
		other := unix.O_WRONLY
		if mode == unix.O_WRONLY {
			other = unix.O_RDONLY
		}
		fd, err := unix.Open(p, other|unix.O_CLOEXEC, 0)
		must(t, err)
		select {
		case r := <-ch:
			if r.Errno != 0 || r.Val < 0 {
				t.Fatalf("open(%d) of a FIFO once its other end came: %v", mode, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("open(%d) of a FIFO still waits after its other end came", mode)
		}
		unix.Close(fd)
	}
	for _, mode := range []int{unix.O_RDONLY, unix.O_WRONLY} {
		sb.async(req{Op: "open", Path: filepath.Join(sb.rw, fmt.Sprintf("p%d", mode)), Arg: int64(mode)})
	}
	time.Sleep(150 * time.Millisecond)
	closed := make(chan struct{})
	go func() { sb.sup.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for the opens of FIFOs performed for the sandbox")
	}
}

// TestHostOpenPerformed: an open a judge allowed, performed for the caller (found
// O_PATH, then opened through that descriptor: hostopen.go), answers as the
// kernel's own open of the same path with the same flags, in the same child, and
// leaves the same tree: each case run continued (naive) and performed.
func TestHostOpenPerformed(t *testing.T) {
	run := &fakeRun{deny: "/no/", done: make(chan struct{})}
	sb := hostSandbox(t, run, "openat")
	rw, ro := sb.rw, sb.ro
	must(t, os.Symlink("new", rw+"/dangling"))
	must(t, os.Symlink("sub/made", rw+"/danglingsub"))
	must(t, os.Mkdir(rw+"/sub", 0o755))
	must(t, os.Symlink("loop2", rw+"/loop1"))
	must(t, os.Symlink("loop1", rw+"/loop2"))
	if r := sb.do(t, req{Op: "chdir", Path: rw + "/d"}); r.Errno != 0 {
		t.Fatalf("chdir: %v", r.Errno)
	}
	reset := func() {
		for _, p := range []string{"new", "sub/made", "c", "d/rel"} {
			os.Remove(filepath.Join(rw, p))
		}
		os.WriteFile(rw+"/t", []byte("0123456789"), 0o644)
	}
	state := func() string {
		var b strings.Builder
		for _, p := range []string{"new", "sub/made", "c", "d/rel", "t", "f"} {
			if st, err := os.Lstat(filepath.Join(rw, p)); err == nil {
				fmt.Fprintf(&b, "%s %v %d; ", p, st.Mode(), st.Size())
			} else {
				fmt.Fprintf(&b, "%s absent; ", p)
			}
		}
		return b.String()
	}
	const (
		rd, wr, cr, ex = unix.O_RDONLY, unix.O_WRONLY, unix.O_CREAT, unix.O_EXCL
	)
	for _, tc := range []struct {
		name  string
		path  string
		flags int
		want  unix.Errno
	}{
		{"read a file", rw + "/f", rd, 0},
		{"read through a link", rw + "/flink", rd, 0},
		{"O_NOFOLLOW on a link", rw + "/flink", rd | unix.O_NOFOLLOW, unix.ELOOP},
		{"O_PATH|O_NOFOLLOW on a link", rw + "/flink", unix.O_PATH | unix.O_NOFOLLOW, 0},
		{"O_DIRECTORY on a file", rw + "/f", rd | unix.O_DIRECTORY, unix.ENOTDIR},
		{"a directory", rw + "/d", rd | unix.O_DIRECTORY, 0},
		{"a directory for writing", rw + "/d", wr, unix.EISDIR},
		{"a file with a slash", rw + "/f/", rd, unix.ENOTDIR},
		{"missing", rw + "/missing", rd, unix.ENOENT},
		{"a loop", rw + "/loop1", rd, unix.ELOOP},
		{"create", rw + "/c", wr | cr, 0},
		{"create existing", rw + "/f", wr | cr, 0},
		{"create exclusive, existing", rw + "/f", wr | cr | ex, unix.EEXIST},
		{"create exclusive", rw + "/c", wr | cr | ex, 0},
		{"create through a dangling link", rw + "/dangling", wr | cr, 0},
		{"create through a dangling link into a directory", rw + "/danglingsub", wr | cr, 0},
		{"create exclusive through a dangling link", rw + "/dangling", wr | cr | ex, unix.EEXIST},
		{"create O_NOFOLLOW through a dangling link", rw + "/dangling", wr | cr | unix.O_NOFOLLOW, unix.ELOOP},
		{"create in a missing directory", rw + "/nodir/c", wr | cr, unix.ENOENT},
		{"create relative to the cwd", "rel", wr | cr, 0},
		{"truncate", rw + "/t", wr | unix.O_TRUNC, 0},
		{"write on the read-only mount", ro + "/f", wr, unix.EROFS},
		{"create on the read-only mount", ro + "/c", wr | cr, unix.EROFS},
		{"O_TMPFILE", rw + "/d", unix.O_TMPFILE | unix.O_RDWR, 0},
		{"read a FIFO without waiting", rw + "/p", rd | unix.O_NONBLOCK, 0},
	} {
		must(t, unix.Mkfifo(rw+"/p", 0o644))
		var got [2]resp
		var after [2]string
		for i, naive := range []bool{true, false} {
			reset()
			naiveContinue = naive
			got[i] = sb.do(t, req{Op: "open_mode", Path: tc.path, Arg: int64(tc.flags), Arg2: 0o644})
			naiveContinue = false
			after[i] = state()
			got[i].ID = 0
		}
		os.Remove(rw + "/p")
		if got[0].Errno != tc.want {
			t.Errorf("%s: the kernel answers %v, the test expects %v", tc.name, errnoName(got[0].Errno), errnoName(tc.want))
		}
		if got[0].Errno != got[1].Errno || after[0] != after[1] {
			t.Errorf("%s:\n kernel    %s %s\n performed %s %s", tc.name, errnoName(got[0].Errno), after[0], errnoName(got[1].Errno), after[1])
		}
	}
	if run.asked.Load() < 2*25 {
		t.Errorf("the judge was asked %d times: the calls were not trapped", run.asked.Load())
	}
}

// An open performed for the caller answers with the descriptor it installs
// (SECCOMP_ADDFD_FLAG_SEND) while signals keep coming to the supervisor's threads
// (a ptrace stop's SIGCHLD, the Go runtime's preemption, the host program's own):
// every open the child makes gets the file it named. A signal that interrupted
// the ioctl before the child took the descriptor left the call answered 0 with no
// descriptor installed (the kernel marks it replied when the request is queued),
// so the child's open "returned" its stdin.
func TestHostInjectFDUnderSignals(t *testing.T) {
	run := &fakeRun{done: make(chan struct{})}
	sb := hostSandbox(t, run, "openat")
	var st unix.Stat_t
	must(t, unix.Stat(sb.ro+"/f", &st))
	stop := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ts, _ := threadsOf(os.Getpid())
			for _, tid := range ts {
				if unix.Tgkill(os.Getpid(), tid, unix.SIGURG) == nil {
					n++
				}
			}
		}
	}()
	r := sb.do(t, req{Op: "open_check", Path: sb.ro + "/f", Arg: int64(st.Ino), N: 3000})
	close(stop)
	n := <-sent
	t.Logf("%d opens, %d of them wrong, %d signals sent", 3000, r.Val, n)
	if r.Errno != 0 || r.Val != 0 {
		t.Fatalf("%d of 3000 opens did not give the caller the file it opened (%v)", r.Val, r)
	}
}
