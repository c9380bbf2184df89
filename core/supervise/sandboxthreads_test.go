//go:build linux

package supervise

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSandboxThreadsKeptByKind: calls of one kind reuse a thread; nothing of a
// call's fs_struct (umask, cwd) reaches the next; other credentials get threads
// of their own; Close ends the waiting ones.
func TestSandboxThreadsKeptByKind(t *testing.T) {
	s := &Supervisor{}
	tid := func(cr *creds, fs *threadFS) int {
		v, err := s.asSandbox(cr, fs, func() (int, error) { return unix.Gettid(), nil })
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := tid(nil, nil)
	for i := 0; i < 50; i++ {
		if got := tid(nil, nil); got != first {
			t.Fatalf("call %d ran on thread %d, the first on %d: not kept", i, got, first)
		}
	}
	if tid(nil, &threadFS{umask: 0o22, dir: -1}) == first {
		t.Fatalf("a call with an fs_struct of its own ran on a thread sharing the process's")
	}

	// fs_struct per call: the previous call's cwd and umask do not stay
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	dfd, err := unix.Open(sub, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	cwd, _ := os.Getwd()
	create := func(name string, umask uint32, d int) (uint32, string) {
		var st unix.Stat_t
		var wd string
		_, err := s.asSandbox(nil, &threadFS{umask: umask, dir: d}, func() (int, error) {
			fd, err := unix.Open(name, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
			if err != nil {
				return -1, err
			}
			defer unix.Close(fd)
			wd, _ = unix.Getwd()
			return 0, unix.Fstat(fd, &st)
		})
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o777, wd
	}
	if m, wd := create("a", 0o077, dfd); m != 0o600 || wd != sub {
		t.Fatalf("umask 077 in sub: mode %o, cwd %s", m, wd)
	}
	if m, wd := create(filepath.Join(dir, "b"), 0o002, -1); m != 0o664 || wd != cwd {
		t.Fatalf("the next call: mode %o (want 664), cwd %s (want the process's %s)", m, wd, cwd)
	}

	// another caller's credentials: a thread of their own, holding them
	if os.Geteuid() == 0 {
		euid := func(uid uint32) (int, int) {
			cr := &creds{uid: [4]uint32{uid, uid, uid, uid}, gid: [4]uint32{uid, uid, uid, uid}}
			var id int
			v, err := s.asSandbox(cr, nil, func() (int, error) { id = unix.Gettid(); return unix.Geteuid(), nil })
			if err != nil {
				t.Fatal(err)
			}
			return v, id
		}
		a, ta := euid(1234)
		b, tb := euid(4321)
		a2, ta2 := euid(1234)
		if a != 1234 || b != 4321 || a2 != 1234 || ta == tb || ta2 != ta || ta == first {
			t.Fatalf("euid %d on %d, %d on %d, %d on %d (ours on %d)", a, ta, b, tb, a2, ta2, first)
		}
	}

	s.threads.close()
	// (a goroutine ending locked to the main thread wedges it instead: Go never ends
	// a process's main thread; in the library the engine's goroutines never run there)
	deadline := time.Now().Add(5 * time.Second)
	for first != os.Getpid() {
		if _, err := os.Stat("/proc/self/task/" + itoa(first)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still there after close", first)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tid(nil, nil) == first {
		t.Fatalf("a call after close ran on the closed thread")
	}
}

// TestSandboxThreadNeverOnTheFirstThread: a performing or tracer thread that
// starts on the runtime's first thread moves to another (Go never ends the first
// thread: a tracer ending there would keep its tracees traced). The first thread
// is played by a thread of the test's, locked.
func TestSandboxThreadNeverOnTheFirstThread(t *testing.T) {
	s := &Supervisor{}
	defer s.threads.close()
	done := make(chan [2]int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		me := unix.Gettid()
		saved := mainThread.Load()
		mainThread.Store(int64(me))
		defer mainThread.Store(saved)
		j := &sandboxJob{f: func() (int, error) { return unix.Gettid(), nil }}
		go func() { v, _ := j.wait(); done <- [2]int{me, v} }()
		s.sandboxThread(tracerKind, nil, false, j) // returns once moved
		if unix.Gettid() != me {
			t.Errorf("the locked goroutine left its thread")
		}
	}()
	select {
	case r := <-done:
		if r[1] == r[0] || r[1] <= 0 {
			t.Fatalf("the job ran on thread %d, the 'first' thread being %d", r[1], r[0])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the job did not run")
	}
}
