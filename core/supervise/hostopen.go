//go:build linux

package supervise

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// An open the host allowed is performed here, not continued: the host judged the
// supervisor's copy of the path, and a thread of the caller could rewrite the
// path between that copy and the kernel's own read of it. The supervisor opens the
// copy for the caller, on a thread of its own that holds the sandbox's Landlock
// domain (landlock_restrict_self on that thread alone, with no_new_privs), the
// caller's credentials (when the supervisor has more) and no capability, resolving
// in the caller's root (RESOLVE_IN_ROOT through /proc/<tid>/root: its view, with
// the view's read-only and nodev mounts) and cwd, and answers with the descriptor
// (SECCOMP_IOCTL_NOTIF_ADDFD with SEND) from that thread (openOnThread: found with
// O_PATH, then opened through that descriptor; a FIFO's wait ended when nobody
// waits for the answer any more). What differs from the kernel's own open:
//
//   - magic links (/proc/self/fd/…, /proc/<pid>/root, …) are refused (ELOOP): they
//     would name the supervisor's; /proc/self names no process of the sandbox;
//   - a path relative to a directory descriptor (not AT_FDCWD) must stay beneath it
//     (RESOLVE_BENEATH: ".." out of it or an absolute symlink is EXDEV);
//   - a run with a /proc of its own has a Landlock rule for it that the zygote's
//     ruleset (the one used here) lacks: opens under /proc are refused (EACCES).

func openTarget(ev *Event) bool {
	return ev.Syscall == "openat" || ev.Syscall == "open" || ev.Syscall == "creat"
}

// openFlags are the flags openat2 accepts (it refuses unknown bits where openat
// ignores them).
const openFlags = unix.O_ACCMODE | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_TRUNC | unix.O_APPEND |
	unix.O_NONBLOCK | unix.O_DSYNC | unix.O_DIRECT | unix.O_LARGEFILE | unix.O_DIRECTORY | unix.O_NOFOLLOW |
	unix.O_NOATIME | unix.O_CLOEXEC | unix.O_SYNC | unix.O_PATH | unix.O_TMPFILE | unix.O_ASYNC

func (c *call) openForCaller(ev *Event) reply {
	dirfd := int32(unix.AT_FDCWD)
	var flags, mode uint64
	switch ev.Syscall {
	case "openat":
		dirfd, flags, mode = c.argInt(0), uint64(uint32(c.arg(2))), c.arg(3)
	case "open":
		flags, mode = uint64(uint32(c.arg(1))), c.arg(2)
	case "creat":
		flags, mode = unix.O_CREAT|unix.O_WRONLY|unix.O_TRUNC, c.arg(1)
	}
	if !ev.HasPath {
		if strings.Contains(ev.PathErr, "name too long") {
			return fail(unix.ENAMETOOLONG)
		}
		return fail(unix.EFAULT)
	}
	if ev.Path == "" {
		return fail(unix.ENOENT)
	}
	if flags&^uint64(openFlags) != 0 {
		flags &= openFlags
	}
	if flags&unix.O_PATH != 0 {
		// an O_PATH descriptor cannot be handed over (SECCOMP_IOCTL_NOTIF_ADDFD
		// takes no O_PATH file): continued, the kernel opens what the path names
		// then (docs/security.md: the calls continued after the judge). It reads and
		// writes nothing; an open through it is an open of its path, which Landlock
		// checks, and the calls made relative to it are judged again.
		if !c.valid() {
			return gone()
		}
		return cont()
	}
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 || flags&unix.O_TMPFILE == unix.O_TMPFILE {
		how.Mode = mode & 07777 &^ uint64(c.umask())
	}
	var base int
	path := ev.Path
	if strings.HasPrefix(path, "/") || dirfd == unix.AT_FDCWD {
		root, abs, r := c.inRoot(path)
		if r != nil {
			return *r
		}
		base, path = root, abs
		how.Resolve |= unix.RESOLVE_IN_ROOT
	} else {
		fd, r := c.childFD(dirfd)
		if r != nil {
			return *r
		}
		base = fd
		how.Resolve |= unix.RESOLVE_BENEATH
	}
	var cr *creds
	if c.s.privileged {
		var err error
		if cr, err = c.readCallerCreds(); err != nil {
			return c.failure("read the caller's credentials", err)
		}
	}
	if !c.valid() {
		return gone()
	}
	// opened and answered on the sandbox thread, without this thread waiting: an
	// open may wait without bound (a FIFO until its other end is opened), and a
	// hand-back would cost another wake-up
	c.s.handling.Add(1)
	c.s.goAsSandbox(cr, nil, func() {
		defer c.s.handling.Done()
		fd, err := c.openOnThread(base, path, how)
		c.deliverHere(c.opened(ev, fd, err, uint32(flags&unix.O_CLOEXEC)))
	}, func(err error) {
		go func() {
			defer c.s.handling.Done()
			c.deliver(c.failure("open for the caller", err))
		}()
	})
	return reply{kind: replyPending}
}

// openOnThread opens path as how says, on the sandbox thread: the file is found
// first with O_PATH (which never waits) and then opened through that descriptor
// (/proc/thread-self/fd/N: the very inode found, with Landlock's checks of an
// open of its path), so that an open that waits — a FIFO's, until its other end
// is opened — is known to wait: while it does, unblockFIFO ends the wait once the
// call is no longer valid (the caller killed, interrupted) or the supervisor
// closes, instead of leaving this thread, and Close, waiting for ever. A create
// is tried with O_EXCL first (a file that is there then is opened as above).
func (c *call) openOnThread(base int, path string, how unix.OpenHow) (int, error) {
	if how.Flags&unix.O_PATH != 0 || how.Flags&unix.O_TMPFILE == unix.O_TMPFILE {
		return unix.Openat2(base, path, &how) // neither waits
	}
	find := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | how.Flags&(unix.O_NOFOLLOW|unix.O_DIRECTORY), Resolve: how.Resolve}
	for try := 0; ; try++ {
		pfd, err := unix.Openat2(base, path, &find)
		if err == unix.ENOENT && how.Flags&unix.O_CREAT != 0 && try < 8 {
			mk := how
			mk.Flags |= unix.O_EXCL
			fd, err := unix.Openat2(base, path, &mk)
			if err == unix.EEXIST && how.Flags&unix.O_EXCL == 0 {
				if finalLink(base, path, how.Resolve) {
					return createThroughLink(base, path, how)
				}
				continue // made in between: open the one there
			}
			return fd, err
		}
		if err != nil {
			return -1, err
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return -1, err
		}
		switch {
		case how.Flags&(unix.O_CREAT|unix.O_EXCL) == unix.O_CREAT|unix.O_EXCL:
			return -1, unix.EEXIST
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return -1, unix.ELOOP // O_NOFOLLOW on a symlink
		}
		re := unix.OpenHow{Flags: how.Flags &^ (unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW)}
		if st.Mode&unix.S_IFMT == unix.S_IFIFO && how.Flags&unix.O_NONBLOCK == 0 && how.Flags&unix.O_ACCMODE != unix.O_RDWR {
			stop := make(chan struct{})
			done := c.whileGone(100*time.Millisecond, stop, func() { unblockFIFO(pfd, how.Flags&unix.O_ACCMODE) })
			defer func() { close(stop); <-done }()
		}
		return unix.Openat2(unix.AT_FDCWD, "/proc/thread-self/fd/"+strconv.Itoa(pfd), &re)
	}
}

// finalLink: path names a symlink (not followed).
func finalLink(base int, path string, resolve uint64) bool {
	fd, err := unix.Openat2(base, path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// createThroughLink creates a file through a dangling symlink, as the kernel's
// O_CREAT follows one: opened with O_NONBLOCK, so that a FIFO put at the link's
// target meanwhile does not make the open wait (it does not wait for its other end:
// the one difference from the kernel's own call), which is taken off again when
// the caller did not ask for it.
func createThroughLink(base int, path string, how unix.OpenHow) (int, error) {
	nb := how
	nb.Flags |= unix.O_NONBLOCK
	fd, err := unix.Openat2(base, path, &nb)
	if err == nil && how.Flags&unix.O_NONBLOCK == 0 {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
			unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	return fd, err
}

// unblockFIFO ends the wait of an open of the FIFO pfd for access (O_RDONLY or
// O_WRONLY) whose call nobody waits for any more: it opens the other end, without
// waiting, and closes it again (the open returns a descriptor nobody is given).
func unblockFIFO(pfd int, access uint64) {
	other := unix.O_WRONLY
	if access == unix.O_WRONLY {
		other = unix.O_RDONLY
	}
	if fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), other|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}

// opened is the answer to an open performed for the caller (on the sandbox thread).
func (c *call) opened(ev *Event, fd int, err error, cloexec uint32) reply {
	if err != nil {
		if !c.valid() {
			return gone()
		}
		var e syscall.Errno
		if errors.As(err, &e) {
			return fail(e) // the kernel's answer for the caller's open (ENOENT, EACCES from Landlock, EROFS, …)
		}
		return deny(unix.EACCES, "supervisor: open for the caller: "+err.Error())
	}
	defer unix.Close(fd)
	if r := ev.deniedFD(fd, ""); r != nil {
		return *r // ctx.deny_path: the file opened, by its name and identity
	}
	return c.injectFD(fd, cloexec)
}

// deliverHere delivers r from a sandbox thread: a denial is recorded from a
// goroutine (recording reads the caller's namespaces, which the sandbox thread's
// Landlock domain may not).
func (c *call) deliverHere(r reply) {
	if r.denied == "" {
		c.deliver(r)
		return
	}
	c.s.handling.Add(1)
	go func() {
		defer c.s.handling.Done()
		c.deliver(r)
	}()
}

// umask is the calling thread's (0022 when /proc does not say).
func (c *call) umask() uint32 {
	b, err := os.ReadFile(c.proc("status"))
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Umask:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return uint32(n)
				}
			}
		}
	}
	return 0o022
}

// threadFS is the fs_struct a call performed for the caller gets (unshare(CLONE_FS)
// on its thread alone): the caller's umask and, with dir >= 0, that directory as cwd.
type threadFS struct {
	umask uint32
	dir   int
}

// asSandbox runs f on a thread in the sandbox's Landlock domain (landlock_restrict_self
// on that thread only, with no_new_privs), with cr (nil: ours, unprivileged) and no
// capability, and with fs (nil: the process's) an fs_struct of its own. The thread
// serves nothing but such calls (sandboxthreads.go: kept for later calls of the
// same credentials). Landlock checks the task that makes a call, not the one that
// opened the fd it is made on: a bind or unlink made here is judged by the
// sandbox's rules as the caller's own would be.
func (s *Supervisor) asSandbox(cr *creds, fs *threadFS, f func() (int, error)) (int, error) {
	return s.runAsSandbox(cr, fs, f)
}
