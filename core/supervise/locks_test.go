//go:build linux

package supervise

import (
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostOpen opens a file in the test process (outside the sandbox), for checking
// what the child's locks really do.
func hostOpen(t testing.TB, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// flockHeld: another process's LOCK_EX|LOCK_NB on path fails with EWOULDBLOCK.
func flockHeld(t testing.TB, path string) bool {
	fd := hostOpen(t, path, unix.O_RDONLY)
	err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		unix.Flock(fd, unix.LOCK_UN)
		return false
	}
	if err != unix.EWOULDBLOCK {
		t.Fatalf("host flock: %v", err)
	}
	return true
}

// posixHeld: F_GETLK from this process sees a lock on path (POSIX or OFD).
func posixHeld(t testing.TB, path string) bool {
	fd := hostOpen(t, path, unix.O_RDWR)
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	must(t, unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk))
	return lk.Type != unix.F_UNLCK
}

// A refusal case is run twice: under the supervisor, where it gets the errno, and
// under a supervisor that continues every call, where the same attack succeeds —
// the proof that the test can fail and that the handler is what stops it.
type attack struct {
	name  string
	run   func(t *testing.T, sb *sandbox) syscall.Errno // the errno the attack got
	want  syscall.Errno                                 // supervised
	check func(t *testing.T, sb *sandbox) bool          // optional: the attack's effect is visible (true = it escaped)
}

func runAttacks(t *testing.T, attacks []attack) {
	for _, mode := range []string{"supervised", "unsupervised"} {
		t.Run(mode, func(t *testing.T) {
			o := sandboxOpts{}
			if mode == "unsupervised" {
				o.override = continueAll()
			}
			for _, a := range attacks {
				t.Run(a.name, func(t *testing.T) {
					sb := newSandbox(t, o)
					got := a.run(t, sb)
					escaped := false
					if a.check != nil {
						sb.idle(t)
						escaped = a.check(t, sb)
					}
					if mode == "supervised" {
						if got != a.want {
							t.Fatalf("got %s, want %s", errnoName(got), errnoName(a.want))
						}
						if escaped {
							t.Fatalf("refused with %s, and yet its effect is visible", errnoName(got))
						}
						return
					}
					if got == a.want && a.want != 0 {
						t.Fatalf("without the handler the attack still gets %s: the test cannot tell", errnoName(got))
					}
					if a.check != nil && !escaped {
						t.Fatalf("without the handler the attack has no visible effect (got %s): the test cannot tell", errnoName(got))
					}
					t.Logf("without the handler: %s (escaped)", errnoName(got))
				})
			}
		})
	}
}

func TestLockRefusals(t *testing.T) {
	flockRO := func(op int64) func(t *testing.T, sb *sandbox) syscall.Errno {
		return func(t *testing.T, sb *sandbox) syscall.Errno {
			fd := sb.open(t, filepath.Join(sb.ro, "f"), unix.O_RDONLY)
			return sb.do(t, req{Op: "flock", FD: fd, Arg: op}).Errno
		}
	}
	fcntlRO := func(cmd int64, typ int16) func(t *testing.T, sb *sandbox) syscall.Errno {
		return func(t *testing.T, sb *sandbox) syscall.Errno {
			fd := sb.open(t, filepath.Join(sb.ro, "f"), unix.O_RDONLY)
			return sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: cmd, Arg2: int64(typ)}).Errno
		}
	}
	roHeld := func(held func(testing.TB, string) bool) func(t *testing.T, sb *sandbox) bool {
		return func(t *testing.T, sb *sandbox) bool { return held(t, filepath.Join(sb.ro, "f")) }
	}
	runAttacks(t, []attack{
		{name: "flock_ex_nb_read_only", run: flockRO(unix.LOCK_EX | unix.LOCK_NB), want: unix.EACCES, check: roHeld(flockHeld)},
		{name: "flock_sh_blocking_read_only", run: flockRO(unix.LOCK_SH), want: unix.EACCES, check: roHeld(flockHeld)},
		// the kernel reads op as 32 bits: high bits must not slip past the trap
		{name: "flock_high_bits_read_only", run: flockRO(1<<32 | unix.LOCK_EX | unix.LOCK_NB), want: unix.EACCES, check: roHeld(flockHeld)},
		{name: "fcntl_setlk_rdlck_read_only", run: fcntlRO(unix.F_SETLK, unix.F_RDLCK), want: unix.EACCES, check: roHeld(posixHeld)},
		{name: "fcntl_setlkw_rdlck_read_only", run: fcntlRO(unix.F_SETLKW, unix.F_RDLCK), want: unix.EACCES, check: roHeld(posixHeld)},
		{name: "fcntl_cmd_high_bits_read_only", run: fcntlRO(1<<32|unix.F_SETLK, unix.F_RDLCK), want: unix.EACCES, check: roHeld(posixHeld)},
		{name: "fcntl_ofd_setlk_read_only", run: fcntlRO(unix.F_OFD_SETLK, unix.F_RDLCK), want: unix.EACCES, check: roHeld(posixHeld)},
		{name: "fcntl_ofd_setlkw_read_only", run: fcntlRO(unix.F_OFD_SETLKW, unix.F_RDLCK), want: unix.EACCES, check: roHeld(posixHeld)},
		{name: "fcntl_setlease_read_only", run: func(t *testing.T, sb *sandbox) syscall.Errno {
			fd := sb.open(t, filepath.Join(sb.ro, "f"), unix.O_RDONLY)
			return sb.do(t, req{Op: "fcntl", FD: fd, Arg: unix.F_SETLEASE, Arg2: unix.F_RDLCK}).Errno
		}, want: unix.EACCES, check: func(t *testing.T, sb *sandbox) bool {
			// a read lease makes another process's O_WRONLY open block (or fail
			// with EWOULDBLOCK when non-blocking) until the lease is broken
			fd, err := unix.Open(filepath.Join(sb.ro, "f"), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
				return false
			}
			if err != unix.EWOULDBLOCK {
				t.Fatalf("host open: %v", err)
			}
			return true
		}},
	})
}

func TestFlock(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rwf := filepath.Join(sb.rw, "f")

	t.Run("read_write_is_locked_for_real", func(t *testing.T) {
		fd := sb.open(t, rwf, unix.O_RDONLY)
		if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_EX | unix.LOCK_NB}).Errno; e != 0 {
			t.Fatalf("flock rw: %s", errnoName(e))
		}
		if !flockHeld(t, rwf) {
			t.Fatal("the child's lock is not held")
		}
		// LOCK_UN is not trapped, and releases it
		if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_UN}).Errno; e != 0 {
			t.Fatalf("unlock: %s", errnoName(e))
		}
		if flockHeld(t, rwf) {
			t.Fatal("still held after LOCK_UN")
		}
		sb.do(t, req{Op: "close", FD: fd})
	})

	t.Run("non_blocking_conflict_is_ewouldblock", func(t *testing.T) {
		host := hostOpen(t, rwf, unix.O_RDONLY)
		must(t, unix.Flock(host, unix.LOCK_EX))
		defer unix.Flock(host, unix.LOCK_UN)
		fd := sb.open(t, rwf, unix.O_RDONLY)
		defer sb.do(t, req{Op: "close", FD: fd})
		if e := sb.do(t, req{Op: "flock", FD: fd, Arg: unix.LOCK_SH | unix.LOCK_NB}).Errno; e != unix.EWOULDBLOCK {
			t.Fatalf("got %s, want EWOULDBLOCK", errnoName(e))
		}
	})

	t.Run("blocking_waits_then_succeeds", func(t *testing.T) {
		host := hostOpen(t, rwf, unix.O_RDONLY)
		must(t, unix.Flock(host, unix.LOCK_EX))
		fd := sb.open(t, rwf, unix.O_RDONLY)
		defer sb.do(t, req{Op: "close", FD: fd})
		done := sb.async(req{Op: "flock", FD: fd, Arg: unix.LOCK_EX})
		select {
		case a := <-done:
			t.Fatalf("blocking flock returned %s while the lock was held", errnoName(a.Errno))
		case <-time.After(200 * time.Millisecond):
		}
		// the loop is not blocked meanwhile: another trapped call is served
		other := sb.open(t, filepath.Join(sb.ro, "f"), unix.O_RDONLY)
		if e := sb.do(t, req{Op: "flock", FD: other, Arg: unix.LOCK_SH | unix.LOCK_NB}).Errno; e != unix.EACCES {
			t.Fatalf("a call while another waits: %s", errnoName(e))
		}
		must(t, unix.Flock(host, unix.LOCK_UN))
		select {
		case a := <-done:
			if a.Errno != 0 {
				t.Fatalf("blocking flock: %s", errnoName(a.Errno))
			}
		case <-time.After(3 * time.Second):
			t.Fatal("blocking flock did not return after the lock was released")
		}
		if !flockHeld(t, rwf) {
			t.Fatal("the lock got by waiting is not held")
		}
	})
}

// Calls from many threads, each new (more than the pidfd cache holds): each is
// answered for its own thread.
func TestManyThreads(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	ro := sb.open(t, filepath.Join(sb.ro, "f"), unix.O_RDONLY)
	rw := sb.open(t, filepath.Join(sb.rw, "f"), unix.O_RDONLY)
	n := 3 * maxPidfds
	if a := sb.do(t, req{Op: "threads", FD: ro, Arg: unix.LOCK_SH | unix.LOCK_NB, N: n}); a.Vals[unix.EACCES] != int64(n) {
		t.Fatalf("read-only from %d threads: %d EACCES", n, a.Vals[unix.EACCES])
	}
	if a := sb.do(t, req{Op: "threads", FD: rw, Arg: unix.LOCK_SH | unix.LOCK_NB, N: n}); a.Vals[0] != int64(n) {
		t.Fatalf("read-write from %d threads: %d succeeded", n, a.Vals[0])
	}
	// path resolution from new threads: /proc/<tid>/root and cwd of each
	if e := sb.do(t, req{Op: "chdir", Path: sb.rw}).Errno; e != 0 {
		t.Fatalf("chdir: %s", errnoName(e))
	}
	ifd := int(sb.do(t, req{Op: "inotify_init"}).Val)
	if a := sb.do(t, req{Op: "threads", FD: ifd, Path: "d", Arg: unix.IN_CREATE, N: n}); a.Vals[0] != int64(n) {
		t.Fatalf("inotify inside from %d threads: %d succeeded (%d EACCES)", n, a.Vals[0], a.Vals[unix.EACCES])
	}
	if a := sb.do(t, req{Op: "threads", FD: ifd, Path: "../no/d", Arg: unix.IN_CREATE, N: n}); a.Vals[unix.EACCES] != int64(n) {
		t.Fatalf("inotify outside from %d threads: %d EACCES", n, a.Vals[unix.EACCES])
	}
	if len(sb.sup.pidfdsForTest()) > maxPidfds {
		t.Fatalf("%d pidfds cached", len(sb.sup.pidfdsForTest()))
	}
}

// Signals interrupt a waiting lock: each time the call restarts with a new
// notification, the old waiter gives up (releasing a lock it may just have got), and
// the call ends with the lock once it is free.
func TestFlockInterruptedBySignals(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rwf := filepath.Join(sb.rw, "f")
	host := hostOpen(t, rwf, unix.O_RDONLY)
	must(t, unix.Flock(host, unix.LOCK_EX))
	fd := sb.open(t, rwf, unix.O_RDONLY)
	before := sb.sup.received.Load()
	done := sb.async(req{Op: "flock_signalled", FD: fd, Arg: unix.LOCK_EX, N: 10})
	time.Sleep(400 * time.Millisecond) // the 10 signals arrive meanwhile
	select {
	case a := <-done:
		t.Fatalf("returned %s while the lock was held", errnoName(a.Errno))
	default:
	}
	must(t, unix.Flock(host, unix.LOCK_UN))
	select {
	case a := <-done:
		if a.Errno != 0 {
			t.Fatalf("flock: %s", errnoName(a.Errno))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("flock did not return after the release")
	}
	if n := sb.sup.received.Load() - before; n < 5 {
		t.Fatalf("%d notifications: the signals did not restart the call", n)
	}
	sb.idle(t)
	if !flockHeld(t, rwf) {
		t.Fatal("the lock is not held")
	}
}

// A child killed while its blocking flock waits leaves no lock, even when the
// supervisor takes the lock after the kill: here the open file description outlives
// the child (the test process holds it too), so a lock left on it would stay.
func TestFlockKilledWhileWaitingLeavesNoLock(t *testing.T) {
	for i := 0; i < 3; i++ {
		sb := newSandbox(t, sandboxOpts{})
		rwf := filepath.Join(sb.rw, "f")
		host := hostOpen(t, rwf, unix.O_RDONLY)
		must(t, unix.Flock(host, unix.LOCK_EX))
		fd := sb.open(t, rwf, unix.O_RDONLY)
		shared := sb.do(t, req{Op: "sendfd", FD: fd}).fd
		if shared < 0 {
			t.Fatal("no fd from the child")
		}
		defer unix.Close(shared)
		sb.async(req{Op: "flock", FD: fd, Arg: unix.LOCK_EX})
		time.Sleep(50 * time.Millisecond) // it waits
		if sb.sup.inflight.Load() != 1 {
			t.Fatalf("%d calls in hand, want the waiting flock", sb.sup.inflight.Load())
		}
		sb.cmd.Process.Kill()
		<-sb.dead
		must(t, unix.Flock(host, unix.LOCK_UN)) // the waiter's next attempt succeeds, then finds the call gone
		sb.idle(t)
		if flockHeld(t, rwf) {
			t.Fatal("a lock outlived the killed child")
		}
	}
}

func TestFcntlLocks(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rof, rwf := filepath.Join(sb.ro, "f"), filepath.Join(sb.rw, "f")

	t.Run("unlock_on_read_only_passes", func(t *testing.T) {
		fd := sb.open(t, rof, unix.O_RDONLY)
		defer sb.do(t, req{Op: "close", FD: fd})
		for _, cmd := range []int64{unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_SETLK, unix.F_OFD_SETLKW} {
			if e := sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: cmd, Arg2: unix.F_UNLCK}).Errno; e != 0 {
				t.Fatalf("cmd %d F_UNLCK: %s", cmd, errnoName(e))
			}
		}
	})

	t.Run("posix_on_read_write_is_locked_for_real", func(t *testing.T) {
		fd := sb.open(t, rwf, unix.O_RDWR)
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: unix.F_SETLK, Arg2: unix.F_WRLCK}).Errno; e != 0 {
			t.Fatalf("F_SETLK rw: %s", errnoName(e))
		}
		if !posixHeld(t, rwf) {
			t.Fatal("the child's POSIX lock is not held")
		}
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: unix.F_SETLK, Arg2: unix.F_UNLCK}).Errno; e != 0 {
			t.Fatalf("F_UNLCK rw: %s", errnoName(e))
		}
		if posixHeld(t, rwf) {
			t.Fatal("still held after F_UNLCK")
		}
		sb.do(t, req{Op: "close", FD: fd})
	})

	t.Run("ofd_on_read_write_is_locked_for_real", func(t *testing.T) {
		fd := sb.open(t, rwf, unix.O_RDWR)
		defer sb.do(t, req{Op: "close", FD: fd})
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: unix.F_OFD_SETLK, Arg2: unix.F_WRLCK}).Errno; e != 0 {
			t.Fatalf("F_OFD_SETLK rw: %s", errnoName(e))
		}
		if !posixHeld(t, rwf) {
			t.Fatal("the child's OFD lock is not held")
		}
		// a second open file description conflicts: EAGAIN, as the kernel
		fd2 := sb.open(t, rwf, unix.O_RDWR)
		defer sb.do(t, req{Op: "close", FD: fd2})
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd2, Arg: unix.F_OFD_SETLK, Arg2: unix.F_WRLCK}).Errno; e != unix.EAGAIN {
			t.Fatalf("conflicting F_OFD_SETLK: %s, want EAGAIN", errnoName(e))
		}
		// a blocking one waits until the first is released
		done := sb.async(req{Op: "fcntl_lock", FD: fd2, Arg: unix.F_OFD_SETLKW, Arg2: unix.F_WRLCK})
		select {
		case a := <-done:
			t.Fatalf("F_OFD_SETLKW returned %s while the lock was held", errnoName(a.Errno))
		case <-time.After(200 * time.Millisecond):
		}
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd, Arg: unix.F_OFD_SETLK, Arg2: unix.F_UNLCK}).Errno; e != 0 {
			t.Fatalf("OFD unlock: %s", errnoName(e))
		}
		select {
		case a := <-done:
			if a.Errno != 0 {
				t.Fatalf("F_OFD_SETLKW: %s", errnoName(a.Errno))
			}
		case <-time.After(3 * time.Second):
			t.Fatal("F_OFD_SETLKW did not return after the release")
		}
		if !posixHeld(t, rwf) {
			t.Fatal("the lock got by waiting is not held")
		}
		if e := sb.do(t, req{Op: "fcntl_lock", FD: fd2, Arg: unix.F_OFD_SETLK, Arg2: unix.F_UNLCK}).Errno; e != 0 {
			t.Fatalf("OFD unlock: %s", errnoName(e))
		}
	})

	t.Run("lease_on_read_write_works", func(t *testing.T) {
		fd := sb.open(t, rwf, unix.O_RDONLY)
		defer sb.do(t, req{Op: "close", FD: fd})
		if e := sb.do(t, req{Op: "fcntl", FD: fd, Arg: unix.F_SETLEASE, Arg2: unix.F_RDLCK}).Errno; e != 0 {
			t.Fatalf("F_SETLEASE rw: %s", errnoName(e))
		}
		if e := sb.do(t, req{Op: "fcntl", FD: fd, Arg: unix.F_SETLEASE, Arg2: unix.F_UNLCK}).Errno; e != 0 {
			t.Fatalf("F_SETLEASE F_UNLCK: %s", errnoName(e))
		}
	})

	t.Run("bad_struct_pointer_is_efault", func(t *testing.T) {
		fd := sb.open(t, rwf, unix.O_RDWR)
		defer sb.do(t, req{Op: "close", FD: fd})
		if e := sb.do(t, req{Op: "fcntl", FD: fd, Arg: unix.F_OFD_SETLK, Arg2: 8}).Errno; e != unix.EFAULT {
			t.Fatalf("got %s, want EFAULT", errnoName(e))
		}
	})

	t.Run("bad_fd_is_ebadf", func(t *testing.T) {
		if e := sb.do(t, req{Op: "fcntl_lock", FD: 999, Arg: unix.F_SETLK, Arg2: unix.F_RDLCK}).Errno; e != unix.EBADF {
			t.Fatalf("got %s, want EBADF", errnoName(e))
		}
		if e := sb.do(t, req{Op: "flock", FD: 999, Arg: unix.LOCK_EX}).Errno; e != unix.EBADF {
			t.Fatalf("flock: got %s, want EBADF", errnoName(e))
		}
	})
}

// Another thread flips l_type between F_UNLCK and F_RDLCK while F_SETLK runs on a
// read-only file. Continuing an unlock would let the kernel read the flipped struct
// and take the lock; the handler answers every command on a read-only mount itself.
// With the naive rule ("F_UNLCK → CONTINUE") the lock is taken.
func TestFcntlFlippedStructNeverLocksReadOnly(t *testing.T) {
	naive := map[string]handlerFunc{"fcntl": func(c *call) reply {
		lk, err := c.readFlock(c.arg(2))
		if err != nil {
			return fail(unix.EFAULT)
		}
		if lk.Type == unix.F_UNLCK {
			return cont()
		}
		return handleFcntl(c)
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			o := sandboxOpts{}
			if mode == "naive" {
				o.override = naive
			}
			sb := newSandbox(t, o)
			rof := filepath.Join(sb.ro, "f")
			fd := sb.open(t, rof, unix.O_RDONLY)
			a := sb.do(t, req{Op: "race_fcntl", FD: fd, N: 2000})
			held := posixHeld(t, rof)
			t.Logf("%s: %d succeeded, %d EACCES, %d other; locks seen %d, held at the end: %v", mode, a.Vals[0], a.Vals[1], a.Vals[2], a.Vals[3], held)
			if mode == "supervised" {
				if held || a.Vals[3] != 0 {
					t.Fatal("a flipped struct took a lock on a read-only file")
				}
				if a.Vals[0] == 0 || a.Vals[1] == 0 {
					t.Fatal("the race never flipped: both outcomes should occur")
				}
				return
			}
			if !held && a.Vals[3] == 0 {
				t.Fatal("the naive handler was not caught: the test cannot tell")
			}
		})
	}
}

// pidfdsForTest reads the loop's cache (the test calls are answered, so the loop is
// idle in the poller: a read here is ordered after its writes by the answers).
func (s *Supervisor) pidfdsForTest() map[uint32]int { return s.pidfds }

// A sandbox cannot make the host poll for an unbounded number of waiting locks: past
// maxWaiting waiting calls, the next answers ENOLCK; the waiters get their locks.
func TestWaitingLocksAreCapped(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	rwf := filepath.Join(sb.rw, "f")
	host := hostOpen(t, rwf, unix.O_RDONLY)
	must(t, unix.Flock(host, unix.LOCK_EX))
	fd := sb.open(t, rwf, unix.O_RDONLY)
	n := maxWaiting + 8
	done := sb.async(req{Op: "concurrent_flock", FD: fd, Arg: unix.LOCK_SH, N: n})
	deadline := time.Now().Add(20 * time.Second)
	for sb.sup.waiting.Load() < maxWaiting && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the last ones are answered ENOLCK meanwhile
	must(t, unix.Flock(host, unix.LOCK_UN))
	select {
	case a := <-done:
		if a.Vals[unix.ENOLCK] != int64(n-maxWaiting) || a.Vals[0] != int64(maxWaiting) {
			t.Fatalf("%d blocking flocks at once: %d got the lock, %d ENOLCK (want %d and %d)",
				n, a.Vals[0], a.Vals[unix.ENOLCK], maxWaiting, n-maxWaiting)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiters never got their locks")
	}
}

// POSIX locks are continued after the check, so a thread that dup2s a read-only file
// over the fd number in between gets a lock on it; the audit that follows every
// continued lock kills that process (its locks go with it) and says why. Without the
// audit (the handler as it was: check, continue), the lock stays.
func TestPosixLockFDSwapIsAudited(t *testing.T) {
	noAudit := map[string]handlerFunc{"fcntl": func(c *call) reply {
		cmd := uint32(c.arg(1))
		if cmd != unix.F_SETLK && cmd != unix.F_SETLKW {
			return handleFcntl(c)
		}
		fd, r := c.childFD(c.argInt(0))
		if r != nil {
			return *r
		}
		if ro, _ := readOnly(fd); ro {
			return deny(unix.EACCES, "read-only")
		}
		return cont()
	}}
	for _, mode := range []string{"supervised", "no audit"} {
		t.Run(mode, func(t *testing.T) {
			o := sandboxOpts{}
			if mode == "no audit" {
				o.override = noAudit
			}
			var a resp
			var died bool
			var held bool
			for round := 0; round < 5 && !died && !held; round++ { // the race is won now and then
				sb := newSandbox(t, o)
				rof, rwf := filepath.Join(sb.ro, "f"), filepath.Join(sb.rw, "f")
				rw := sb.open(t, rwf, unix.O_RDWR)
				ro := sb.open(t, rof, unix.O_RDONLY)
				select {
				case r, ok := <-sb.async(req{Op: "race_posix_fd", FD: rw, FD2: ro, N: 20000}):
					died, a = !ok, r
				case <-time.After(60 * time.Second):
					t.Fatal("no answer")
				}
				time.Sleep(300 * time.Millisecond) // past the audit's last look
				held = posixHeld(t, rof)
				t.Logf("%s, round %d: died %v, vals %v, a lock on the read-only file at the end: %v; denials %+v", mode, round, died, a.Vals, held, sb.sup.Denials())
				if mode == "supervised" {
					if held {
						t.Fatal("a lock on the read-only file outlived the audit")
					}
					won := died || a.Vals[3] != 0
					if won && !sb.denied("a POSIX lock on a read-only file") {
						t.Fatalf("the race was won and the audit says nothing: %+v", sb.sup.Denials())
					}
					if won {
						died = true // killed by the audit (after its answer, or before)
					}
				}
			}
			if mode == "no audit" && !held {
				t.Skip("the race was not won in 5 rounds: the test cannot tell here")
			}
			if mode == "supervised" && !died {
				t.Log("the race was not won: nothing to audit this time")
			}
		})
	}
}

// TestPosixLockFDSwapKillsTheRun: a POSIX lock belongs to a descriptor table, and a
// sibling made with clone(CLONE_FILES) shares it: killing only the process that won
// the race leaves the lock held by the sibling. The audit kills the run (its pid
// namespace, whose pid 1 the child is here).
func TestPosixLockFDSwapKillsTheRun(t *testing.T) {
	var won bool
	for round := 0; round < 5 && !won; round++ {
		sb := newSandbox(t, sandboxOpts{pidns: true})
		if sib := sb.do(t, req{Op: "sibling"}); len(sib.Vals) != 1 || sib.Vals[0] <= 0 {
			t.Fatalf("no sibling: %+v", sib)
		}
		rof, rwf := filepath.Join(sb.ro, "f"), filepath.Join(sb.rw, "f")
		rw := sb.open(t, rwf, unix.O_RDWR)
		ro := sb.open(t, rof, unix.O_RDONLY)
		var a resp
		died := false
		select {
		case r, ok := <-sb.async(req{Op: "race_posix_fd", FD: rw, FD2: ro, N: 20000}):
			died, a = !ok, r
		case <-time.After(60 * time.Second):
			t.Fatal("no answer")
		}
		won = died || (len(a.Vals) == 4 && a.Vals[3] != 0)
		time.Sleep(300 * time.Millisecond) // past the audit's last look
		held := posixHeld(t, rof)
		t.Logf("round %d: won %v, vals %v, lock held at the end %v; denials %+v", round, won, a.Vals, held, sb.sup.Denials())
		if !won {
			continue
		}
		if held {
			t.Fatal("the sibling sharing the descriptor table kept the lock on the read-only file")
		}
		select {
		case <-sb.dead:
		case <-time.After(5 * time.Second):
			t.Fatal("the run (its pid 1) outlived the audit's kill")
		}
		if !sb.denied("its run was killed") {
			t.Fatalf("no denial names the kill: %+v", sb.sup.Denials())
		}
	}
	if !won {
		t.Log("the race was not won in 5 rounds: nothing to audit this time")
	}
}
