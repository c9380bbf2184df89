//go:build linux

package supervise

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The other path calls a judge allowed are performed here too, on the copy it
// judged, as unlink and mkdir are (hostperform.go: a thread of its own in the
// sandbox's Landlock domain, with the caller's credentials, umask and no
// capability, resolving in the caller's root and cwd or beneath its directory
// descriptor, never through a magic link):
//
//   - newfstatat, stat, lstat, statx: the file is opened O_PATH (O_NOFOLLOW for
//     AT_SYMLINK_NOFOLLOW and lstat) on that thread and stat'ed by descriptor; the
//     result is written into the caller's buffer with its owner and group as the
//     caller's user namespace shows them (its uid_map and gid_map; an id it does
//     not map is the overflow id, as the kernel shows it). AT_EMPTY_PATH with an
//     empty path stats the caller's descriptor (or its cwd);
//   - faccessat, faccessat2, access: faccessat2 on that descriptor with the
//     caller's mode and AT_EACCESS (the kernel checks the thread's real or
//     effective ids, the caller's);
//   - readlinkat, readlink: the link itself opened O_PATH|O_NOFOLLOW and read, at
//     most the caller's size written into its buffer. A link under /proc is
//     refused (EACCES): its target would be named in the supervisor's view;
//   - truncate: made on the file reached (its /proc/thread-self/fd name): the
//     kernel checks write permission and Landlock's TRUNCATE right on that file for
//     the thread;
//   - mknodat, mknod: made in the parent directory as mkdir is (Landlock's MAKE_*
//     rights, the umask).
//
// Differences from the kernel's own call are openForCaller's (ELOOP for a magic
// link, EACCES for a path leaving its directory descriptor); the calls the kernel
// refuses for their arguments alone (flags, sizes, modes) are refused the same way
// before anything is resolved.

// inodeCalls are the calls performed here (besides openTarget, unlinkTarget, mkdirTarget).
var inodeCalls = map[string]bool{
	"newfstatat": true, "stat": true, "lstat": true, "statx": true,
	"faccessat": true, "faccessat2": true, "access": true,
	"readlinkat": true, "readlink": true, "truncate": true, "mknodat": true, "mknod": true,
}

func inodeTarget(ev *Event) bool { return inodeCalls[ev.Syscall] }

// lookUpCalls are the inodeCalls that only look a path up and read what they find
// (creds.go: lookUpAs).
var lookUpCalls = map[string]bool{
	"newfstatat": true, "stat": true, "lstat": true, "statx": true, "readlinkat": true, "readlink": true,
}

const (
	atStatxSyncType = 0x6000
	statxReserved   = 0x80000000
	procSuperMagic  = 0x9fa0
)

// inodeForCaller performs a call of inodeCalls with the path the judge saw.
func (c *call) inodeForCaller(ev *Event) reply {
	dirfd := int32(unix.AT_FDCWD)
	var flags uint64
	pathArg := PathArg[ev.Syscall]
	switch ev.Syscall {
	case "newfstatat":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(3)))
		if flags&^uint64(unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_EMPTY_PATH) != 0 {
			return fail(unix.EINVAL)
		}
	case "lstat":
		flags = unix.AT_SYMLINK_NOFOLLOW
	case "statx":
		dirfd, flags = c.argInt(0), uint64(uint32(c.arg(2)))
		if flags&^uint64(unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_EMPTY_PATH|atStatxSyncType) != 0 ||
			flags&atStatxSyncType == atStatxSyncType || uint32(c.arg(3))&statxReserved != 0 {
			return fail(unix.EINVAL)
		}
	case "faccessat", "faccessat2", "access":
		mode := c.arg(1)
		if ev.Syscall != "access" {
			dirfd, mode = c.argInt(0), c.arg(2)
		}
		if ev.Syscall == "faccessat2" {
			flags = uint64(uint32(c.arg(3)))
			if flags&^uint64(unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
				return fail(unix.EINVAL)
			}
		}
		if uint32(mode)&^7 != 0 {
			return fail(unix.EINVAL)
		}
	case "readlinkat", "readlink":
		size := c.arg(2)
		if ev.Syscall == "readlinkat" {
			dirfd, size = c.argInt(0), c.arg(3)
		}
		if int32(uint32(size)) <= 0 {
			return fail(unix.EINVAL)
		}
		flags = unix.AT_SYMLINK_NOFOLLOW | unix.AT_EMPTY_PATH // the kernel reads a link by an empty path too
	case "truncate":
		if int64(c.arg(1)) < 0 {
			return fail(unix.EINVAL)
		}
	case "mknodat", "mknod":
		if ev.Syscall == "mknodat" {
			dirfd = c.argInt(0)
		}
		return c.mknodForCaller(ev, dirfd)
	}
	path := ev.Path
	nullOK := ev.Syscall == "newfstatat" || ev.Syscall == "statx" // Linux 6.11: a NULL path with AT_EMPTY_PATH
	empty := flags&unix.AT_EMPTY_PATH != 0 && (ev.HasPath && ev.Path == "" || !ev.HasPath && nullOK && c.arg(pathArg) == 0)
	emptyPath := empty
	if !empty {
		p, r := pathCopy(ev)
		if r != nil {
			return *r
		}
		path = p
	}
	var b pathBase
	if empty {
		if dirfd == unix.AT_FDCWD {
			empty, path = false, "." // the caller's cwd, resolved in its root
		} else {
			fd, r := c.childFD(dirfd)
			if r != nil {
				return *r
			}
			b = pathBase{fd: fd}
		}
	}
	if !empty {
		var r *reply
		if b, r = c.pathBase(dirfd, path); r != nil {
			return *r
		}
	}
	cr, r := c.callerCreds()
	if r != nil {
		return *r
	}
	var ids *idMaps
	if ev.Syscall == "newfstatat" || ev.Syscall == "stat" || ev.Syscall == "lstat" || ev.Syscall == "statx" {
		m, err := c.idMaps()
		if err != nil {
			return c.failure("read the caller's id maps", err)
		}
		ids = m
	}
	if !c.valid() {
		return gone()
	}
	var st unix.Stat_t
	var stx unix.Statx_t
	var link []byte
	var denied *reply
	perform := func() (int, error) {
		fd := b.fd
		if !empty {
			of := uint64(unix.O_PATH | unix.O_CLOEXEC)
			if flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
				of |= unix.O_NOFOLLOW
			}
			how := &unix.OpenHow{Flags: of, Resolve: b.resolve}
			var err error
			for try := 0; ; try++ {
				fd, err = unix.Openat2(b.fd, b.path, how)
				if err != unix.EAGAIN || try >= 8 {
					break // EAGAIN: a concurrent rename, look again
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
		case "newfstatat", "stat", "lstat":
			return 0, unix.Fstatat(fd, "", &st, unix.AT_EMPTY_PATH)
		case "statx":
			return 0, unix.Statx(fd, "", unix.AT_EMPTY_PATH|int(flags&atStatxSyncType), int(uint32(c.arg(3))), &stx)
		case "faccessat", "faccessat2", "access":
			mode := c.arg(1)
			if ev.Syscall != "access" {
				mode = c.arg(2)
			}
			_, _, e := unix.Syscall6(unix.SYS_FACCESSAT2, uintptr(fd), uintptr(unsafe.Pointer(bytePtr(""))), uintptr(uint32(mode)),
				uintptr(unix.AT_EMPTY_PATH|flags&unix.AT_EACCESS), 0, 0)
			if e != 0 {
				return -1, e
			}
			return 0, nil
		case "readlinkat", "readlink":
			if err := unix.Fstat(fd, &st); err != nil {
				return -1, err
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				if emptyPath {
					return -1, unix.ENOENT // what the kernel answers for an empty path to no link
				}
				return -1, unix.EINVAL
			}
			var sfs unix.Statfs_t
			if err := unix.Fstatfs(fd, &sfs); err != nil {
				return -1, err
			}
			if sfs.Type == procSuperMagic {
				denied = &reply{}
				*denied = deny(unix.EACCES, "supervisor: readlink of "+path+" for the caller: a /proc link names its target in the supervisor's view")
				return -1, unix.EACCES
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, "", buf)
			if err != nil {
				return -1, err
			}
			link = buf[:n]
			return n, nil
		case "truncate":
			return 0, unix.Truncate("/proc/thread-self/fd/"+strconv.Itoa(fd), int64(c.arg(1)))
		}
		return -1, unix.ENOSYS
	}
	var v int
	var err error
	if lookUpCalls[ev.Syscall] {
		v, err = c.s.lookUpAs(cr, perform) // not Landlock's: on this thread (creds.go)
	} else {
		v, err = c.s.asSandbox(cr, nil, perform)
	}
	if denied != nil {
		return *denied
	}
	if err != nil {
		return c.performed(ev.Syscall, v, err)
	}
	switch ev.Syscall {
	case "newfstatat", "stat", "lstat":
		st.Uid, st.Gid = ids.uid(st.Uid), ids.gid(st.Gid)
		buf := c.arg(1)
		if ev.Syscall == "newfstatat" {
			buf = c.arg(2)
		}
		return c.written(buf, unsafe.Slice((*byte)(unsafe.Pointer(&st)), unsafe.Sizeof(st)), 0)
	case "statx":
		stx.Uid, stx.Gid = ids.uid(stx.Uid), ids.gid(stx.Gid)
		return c.written(c.arg(4), unsafe.Slice((*byte)(unsafe.Pointer(&stx)), unsafe.Sizeof(stx)), 0)
	case "readlinkat", "readlink":
		size := c.arg(2)
		buf := c.arg(1)
		if ev.Syscall == "readlinkat" {
			size, buf = c.arg(3), c.arg(2)
		}
		if uint64(len(link)) > uint64(uint32(size)) {
			link = link[:uint32(size)]
		}
		return c.written(buf, link, int64(len(link)))
	}
	return ret(int64(v))
}

// written answers v once buf is in the caller's memory at addr (EFAULT where the
// kernel's copy to the caller would fail).
func (c *call) written(addr uint64, buf []byte, v int64) reply {
	if len(buf) > 0 {
		if err := c.write(addr, buf); err != nil {
			return c.failure("write the result", err, unix.EFAULT)
		}
	}
	if !c.valid() {
		return gone()
	}
	return ret(v)
}

// mknodForCaller performs mknod(at) in the parent directory of the judged path.
func (c *call) mknodForCaller(ev *Event, dirfd int32) reply {
	path, r := pathCopy(ev)
	if r != nil {
		return *r
	}
	mode, dev := uint32(c.arg(1)), uint64(uint32(c.arg(2)))
	if ev.Syscall == "mknodat" {
		mode, dev = uint32(c.arg(2)), uint64(uint32(c.arg(3)))
	}
	return c.inParentForCaller(ev, dirfd, path, ev.Syscall, func(pfd int, base string) (int, error) {
		if base == "." && strings.Trim(path, "/") == "" {
			return -1, unix.EEXIST // mknod("/")
		}
		// new_decode_dev of the caller's 32-bit dev_t, as mknodat does
		major, minor := (dev&0xfff00)>>8, (dev&0xff)|((dev>>12)&0xfff00)
		return 0, unix.Mknodat(pfd, base, mode, int(unix.Mkdev(uint32(major), uint32(minor))))
	})
}

// idMaps translate the ids the supervisor sees into the caller's user namespace
// (nil: the same namespace, nothing to translate).
type idMaps struct {
	uids, gids       []idRange
	overUID, overGID uint32
}

type idRange struct{ inside, outside, n uint32 }

// idMaps are the caller's user namespace's maps. A namespace's maps are written
// once and never change, so those found written are kept (idMapCache), each with
// the namespace held open: its inode number, the key, cannot name another
// namespace while it is kept.
func (c *call) idMaps() (*idMaps, error) {
	// a run's tasks never change user namespace (the filter refuses new ones and
	// setns), but for its pid 1, which makes the run's: theirs are the run's
	rl := c.run
	perRun := rl != nil && !rl.noPid1 && int(c.n.Pid) != rl.pid
	if perRun {
		if m := rl.idmaps.Load(); m != nil {
			return m.maps, nil
		}
	}
	m, err := c.readIDMaps()
	if err == nil && perRun && (m == nil || len(m.uids) > 0 && len(m.gids) > 0) {
		rl.idmaps.Store(&runIDMaps{m})
	}
	return m, err
}

// runIDMaps are a run's id maps (nil maps: its namespace is the supervisor's).
type runIDMaps struct{ maps *idMaps }

func (c *call) readIDMaps() (*idMaps, error) {
	ours, err := ourUserNS()
	if err != nil {
		return nil, err
	}
	theirs, err := os.Readlink(c.proc("ns/user"))
	if err != nil {
		return nil, err
	}
	if ours == theirs {
		return nil, nil
	}
	if m := c.s.idmaps.get(theirs); m != nil {
		return m, nil
	}
	m := &idMaps{overUID: overflowUID(), overGID: overflowGID()}
	if m.uids, err = readIDMap(c.proc("uid_map")); err != nil {
		return nil, err
	}
	if m.gids, err = readIDMap(c.proc("gid_map")); err != nil {
		return nil, err
	}
	if len(m.uids) > 0 && len(m.gids) > 0 {
		c.s.idmaps.put(theirs, c.proc("ns/user"), m)
	}
	return m, nil
}

// ourUserNS is the supervisor's user namespace (its link, "user:[inode]").
var ourUserNS = sync.OnceValues(func() (string, error) { return os.Readlink("/proc/self/ns/user") })

var (
	overflowUID = sync.OnceValue(func() uint32 { return overflowID("uid") })
	overflowGID = sync.OnceValue(func() uint32 { return overflowID("gid") })
)

// maxIDMaps bounds the user namespaces whose maps are kept.
const maxIDMaps = 64

type idMapCache struct {
	mu sync.Mutex
	m  map[string]idMapEntry // by the namespace's link ("user:[inode]")
}

type idMapEntry struct {
	fd   int // the namespace, held
	maps *idMaps
}

func (k *idMapCache) get(ns string) *idMaps {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[ns].maps
}

// put keeps m for ns if the namespace nsPath opens is still ns (the caller did
// not move between the reads).
func (k *idMapCache) put(ns, nsPath string, m *idMaps) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || ns != "user:["+strconv.FormatUint(st.Ino, 10)+"]" {
		unix.Close(fd)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[ns]; ok || len(k.m) >= maxIDMaps {
		unix.Close(fd)
		return
	}
	if k.m == nil {
		k.m = map[string]idMapEntry{}
	}
	k.m[ns] = idMapEntry{fd: fd, maps: m}
}

func (k *idMapCache) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.m {
		unix.Close(e.fd)
	}
	k.m = nil
}

// readIDMap parses a uid_map or gid_map as this process reads it (its outside ids
// are ours: the caller's namespace is not ours).
func readIDMap(p string) ([]idRange, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []idRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) != 3 {
			continue
		}
		var v [3]uint64
		for i := range fl {
			if v[i], err = strconv.ParseUint(fl[i], 10, 32); err != nil {
				return nil, err
			}
		}
		rs = append(rs, idRange{uint32(v[0]), uint32(v[1]), uint32(v[2])})
	}
	return rs, sc.Err()
}

func overflowID(kind string) uint32 {
	b, err := os.ReadFile("/proc/sys/kernel/overflow" + kind)
	if err == nil {
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
			return uint32(v)
		}
	}
	return 65534
}

func mapID(rs []idRange, id, over uint32) uint32 {
	for _, r := range rs {
		if id >= r.outside && uint64(id) < uint64(r.outside)+uint64(r.n) {
			return r.inside + (id - r.outside)
		}
	}
	return over
}

func (m *idMaps) uid(id uint32) uint32 {
	if m == nil {
		return id
	}
	return mapID(m.uids, id, m.overUID)
}

func (m *idMaps) gid(id uint32) uint32 {
	if m == nil {
		return id
	}
	return mapID(m.gids, id, m.overGID)
}

// continuedDirfds are the path calls an allowed call of may be continued as the
// caller's own (pathContinued), with the argument holding the directory each of
// its paths (Path, Path2) is resolved from: -1 the cwd, -2 not resolved (a
// symlink's target: its contents). utimensat stays performed (its times are a
// second pointer the kernel would read again).
var continuedDirfds = map[string][2]int{
	"openat": {0, -2}, "open": {-1, -2}, "creat": {-1, -2},
	"unlinkat": {0, -2}, "unlink": {-1, -2}, "rmdir": {-1, -2}, "mkdirat": {0, -2}, "mkdir": {-1, -2},
	"renameat": {0, 2}, "renameat2": {0, 2}, "rename": {-1, -1}, "linkat": {0, 2}, "link": {-1, -1},
	"symlinkat": {-2, 1}, "symlink": {-2, -1},
	"chmod": {-1, -2}, "fchmodat": {0, -2}, "fchmodat2": {0, -2}, "chown": {-1, -2}, "lchown": {-1, -2},
	"fchownat": {0, -2},
}

// pathContinued continues a path call the host allowed as the caller's own call
// when nothing but the kernel can change the paths it judged (hostexec.go: alone:
// the caller is its process's only thread and shares its memory with no other
// process; the judged copies written back, their pages private): the kernel then
// runs it with the caller's credentials, Landlock domain and umask on exactly what
// the host saw, where a performed call differs from the kernel's own in the ways
// docs/security.md lists. Not when the run denies paths (ctx.deny_path also denies
// by the identity of the file reached, which only a performed call learns), nor
// for a path relative to a directory descriptor (a performed one stays beneath
// it: RESOLVE_BENEATH); false: performed instead.
func (c *call) pathContinued(ev *Event, rl *RunLog) (reply, bool) {
	dirfds, ok := continuedDirfds[ev.Syscall]
	if !ok {
		return reply{}, false
	}
	_, two := PathArg2[ev.Syscall]
	for i, p := range []struct {
		named, has bool
		path       string
	}{{true, ev.HasPath, ev.Path}, {two, ev.HasPath2, ev.Path2}} {
		if !p.named {
			continue
		}
		if !p.has {
			return reply{}, false // not copied: the performed call answers the kernel's error
		}
		if dirfds[i] >= 0 && !strings.HasPrefix(p.path, "/") && c.argInt(dirfds[i]) != unix.AT_FDCWD {
			return reply{}, false
		}
	}
	if pd, ok := ev.run.(PathDenier); ok && pd.HasDenied() {
		return reply{}, false
	}
	if alone, _, err := c.alone(ev, rl); !alone || err != nil {
		return reply{}, false
	}
	if !c.valid() {
		return gone(), true
	}
	return cont(), true
}
