//go:build linux

package supervise

import (
	"errors"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The two-path calls a judge allowed (rename, renameat, renameat2, link, linkat,
// symlink, symlinkat) are performed with both paths it judged (Event.Path and
// Path2), on the thread unlink and mkdir are made on (hostperform.go): each name
// is resolved to its parent directory there (in the caller's root and cwd, or
// beneath its directory descriptor) and the call is made on the two parents with
// the last components, so Landlock's REFER, MAKE_* and REMOVE_* rights, the view's
// mounts (EXDEV across them) and the directories' permissions are the kernel's
// checks for that thread. linkat with AT_SYMLINK_FOLLOW links the file the old
// name leads to (opened O_PATH there, linked by its /proc/thread-self/fd name);
// AT_EMPTY_PATH links the caller's descriptor (the kernel asks for
// CAP_DAC_READ_SEARCH, which the thread lacks, as the sandbox's programs do). A
// symlink's target is the judged string, written as it is.

func twoPathTarget(ev *Event) bool {
	_, ok := PathArg2[ev.Syscall]
	return ok
}

// pathCopy2 is the copied second path, or the kernel's answer for one that could not be copied.
func pathCopy2(ev *Event) (string, *reply) {
	return pathCopy(&Event{Path: ev.Path2, HasPath: ev.HasPath2, PathErr: ev.Path2Err})
}

func (c *call) twoPathForCaller(ev *Event) reply {
	oldfd, newfd := int32(unix.AT_FDCWD), int32(unix.AT_FDCWD)
	var flags uint64
	switch ev.Syscall {
	case "renameat", "linkat":
		oldfd, newfd = c.argInt(0), c.argInt(2)
		if ev.Syscall == "linkat" {
			flags = uint64(uint32(c.arg(4)))
			if flags&^uint64(unix.AT_SYMLINK_FOLLOW|unix.AT_EMPTY_PATH) != 0 {
				return fail(unix.EINVAL)
			}
		}
	case "renameat2":
		oldfd, newfd, flags = c.argInt(0), c.argInt(2), uint64(uint32(c.arg(4)))
	case "symlinkat":
		newfd = c.argInt(1)
	}
	emptyOld := ev.Syscall == "linkat" && flags&unix.AT_EMPTY_PATH != 0 && ev.HasPath && ev.Path == ""
	var old string
	if !emptyOld {
		p, r := pathCopy(ev)
		if r != nil {
			return *r
		}
		old = p
	}
	newPath, r := pathCopy2(ev)
	if r != nil {
		return *r
	}
	symlink := ev.Syscall == "symlink" || ev.Syscall == "symlinkat"
	var ob pathBase
	switch {
	case symlink: // the target is a string, not resolved
	case emptyOld:
		fd, r := c.childFD(oldfd)
		if r != nil {
			return *r
		}
		ob = pathBase{fd: fd}
	default:
		if ob, r = c.pathBase(oldfd, old); r != nil {
			return *r
		}
	}
	nb, r := c.pathBase(newfd, newPath)
	if r != nil {
		return *r
	}
	cr, r := c.callerCreds()
	if r != nil {
		return *r
	}
	fs := &threadFS{umask: c.umask(), dir: -1}
	if !c.valid() {
		return gone()
	}
	var denied *reply
	// EXDEV from resolving a name (RESOLVE_BENEATH) is not the call's own EXDEV (across mounts)
	leaves := func(err error) error {
		if err == unix.EXDEV {
			return errLeaves
		}
		return err
	}
	v, err := c.s.asSandbox(cr, fs, func() (int, error) {
		np, nbase, err := nb.parent()
		if err != nil {
			return -1, leaves(err)
		}
		defer unix.Close(np)
		if r := ev.deniedFD(np, strings.TrimRight(nbase, "/")); r != nil {
			denied = r
			return -1, unix.EACCES
		}
		if symlink {
			return 0, unix.Symlinkat(old, np, nbase)
		}
		if ev.Syscall == "link" || ev.Syscall == "linkat" {
			switch {
			case emptyOld:
				return 0, unix.Linkat(ob.fd, "", np, nbase, unix.AT_EMPTY_PATH)
			case flags&unix.AT_SYMLINK_FOLLOW != 0:
				// the file the old name leads to, linked by its descriptor's name
				fd, err := unix.Openat2(ob.fd, ob.path, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: ob.resolve})
				if err != nil {
					return -1, leaves(err)
				}
				defer unix.Close(fd)
				if r := ev.deniedFD(fd, ""); r != nil {
					denied = r
					return -1, unix.EACCES
				}
				return 0, unix.Linkat(unix.AT_FDCWD, "/proc/thread-self/fd/"+strconv.Itoa(fd), np, nbase, unix.AT_SYMLINK_FOLLOW)
			}
		}
		op, obase, err := ob.parent()
		if err != nil {
			return -1, leaves(err)
		}
		defer unix.Close(op)
		if r := ev.deniedFD(op, strings.TrimRight(obase, "/")); r != nil {
			denied = r
			return -1, unix.EACCES
		}
		if ev.Syscall == "link" || ev.Syscall == "linkat" {
			return 0, unix.Linkat(op, obase, np, nbase, 0)
		}
		_, _, e := unix.Syscall6(unix.SYS_RENAMEAT2, uintptr(op), uintptr(unsafe.Pointer(bytePtr(obase))),
			uintptr(np), uintptr(unsafe.Pointer(bytePtr(nbase))), uintptr(flags), 0)
		if e != 0 {
			return -1, e
		}
		return 0, nil
	})
	if denied != nil {
		return *denied
	}
	if err == unix.EXDEV {
		return fail(unix.EXDEV) // the kernel's: the two names are on different mounts
	}
	return c.performed(ev.Syscall, v, err)
}

var errLeaves = errors.New("the path leaves its directory descriptor")
