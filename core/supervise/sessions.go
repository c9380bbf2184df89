//go:build linux

package supervise

// Denials by session within a run. A COW-fork template's clones are processes of
// one run (the template's pid namespace); each clone makes itself a session of its
// own right after it is forked (setsid) and then loads a seccomp layer refusing
// setsid and setpgid (seccomp.SessionLayer), so it and everything it starts stay in
// that session. A run whose log counts sessions (CountSessions) also keeps each
// denial under the caller's session:
//
//   - The session is identified by its leader's pidfs inode: the session id is read
//     from /proc/<tid>/stat of the caller (field 6, a number in the supervisor's pid
//     namespace), the leader opened by it (pidfd_open) and its inode taken (pidfs:
//     one inode per struct pid, never reused, where pid numbers are). The template
//     reports each clone with the same inode (os.pidfd_open of its clone), so no
//     pid number — and no pid reuse — is in the match.
//   - Then the notification's validity is checked (SECCOMP_IOCTL_NOTIF_ID_VALID):
//     valid, the caller lived throughout, so the stat was its own, and its session
//     kept its number allocated (a number used as a session id is not given to
//     another process), so the process opened by that number was the session's
//     leader.
//   - What is not attributed (kept by the run's log only): a call whose session
//     leader is gone (reaped: a clone's leftovers are killed before it is reaped,
//     so these are calls of dying processes), a kernel without pidfs (Linux < 6.9:
//     SessionsAttributable says so), and denials of more than maxSessions sessions
//     waiting to be taken at once.
//
// Reading stat, opening and closing the pidfd is paid per denial only, and only in
// runs that count sessions.

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxSessions bounds the sessions whose denials wait to be taken (TakeSession).
const maxSessions = 1 << 15

type sessionLogs struct {
	mu   sync.Mutex
	logs map[uint64]*denialLog // by the pidfs inode of the session's leader
}

// sessionsOf is r's per-session logs (nil: r does not count sessions).
type sessionsPtr = atomic.Pointer[sessionLogs]

// CountSessions makes r keep its denials by the caller's session too (TakeSession).
func (r *RunLog) CountSessions() {
	r.sessions.CompareAndSwap(nil, &sessionLogs{logs: map[uint64]*denialLog{}})
}

// TakeSession returns (and forgets) what the session whose leader has pidfs inode
// ino was refused.
func (r *RunLog) TakeSession(ino uint64) DenialList {
	out := DenialList{Entries: []Denial{}}
	ss := r.sessions.Load()
	if ss == nil {
		return out
	}
	ss.mu.Lock()
	l := ss.logs[ino]
	delete(ss.logs, ino)
	ss.mu.Unlock()
	if l == nil {
		return out
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out.Dropped = l.more
	for _, d := range l.entries {
		if d.Count > 0 {
			out.Entries = append(out.Entries, d)
		}
	}
	return out
}

func (ss *sessionLogs) log(ino uint64) *denialLog {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l := ss.logs[ino]
	if l == nil {
		if len(ss.logs) >= maxSessions {
			return nil
		}
		l = &denialLog{}
		ss.logs[ino] = l
	}
	return l
}

// pidfsMagic is PID_FS_MAGIC: pidfds are pidfs files (Linux 6.9), whose inode
// numbers are unique per struct pid.
const pidfsMagic = 0x50494446

var pidfsOnce = sync.OnceValues(func() (bool, string) {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false, "pidfd_open: " + err.Error()
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, "fstatfs of a pidfd: " + err.Error()
	}
	if st.Type != pidfsMagic {
		return false, "pidfds are not pidfs files here (Linux < 6.9): a process's inode does not identify it"
	}
	return true, ""
})

// SessionsAttributable says whether denials can be kept by session on this kernel,
// and why not.
func SessionsAttributable() (bool, string) { return pidfsOnce() }

// callerSession is the pidfs inode of the leader of the calling thread's session
// (see the top of this file; the caller checks the notification's validity after).
func (c *call) callerSession() (uint64, bool) {
	if ok, _ := pidfsOnce(); !ok {
		return 0, false
	}
	b, err := os.ReadFile(c.proc("stat"))
	if err != nil {
		return 0, false
	}
	sid, ok := statSession(b)
	if !ok || sid <= 0 {
		return 0, false
	}
	fd, err := unix.PidfdOpen(sid, 0)
	if err != nil {
		return 0, false // the leader is gone
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return 0, false
	}
	return st.Ino, true
}

// statSession is the session field of a /proc/<pid>/stat line: the fourth after the
// command's closing parenthesis (state, ppid, pgrp, session).
func statSession(b []byte) (int, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[3]))
	return n, err == nil
}
