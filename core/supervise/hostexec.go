//go:build linux

package supervise

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sandtrap/sandtrap/core/seccomp"
	"golang.org/x/sys/unix"
)

// An execve the host allowed cannot be performed for the caller (the new program
// must replace the caller itself), so it is continued; what the kernel then reads
// — the path, the argv array and its strings — is made to be what the host judged,
// and held still until the kernel has read it:
//
//  1. every other task that can write the caller's memory is held: the other
//     threads of its process and every task of another process sharing its address
//     space (clone(CLONE_VM) without CLONE_THREAD: vfork and posix_spawn children
//     and parents; found by kcmp(KCMP_VM) against every process of /proc, again
//     until no new one appears, since a held task cannot make another). Each is
//     PTRACE_SEIZEd and PTRACE_INTERRUPTed, and must reach its ptrace stop, or be
//     parked in a vfork wait (state D inside clone/vfork, its wait channel
//     kernel_clone: it cannot return to user space before our caller execs, and
//     when it does the interrupt stops it first), within 1 s. The scan is skipped
//     when no process can share the memory (below);
//  2. the judged copy is written back over the caller's memory at the addresses
//     it was copied from (/proc/<tid>/mem, FOLL_FORCE): whatever a thread wrote in
//     between is undone, and every private page that holds it becomes the caller's
//     own anonymous copy (a write to the file behind a MAP_PRIVATE mapping no
//     longer shows through);
//  3. every page holding it must then be private anonymous memory
//     (/proc/<tid>/pagemap: neither file-backed nor shared): memory shared with
//     another process (MAP_SHARED, SysV shm) could be written by that process,
//     which no freeze holds — such an execve is refused (EACCES);
//  4. the caller is seized too (PTRACE_O_TRACEEXEC), the call continued and the
//     caller interrupted: its next stop — the exec event, or the interrupt on its
//     return from a failed execve, or its death — means the kernel is done reading;
//     then every task is detached (a signal that stopped one is re-delivered). The
//     thread that made the ptrace calls ends after: the kernel detaches whatever
//     it still traced.
//
// Nothing else can write the caller's memory: process_vm_writev, ptrace,
// userfaultfd and io_uring are refused by the filter, Linux AIO (whose reads
// complete into memory after io_submit returned) by the supervisor while execve is
// judged (handleAIOSetup), /proc is mounted read-only
// in every run (no /proc/<pid>/mem opens for writing). Anything that cannot be
// established is a refusal (EACCES, with the reason), never a plain continue.

// The /proc scan of step 1 (a kcmp per process of the machine: ~1.5 µs each, the
// largest part of a held execve) is skipped when no process can share the caller's
// memory: a task shares an address space with another process only when it, or a
// task it descends from by such calls, was made by clone with CLONE_VM and without
// CLONE_THREAD, or by vfork (clone3 is refused, and so are io_uring, whose workers
// share it, unshare and setns), by a task of that address space. In a sandbox whose
// execve the host judges (or a path call that alone may continue: cloneVMTraps),
// every such call traps to handleCloneVM, which marks the
// caller's run (found by its pid namespace, as a host call's is; a task of no run
// found marks the sandbox) before it continues the call: a process sharing memory
// exists only after its run was marked. The caller's pid namespace is its run's,
// which no process can leave, so every task sharing its memory made in it was made
// in its run. The run's pid 1, sandtrap-init, is not marked for its vfork of the
// target: its address space (its own, no program code runs in it) is the caller's
// only for that vfork child, whose exec is continued without holds (execJudged).
// The mark is read after the caller's own threads are held and stopped: a thread
// that was making such a process either had its call continued (the run was marked
// before) or is stopped before the kernel made it (its call restarts after the
// detach, and traps again). Once marked, every held execve of the run scans.

// memRegion is memory of the caller a judged copy was made from.
type memRegion struct {
	addr uint64
	data []byte
}

const (
	ptraceEventExec = 4
	ptraceEventStop = 128
	kcmpVM          = 1
)

func init() {
	// the traps are the host's (hostTraps): the engine adds those to the filter of
	// a sandbox the host judges
	handlers = append(handlers, handler{name: "clone", nr: unix.SYS_CLONE, fn: handleCloneVM})
	if nr, ok := seccomp.Nr("vfork"); ok {
		handlers = append(handlers, handler{name: "vfork", nr: nr, fn: handleCloneVM})
	}
	handlers = append(handlers, handler{name: "io_setup", nr: unix.SYS_IO_SETUP, fn: handleAIOSetup})
}

// handleAIOSetup refuses a Linux AIO context where execve (or a path call alone
// may continue) is judged: a read
// submitted with io_submit on an O_DIRECT file completes after the call returned,
// the kernel writing the caller's memory while nothing of it runs — after a held
// execve's checks, over the arguments it held (no ptrace stop holds a transfer in
// flight). io_uring is refused by the filter for the same reason and more.
func handleAIOSetup(c *call) reply {
	return deny(unix.EPERM, "supervisor: io_setup: Linux AIO writes memory while no thread runs, after a judged execve's checks")
}

// cloneVMTraps: with a call judged by the host that may be continued once its
// arguments are held or alone (execve; the path calls of pathContinued), the calls
// that make a process sharing the caller's memory, and io_setup (refused).
func cloneVMTraps(cfg Config) []Trap {
	if cfg.Host == nil || !slices.ContainsFunc(cfg.Host.Syscalls, func(n string) bool {
		_, path := continuedDirfds[n]
		return n == "execve" || path
	}) {
		return nil
	}
	ts := []Trap{{Syscall: "clone", Arg: 0, Mask: unix.CLONE_VM | unix.CLONE_THREAD, Values: []uint64{unix.CLONE_VM}}}
	if _, ok := seccomp.Nr("vfork"); ok {
		ts = append(ts, Trap{Syscall: "vfork", Arg: -1})
	}
	return append(ts, Trap{Syscall: "io_setup", Arg: -1})
}

// handleCloneVM marks the caller's run as having made a process sharing its memory
// (the run's pid 1 excepted), then continues the call. The filter answers a clone
// with a namespace flag EPERM before it traps (an error takes precedence over a
// notification).
func handleCloneVM(c *call) reply {
	s := c.s
	ns, ok := c.callerNS()
	if !ok {
		s.runs.vmUnplaced.Store(true)
		return cont()
	}
	mark := func(rl *RunLog) reply {
		if rl == nil {
			s.runs.vmUnplaced.Store(true)
		} else if rl.noPid1 || int(c.n.Pid) != rl.pid {
			rl.vmShared.Store(true)
		}
		return cont()
	}
	if rl := s.hostRunOf(ns, false); rl != nil {
		return mark(rl)
	}
	return c.detachHost(func() reply {
		if rl := s.hostRunOf(ns, true); rl != nil {
			return mark(rl)
		}
		if inner, err := c.innerPid(); err == nil && inner == 1 {
			// the pid 1 of a namespace no run is attached for (its calls are
			// continued unjudged: hostCall.find): sandtrap-init's vfork
			if !c.valid() {
				return gone()
			}
			return cont()
		}
		return mark(nil)
	})
}

// skipSharerScan (tests only): every scan is skipped.
var skipSharerScan bool

// skipWriteBack (tests only): the judged copy is not written back.
var skipWriteBack bool

// mayShareVM: a process other than the caller's may share its memory: a mark
// above, no run to read one of, or clone or vfork judged by the host too (its
// answer, not handleCloneVM, would then continue them).
func (c *call) mayShareVM(rl *RunLog) bool {
	if skipSharerScan {
		return false
	}
	return rl == nil || rl.vmShared.Load() || c.s.runs.vmUnplaced.Load() ||
		slices.ContainsFunc(c.s.cfg.Host.Syscalls, func(n string) bool { return n == "clone" || n == "vfork" })
}

func (c *call) execJudged(ev *Event, initPid int, rl *RunLog) reply {
	if !ev.HasPath {
		if strings.Contains(ev.PathErr, "name too long") {
			return fail(unix.ENAMETOOLONG)
		}
		return fail(unix.EFAULT)
	}
	if initPid > 0 {
		// the run's first exec, by sandtrap-init's vfork child: in init's memory, in
		// which no code of the program has run and which no other task shares
		r, _, e := unix.RawSyscall6(unix.SYS_KCMP, uintptr(c.n.Pid), uintptr(initPid), kcmpVM, 0, 0, 0)
		if e == 0 && r == 0 {
			if !c.valid() {
				return gone()
			}
			return cont()
		}
	}
	if r, ok := c.execAlone(ev, rl); ok {
		return r
	}
	// held on a tracer thread (the tasks it seizes are its tracees until it
	// detaches them: every ptrace call must come from it), which answers the call;
	// this thread goes on. A tracer thread that could not detach every task it
	// seized ends after the call (the kernel then detaches them); else it is kept
	// for the next held execve (sandboxthreads.go: a thread per call cost a new OS
	// thread and two hand-offs through the Go scheduler).
	c.s.handling.Add(1)
	j := &sandboxJob{}
	j.f = func() (int, error) {
		defer c.s.handling.Done()
		r, release := c.execHeld(ev, rl)
		c.deliver(r)
		// after the answer: a vfork parent held while its child (the caller) is
		// refused leaves its vfork wait, and stops, only once the child has it
		j.end = !release()
		return 0, nil
	}
	j.fail = func(err error) {
		defer c.s.handling.Done()
		c.deliver(c.failure("execve: a tracer thread", err))
	}
	c.s.give(tracerKind, nil, j)
	return reply{kind: replyPending}
}

// execAlone continues an execve no other task can race (false: one may: execHeld
// decides), or refuses it when its judged copy cannot be made what the kernel
// reads (alone, below).
func (c *call) execAlone(ev *Event, rl *RunLog) (reply, bool) {
	alone, why, err := c.alone(ev, rl)
	if !alone {
		return reply{}, false
	}
	if err != nil {
		if !c.valid() {
			return gone(), true
		}
		return deny(unix.EACCES, "supervisor: execve: "+why+": "+err.Error()), true
	}
	if !c.valid() {
		return gone(), true
	}
	return cont(), true
}

// alone: no task but the kernel can write the caller's memory from here on, so a
// call continued now reads what the host judged, once the judged copy is written
// back — the caller is its process's only thread, no thread of another process
// shares its memory (mayShareVM), and no thread can be added to its group but by
// one of the group, whose only thread sleeps in this call (the filter refuses every
// other way to write another process's memory: above). What a thread that has
// ended since wrote while the copy was made is undone by the write-back, and every
// page under it must be private anonymous memory, as for a held execve; err (with
// why): the caller is alone, but that could not be established. Nothing is
// seized: there is no task to release once the kernel has read the arguments.
func (c *call) alone(ev *Event, rl *RunLog) (alone bool, why string, err error) {
	tid := int(c.n.Pid)
	if c.mayShareVM(rl) || !onlyThread(tid) {
		return false, "", nil
	}
	if err := consistent(ev.judged); err != nil {
		return true, "the arguments changed while they were copied", err
	}
	if err := c.writeBack(ev.judged); err != nil {
		return true, "write the judged arguments back", err
	}
	if err := c.privatePages(ev.judged); err != nil {
		return true, "arguments in memory another process can write", err
	}
	return true, "", nil
}

// tracee is a task held by execHeld.
type tracee struct {
	tid     int
	stopped bool // in a ptrace stop (else parked in a vfork wait)
	sig     int  // the signal of its signal-delivery stop, re-delivered at detach
}

// execHeld holds the caller's memory still for its exec (above) and answers it,
// or says what to answer; release, called once that answer is delivered, lets go
// of every task it seized (false: one may still be traced by this thread).
func (c *call) execHeld(ev *Event, rl *RunLog) (_ reply, release func() bool) {
	tid := int(c.n.Pid)
	held := map[int]*tracee{}
	detachAll := func() bool {
		clean := true
		deadline := time.Now().Add(time.Second)
		for _, t := range held {
			if !t.release(deadline) {
				clean = false
			}
		}
		return clean
	}
	refuse := func(why string, err error) (reply, func() bool) {
		if !c.valid() {
			return gone(), detachAll
		}
		if err != nil {
			why += ": " + err.Error()
		}
		return deny(unix.EACCES, "supervisor: execve: "+why), detachAll
	}
	tgid, err := tgidOfCaller(tid)
	if err != nil {
		return refuse("the caller's process", err)
	}
	// holdThreads holds every thread of p but the caller, until none is new (a held
	// thread makes no other): how many were new
	holdThreads := func(p int) (int, error) {
		fresh := 0
		for round := 0; ; round++ {
			ts, err := threadsOf(p)
			if err != nil {
				if p == tgid {
					return 0, err
				}
				return fresh, nil // exited
			}
			n := 0
			for _, x := range ts {
				if x == tid || held[x] != nil {
					continue
				}
				t, err := hold(x)
				if t != nil {
					held[x] = t // released with the others, whatever comes next
					n++
				}
				if err != nil {
					return 0, fmt.Errorf("task %d: %w", x, err)
				}
			}
			if n == 0 {
				return fresh, nil
			}
			fresh += n
			if round > 64 {
				return 0, errors.New("its threads keep growing")
			}
		}
	}
	deadline := time.Now().Add(time.Second)
	stopAll := func() error {
		for _, t := range held {
			if err := t.waitStopped(deadline); err != nil {
				return fmt.Errorf("task %d: %w", t.tid, err)
			}
		}
		return nil
	}
	// the caller's own threads first, stopped: then only a task of another process
	// sharing the memory can make a new one, and a scan that finds none is final
	if _, err := holdThreads(tgid); err != nil {
		return refuse("hold its threads", err)
	}
	if err := stopAll(); err != nil {
		return refuse("hold its threads", err)
	}
	for round := 0; c.mayShareVM(rl); round++ {
		procs, err := sharingProcesses(tid, tgid)
		if err != nil {
			return refuse("find the processes sharing its memory", err)
		}
		fresh := 0
		for _, p := range procs {
			n, err := holdThreads(p)
			if err != nil {
				return refuse("hold the processes sharing its memory", err)
			}
			fresh += n
		}
		if fresh == 0 {
			break
		}
		if err := stopAll(); err != nil {
			return refuse("hold the processes sharing its memory", err)
		}
		if round > 64 {
			return refuse("the processes sharing its memory keep growing", nil)
		}
	}
	// (the caller itself sleeps in its call: it writes nothing until answered)
	if err := consistent(ev.judged); err != nil {
		return refuse("the arguments changed while they were copied", err)
	}
	if err := c.writeBack(ev.judged); err != nil {
		return refuse("write the judged arguments back", err)
	}
	if err := c.privatePages(ev.judged); err != nil {
		return refuse("arguments in memory another process can write", err)
	}
	// the caller: traced for its exec event (not interrupted before it is answered),
	// last, so that no refusal leaves it seized outside a stop
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, unix.PTRACE_O_TRACEEXEC, 0, 0); e != 0 {
		return refuse("trace the caller", e)
	}
	me := &tracee{tid: tid}
	held[tid] = me
	if !c.valid() {
		return gone(), detachAll
	}
	if err := send(uintptr(c.s.fd), seccompNotifResp{ID: c.n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}); err != nil {
		return gone(), detachAll
	}
	unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(tid), 0, 0, 0, 0)
	// the caller's next stop (or its end) means the kernel has read the arguments:
	// the exec event (reported for the thread-group leader's id when a non-leader
	// thread execs), the interrupt on the return of a failed execve, or a signal
	alone := len(held) == 1
	if alone {
		// nothing else held: the caller keeps its id (it is its process's only
		// thread) and no held thread must be reaped for its exec to go on (the exec
		// waits for its other threads to die, and a traced one's death is reported
		// to us): wait for it
		var st unix.WaitStatus
		for {
			n, err := unix.Wait4(tid, &st, unix.WALL, nil)
			if err == unix.EINTR {
				continue
			}
			if err == nil && n == tid && st.Stopped() {
				me.noteStop(st)
			}
			break
		}
	}
	for wait := 20 * time.Microsecond; !alone; wait = min(2*wait, 2*time.Millisecond) {
		if _, ok := me.poll(); ok {
			break
		}
		if pollExecEvent(tid, held) {
			break
		}
		time.Sleep(wait)
	}
	// the tasks parked in a vfork wait leave it now: let them reach their stop
	for _, t := range held {
		if !t.stopped {
			t.waitStopped(time.Now().Add(100 * time.Millisecond))
		}
	}
	clean := detachAll()
	return gone(), func() bool { return clean } // answered above
}

// tgidOfCaller is the process of the thread tid, which sleeps in its trapped call
// (so it neither becomes its group's leader by an exec nor leaves it): tid itself
// when it is the leader — pidfd_open without PIDFD_THREAD accepts only a leader's
// id, one syscall instead of generating /proc/<tid>/status — else read there.
func tgidOfCaller(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, 0)
	if err == nil {
		unix.Close(fd)
		return tid, nil
	}
	if err == unix.ESRCH {
		return 0, err
	}
	return tgidOf("/proc/" + strconv.Itoa(tid) + "/status")
}

// sharingProcesses are the other processes with tid's mm (kcmp KCMP_VM against
// every process of /proc).
func sharingProcesses(tid, tgid int) ([]int, error) {
	names, err := dirNames("/proc")
	if err != nil {
		return nil, err
	}
	var procs []int
	for _, name := range names {
		p, err := strconv.Atoi(name)
		if err != nil || p == tgid {
			continue
		}
		r, _, errno := unix.RawSyscall6(unix.SYS_KCMP, uintptr(tid), uintptr(p), kcmpVM, 0, 0, 0)
		switch {
		case errno == 0 && r == 0:
			procs = append(procs, p)
		case errno == 0, errno == unix.ESRCH, errno == unix.EPERM:
			// another mm, gone, or a task we may not inspect: not one created from
			// the caller's memory (that would be ours to inspect, as the caller is)
		default:
			return nil, fmt.Errorf("kcmp %d: %w", p, errno)
		}
	}
	return procs, nil
}

// onlyThread: tid is its process's only thread (/proc/<tid>/task lists the
// threads of tid's process, whichever thread tid is), read with one getdents.
func onlyThread(tid int) bool {
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var buf [512]byte
	name := strconv.Itoa(tid)
	seen := false
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return false
		}
		if n == 0 {
			return seen
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(*(*uint16)(unsafe.Pointer(&b[16])))
			if reclen < 19 || reclen > len(b) {
				return false
			}
			d := b[19:reclen]
			if i := bytes.IndexByte(d, 0); i >= 0 {
				d = d[:i]
			}
			switch string(d) {
			case ".", "..":
			case name:
				seen = true
			default:
				return false // another thread
			}
			b = b[reclen:]
		}
	}
}

// threadsOf are the thread ids of process p.
func threadsOf(p int) ([]int, error) {
	names, err := dirNames("/proc/" + strconv.Itoa(p) + "/task")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(names))
	for _, name := range names {
		if n, err := strconv.Atoi(name); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// dirNames lists a directory unsorted, without a stat per entry.
func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// hold seizes and interrupts tid (nil: it is gone, or was not seized).
func hold(tid int) (*tracee, error) {
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, 0, 0, 0); e != 0 {
		if e == unix.ESRCH {
			return nil, nil
		}
		return nil, fmt.Errorf("PTRACE_SEIZE: %w", e)
	}
	t := &tracee{tid: tid}
	if _, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(tid), 0, 0, 0, 0); e != 0 && e != unix.ESRCH {
		return t, fmt.Errorf("PTRACE_INTERRUPT: %w", e) // seized: to be released
	}
	return t, nil
}

// poll reaps t's pending stop or exit without waiting: (status, true) when it
// reported one.
func (t *tracee) poll() (unix.WaitStatus, bool) {
	var st unix.WaitStatus
	n, err := unix.Wait4(t.tid, &st, unix.WNOHANG|unix.WALL, nil)
	if err != nil || n != t.tid {
		if err == unix.ECHILD {
			return 1, true // gone (reaped, or no longer ours)
		}
		return 0, false
	}
	if st.Stopped() {
		t.noteStop(st)
		return 0, true
	}
	return st, true // exited or killed
}

// waitStopped waits until t is in its ptrace stop, gone, or parked in a vfork
// wait, until deadline.
func (t *tracee) waitStopped(deadline time.Time) error {
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		if t.stopped {
			return nil
		}
		if _, ok := t.poll(); ok {
			return nil
		}
		if vforkParked(t.tid) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("it did not stop")
		}
		time.Sleep(wait)
	}
}

// vforkParked: tid sleeps uninterruptibly inside clone/vfork with CLONE_VFORK
// (waiting for its vfork child, which shares the caller's memory: it returns to
// user space only after that child execs or exits, and its pending interrupt
// stops it before it runs).
func vforkParked(tid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] != 'D' {
		return false
	}
	// its wait channel: the vfork wait (in kernel_clone, where wait_for_vfork_done
	// is inlined), not another sleep inside clone before the child exists — a
	// trapped clone waiting for the supervisor's answer (handleCloneVM) with
	// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, which a ptrace interrupt does not end,
	// or copy_process sleeping: its child would appear after the scan
	w, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/wchan")
	if err != nil || string(w) != "kernel_clone" && string(w) != "wait_for_vfork_done" {
		return false
	}
	sc, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/syscall")
	if errors.Is(err, os.ErrPermission) {
		// a task that is not dumpable has a /proc/<tid>/syscall only root reads
		// (an unprivileged supervisor): its wait channel says it sleeps in clone,
		// not that the clone is a vfork (docs/security.md)
		return true
	}
	if err != nil {
		return false
	}
	f := strings.Fields(string(sc))
	if len(f) < 2 {
		return false
	}
	switch f[0] {
	case strconv.Itoa(unix.SYS_VFORK):
		return true
	case strconv.Itoa(unix.SYS_CLONE):
		flags, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		return err == nil && flags&unix.CLONE_VFORK != 0
	}
	return false
}

// noteStop records a ptrace stop: one without an event (no PTRACE_SYSCALL here) is
// a signal-delivery stop, whose signal is the program's and goes back at detach.
func (t *tracee) noteStop(st unix.WaitStatus) {
	t.stopped = true
	if uint32(st)>>16 == 0 {
		t.sig = int(st.StopSignal())
	}
}

// release ends the trace of t for good: detached where it is in a ptrace stop;
// else interrupted and, once in its stop, detached, or, dead, reaped as its
// tracer's (its real parent then reaps it), until deadline. False: t may still
// be traced by this thread (whose end then detaches it: sandboxJob.end).
func (t *tracee) release(deadline time.Time) bool {
	if t.detach() {
		return true
	}
	// not in a stop (a caller whose call was answered meanwhile, a task that
	// left its stop) or gone: stop it, or see it gone
	unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(t.tid), 0, 0, 0, 0)
	t.stopped = false
	for wait := 10 * time.Microsecond; ; wait = min(2*wait, time.Millisecond) {
		_, ok := t.poll()
		switch {
		case ok && t.stopped:
			return t.detach()
		case ok:
			return true // exited and reaped, or no longer ours
		case time.Now().After(deadline):
			return false
		}
		time.Sleep(wait)
	}
}

// detach ends the trace of t (false: it could not, t may still be traced: a task
// not in a ptrace stop cannot be detached, unless it is gone).
func (t *tracee) detach() bool {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(t.tid), 0, uintptr(t.sig), 0, 0)
	return e == 0
}

// pollExecEvent: a non-leader caller's exec is reported for its thread group's
// leader (whose id it takes); true once it was.
func pollExecEvent(tid int, held map[int]*tracee) bool {
	for _, t := range held {
		if t.tid == tid {
			continue
		}
		var st unix.WaitStatus
		n, err := unix.Wait4(t.tid, &st, unix.WNOHANG|unix.WALL, nil)
		if err != nil || n != t.tid || !st.Stopped() {
			continue
		}
		t.noteStop(st)
		if uint32(st)>>16 == ptraceEventExec {
			t.sig = 0
			return true
		}
	}
	return false
}

// consistent: where the copied regions overlap (argv[0] is often the path itself)
// they were copied at different times; a thread that changed the bytes in between
// made the host judge two different things, and writing both back would leave the
// later one, not the path it judged.
func consistent(rs []memRegion) error {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b memRegion) int { return cmp.Compare(a.addr, b.addr) })
	for i, a := range sorted {
		end := a.addr + uint64(len(a.data))
		for _, b := range sorted[i+1:] {
			if b.addr >= end {
				break
			}
			n := min(end, b.addr+uint64(len(b.data))) - b.addr
			if !bytes.Equal(a.data[b.addr-a.addr:b.addr-a.addr+n], b.data[:n]) {
				return fmt.Errorf("%d bytes at %#x differ between two copies", n, b.addr)
			}
		}
	}
	return nil
}

// writeBack writes the judged copy over the caller's memory (FOLL_FORCE: also on
// read-only private mappings, which it turns into the caller's own copy).
func (c *call) writeBack(rs []memRegion) error {
	if skipWriteBack {
		return nil
	}
	fd, err := unix.Open(c.proc("mem"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, r := range rs {
		for done := 0; done < len(r.data); {
			n, err := unix.Pwrite(fd, r.data[done:], int64(r.addr)+int64(done))
			if err != nil {
				return err
			}
			if n == 0 {
				return unix.EIO
			}
			done += n
		}
	}
	return nil
}

// privatePages: every page under rs is private anonymous memory of the caller
// (pagemap: present or swapped, not a file page nor shared anonymous memory).
func (c *call) privatePages(rs []memRegion) error {
	fd, err := unix.Open(c.proc("pagemap"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	const page = 4096
	// the pages under all regions as spans of page numbers, merged: one pagemap
	// read per span (argv's strings usually lie on one or two stack pages)
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(rs))
	for _, r := range rs {
		if len(r.data) > 0 {
			spans = append(spans, span{r.addr / page, (r.addr + uint64(len(r.data)) - 1) / page})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var e []byte
	for i := 0; i < len(spans); {
		lo, hi := spans[i].lo, spans[i].hi
		for i++; i < len(spans) && spans[i].lo <= hi+1; i++ {
			hi = max(hi, spans[i].hi)
		}
		e = slices.Grow(e[:0], int(hi-lo+1)*8)[:int(hi-lo+1)*8]
		if n, err := unix.Pread(fd, e, int64(lo*8)); err != nil || n != len(e) {
			if err == nil {
				err = fmt.Errorf("pagemap: %d of %d bytes", n, len(e))
			}
			return err
		}
		for p := lo; p <= hi; p++ {
			v := *(*uint64)(unsafe.Pointer(&e[(p-lo)*8]))
			if v&(3<<62) == 0 {
				return fmt.Errorf("page %#x not present", p*page)
			}
			if v&(1<<61) != 0 {
				return fmt.Errorf("page %#x is shared or file-backed", p*page)
			}
		}
	}
	return nil
}
