//go:build linux

package supervise

import (
	"errors"

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
