//go:build linux

package supervise

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Unix socket addresses in calls performed for the caller (net.go). A path is the
// caller's: it is resolved in the caller's root from its cwd, and the call is given
// the inode found, as "/proc/self/fd/N" (the kernel follows that link to the very
// socket inode, and checks write permission on it). When the supervisor has
// privileges the caller lacks (a root host), the resolution and the call run on a
// thread of their own holding the caller's uids, gids, groups and no capability, so
// that the permission checks are the caller's. An abstract address is refused where
// the sandbox's Landlock domain scopes abstract sockets: the supervisor is outside
// every domain, and cannot tell the sandbox's own abstract sockets from the host's.

func sunPath(a *addr) (path []byte, abstract bool) {
	if a == nil || a.n <= 2 || a.sa.Addr.Family != unix.AF_UNIX {
		return nil, false // unnamed (autobind), or what the kernel refuses (EINVAL)
	}
	u := (*unix.RawSockaddrUnix)(unsafe.Pointer(&a.sa))
	n := a.n - 2
	if n > len(u.Path) {
		n = len(u.Path)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&u.Path[0])), n)
	if b[0] == 0 {
		return b[1:], true
	}
	for i, ch := range b {
		if ch == 0 {
			return b[:i], false
		}
	}
	return b, false
}

// unixDestination refuses an abstract address the sandbox may not reach itself.
func (c *call) unixDestination(a *addr) *reply {
	name, abstract := sunPath(a)
	if abstract && c.s.cfg.AbstractScoped {
		r := deny(unix.EPERM, fmt.Sprintf("abstract unix socket @%s (Landlock scope: not reached for the sandbox)", strings.ToValidUTF8(string(name), "?")))
		return &r
	}
	return nil
}

// asCaller runs op after turning the unix path addresses in names into the inodes
// they resolve to for the caller, as the caller when the supervisor is privileged.
func (c *call) asCaller(k sock, names []*addr, op func() reply) reply {
	if k.family != unix.AF_UNIX {
		return op()
	}
	type todo struct {
		a    *addr
		root int
		path string
	}
	var paths []todo
	for _, a := range names {
		p, abstract := sunPath(a)
		if abstract || len(p) == 0 {
			continue
		}
		root, abs, r := c.inRoot(string(p))
		if r != nil {
			return *r
		}
		paths = append(paths, todo{a, root, abs})
	}
	if len(paths) == 0 {
		return op()
	}
	run := func() reply {
		for _, t := range paths {
			pin, r := c.walk(t.root, t.path, true)
			if r != nil {
				return *r
			}
			link := "/proc/self/fd/" + strconv.Itoa(pin.fd)
			u := (*unix.RawSockaddrUnix)(unsafe.Pointer(&t.a.sa))
			*u = unix.RawSockaddrUnix{Family: unix.AF_UNIX}
			for i := 0; i < len(link); i++ {
				u.Path[i] = int8(link[i])
			}
			t.a.n = 2 + len(link) + 1
		}
		return op()
	}
	if !c.s.privileged {
		return run()
	}
	cr, err := c.readCallerCreds()
	if err != nil {
		return c.failure("read the caller's credentials", err)
	}
	done := make(chan reply, 1)
	go func() {
		// never unlocked: the thread, holding the caller's credentials, ends with
		// this goroutine and serves nothing else
		runtime.LockOSThread()
		if err := cr.become(); err != nil {
			done <- deny(unix.EACCES, "supervisor: take the caller's credentials: "+err.Error())
			return
		}
		done <- run()
	}()
	return <-done
}

// creds are a task's ids, as /proc/<tid>/status gives them (in the supervisor's
// user namespace: the host's ids).
type creds struct {
	uid, gid [4]uint32 // real, effective, saved, filesystem
	groups   []uint32
}

func readCreds(status string) (*creds, error) {
	f, err := os.Open(status)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cr := &creds{}
	seen := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		switch key {
		case "Uid", "Gid":
			if len(fields) != 4 {
				return nil, fmt.Errorf("%s: %q", key, val)
			}
			dst := &cr.uid
			if key == "Gid" {
				dst = &cr.gid
			}
			for i, s := range fields {
				v, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return nil, err
				}
				dst[i] = uint32(v)
			}
			seen++
		case "Groups":
			for _, s := range fields {
				v, err := strconv.ParseUint(s, 10, 32)
				if err != nil {
					return nil, err
				}
				cr.groups = append(cr.groups, uint32(v))
			}
			seen++
		}
	}
	if seen != 3 {
		return nil, fmt.Errorf("%s: no Uid, Gid or Groups", status)
	}
	return cr, sc.Err()
}

// become gives the calling thread (only: raw system calls, not the runtime's
// all-threads ones) these credentials and no capability.
func (cr *creds) become() error {
	var gp uintptr
	if len(cr.groups) > 0 {
		gp = uintptr(unsafe.Pointer(&cr.groups[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(cr.groups)), gp, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(cr.gid[0]), uintptr(cr.gid[1]), uintptr(cr.gid[2])); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(cr.uid[0]), uintptr(cr.uid[1]), uintptr(cr.uid[2])); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(cr.gid[3]), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(cr.uid[3]), 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

// privileged: this process has capabilities (or is root), which a caller's call
// performed here must not borrow.
func privileged() bool {
	if os.Geteuid() == 0 {
		return true
	}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true // cannot tell: act as the caller
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.Trim(strings.TrimSpace(v), "0") != ""
		}
	}
	return true
}
