//go:build linux

package supervise

import (
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The metadata calls a judge allowed are performed too (on the thread and with the
// resolution of hostpath.go; Landlock does not govern metadata, the kernel's
// permission checks are the thread's, the caller's credentials without capability):
//
//   - chmod, fchmodat, fchmodat2: the file opened O_PATH (O_NOFOLLOW for
//     AT_SYMLINK_NOFOLLOW: a symlink's mode cannot be changed, EOPNOTSUPP as the
//     kernel answers) and its mode set by its /proc/thread-self/fd name;
//   - chown, lchown, fchownat: the ids the caller named mapped out of its user
//     namespace (its uid_map/gid_map: an id it does not map is EINVAL, as the
//     kernel answers), set with fchownat(fd, "", AT_EMPTY_PATH) on the file opened
//     O_PATH (the link itself for lchown and AT_SYMLINK_NOFOLLOW);
//   - utimensat: the caller's times copied once (NULL: now) and set with
//     utimensat(fd, "", AT_EMPTY_PATH) on the file opened O_PATH; a NULL path sets
//     the times of the caller's descriptor.

var metaCalls = map[string]bool{
	"chmod": true, "fchmodat": true, "fchmodat2": true, "chown": true, "lchown": true, "fchownat": true, "utimensat": true,
}

func metaTarget(ev *Event) bool { return metaCalls[ev.Syscall] }

const noID = ^uint32(0)

func (c *call) metaForCaller(ev *Event) reply {
	dirfd := int32(unix.AT_FDCWD)
	var flags uint64
	allowed := uint64(unix.AT_SYMLINK_NOFOLLOW | unix.AT_EMPTY_PATH)
	switch ev.Syscall {
	case "fchmodat":
		dirfd = c.argInt(0)
	case "fchmodat2":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(3)))
	case "lchown":
		flags = unix.AT_SYMLINK_NOFOLLOW
	case "fchownat":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(4)))
	case "utimensat":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(3)))
		allowed = unix.AT_SYMLINK_NOFOLLOW | unix.AT_EMPTY_PATH
	}
	if flags&^allowed != 0 {
		return fail(unix.EINVAL)
	}
	// utimensat with a NULL path: the descriptor itself (futimens), no flags
	nullPath := ev.Syscall == "utimensat" && c.arg(1) == 0 && dirfd != unix.AT_FDCWD
	if nullPath && flags != 0 {
		return fail(unix.EINVAL)
	}
	empty := nullPath || flags&unix.AT_EMPTY_PATH != 0 && ev.HasPath && ev.Path == ""
	var times []byte
	if ev.Syscall == "utimensat" && c.arg(2) != 0 {
		times = make([]byte, 2*unsafe.Sizeof(unix.Timespec{}))
		if err := c.read(c.arg(2), times); err != nil {
			return c.failure("read the times", err, unix.EFAULT)
		}
	}
	uid, gid := noID, noID
	switch ev.Syscall {
	case "chown", "lchown":
		uid, gid = uint32(c.arg(1)), uint32(c.arg(2))
	case "fchownat":
		uid, gid = uint32(c.arg(2)), uint32(c.arg(3))
	}
	if uid != noID || gid != noID {
		m, err := c.idMaps()
		if err != nil {
			return c.failure("read the caller's id maps", err)
		}
		var ok bool
		if uid, ok = m.outUID(uid); !ok {
			return fail(unix.EINVAL)
		}
		if gid, ok = m.outGID(gid); !ok {
			return fail(unix.EINVAL)
		}
	}
	var b pathBase
	switch {
	case empty && dirfd != unix.AT_FDCWD:
		fd, r := c.childFD(dirfd)
		if r != nil {
			return *r
		}
		b = pathBase{fd: fd}
	default:
		path := "."
		if !empty {
			p, r := pathCopy(ev)
			if r != nil {
				return *r
			}
			path = p
		}
		empty = false
		var r *reply
		if b, r = c.pathBase(dirfd, path); r != nil {
			return *r
		}
	}
	cr, r := c.callerCreds()
	if r != nil {
		return *r
	}
	if !c.valid() {
		return gone()
	}
	var denied *reply
	v, err := c.s.asSandbox(cr, nil, func() (int, error) {
		fd := b.fd
		if !empty {
			of := uint64(unix.O_PATH | unix.O_CLOEXEC)
			if flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
				of |= unix.O_NOFOLLOW
			}
			var err error
			for try := 0; ; try++ {
				fd, err = unix.Openat2(b.fd, b.path, &unix.OpenHow{Flags: of, Resolve: b.resolve})
				if err != unix.EAGAIN || try >= 8 {
					break
				}
			}
			if err != nil {
				return -1, err
			}
			defer unix.Close(fd)
		}
		if r := ev.deniedFD(fd, ""); r != nil {
			denied = r
			return -1, unix.EACCES
		}
		switch ev.Syscall {
		case "chmod", "fchmodat", "fchmodat2":
			mode := c.arg(1)
			if ev.Syscall != "chmod" {
				mode = c.arg(2)
			}
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return -1, err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, unix.EOPNOTSUPP // a symlink's mode (AT_SYMLINK_NOFOLLOW)
			}
			return 0, unix.Chmod("/proc/thread-self/fd/"+strconv.Itoa(fd), uint32(mode)&0o7777)
		case "chown", "lchown", "fchownat":
			_, _, e := unix.Syscall6(unix.SYS_FCHOWNAT, uintptr(fd), uintptr(unsafe.Pointer(bytePtr(""))), uintptr(uid), uintptr(gid),
				unix.AT_EMPTY_PATH, 0)
			if e != 0 {
				return -1, e
			}
			return 0, nil
		case "utimensat":
			var tp uintptr
			if times != nil {
				tp = uintptr(unsafe.Pointer(&times[0]))
			}
			_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), uintptr(unsafe.Pointer(bytePtr(""))), tp, unix.AT_EMPTY_PATH, 0, 0)
			if e != 0 {
				return -1, e
			}
			return 0, nil
		}
		return -1, unix.ENOSYS
	})
	if denied != nil {
		return *denied
	}
	return c.performed(ev.Syscall, v, err)
}

func mapOut(rs []idRange, id uint32) (uint32, bool) {
	for _, r := range rs {
		if id >= r.inside && uint64(id) < uint64(r.inside)+uint64(r.n) {
			return r.outside + (id - r.inside), true
		}
	}
	return 0, false
}

// outUID is the caller's uid as the supervisor names it (false: its namespace maps no such id).
func (m *idMaps) outUID(id uint32) (uint32, bool) {
	if m == nil || id == noID {
		return id, true
	}
	return mapOut(m.uids, id)
}

func (m *idMaps) outGID(id uint32) (uint32, bool) {
	if m == nil || id == noID {
		return id, true
	}
	return mapOut(m.gids, id)
}
