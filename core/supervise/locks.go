//go:build linux

package supervise

import (
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Locks (issue 10, class 1): a read-only grant must not let the sandbox lock a file.
// The sandbox's view mounts what it may only read read-only, so "read-only grant" is
// "the file is on a read-only mount" (fstatfs ST_RDONLY on the open file itself).

func flockTraps(Config) []Trap {
	// The operations that take a lock (fs/locks.c: LOCK_MAND is ignored, any other
	// value than these and LOCK_UN[|LOCK_NB] is EINVAL). Unlocking never traps.
	return []Trap{{Syscall: "flock", Arg: 1, Mask: 0xffffffff, Values: []uint64{
		unix.LOCK_SH, unix.LOCK_EX, unix.LOCK_SH | unix.LOCK_NB, unix.LOCK_EX | unix.LOCK_NB,
	}}}
}

func fcntlTraps(Config) []Trap {
	return []Trap{{Syscall: "fcntl", Arg: 1, Mask: 0xffffffff, Values: []uint64{
		unix.F_SETLK, unix.F_SETLKW, unix.F_OFD_SETLK, unix.F_OFD_SETLKW, unix.F_SETLEASE,
	}}}
}

// readOnly reports whether the open file is on a read-only mount.
func readOnly(fd int) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, err
	}
	return st.Flags&unix.ST_RDONLY != 0, nil
}

// fdPath names an open file for a denial record (as the supervisor sees it).
func fdPath(fd int) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	if err != nil {
		return "?"
	}
	return string(buf[:n])
}

// handleFlock: flock(fd, op). The lock belongs to the open file description, which
// the supervisor's duplicate shares, so it is taken on the duplicate: the child's fd
// number can be re-pointed by another thread after the check without effect.
func handleFlock(c *call) reply {
	op := uint32(c.arg(1))
	if kind := op &^ unix.LOCK_NB; kind != unix.LOCK_SH && kind != unix.LOCK_EX {
		return cont() // unlock, or an operation the kernel takes no lock for (a register: no race)
	}
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	ro, err := readOnly(fd)
	if err != nil {
		return c.failure("fstatfs", err)
	}
	if ro {
		return deny(unix.EACCES, fdPath(fd))
	}
	if !c.valid() {
		return gone()
	}
	unlock := func() { unix.Flock(fd, unix.LOCK_UN) }
	try := func() (bool, reply) {
		err := unix.Flock(fd, int(op|unix.LOCK_NB))
		if err == unix.EWOULDBLOCK && op&unix.LOCK_NB == 0 {
			return false, reply{}
		}
		if err != nil {
			return true, result(0, err)
		}
		r := ret(0)
		r.undo = unlock
		return true, r
	}
	return wait(c, try, unlock)
}

// handleFcntl: the lock and lease commands.
func handleFcntl(c *call) reply {
	cmd := uint32(c.arg(1))
	if cmd == unix.F_SETLEASE {
		return fcntlLease(c)
	}
	if cmd != unix.F_SETLK && cmd != unix.F_SETLKW && cmd != unix.F_OFD_SETLK && cmd != unix.F_OFD_SETLKW {
		return cont() // not a command this handler traps (a register: no race)
	}
	// The struct is copied once; every decision and every call made on the child's
	// behalf uses the copy, never the child's memory again.
	lk, err := c.readFlock(c.arg(2))
	if err != nil {
		return c.failure("read struct flock", err, unix.EFAULT)
	}
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	ofd := cmd == unix.F_OFD_SETLK || cmd == unix.F_OFD_SETLKW
	if ofd {
		// Open-file-description locks belong to the open file: performed on the
		// duplicate with the copied struct, and the result answered.
		if lk.Type != unix.F_UNLCK {
			if rr, ok := refuseReadOnly(c, fd); !ok {
				return rr
			}
		}
		if !c.valid() {
			return gone()
		}
		blocking := cmd == unix.F_OFD_SETLKW
		unlk := lk
		unlk.Type = unix.F_UNLCK
		unlock := func() { unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &unlk) }
		try := func() (bool, reply) {
			l := lk
			err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &l)
			if blocking && (err == unix.EAGAIN || err == unix.EACCES) {
				return false, reply{}
			}
			if err != nil {
				return true, result(0, err)
			}
			r := ret(0)
			if lk.Type != unix.F_UNLCK {
				r.undo = unlock
			}
			return true, r
		}
		return wait(c, try, unlock)
	}
	// POSIX record locks belong to the process, so they cannot be taken on its behalf:
	// the check is made and the kernel runs the call (CONTINUE). It then re-reads the
	// struct, so nothing here may depend on l_type without closing that race:
	//  - on a read-only mount every command is answered here: a lock is refused, and an
	//    unlock succeeds without the kernel (no lock can exist there; continuing it
	//    would let another thread turn the struct into a lock after this check);
	//  - elsewhere the kernel runs it, whatever the struct then says.
	// Another thread can dup2 a read-only fd over the number between this check and
	// the kernel's call: the process is audited soon after (posixaudit.go) and killed
	// if it then holds a lock on a read-only file.
	ro, err := readOnly(fd)
	if err != nil {
		return c.failure("fstatfs", err)
	}
	if !ro { // whatever l_type said: the kernel reads the struct again
		if err := c.auditPosixLock(); err != nil {
			return c.failure("audit the lock", err)
		}
	}
	if !c.valid() {
		return gone()
	}
	if ro {
		if lk.Type == unix.F_UNLCK {
			return ret(0)
		}
		return deny(unix.EACCES, fdPath(fd))
	}
	return cont()
}

// fcntlLease: F_SETLEASE(fd, type). A lease cannot be taken on the child's behalf
// (the lease-break signal would go to the supervisor), so, as for POSIX locks, the
// check is made and the call continued; the type is a register (no race), the fd-swap
// race of POSIX locks remains.
func fcntlLease(c *call) reply {
	if c.argInt(2) == unix.F_UNLCK {
		return cont()
	}
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	if rr, ok := refuseReadOnly(c, fd); !ok {
		return rr
	}
	if !c.valid() {
		return gone()
	}
	return cont()
}

func refuseReadOnly(c *call, fd int) (reply, bool) {
	ro, err := readOnly(fd)
	if err != nil {
		return c.failure("fstatfs", err), false
	}
	if ro {
		return deny(unix.EACCES, fdPath(fd)), false
	}
	return reply{}, true
}

// Backoff between attempts of a blocking lock, and how many calls of one sandbox
// may wait at once (the next answers ENOLCK, "too many locks").
const (
	waitMin    = 500 * time.Microsecond
	waitMax    = 10 * time.Millisecond
	maxWaiting = 64
)

// wait makes one attempt (try: one non-blocking call; done=false means "would
// block"). When it would block, the call is detached and retried with a backoff of at
// most waitMax while the notification stays valid: the loop keeps serving other calls.
// A lock got for a call that is no longer valid (the child was killed, or a signal
// interrupted the call, which will be restarted) is released.
func wait(c *call, try func() (bool, reply), unlock func()) reply {
	done, r := try()
	if done {
		return settled(c, r, unlock)
	}
	// each waiting call polls: a sandbox with many threads blocked on locks must not
	// make the host spin for all of them
	if c.s.waiting.Add(1) > maxWaiting {
		c.s.waiting.Add(-1)
		return deny(unix.ENOLCK, fmt.Sprintf("more than %d calls of this sandbox already wait for a lock", maxWaiting))
	}
	return c.detach(func() reply {
		defer c.s.waiting.Add(-1)
		// try, then check: a lock taken after the caller died is found and released
		for d := waitMin; ; d = min(2*d, waitMax) {
			time.Sleep(d)
			if done, r := try(); done {
				return settled(c, r, unlock)
			}
			if !c.valid() {
				return gone()
			}
			if c.s.cfg.Killable && c.signalPending() {
				return fail(unix.EINTR)
			}
		}
	})
}

func settled(c *call, r reply, unlock func()) reply {
	if r.kind == replyValue && !c.valid() {
		unlock()
		return gone()
	}
	return r
}
