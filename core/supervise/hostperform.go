//go:build linux

package supervise

import (
	"errors"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Path and bind calls the host allowed are performed here, not continued (as opens
// are, hostopen.go): the host judged the supervisor's copy of the path or address,
// and a thread of the caller could rewrite it between that copy and the kernel's
// own read. Each is made on a thread of its own (asSandbox) that holds the sandbox's
// Landlock domain, the caller's credentials (when the supervisor has more), no
// capability and, for the calls that create something, the caller's umask:
//
//   - unlinkat, unlink, rmdir, mkdirat, mkdir: the parent directory of the copied
//     path is resolved on that thread as openForCaller resolves (in the caller's
//     root and cwd, RESOLVE_IN_ROOT; beneath the directory descriptor for a path
//     relative to one, RESOLVE_BENEATH; never through a magic link), and the last
//     component (with its trailing slashes, which the kernel interprets) is removed
//     or made there: Landlock's REMOVE_*/MAKE_DIR rights, the view's read-only
//     mounts and the directory's permissions are checked by the kernel for that
//     thread, as they would be for the caller;
//   - bind: made on the supervisor's duplicate of the caller's socket (pidfd_getfd:
//     the same socket) with the copied address. Landlock's TCP bind rules
//     (net_allow_bind) check the task that binds, here the thread in the sandbox's
//     domain. A unix path address is bound from its parent directory, resolved in
//     the caller's root as above (the thread's cwd, an fs_struct of its own), so the
//     socket file is made with the caller's credentials, umask and MAKE_SOCK right.
//
// Differences from the kernel's own call are openForCaller's: magic links are
// refused (ELOOP), a path relative to a directory descriptor must stay beneath it
// (EXDEV), a run with a /proc of its own cannot remove or make anything under
// /proc (it could not anyway).

func unlinkTarget(ev *Event) bool {
	return ev.Syscall == "unlinkat" || ev.Syscall == "unlink" || ev.Syscall == "rmdir"
}

func mkdirTarget(ev *Event) bool { return ev.Syscall == "mkdirat" || ev.Syscall == "mkdir" }

// splitLast splits a path at its last component, keeping that component's
// trailing slashes ("a/b/" → "a", "b/"; "b" → ".", "b"; "/" → "/", ".").
func splitLast(p string) (dir, base string) {
	t := strings.TrimRight(p, "/")
	if t == "" {
		return "/", "."
	}
	i := strings.LastIndexByte(t, '/')
	if i < 0 {
		return ".", p
	}
	dir = t[:i]
	if dir == "" {
		dir = "/"
	}
	return dir, p[i+1:]
}

// pathBase is where a path argument is resolved from: the caller's root (abs: the
// path made absolute with its cwd) or its directory descriptor.
type pathBase struct {
	fd      int
	path    string
	resolve uint64
}

func (c *call) pathBase(dirfd int32, path string) (pathBase, *reply) {
	if strings.HasPrefix(path, "/") || dirfd == unix.AT_FDCWD {
		root, abs, r := c.inRoot(path)
		if r != nil {
			return pathBase{}, r
		}
		return pathBase{root, abs, unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}, nil
	}
	fd, r := c.childFD(dirfd)
	if r != nil {
		return pathBase{}, r
	}
	return pathBase{fd, path, unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS}, nil
}

// parent opens the directory b's path ends in (on the performing thread), and
// names its last component.
func (b pathBase) parent() (int, string, error) {
	dir, base := splitLast(b.path)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: b.resolve}
	for try := 0; ; try++ {
		fd, err := unix.Openat2(b.fd, dir, how)
		if err == unix.EAGAIN && try < 8 {
			continue // a concurrent rename: look again
		}
		return fd, base, err
	}
}

// pathCopy is the copied path of ev, or the kernel's answer for one that could
// not be copied.
func pathCopy(ev *Event) (string, *reply) {
	if !ev.HasPath {
		r := fail(unix.EFAULT)
		if strings.Contains(ev.PathErr, "name too long") {
			r = fail(unix.ENAMETOOLONG)
		}
		return "", &r
	}
	if ev.Path == "" {
		r := fail(unix.ENOENT)
		return "", &r
	}
	return ev.Path, nil
}

// performed turns the performing thread's outcome into the answer.
func (c *call) performed(what string, v int, err error) reply {
	if err != nil {
		if !c.valid() {
			return gone()
		}
		var e syscall.Errno
		if errors.As(err, &e) {
			if e == unix.EXDEV {
				return deny(unix.EACCES, "supervisor: "+what+" for the caller: the path leaves its directory descriptor")
			}
			return fail(e) // the kernel's answer for the caller's call (ENOENT, EACCES from Landlock, EROFS, …)
		}
		return deny(unix.EACCES, "supervisor: "+what+" for the caller: "+err.Error())
	}
	return ret(int64(v))
}

// callerCreds are the caller's credentials when the supervisor has more (nil: ours).
func (c *call) callerCreds() (*creds, *reply) {
	if !c.s.privileged {
		return nil, nil
	}
	cr, err := c.readCallerCreds()
	if err != nil {
		r := c.failure("read the caller's credentials", err)
		return nil, &r
	}
	return cr, nil
}

// pathForCaller performs unlink(at), rmdir, mkdir(at) with the path the host judged.
func (c *call) pathForCaller(ev *Event) reply {
	path, r := pathCopy(ev)
	if r != nil {
		return *r
	}
	dirfd := int32(unix.AT_FDCWD)
	var flags, mode uint64
	op := "unlink"
	switch ev.Syscall {
	case "unlinkat":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(2)))
	case "rmdir":
		flags = unix.AT_REMOVEDIR
	case "mkdirat":
		dirfd, mode, op = c.argInt(0), uint64(uint32(c.arg(2))), "mkdir"
	case "mkdir":
		mode, op = uint64(uint32(c.arg(1))), "mkdir"
	}
	return c.inParentForCaller(ev, dirfd, path, op, func(pfd int, base string) (int, error) {
		// an O_PATH directory fd serves as the *at calls' base
		if op == "mkdir" {
			return 0, unix.Mkdirat(pfd, base, uint32(mode&0o7777))
		}
		if base == "." && strings.Trim(path, "/") == "" {
			if flags&unix.AT_REMOVEDIR != 0 {
				return -1, unix.EBUSY // rmdir("/")
			}
			return -1, unix.EISDIR
		}
		_, _, e := unix.Syscall(unix.SYS_UNLINKAT, uintptr(pfd), uintptr(unsafe.Pointer(bytePtr(base))), uintptr(flags))
		if e != 0 {
			return -1, e
		}
		return 0, nil
	})
}

// inParentForCaller performs f for the caller on the directory its path ends in
// (pfd, opened on the performing thread with the caller's credentials and umask)
// and the last component (base), after ctx.deny_path has seen that directory.
func (c *call) inParentForCaller(ev *Event, dirfd int32, path, what string, f func(pfd int, base string) (int, error)) reply {
	b, r := c.pathBase(dirfd, path)
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
	v, err := c.s.asSandbox(cr, fs, func() (int, error) {
		pfd, base, err := b.parent()
		if err != nil {
			return -1, err
		}
		defer unix.Close(pfd)
		if r := ev.deniedFD(pfd, strings.TrimRight(base, "/")); r != nil {
			denied = r
			return -1, unix.EACCES
		}
		return f(pfd, base)
	})
	if denied != nil {
		return *denied
	}
	return c.performed(what, v, err)
}

func bytePtr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

// bindForCaller performs bind on the caller's socket with the address the host
// judged (a == nil: no address was given, so the kernel reads none).
func (c *call) bindForCaller(a *addr) reply {
	if a == nil || a.n == 0 {
		return cont() // bind(fd, NULL or 0 bytes): nothing in memory to swap (EINVAL, EFAULT from the kernel)
	}
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	cr, r := c.callerCreds()
	if r != nil {
		return *r
	}
	var fs *threadFS
	var b pathBase
	name, abstract := sunPath(a)
	local := k.family == unix.AF_UNIX && a.sa.Addr.Family == unix.AF_UNIX && !abstract && len(name) > 0
	if local {
		if b, r = c.pathBase(unix.AT_FDCWD, string(name)); r != nil {
			return *r
		}
		fs = &threadFS{umask: c.umask(), dir: -1}
	}
	if !c.valid() {
		return gone()
	}
	v, err := c.s.asSandbox(cr, fs, func() (int, error) {
		sa := *a
		if local {
			// bound by its last component from its parent, the thread's cwd
			pfd, base, err := b.parent()
			if err != nil {
				return -1, err
			}
			err = unix.Fchdir(pfd)
			unix.Close(pfd)
			if err != nil {
				return -1, err
			}
			u := (*unix.RawSockaddrUnix)(unsafe.Pointer(&sa.sa))
			*u = unix.RawSockaddrUnix{Family: unix.AF_UNIX}
			for i := 0; i < len(base); i++ {
				u.Path[i] = int8(base[i])
			}
			sa.n = 2 + len(base) + 1
		}
		p, n := sa.ptr()
		_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(k.fd), uintptr(p), uintptr(n))
		if e != 0 {
			return -1, e
		}
		return 0, nil
	})
	return c.performed("bind", v, err)
}
