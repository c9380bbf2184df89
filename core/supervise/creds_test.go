//go:build linux

package supervise

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The ids PIDFD_GET_INFO gives for a thread are that thread's own (not its
// process leader's), each of the eight where /proc/<tid>/status puts it: a thread
// of this test process takes distinct real, effective, saved and filesystem ids.
func TestPidfdCredsAreTheThreads(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a thread ids of its own")
	}
	type ready struct {
		tid int
		err error
	}
	up, done := make(chan ready), make(chan struct{})
	var hold func()
	hold = func() {
		runtime.LockOSThread()
		if unix.Gettid() == os.Getpid() {
			// the leader: its pidfd names the process too; a thread that is not is
			// the case to show (its locked sibling keeps this one from being reused)
			defer runtime.UnlockOSThread()
			go hold()
			<-done
			return
		}
		// never unlocked from here: the thread ends with its odd ids
		for _, c := range [][4]uintptr{{unix.SYS_SETRESGID, 1001, 1002, 1003}, {unix.SYS_SETFSGID, 1003, 0, 0},
			{unix.SYS_SETRESUID, 2001, 2002, 2003}, {unix.SYS_SETFSUID, 2003, 0, 0}} {
			if c[0] == unix.SYS_SETFSGID || c[0] == unix.SYS_SETFSUID {
				unix.RawSyscall(c[0], c[1], 0, 0) // returns the previous fsid, no error
				continue
			}
			if _, _, e := unix.RawSyscall(c[0], c[1], c[2], c[3]); e != 0 {
				up <- ready{err: e}
				return
			}
		}
		up <- ready{tid: unix.Gettid()}
		<-done
	}
	go hold()
	r := <-up
	defer close(done)
	if r.err != nil {
		t.Fatal(r.err)
	}
	c := &call{s: &Supervisor{}, pidfd: -1, detached: true}
	c.n.Pid = uint32(r.tid)
	defer c.release()
	got, err := c.pidfdCreds()
	if err == unix.ENOTTY || err == unix.EINVAL {
		t.Skip("no PIDFD_GET_INFO (Linux < 6.13)")
	}
	if err != nil {
		t.Fatal(err)
	}
	want, err := readCreds("/proc/" + strconv.Itoa(r.tid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if got.uid != want.uid || got.gid != want.gid || want.uid != [4]uint32{2001, 2002, 2003, 2003} || want.gid != [4]uint32{1001, 1002, 1003, 1003} {
		t.Fatalf("pidfd: uid %v gid %v; /proc: uid %v gid %v", got.uid, got.gid, want.uid, want.gid)
	}
	// another thread of the process (it may be the leader: the test's goroutine may
	// have run on it) has its own
	other, stop := make(chan int), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		other <- unix.Gettid()
		<-stop
	}()
	o := &call{s: &Supervisor{}, pidfd: -1, detached: true}
	o.n.Pid = uint32(<-other)
	defer close(stop)
	defer o.release()
	if l, err := o.pidfdCreds(); err != nil || l.uid != [4]uint32{} || l.gid != [4]uint32{} {
		t.Fatalf("another thread: %+v %v", l, err)
	}
}
