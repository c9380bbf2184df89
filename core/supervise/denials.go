//go:build linux

package supervise

// Denials by run. One supervisor serves every run of a zygote, and every run has a
// pid namespace of its own, which no process of it can leave (the filter refuses
// unshare, setns and namespace flags on clone without the zygote's cookie). A denial
// is attributed to the run whose pid namespace its caller is in:
//
//   - The engine attaches a run with the pidfd of its pid 1. Its pid namespace is
//     opened from that pidfd (no pid number involved) only when needed — at the
//     first denial the supervisor cannot place, or at Attach when denials wait —
//     so a run refused nothing pays nothing; once open it is held until Detach: a
//     namespace that is open cannot be freed, so no other namespace can have its
//     inode number (nsfs numbers are reused) while the run is attached.
//   - For a denial, the supervisor stats /proc/<tid>/ns/pid of the caller, then checks
//     that the notification is still valid (SECCOMP_IOCTL_NOTIF_ID_VALID): valid, the
//     caller was alive throughout, so the tid was still its and the namespace its own
//     (pid reuse). A denial whose call is no longer valid never reached the program
//     and is kept by the sandbox's log only.
//   - A run's first trapped calls can come before the engine attached it (the
//     program starts while the zygote answers). Their denials wait in a pending log
//     that holds an fd of their namespace (so its inode cannot be reused by another
//     while it waits), taken over by Attach; one not claimed within pendingTTL
//     (a run that ended before it was attached, or late calls of a detached run) is
//     dropped from the per-run logs (the sandbox's log keeps it).

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunLog collects the denials of one run (one pid namespace).
type RunLog struct {
	log   denialLog
	ino   uint64
	nsfd  int       // -1: not opened yet (unresolved)
	pidfd int       // its pid 1 (the engine's, open until Detach)
	pid   int       // its number, for kernels without PIDFD_GET_PID_NAMESPACE
	at    time.Time // pending since (unattached)
	// host judges the run's trapped calls (AttachHost; host.go); nil: none.
	// noPid1 (tests): the run's pid 1 is the program itself, its calls are judged too.
	host   HostRun
	noPid1 bool
	// sessions: its denials by the caller's session too (sessions.go); nil: not kept
	sessions sessionsPtr
	// vmShared: a task of the run other than its pid 1 made a process sharing its
	// address space (clone with CLONE_VM without CLONE_THREAD, vfork: hostexec.go)
	vmShared atomic.Bool
	// groups: the supplementary groups of the run's tasks but its pid 1, read once
	// (creds.go: no task of a run can change them); nil: not read yet
	groups atomic.Pointer[[]uint32]
	// idmaps: the id maps of the run's tasks but its pid 1 (hostpath.go); nil: not read yet
	idmaps atomic.Pointer[runIDMaps]
}

// DenialList is what a run was refused: at most maxDenials distinct entries in the
// order first seen, and Dropped counts the denials of further distinct entries.
type DenialList struct {
	Entries []Denial
	Dropped int
}

// MaxDenials is the cap of distinct entries in one log.
const MaxDenials = maxDenials

const (
	pendingTTL = 10 * time.Second
	maxPending = 32
)

type runLogs struct {
	mu         sync.Mutex
	attached   map[uint64]*RunLog   // by namespace inode
	unresolved map[*RunLog]struct{} // attached, namespace not opened yet
	pending    map[uint64]*RunLog
	starting   int           // host runs being started (Starting)
	changed    chan struct{} // closed when a run is attached or a start ends
	// vmUnplaced: a process sharing an address space was made by a task of no run
	// found (hostexec.go: every held execve then scans /proc)
	vmUnplaced atomic.Bool
}

// nsIno is the inode of the pid namespace fd names.
func nsIno(fd int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidfdGetPidNS is PIDFD_GET_PID_NAMESPACE (Linux 6.11): _IO(PIDFS_IOCTL_MAGIC, 5).
const pidfdGetPidNS = 0xFF05

// PidNamespaceFD opens the pid namespace of the process pidfd names (the run's pid 1):
// by the pidfd ioctl where the kernel has it, else through /proc/<pid>/ns/pid,
// checked against pid reuse by the pidfd still naming a live process afterwards.
func PidNamespaceFD(pidfd, pid int) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(pidfd), pidfdGetPidNS, 0)
	if e == 0 {
		unix.CloseOnExec(int(fd))
		return int(fd), nil
	}
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		unix.Close(nsfd)
		return -1, err // gone: the number may be another's now
	}
	return nsfd, nil
}

// Attach starts collecting the denials of the run whose pid 1 pidfd names (pid is
// its number, used only where the kernel cannot open a namespace from a pidfd), with
// those its processes were refused before. The caller keeps pidfd open until Detach.
func (s *Supervisor) Attach(pidfd, pid int) (*RunLog, error) {
	r := &RunLog{nsfd: -1, pidfd: pidfd, pid: pid}
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	if s.runs.unresolved == nil {
		s.runs.unresolved = map[*RunLog]struct{}{}
	}
	s.runs.unresolved[r] = struct{}{}
	if len(s.runs.pending) > 0 {
		// denials wait: they may be this run's
		s.expirePendingLocked(time.Now())
		if err := s.resolveLocked(r); err != nil {
			delete(s.runs.unresolved, r)
			return nil, err
		}
	}
	return r, nil
}

// AttachHost attaches a run whose trapped calls the host judges (Config.Host): as
// Attach, with its pid namespace opened at once, since each of its trapped calls is
// routed to h by the caller's namespace (host.go). Call it within Starting.
func (s *Supervisor) AttachHost(pidfd, pid int, h HostRun) (*RunLog, error) {
	if u, ok := h.(ReceiverUser); ok {
		u.UseReceiver(s.Receive())
	}
	return s.attachHost(&RunLog{nsfd: -1, pidfd: pidfd, pid: pid, host: h})
}

func (s *Supervisor) attachHost(r *RunLog) (*RunLog, error) {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	s.expirePendingLocked(time.Now())
	if err := s.resolveLocked(r); err != nil {
		return nil, err
	}
	s.runs.signalLocked()
	return r, nil
}

// Starting marks a host run being started, until done is called (after its
// AttachHost): its program can make trapped calls before it is attached, and a
// trapped call of a namespace no run is attached to waits meanwhile (hostRunOf).
func (s *Supervisor) Starting() (done func()) {
	s.runs.mu.Lock()
	s.runs.starting++
	s.runs.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.runs.mu.Lock()
			s.runs.starting--
			s.runs.signalLocked()
			s.runs.mu.Unlock()
		})
	}
}

func (rl *runLogs) signalLocked() {
	if rl.changed != nil {
		close(rl.changed)
		rl.changed = nil
	}
}

// hostRunWait bounds how long a trapped call waits for its run to be attached.
const hostRunWait = 5 * time.Second

// hostRunOf is the host run attached under pid namespace ino; with wait, a call of
// a namespace not attached (yet) waits while a run is being started (at most
// hostRunWait). nil: no host run.
func (s *Supervisor) hostRunOf(ino uint64, wait bool) *RunLog {
	deadline := time.Now().Add(hostRunWait)
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	for {
		if r := s.runs.attached[ino]; r != nil && r.host != nil {
			return r
		}
		if !wait || s.runs.starting == 0 || time.Now().After(deadline) {
			return nil
		}
		if s.runs.changed == nil {
			s.runs.changed = make(chan struct{})
		}
		ch := s.runs.changed
		s.runs.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
		s.runs.mu.Lock()
	}
}

// resolveLocked opens r's pid namespace and files r under its inode, with the
// denials that waited for it.
func (s *Supervisor) resolveLocked(r *RunLog) error {
	nsfd, err := PidNamespaceFD(r.pidfd, r.pid)
	if err != nil {
		return err
	}
	ino, err := nsIno(nsfd)
	if err != nil {
		unix.Close(nsfd)
		return err
	}
	delete(s.runs.unresolved, r)
	if s.runs.attached == nil {
		s.runs.attached = map[uint64]*RunLog{}
	}
	if old := s.runs.attached[ino]; old != nil {
		// both fds are open, so both name this one namespace: attached twice
		unix.Close(nsfd)
		return fmt.Errorf("supervise: the pid namespace of pid %d is attached already", r.pid)
	}
	r.ino, r.nsfd = ino, nsfd
	if p := s.runs.pending[ino]; p != nil {
		// p's fd held its namespace alive: it is this one
		r.log.take(&p.log)
		unix.Close(p.nsfd)
		delete(s.runs.pending, ino)
	}
	s.runs.attached[ino] = r
	return nil
}

// resolveAllLocked resolves every unresolved run (a denial no attached run owns);
// a run whose pid 1 is gone is left so: its processes are being killed.
func (s *Supervisor) resolveAllLocked() {
	for r := range s.runs.unresolved {
		if s.resolveLocked(r) != nil {
			delete(s.runs.unresolved, r)
		}
	}
}

// Detach stops collecting for r and returns what it was refused.
func (s *Supervisor) Detach(r *RunLog) DenialList {
	if r == nil {
		return DenialList{}
	}
	s.runs.mu.Lock()
	delete(s.runs.unresolved, r)
	if r.nsfd >= 0 && s.runs.attached[r.ino] == r {
		delete(s.runs.attached, r.ino)
		unix.Close(r.nsfd)
		r.nsfd = -1
	}
	s.runs.mu.Unlock()
	r.takeReceiverBack()
	return r.Snapshot()
}

// takeReceiverBack: the run's operation thread stops receiving the sandbox's
// notifications (Receive), and is woken to see it.
func (r *RunLog) takeReceiverBack() {
	if u, ok := r.host.(ReceiverUser); ok {
		u.UseReceiver(-1, nil)
	}
}

// Snapshot is what r was refused so far (a run still going: a cooperative worker
// between two execs).
func (r *RunLog) Snapshot() DenialList {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	out := DenialList{Entries: make([]Denial, 0, len(r.log.entries)), Dropped: r.log.more}
	for _, d := range r.log.entries {
		if d.Count > 0 { // 0: taken back (sub)
			out.Entries = append(out.Entries, d)
		}
	}
	return out
}

// Reset empties r (what a worker's next exec is refused starts from nothing).
func (r *RunLog) Reset() {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.entries, r.log.index, r.log.more = nil, nil, 0
}

// closeRuns releases every namespace fd held (Close).
func (s *Supervisor) closeRuns() {
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	for ino, r := range s.runs.attached {
		unix.Close(r.nsfd)
		r.nsfd = -1
		delete(s.runs.attached, ino)
		r.takeReceiverBack()
	}
	clear(s.runs.unresolved)
	for ino, r := range s.runs.pending {
		unix.Close(r.nsfd)
		delete(s.runs.pending, ino)
	}
}

func (s *Supervisor) expirePendingLocked(now time.Time) {
	for ino, r := range s.runs.pending {
		if now.Sub(r.at) > pendingTTL {
			unix.Close(r.nsfd)
			delete(s.runs.pending, ino)
		}
	}
}

// record keeps a denial of c: in the sandbox's log, and in the log of the caller's
// run (see the top of this file). The caller's run is taken as the one whose pid
// namespace the (cached) pidfd of its thread is in; the answer then proves it: the
// notification still valid when its answer is delivered means the caller lived
// throughout, so that pidfd was its own. The returned undo (non-nil when the denial
// went to a run) must run when the answer is not delivered: the call never reached
// the program, and the pidfd may have been another task's. A denial recorded with
// no answer to follow (checked) is checked against the notification's validity
// instead.
func (s *Supervisor) record(c *call, sc, detail string, e syscall.Errno, checked bool) (undo func()) {
	s.denials.add(sc, detail, e)
	if !s.attributes.Load() || c.n.Pid == 0 {
		return nil
	}
	if c.detached {
		c.pidfd, c.live = -1, false // its own was closed with what the call opened (release): open another
	}
	ino, ok := c.callerNS()
	if !ok {
		return nil
	}
	s.runs.mu.Lock()
	r := s.runs.attached[ino]
	if r == nil && len(s.runs.unresolved) > 0 {
		s.resolveAllLocked()
		r = s.runs.attached[ino]
	}
	s.runs.mu.Unlock()
	if r != nil {
		var sl *denialLog
		if ss := r.sessions.Load(); ss != nil {
			if ino, ok := c.callerSession(); ok {
				sl = ss.log(ino)
			}
		}
		if (checked || sl != nil) && !c.valid() { // after reading the session (sessions.go)
			return nil
		}
		r.log.add(sc, detail, e)
		if sl != nil {
			sl.add(sc, detail, e)
			return func() { r.log.sub(sc, detail, e); sl.sub(sc, detail, e) }
		}
		return func() { r.log.sub(sc, detail, e) }
	}
	// not attached (yet): pin the namespace, then wait for its run
	nsfd, err := c.callerNSFD()
	if err != nil {
		return nil
	}
	if got, err := nsIno(nsfd); err != nil || got != ino || !c.valid() {
		unix.Close(nsfd)
		return nil
	}
	s.runs.mu.Lock()
	defer s.runs.mu.Unlock()
	if r := s.runs.attached[ino]; r != nil { // attached meanwhile
		unix.Close(nsfd)
		r.log.add(sc, detail, e)
		return nil
	}
	now := time.Now()
	s.expirePendingLocked(now)
	p := s.runs.pending[ino]
	if p != nil {
		unix.Close(nsfd)
	} else {
		if len(s.runs.pending) >= maxPending {
			unix.Close(nsfd)
			return nil
		}
		if s.runs.pending == nil {
			s.runs.pending = map[uint64]*RunLog{}
		}
		p = &RunLog{ino: ino, nsfd: nsfd, at: now}
		s.runs.pending[ino] = p
	}
	p.log.add(sc, detail, e)
	return nil
}

// callerNS is the inode of the calling thread's pid namespace, by its pidfd (no pid
// number involved): the namespace of a task never changes, so the loop caches it
// with the cached pidfd, and a cached one is used only while that pidfd's task is
// alive (a live task holds its tid, so it is the caller while the notification is
// valid, which record checks after). Without PIDFD_GET_PID_NAMESPACE (Linux < 6.11):
// /proc/<tid>/ns/pid, checked by the notification's validity after.
func (c *call) callerNS() (uint64, bool) {
	s := c.s
	if c.openPidfd(false) == nil && !c.detached {
		if n, ok := s.nsof[c.n.Pid]; ok && n.pidfd == c.pidfd {
			// alive: shown by the handler's pidfd_getfd on it, else asked
			if c.live || unix.PidfdSendSignal(c.pidfd, 0, nil, 0) == nil {
				return n.ino, true
			}
			delete(s.nsof, c.n.Pid)
			if c.openPidfd(true) != nil { // a dead thread's pidfd: this tid is another's now
				return 0, false
			}
		}
	}
	fd, err := c.callerNSFD()
	if err != nil {
		return 0, false
	}
	ino, err := nsIno(fd)
	unix.Close(fd)
	if err != nil {
		return 0, false
	}
	if !c.detached {
		if len(s.nsof) >= maxPidfds {
			clear(s.nsof)
		}
		s.nsof[c.n.Pid] = nsEntry{pidfd: c.pidfd, ino: ino}
	}
	return ino, true
}

type nsEntry struct {
	pidfd int
	ino   uint64
}

// callerNSFD opens the calling thread's pid namespace.
func (c *call) callerNSFD() (int, error) {
	if err := c.openPidfd(false); err == nil {
		fd, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(c.pidfd), pidfdGetPidNS, 0)
		if e == 0 {
			unix.CloseOnExec(int(fd))
			return int(fd), nil
		}
		if e == unix.ESRCH {
			return -1, e
		}
	}
	return unix.Open(c.proc("ns/pid"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// AttributeRuns makes the supervisor attribute denials to runs (the engine calls it
// when each run has a pid namespace of its own); without it only the sandbox's log
// is kept and no stat is paid per denial.
func (s *Supervisor) AttributeRuns() { s.attributes.Store(true) }

// take moves o's entries into l (the order first seen: o's came first).
func (l *denialLog) take(o *denialLog) {
	o.mu.Lock()
	entries, more := o.entries, o.more
	o.entries, o.index, o.more = nil, nil, 0
	o.mu.Unlock()
	for _, d := range entries {
		l.addN(d.Syscall, d.Detail, d.Errno, d.Count)
	}
	l.mu.Lock()
	l.more += more
	l.mu.Unlock()
}

// sub takes back one denial add counted (its answer was not delivered).
func (l *denialLog) sub(sc, detail string, e syscall.Errno) {
	if len(detail) > maxDenialDetail {
		detail = detail[:maxDenialDetail] + "…"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.index[denialKey{sc, detail, e}]; ok {
		if l.entries[i].Count > 0 {
			l.entries[i].Count--
		}
	} else if l.more > 0 {
		l.more--
	}
}
