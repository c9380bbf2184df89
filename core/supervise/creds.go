//go:build linux

package supervise

import (
	"errors"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The caller's credentials, for a call the supervisor performs with them
// (privileged supervisors only). Generating /proc/<tid>/status for them cost a
// performed call 30-70 µs (a freshly exec'd process the most: its /proc entries are
// made by that read). Instead:
//
//   - the ids (real, effective, saved, filesystem; uid and gid) come from
//     PIDFD_GET_INFO (Linux 6.13) on the caller's thread pidfd, fresh at every call:
//     a task changes them at will (setresuid without capabilities, a set-user-ID
//     program);
//   - the supplementary groups are read from /proc once per run and kept in its
//     RunLog. No task of a run can change them: setgroups needs CAP_SETGID in the
//     task's user namespace, and a root supervisor's runs have none — their pid 1,
//     sandtrap-init, empties its bounding, permitted, effective and inheritable sets
//     (ST_CF_CAPS, set whenever the engine is root: spawn.go) after its own
//     setgroups and before the program, so neither an exec of a set-user-ID program
//     nor a file capability gives CAP_SETGID back, and a new user namespace (refused
//     by the filter anyway) would not allow setgroups: its gid_map is written
//     without CAP_SETGID over the parent namespace. The run's pid 1 itself is never
//     read from or for the cache (its groups change in that setup).
//
// Anything else — an unprivileged-but-capable supervisor (its runs' capabilities
// are not dropped by pid 1), a call of no run, a test run whose pid 1 is the
// program, a kernel without PIDFD_GET_INFO — reads /proc/<tid>/status as before.

// readCallerCreds are the calling thread's credentials (before c.valid(), which
// the caller checks: the pidfd or /proc entry may be a reused tid's until then).
func (c *call) readCallerCreds() (*creds, error) {
	if c.creds != nil {
		return c.creds, nil
	}
	rl := c.run
	if !c.s.groupsFixed || rl == nil || rl.noPid1 || int(c.n.Pid) == rl.pid || c.s.noPidfdInfo.Load() {
		return readCreds(c.proc("status"))
	}
	g := rl.groups.Load()
	if g == nil {
		cr, err := readCreds(c.proc("status"))
		if err == nil {
			gs := append([]uint32{}, cr.groups...)
			rl.groups.CompareAndSwap(nil, &gs)
		}
		return cr, err
	}
	cr, err := c.pidfdCreds()
	if err != nil {
		return readCreds(c.proc("status"))
	}
	cr.groups = *g
	return cr, nil
}

// pidfdCreds are the caller's ids by PIDFD_GET_INFO (groups not filled in).
func (c *call) pidfdCreds() (*creds, error) {
	for fresh := false; ; fresh = true {
		if err := c.openPidfd(fresh); err != nil {
			return nil, err
		}
		info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_CREDS}
		err := unix.IoctlPidfdInfo(c.pidfd, &info)
		switch {
		case err == unix.ESRCH && !fresh:
			continue // a cached pidfd of a thread that is gone: this tid is another's now
		case err == unix.ENOTTY || err == unix.EINVAL:
			c.s.noPidfdInfo.Store(true)
			return nil, err
		case err != nil:
			return nil, err
		case info.Mask&unix.PIDFD_INFO_CREDS == 0:
			return nil, errors.New("PIDFD_GET_INFO: no credentials")
		}
		return &creds{
			uid: [4]uint32{info.Ruid, info.Euid, info.Suid, info.Fsuid},
			gid: [4]uint32{info.Rgid, info.Egid, info.Sgid, info.Fsgid},
		}, nil
	}
}

// Look-ups performed in place. A stat, statx or readlink a judge allowed is a path
// look-up (openat2 with O_PATH) and a read of what it found by that descriptor:
// Landlock governs none of these (no Landlock ABI up to 8 checks O_PATH opens,
// getattr or readlink), so they need not run on a thread of the sandbox's domain
// (sandboxthreads.go) — only with the caller's filesystem credentials, which are
// what the kernel's permission checks of a look-up read (search permission on each
// directory: the fsuid, fsgid, supplementary groups and the effective capabilities).
// Handing a call to another thread and back costs two wake-ups of an idle CPU
// (30 µs each on a 2-vCPU VM, where an idle vCPU halts); so lookUpAs runs it on the
// calling thread instead:
//
//   - an unprivileged supervisor (no capability: privileged()) looks up as itself,
//     exactly as its sandbox thread would;
//   - a privileged one switches the calling thread alone (raw setgroups, setfsgid,
//     setfsuid, capset: per-thread in the kernel) to the caller's groups and
//     filesystem ids with no effective capability, runs the look-up and switches
//     back (capabilities first: setgroups needs CAP_SETGID). Its real, effective
//     and saved ids never change, so switching back is always allowed. Should
//     anything of it fail, the calls go to the sandbox thread from then on
//     (inPlaceOff); a thread that could not be switched back keeps the lesser
//     rights of the caller, never more.
//
// faccessat is not among them: it checks the real ids, and as root it would take
// the thread's permitted capabilities (access_override_creds); truncate is
// Landlock's (TRUNCATE). Both stay on the sandbox thread.

// lookUpAs runs f, a look-up that Landlock does not govern, with cr's filesystem
// credentials (nil: ours, unprivileged) on the calling thread.
func (s *Supervisor) lookUpAs(cr *creds, f func() (int, error)) (int, error) {
	if cr == nil {
		return f()
	}
	if s.inPlaceOff.Load() {
		return s.asSandbox(cr, nil, f)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var saved threadCreds
	if err := saved.switchTo(cr); err != nil {
		s.inPlaceOff.Store(true)
		return s.asSandbox(cr, nil, f)
	}
	v, err := f()
	if saved.restore() != nil {
		s.inPlaceOff.Store(true)
	}
	return v, err
}

// threadCreds are a thread's filesystem credentials, saved to be put back.
type threadCreds struct {
	fsuid, fsgid uint32
	groups       []uint32
	sameGroups   bool // the caller's groups are the thread's: not set
	caps         [2]unix.CapUserData
	switched     int // the steps of switchTo done
}

func setfsid(nr uintptr, id uint32) uint32 {
	old, _, _ := unix.RawSyscall(nr, uintptr(id), 0, 0)
	return uint32(old)
}

// switchFSID sets the calling thread's filesystem uid or gid (nr: SYS_SETFSUID,
// SYS_SETFSGID) to id: the one it had, and whether it now has id. setfs[ug]id
// answer the previous id and change nothing when not allowed (-1 changes nothing):
// asked again to know.
func switchFSID(nr uintptr, id uint32) (old uint32, ok bool) {
	if old = setfsid(nr, id); old == id {
		return old, true
	}
	return old, setfsid(nr, ^uint32(0)) == id
}

func rawSetgroups(g []uint32) error {
	var p uintptr
	if len(g) > 0 {
		p = uintptr(unsafe.Pointer(&g[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(g)), p, 0); e != 0 {
		return e
	}
	return nil
}

func capsOf(data *[2]unix.CapUserData, set bool) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	nr := uintptr(unix.SYS_CAPGET)
	if set {
		nr = unix.SYS_CAPSET
	}
	if _, _, e := unix.RawSyscall(nr, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return e
	}
	return nil
}

// switchTo saves the calling thread's filesystem credentials into t and gives it
// cr's, with no effective capability. On error the thread is as it was.
func (t *threadCreds) switchTo(cr *creds) error {
	n, err := unix.Getgroups()
	if err != nil {
		return err
	}
	for _, g := range n {
		t.groups = append(t.groups, uint32(g))
	}
	if err := capsOf(&t.caps, false); err != nil {
		return err
	}
	t.sameGroups = slices.Equal(t.groups, cr.groups)
	if !t.sameGroups {
		if err := rawSetgroups(cr.groups); err != nil {
			return err
		}
	}
	t.switched = 1
	var ok bool
	t.fsgid, ok = switchFSID(unix.SYS_SETFSGID, cr.gid[3])
	t.switched = 2
	if !ok {
		t.restore()
		return unix.EPERM
	}
	t.fsuid, ok = switchFSID(unix.SYS_SETFSUID, cr.uid[3])
	t.switched = 3
	if !ok {
		t.restore()
		return unix.EPERM
	}
	none := t.caps
	none[0].Effective, none[1].Effective = 0, 0
	if err := capsOf(&none, true); err != nil {
		t.restore()
		return err
	}
	t.switched = 4
	return nil
}

// restore puts back what switchTo changed (capabilities first: the others need them).
func (t *threadCreds) restore() error {
	var bad error
	if t.switched >= 4 {
		if err := capsOf(&t.caps, true); err != nil {
			bad = err
		}
	}
	uidChanged := false
	if t.switched >= 3 {
		was, ok := switchFSID(unix.SYS_SETFSUID, t.fsuid)
		uidChanged = was != t.fsuid
		if !ok {
			bad = unix.EPERM
		}
	}
	if t.switched >= 2 {
		if _, ok := switchFSID(unix.SYS_SETFSGID, t.fsgid); !ok {
			bad = unix.EPERM
		}
	}
	if t.switched >= 1 && !t.sameGroups {
		if err := rawSetgroups(t.groups); err != nil {
			bad = err
		}
	}
	// setfsuid(0) gave back the filesystem capabilities it had taken: the set
	// saved is what the thread ends with
	if uidChanged {
		if err := capsOf(&t.caps, true); err != nil {
			bad = err
		}
	}
	t.switched = 0
	return bad
}
