//go:build linux

package supervise

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// POSIX record locks belong to the process, so the supervisor cannot take them on
// its behalf: it checks the fd's file and continues the call, and the kernel then
// reads the fd table again. Another thread that dup2s a read-only file over the fd
// number in between gets a lock on it. The audit closes what that race leaves: soon
// after each continued lock request (auditDelays), the supervisor looks at the POSIX
// locks that process holds (/proc/locks) and kills its run (killRun: the locks go
// with the last process sharing its descriptor table) if one is on a file the
// process has open only through read-only mounts. A host writer can be held up for
// that long at most; nothing else of the race remains.
var auditDelays = []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}

type auditEntry struct {
	pidfd int       // names the process: /proc/<tgid> is read only while it lives
	due   time.Time // next look
	left  int       // looks left
}

type posixAudit struct {
	mu      sync.Mutex
	procs   map[int]*auditEntry // by tgid
	running bool
}

// auditPosixLock schedules the audit of the process of the calling thread. Called
// before the notification is validated (the handle on the process is taken first).
func (c *call) auditPosixLock() error {
	tgid, err := tgidOf(c.proc("status"))
	if err != nil {
		return err
	}
	pidfd, err := unix.PidfdOpen(tgid, 0)
	if err != nil {
		return err
	}
	s := c.s
	a := &s.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.procs == nil {
		a.procs = map[int]*auditEntry{}
	}
	if e, ok := a.procs[tgid]; ok && pidAlive(e.pidfd) {
		unix.Close(pidfd)
		e.left = len(auditDelays)
		if d := time.Now().Add(auditDelays[0]); d.Before(e.due) {
			e.due = d
		}
	} else {
		if ok {
			unix.Close(e.pidfd)
		}
		a.procs[tgid] = &auditEntry{pidfd: pidfd, due: time.Now().Add(auditDelays[0]), left: len(auditDelays)}
	}
	if !a.running {
		a.running = true
		s.handling.Add(1)
		go s.auditLoop()
	}
	return nil
}

func (s *Supervisor) auditLoop() {
	defer s.handling.Done()
	a := &s.audit
	for {
		a.mu.Lock()
		if len(a.procs) == 0 || s.closing.Load() {
			for tgid, e := range a.procs {
				unix.Close(e.pidfd)
				delete(a.procs, tgid)
			}
			a.running = false
			a.mu.Unlock()
			return
		}
		next := time.Time{}
		var due []int
		now := time.Now()
		for tgid, e := range a.procs {
			if !e.due.After(now) {
				due = append(due, tgid)
			} else if next.IsZero() || e.due.Before(next) {
				next = e.due
			}
		}
		a.mu.Unlock()
		if len(due) > 0 {
			locks := posixLocks()
			for _, tgid := range due {
				a.mu.Lock()
				e := a.procs[tgid]
				pfd := -1
				if e != nil {
					// a copy of its own: auditPosixLock may close and replace e's
					// meanwhile, and a closed number can name another process's pidfd
					pfd, _ = unix.FcntlInt(uintptr(e.pidfd), unix.F_DUPFD_CLOEXEC, 0)
				}
				a.mu.Unlock()
				if e == nil || pfd < 0 {
					continue
				}
				s.auditOne(tgid, pfd, locks[tgid])
				unix.Close(pfd)
				a.mu.Lock()
				if a.procs[tgid] == e { // not replaced meanwhile (then the new one has its own schedule)
					if e.left--; e.left <= 0 || !pidAlive(e.pidfd) {
						unix.Close(e.pidfd)
						delete(a.procs, tgid)
					} else {
						e.due = time.Now().Add(auditDelays[len(auditDelays)-e.left])
					}
				}
				a.mu.Unlock()
			}
			continue
		}
		select {
		case <-time.After(time.Until(next)):
		case <-s.loopDone: // closing
		}
	}
}

// auditOne kills the process if one of its POSIX locks is on a file it has open
// through read-only mounts only.
func (s *Supervisor) auditOne(tgid, pidfd int, locks []fileKey) {
	if len(locks) == 0 || !pidAlive(pidfd) {
		return
	}
	dir := "/proc/" + strconv.Itoa(tgid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if !pidAlive(pidfd) {
		return // gone (or not this process any more)
	}
	if err != nil {
		// it holds POSIX locks and its descriptors cannot be looked at: what cannot
		// be decided is refused
		s.killRun(tgid, pidfd, "POSIX locks held by a process whose descriptors cannot be inspected ("+err.Error()+"): its run was killed")
		return
	}
	writable := map[fileKey]bool{}
	seen := map[fileKey]string{}
	for _, ent := range ents {
		p := dir + ent.Name()
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		k := fileKey{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}
		var fs unix.Statfs_t
		if unix.Statfs(p, &fs) == nil && fs.Flags&unix.ST_RDONLY == 0 {
			writable[k] = true
		}
		seen[k] = p
	}
	if !pidAlive(pidfd) {
		return
	}
	for _, k := range locks {
		if writable[k] {
			continue
		}
		name := "?"
		if p, ok := seen[k]; ok {
			if t, err := os.Readlink(p); err == nil {
				name = t
			}
		}
		s.killRun(tgid, pidfd, fmt.Sprintf("a POSIX lock on a read-only file (%s), taken through an fd swapped during the check: its run was killed", name))
		return
	}
}

// killRun kills the run of the process pidfd names (tgid its number): a POSIX lock
// belongs to a descriptor table, which a sibling made with clone(CLONE_FILES) shares
// and keeps alive, so killing the process alone would leave the lock held. The run
// is its pid namespace: its pid 1 (the engine's pidfd, attached) is killed and the
// kernel kills every process of the namespace. A process the supervisor cannot place
// in an attached run (runs not attributed, or not attached yet) fails the sandbox
// instead (Abort: the engine kills every process of the zygote). Either way the
// process itself is killed first.
func (s *Supervisor) killRun(tgid, pidfd int, why string) {
	var ino uint64
	placed := false
	if s.attributes.Load() {
		if nsfd, err := PidNamespaceFD(pidfd, tgid); err == nil {
			ino, err = nsIno(nsfd)
			unix.Close(nsfd)
			placed = err == nil
		}
	}
	unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	s.denials.add("fcntl", why, unix.EACCES)
	if placed {
		s.runs.mu.Lock()
		r := s.runs.attached[ino]
		if r == nil && len(s.runs.unresolved) > 0 {
			s.resolveAllLocked()
			r = s.runs.attached[ino]
		}
		if r != nil {
			// under the lock: Detach (which precedes the engine closing r.pidfd)
			// waits for it
			r.log.add("fcntl", why, unix.EACCES)
			unix.PidfdSendSignal(r.pidfd, unix.SIGKILL, nil, 0)
		}
		s.runs.mu.Unlock()
		if r != nil {
			return
		}
	}
	s.Abort("a POSIX lock audit could not place the process in a run: " + why)
}

type fileKey struct {
	major, minor uint32
	ino          uint64
}

// posixLocks reads /proc/locks: the POSIX locks held (not waited for), by pid.
// A line: "1: POSIX  ADVISORY  READ 1234 fd:01:5678 0 EOF".
func posixLocks() map[int][]fileKey {
	out := map[int][]fileKey{}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "POSIX" {
			continue // a waiter ("->"), or another kind of lock
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		dev := strings.Split(fields[5], ":")
		if len(dev) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(dev[0], 16, 32)
		min, err2 := strconv.ParseUint(dev[1], 16, 32)
		ino, err3 := strconv.ParseUint(dev[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out[pid] = append(out[pid], fileKey{uint32(maj), uint32(min), ino})
	}
	return out
}

func pidAlive(pidfd int) bool {
	return unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil
}

func tgidOf(status string) (int, error) {
	f, err := os.Open(status)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("%s: no Tgid", status)
}
