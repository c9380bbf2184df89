//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// call is one trapped system call being handled: the notification, and what the
// handler opened on the child's behalf (closed once the answer is sent).
type call struct {
	s        *Supervisor
	n        seccompNotif
	name     string // the syscall's, for denials
	pidfd    int
	closes   []int
	detached bool    // handled by a goroutine of its own, no longer by the loop
	live     bool    // pidfd_getfd on c.pidfd succeeded: its task was alive during the call (denials.go)
	run      *RunLog // the run a host-judged call belongs to (hostCall.setRun; creds.go)
	creds    *creds  // the caller's, read while the call was the loop's (hostCall.ask); nil: not read
}

func (c *call) arg(i int) uint64 { return c.n.Data.Args[i] }

// argInt is an argument the kernel reads as a C int (fd numbers, commands, flags).
func (c *call) argInt(i int) int32 { return int32(uint32(c.n.Data.Args[i])) }

func (c *call) keep(fd int) int {
	c.closes = append(c.closes, fd)
	return fd
}

// finish closes what the call opened (after the answer: an undo may need it).
func (c *call) finish() {
	c.release()
	c.s.inflight.Add(-1)
}

// release closes what the call opened (its duplicates of the caller's fds hold
// the caller's files open: a file still open for writing here makes the caller's
// next lease fail with EAGAIN, so they go before the answer where no undo needs them).
func (c *call) release() {
	for i := len(c.closes) - 1; i >= 0; i-- {
		unix.Close(c.closes[i])
	}
	c.closes = nil
}

// whileGone runs f at every period once the call is no longer valid (its caller
// died or was interrupted, or the supervisor closes: idValid), until stop is
// closed; f ends what the call's performer still waits for. The channel it
// returns is closed once it has stopped.
func (c *call) whileGone(period time.Duration, stop <-chan struct{}, f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if !c.valid() {
					f()
				}
			}
		}
	}()
	return done
}

// valid: the notification is still pending, so the task that made it is alive and
// every pid-based handle opened before this check refers to it (pid reuse).
func (c *call) valid() bool { return c.s.idValid(c.n.ID) }

// proc names a file of the calling thread in /proc. notif.pid is its thread id in
// our pid namespace; /proc/<tid> exists for any thread (it is not listed, but opens).
func (c *call) proc(name string) string {
	return "/proc/" + strconv.FormatUint(uint64(c.n.Pid), 10) + "/" + name
}

// failure turns an error met while reading the child's state into an answer: the
// child is gone (nothing to answer), the errno the kernel would have given the
// child for its own argument (EBADF, EFAULT, …), or a refusal (fail closed).
func (c *call) failure(what string, err error, childErrnos ...unix.Errno) reply {
	if !c.valid() {
		return gone()
	}
	var e unix.Errno
	if errors.As(err, &e) {
		for _, ce := range childErrnos {
			if e == ce {
				return fail(e)
			}
		}
	}
	return deny(unix.EACCES, fmt.Sprintf("supervisor: %s: %v", what, err))
}

// openPidfd gets a pidfd of the calling thread (PIDFD_THREAD, Linux 6.9: a thread
// may have an fd table of its own; without it only a thread-group leader can be
// served, any other thread's call is refused).
//
// Calls handled by the loop share the supervisor's cache of pidfds by thread id. A
// pidfd names a struct pid, never a number: a cached one is either dead (its threads
// exited; pidfd_getfd answers ESRCH and childFD opens a fresh one) or the current
// holder of that tid, so it can never reach another task. A detached call opens its
// own (the cache belongs to the loop goroutine).
func (c *call) openPidfd(fresh bool) error {
	if c.pidfd >= 0 && !fresh {
		return nil
	}
	c.live = false
	if c.n.Pid == 0 {
		return errors.New("the calling task is not visible in the supervisor's pid namespace")
	}
	if !c.detached && !fresh {
		if fd, ok := c.s.pidfds[c.n.Pid]; ok {
			c.pidfd = fd
			return nil
		}
	}
	fd, err := unix.PidfdOpen(int(c.n.Pid), unix.PIDFD_THREAD)
	if err == unix.EINVAL {
		fd, err = unix.PidfdOpen(int(c.n.Pid), 0)
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	c.pidfd = fd
	if c.detached {
		c.keep(fd)
	} else {
		c.s.cachePidfd(c.n.Pid, fd)
	}
	return nil
}

// childFD duplicates the child's descriptor n into the supervisor (the same open file
// description). Errors: EBADF when n is not open in the child.
func (c *call) childFD(n int32) (int, *reply) {
	if err := c.openPidfd(false); err != nil {
		r := c.failure("open the caller", err)
		return -1, &r
	}
	fd, err := unix.PidfdGetfd(c.pidfd, int(n), 0)
	if err == unix.ESRCH {
		// a cached pidfd of a thread that is gone: this tid is a new thread's
		if err = c.openPidfd(true); err == nil {
			fd, err = unix.PidfdGetfd(c.pidfd, int(n), 0)
		}
	}
	if err != nil {
		r := c.failure("pidfd_getfd", err, unix.EBADF)
		return -1, &r
	}
	c.live = true
	return c.keep(fd), nil // pidfd_getfd sets O_CLOEXEC
}

// read copies exactly len(buf) bytes of the child's memory at addr, one page at a
// time (process_vm_readv stops at the first unmapped page). A bad address is EFAULT.
func (c *call) read(addr uint64, buf []byte) error {
	for done := 0; done < len(buf); {
		n, err := c.readSome(addr+uint64(done), buf[done:])
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

func (c *call) readSome(addr uint64, buf []byte) (int, error) {
	if addr == 0 {
		return 0, unix.EFAULT
	}
	page := uint64(os.Getpagesize())
	n := page - addr%page
	if n > uint64(len(buf)) {
		n = uint64(len(buf))
	}
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(int(n))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: int(n)}}
	got, err := unix.ProcessVMReadv(int(c.n.Pid), local, remote, 0)
	if err != nil {
		return 0, err
	}
	if got == 0 {
		return 0, unix.EFAULT
	}
	return got, nil
}

// write copies buf into the child's memory at addr, one page at a time (a bad
// address is EFAULT; what the kernel would write with put_user).
func (c *call) write(addr uint64, buf []byte) error {
	page := uint64(os.Getpagesize())
	for done := 0; done < len(buf); {
		if addr == 0 {
			return unix.EFAULT
		}
		at := addr + uint64(done)
		n := page - at%page
		if n > uint64(len(buf)-done) {
			n = uint64(len(buf) - done)
		}
		local := []unix.Iovec{{Base: &buf[done]}}
		local[0].SetLen(int(n))
		remote := []unix.RemoteIovec{{Base: uintptr(at), Len: int(n)}}
		got, err := unix.ProcessVMWritev(int(c.n.Pid), local, remote, 0)
		if err != nil {
			return err
		}
		if got == 0 {
			return unix.EFAULT
		}
		done += got
	}
	return nil
}

// readString copies a NUL-terminated string of at most max bytes (NUL included);
// ENAMETOOLONG when there is no NUL within max, EFAULT at an unreadable byte.
func (c *call) readString(addr uint64, max int) (string, error) {
	buf := make([]byte, max)
	for done := 0; done < max; {
		n, err := c.readSome(addr+uint64(done), buf[done:])
		if err != nil {
			return "", err
		}
		for i := done; i < done+n; i++ {
			if buf[i] == 0 {
				return string(buf[:i]), nil
			}
		}
		done += n
	}
	return "", unix.ENAMETOOLONG
}

// signalPending: the calling thread has a signal pending that it catches and does
// not block (what interrupts a kernel wait with EINTR).
func (c *call) signalPending() bool {
	b, err := os.ReadFile(c.proc("status"))
	if err != nil {
		return false
	}
	var pnd, blk, cgt uint64
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		x, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			continue
		}
		switch k {
		case "SigPnd", "ShdPnd":
			pnd |= x
		case "SigBlk":
			blk = x
		case "SigCgt":
			cgt = x
		}
	}
	return pnd&^blk&cgt != 0
}

// readFlock copies a struct flock.
func (c *call) readFlock(addr uint64) (unix.Flock_t, error) {
	var lk unix.Flock_t
	err := c.read(addr, unsafe.Slice((*byte)(unsafe.Pointer(&lk)), unsafe.Sizeof(lk)))
	return lk, err
}
