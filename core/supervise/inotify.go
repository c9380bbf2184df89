//go:build linux

package supervise

import (
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// inotify_add_watch (issue 10, class 9): Landlock does not govern it, so a watch on a
// directory outside the policy would show the names of the files created there.

func inotifyTraps(Config) []Trap {
	return []Trap{{Syscall: "inotify_add_watch", Arg: -1}}
}

const (
	maxSymlinks = 40   // as the kernel (ELOOP)
	maxDepth    = 4096 // ".." steps before the walk gives up (a path has at most PATH_MAX/2 components)
)

// handleInotifyAddWatch copies the path once, resolves it in the child's root and
// cwd to a pinned inode, checks that inode against the policy, and adds the watch
// itself on the child's inotify instance, through /proc/self/fd/<pinned>: the watch
// is on the inode that was checked, whatever the child's memory says by then.
func handleInotifyAddWatch(c *call) reply {
	mask := uint32(c.arg(2))
	ifd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	if !isInotify(ifd) {
		return fail(unix.EINVAL) // as the kernel, for an fd that is no inotify instance
	}
	path, err := c.readString(c.arg(1), unix.PathMax)
	if err != nil {
		return c.failure("read the path", err, unix.EFAULT, unix.ENAMETOOLONG)
	}
	pinned, r := c.resolve(path, mask&unix.IN_DONT_FOLLOW == 0)
	if r != nil {
		return *r
	}
	in, err := c.s.inside(pinned)
	if err != nil {
		return c.failure("walk to the policy", err)
	}
	if !in {
		return deny(unix.EACCES, path)
	}
	if mask&unix.IN_ONLYDIR != 0 && !isDir(pinned.fd) {
		return fail(unix.ENOTDIR)
	}
	if !c.valid() {
		return gone()
	}
	// Following /proc/self/fd/N lands on the pinned dentry and stops there (a jump
	// through a magic link is not followed further), so IN_DONT_FOLLOW, already
	// applied when resolving, must not be passed: it would watch the magic link.
	wd, err := unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(pinned.fd), mask&^unix.IN_DONT_FOLLOW)
	rr := result(int64(wd), err)
	if err == nil && mask&unix.IN_MASK_CREATE != 0 {
		// a new watch (IN_MASK_CREATE fails on an existing one): not delivered, it
		// must not stay, or the restarted call would find it and fail with EEXIST
		rr.undo = func() { unix.InotifyRmWatch(ifd, uint32(wd)) }
	}
	return rr
}

func isInotify(fd int) bool {
	buf := make([]byte, 64)
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf)
	return err == nil && string(buf[:n]) == "anon_inode:inotify"
}

func isDir(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// pin is a resolved path: the inode, and for anything but a directory the directory
// it was found in (a non-directory has no ".." to walk).
type pin struct {
	fd, parent int
}

// resolve resolves path as the calling thread would: in its root (RESOLVE_IN_ROOT:
// ".." and absolute symlinks stay inside it), relative to its cwd, never through a
// magic link (/proc/<pid>/fd/…, /proc/self/root: they would be the supervisor's),
// following a final symlink when follow is set. It returns the errno the kernel
// would give for a path that does not resolve.
func (c *call) resolve(path string, follow bool) (pin, *reply) {
	if path == "" {
		return pin{}, &reply{kind: replyErrno, errno: unix.ENOENT}
	}
	root, path, r := c.inRoot(path)
	if r != nil {
		return pin{}, r
	}
	return c.walk(root, path, follow)
}

// inRoot opens the calling thread's root and makes path absolute in it (a relative
// path is joined to the caller's cwd).
func (c *call) inRoot(path string) (int, string, *reply) {
	root, err := unix.Open(c.proc("root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		r := c.failure("open the caller's root", err)
		return -1, "", &r
	}
	c.keep(root)
	if !strings.HasPrefix(path, "/") {
		cwd, r := c.cwd(root)
		if r != nil {
			return -1, "", r
		}
		path = cwd + "/" + path
	}
	return root, path, nil
}

// walk resolves the absolute path in root (see resolve).
func (c *call) walk(root int, path string, follow bool) (pin, *reply) {
	bad := func(r reply) (pin, *reply) { return pin{}, &r }
	open := func(dir int, p string, flags int, resolve uint64) (int, error) {
		how := &unix.OpenHow{Flags: uint64(flags | unix.O_PATH | unix.O_CLOEXEC), Resolve: resolve}
		for try := 0; ; try++ {
			fd, err := unix.Openat2(dir, p, how)
			if err == unix.EAGAIN && try < 8 {
				continue // RESOLVE_IN_ROOT saw a concurrent rename: look again
			}
			if err == nil {
				c.keep(fd)
			}
			return fd, err
		}
	}
	const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	for hops := 0; ; hops++ {
		if hops > maxSymlinks {
			return bad(fail(unix.ELOOP))
		}
		dir, base := splitPath(path)
		if base == "" || base == "." || base == ".." {
			// a directory by its own name ("/", "a/", "a/.", "a/.."): the kernel walks it all
			fd, err := open(root, path, unix.O_DIRECTORY, inRoot)
			if err != nil {
				return bad(pathErr(c, err))
			}
			return pin{fd: fd, parent: -1}, nil
		}
		dfd, err := open(root, dir, unix.O_DIRECTORY, inRoot)
		if err != nil {
			return bad(pathErr(c, err))
		}
		fd, err := open(dfd, base, unix.O_NOFOLLOW, unix.RESOLVE_NO_MAGICLINKS|unix.RESOLVE_BENEATH)
		if err != nil {
			return bad(pathErr(c, err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return bad(c.failure("fstat", err))
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK || !follow {
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return pin{fd: fd, parent: -1}, nil
			}
			return pin{fd: fd, parent: dfd}, nil
		}
		// A final symlink to follow: a magic link is refused as the kernel would with
		// RESOLVE_NO_MAGICLINKS (ELOOP; a symlink loop gives ELOOP too); any other is
		// followed here, so that the file it ends at is found with its directory.
		if _, err := open(dfd, base, 0, unix.RESOLVE_NO_MAGICLINKS|unix.RESOLVE_BENEATH); err == unix.ELOOP {
			return bad(deny(unix.ELOOP, path+" (a magic link or a symlink loop)"))
		}
		target, err := readlinkFD(fd)
		if err != nil {
			return bad(c.failure("readlink", err))
		}
		if strings.HasPrefix(target, "/") {
			path = target
		} else {
			path = dir + "/" + target
		}
	}
}

// cwd is the calling thread's working directory as a path in its root: the path
// /proc/<tid>/cwd names, checked to lead (in that root) to that very directory; a
// cwd that cannot be named so (deleted, outside the root) is refused.
func (c *call) cwd(root int) (string, *reply) {
	bad := func(r reply) (string, *reply) { return "", &r }
	cwdFD, err := unix.Open(c.proc("cwd"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return bad(c.failure("open the caller's cwd", err))
	}
	c.keep(cwdFD)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(c.proc("cwd"), buf)
	if err != nil {
		return bad(c.failure("readlink the caller's cwd", err))
	}
	cwd := string(buf[:n])
	fd, err := unix.Openat2(root, cwd, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return bad(deny(unix.EACCES, "supervisor: the caller's cwd "+cwd+" cannot be resolved in its root"))
	}
	c.keep(fd)
	a, err1 := statID(fd)
	b, err2 := statID(cwdFD)
	if err1 != nil || err2 != nil || a != b {
		return bad(deny(unix.EACCES, "supervisor: the caller's cwd "+cwd+" is not where its root leads"))
	}
	return cwd, nil
}

// pathErr: an error resolving the child's path is the child's error (ENOENT,
// ENOTDIR, ELOOP, EACCES for a directory it may not search, …), unless the child is
// gone. RESOLVE_BENEATH cannot fail on a single component that is not "..".
func pathErr(c *call, err error) reply {
	if !c.valid() {
		return gone()
	}
	if e, ok := err.(unix.Errno); ok {
		if e == unix.EXDEV || e == unix.EAGAIN {
			return deny(unix.EACCES, "supervisor: openat2: "+e.Error())
		}
		return fail(e)
	}
	return deny(unix.EACCES, "supervisor: openat2: "+err.Error())
}

// splitPath splits lexically at the last "/": "a/b" → ("a", "b"), "/b" → ("/", "b"),
// "a/" → ("a", ""), "b" → (".", "b"). Paths here are absolute.
func splitPath(p string) (dir, base string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	dir, base = p[:i], p[i+1:]
	if dir == "" {
		dir = "/"
	}
	return dir, base
}

func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// inside reports whether the pinned inode is inside the policy: it, or a directory
// above it, is one of the Allowed inodes. The walk opens ".." (O_PATH) from the
// directory (a directory's own, or the one a file was found in), which crosses mount
// boundaries to the mountpoint's parent, and ends where ".." no longer moves (the root
// of the child's mount namespace).
func (s *Supervisor) inside(p pin) (bool, error) {
	allowed, err := allowedIDs(s.cfg.Allowed)
	if err != nil {
		return false, err
	}
	id, err := statID(p.fd)
	if err != nil {
		return false, err
	}
	if allowed[id] {
		return true, nil
	}
	cur := p.fd
	if p.parent >= 0 {
		cur = p.parent
		if id, err = statID(cur); err != nil {
			return false, err
		}
	}
	owned := -1 // the ".." opened last (the pin's own fds belong to the call)
	defer func() {
		if owned >= 0 {
			unix.Close(owned)
		}
	}()
	for depth := 0; depth < maxDepth; depth++ {
		if allowed[id] {
			return true, nil
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		if owned >= 0 {
			unix.Close(owned)
		}
		owned = up
		upID, err := statID(up)
		if err != nil {
			return false, err
		}
		if upID == id {
			return false, nil // the root: the walk stopped moving
		}
		cur, id = up, upID
	}
	return false, nil
}
