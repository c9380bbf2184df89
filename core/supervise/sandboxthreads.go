//go:build linux

package supervise

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The threads calls performed for a caller run on (asSandbox). Such a thread
// holds what cannot be taken back from a thread — the sandbox's Landlock domain,
// no_new_privs, the caller's credentials without capabilities, an fs_struct of its
// own — so it never runs anything else of the supervisor. Making one per call cost
// a new OS thread and its set-up (~0.3 ms of a judged stat's 0.4 ms); instead a
// thread, once made, serves later calls that need the same state:
//
//   - a thread is kept by its kind: the credentials it took (every uid, gid and
//     supplementary group; "ours" when the supervisor has no privilege to lend)
//     and whether it has an fs_struct of its own; the Landlock domain and
//     no_new_privs are the supervisor's, the same for all;
//   - a call with an fs_struct of its own sets the thread's umask and cwd every
//     time (the caller's umask; its directory, or the cwd the thread had when it
//     was made): nothing of one call's fs_struct reaches the next;
//   - a job changes no other state of its thread (the performed calls are
//     openat2, *at calls on descriptors, access, truncate, mknod, rename, link,
//     symlink, chmod, chown, utimensat; an open's job also answers its call:
//     SECCOMP_IOCTL_NOTIF_ADDFD, the supervisor's bookkeeping, no denial — a
//     denial is recorded from a goroutine, hostopen.go);
//   - the tracer threads of held execves (tracerKind, hostexec.go) hold nothing
//     of a sandbox's: they are kept the same way, unless a job leaves a task
//     traced (sandboxJob.end);
//   - at most maxIdlePerKind threads wait per kind, maxKinds kinds are kept; a
//     thread beyond them ends after its call (its goroutine returns locked, so the
//     runtime ends the thread). Close ends every waiting one.
const (
	maxIdlePerKind = 4
	maxKinds       = 32
)

// The hand-off to a kept thread and back is a futex word each way, not a Go
// channel: a goroutine blocked on a channel of a thread locked to it is woken through
// the Go scheduler, which must hand its P to that thread (two wake-ups, 25–50 µs a
// round trip on a 2-vCPU VM), where a futex wakes the blocked thread directly
// (about 3 µs). The requester blocks in the futex too, so a call performed for the
// loop or for the binding's thread never waits for the Go scheduler.

type sandboxJob struct {
	fs *threadFS
	f  func() (int, error)
	// end (set by f): the thread must end after the job (it holds what it cannot
	// give back: a tracer thread whose tracee could not be detached)
	end bool
	// fail (a job nobody waits for: goAsSandbox) is called instead of f when the
	// thread cannot be given the job's state; nil: a requester waits (wait)
	fail  func(error)
	ready atomic.Uint32 // 1: v and err are set
	v     int
	err   error
}

// wait blocks the calling thread (in the kernel) until the job is done.
func (j *sandboxJob) wait() (int, error) {
	for j.ready.Load() == 0 {
		futexWait(&j.ready, 0)
	}
	return j.v, j.err
}

// failed: the job could not run (the thread could not take its state).
func (j *sandboxJob) failed(err error) {
	if j.fail != nil {
		j.fail(err)
		return
	}
	j.finish(-1, err)
}

// finish: the job ran; its requester (if one waits) is told.
func (j *sandboxJob) finish(v int, err error) {
	if j.fail != nil {
		return // nobody waits: f answered the call
	}
	j.v, j.err = v, err
	j.ready.Store(1)
	futexWake(&j.ready)
}

// keptThread is a thread kept for later calls of its kind.
type keptThread struct {
	state atomic.Uint32 // threadIdle, threadJob (job set), threadQuit
	job   *sandboxJob
}

const (
	threadIdle = iota
	threadJob
	threadQuit
)

// give hands j to the waiting thread t.
func (t *keptThread) give(j *sandboxJob) {
	t.job = j
	t.state.Store(threadJob)
	futexWake(&t.state)
}

// next waits for a job (nil: the thread is to end).
func (t *keptThread) next() *sandboxJob {
	for {
		switch t.state.Load() {
		case threadJob:
			j := t.job
			t.job = nil
			t.state.Store(threadIdle)
			return j
		case threadQuit:
			return nil
		}
		futexWait(&t.state, threadIdle)
	}
}

// linux/futex.h
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// futexWait blocks while *w == v (or until woken; callers re-check).
func futexWait(w *atomic.Uint32, v uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitPrivate, uintptr(v), 0, 0, 0)
}

func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakePrivate, 1, 0, 0, 0)
}

type sandboxThreads struct {
	mu     sync.Mutex
	idle   map[string][]*keptThread
	closed bool
}

// mainThread is the runtime's first thread (package initialization runs on it,
// locked: in a program its main thread, in the c-shared library the thread the
// runtime started on).
var mainThread atomic.Int64

func init() { mainThread.Store(int64(unix.Gettid())) }

// kindOf names the state a thread holds for cr and fs.
func kindOf(cr *creds, fs *threadFS) string {
	if cr == nil {
		if fs != nil {
			return "ours/fs"
		}
		return "ours"
	}
	b := make([]byte, 0, 96)
	for _, v := range cr.uid {
		b = strconv.AppendUint(append(b, ' '), uint64(v), 10)
	}
	b = append(b, ';')
	for _, v := range cr.gid {
		b = strconv.AppendUint(append(b, ' '), uint64(v), 10)
	}
	b = append(b, ';')
	for _, v := range cr.groups {
		b = strconv.AppendUint(append(b, ' '), uint64(v), 10)
	}
	if fs != nil {
		b = append(b, "/fs"...)
	}
	return string(b)
}

// take is a waiting thread of kind k (nil: none).
func (t *sandboxThreads) take(k string) *keptThread {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[k]
	if len(l) == 0 {
		return nil
	}
	ch := l[len(l)-1]
	t.idle[k] = l[:len(l)-1]
	return ch
}

// park makes kt wait for another call of kind k (false: the thread is to end).
func (t *sandboxThreads) park(k string, kt *keptThread) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.idle == nil {
		t.idle = map[string][]*keptThread{}
	}
	l, ok := t.idle[k]
	if (!ok && len(t.idle) >= maxKinds) || len(l) >= maxIdlePerKind {
		return false
	}
	t.idle[k] = append(l, kt)
	return true
}

// close ends every waiting thread; threads busy now end after their call.
func (t *sandboxThreads) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, l := range t.idle {
		for _, kt := range l {
			kt.state.Store(threadQuit)
			futexWake(&kt.state)
		}
	}
	t.idle = nil
}

// runAsSandbox performs f on a thread of kind (cr, fs): a waiting one, or a new one.
func (s *Supervisor) runAsSandbox(cr *creds, fs *threadFS, f func() (int, error)) (int, error) {
	j := &sandboxJob{fs: fs, f: f}
	s.give(kindOf(cr, fs), cr, j)
	return j.wait()
}

// goAsSandbox runs f on a thread of kind (cr, fs) and returns at once; f answers
// the call itself. fail is called instead (on that thread) when the thread cannot
// take the kind's state.
func (s *Supervisor) goAsSandbox(cr *creds, fs *threadFS, f func(), fail func(error)) {
	s.give(kindOf(cr, fs), cr, &sandboxJob{fs: fs, f: func() (int, error) { f(); return 0, nil }, fail: fail})
}

// tracerKind is the kind of the threads that hold an execve's memory still
// (hostexec.go): the supervisor's own state, no Landlock domain, kept as the
// others are.
const tracerKind = "tracer"

// give hands j to a waiting thread of kind k, or to a new one.
func (s *Supervisor) give(k string, cr *creds, j *sandboxJob) {
	if kt := s.threads.take(k); kt != nil {
		kt.give(j)
	} else {
		go s.sandboxThread(k, cr, j.fs != nil, j)
	}
}

// sandboxThread sets its thread up for kind k, performs first and then every call
// it is given while it is kept. It never unlocks its thread.
func (s *Supervisor) sandboxThread(k string, cr *creds, ownFS bool, first *sandboxJob) {
	runtime.LockOSThread()
	if int64(unix.Gettid()) == mainThread.Load() {
		// the runtime's first thread: Go never ends it, so a goroutine that ends
		// locked to it wedges it instead of ending it, and what it holds (a tracee,
		// the sandbox's domain) stays. Move to another thread: the new goroutine
		// cannot run here while this one holds it.
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			s.sandboxThread(k, cr, ownFS, first)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	startCwd := -1
	defer func() {
		if startCwd >= 0 {
			unix.Close(startCwd)
		}
	}()
	if k != tracerKind {
		if err := s.setUpSandboxThread(cr, ownFS, &startCwd); err != nil {
			first.failed(err)
			return
		}
	}
	kt := &keptThread{}
	for j := first; j != nil; j = kt.next() {
		if j.fs != nil {
			unix.RawSyscall(unix.SYS_UMASK, uintptr(j.fs.umask&0o777), 0, 0)
			dir := j.fs.dir
			if dir < 0 {
				dir = startCwd
			}
			if _, _, e := unix.RawSyscall(unix.SYS_FCHDIR, uintptr(dir), 0, 0); e != 0 {
				j.failed(e)
				return // its cwd is unknown now: the thread ends
			}
		}
		v, err := j.f()
		// parked before the requester is told: a job given to it from then on
		// waits in its state until next() reads it
		kept := !j.end && s.threads.park(k, kt)
		j.finish(v, err)
		if !kept {
			break
		}
	}
}

// setUpSandboxThread gives the calling (locked) thread its state: with ownFS an
// fs_struct of its own (its cwd kept in *startCwd), no_new_privs, cr (nil: ours,
// unprivileged) without capabilities, the sandbox's Landlock domain.
func (s *Supervisor) setUpSandboxThread(cr *creds, ownFS bool, startCwd *int) error {
	if ownFS {
		if _, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_FS, 0, 0); e != 0 {
			return errors.New("unshare(CLONE_FS): " + e.Error())
		}
		fd, err := unix.Open(".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return errors.New("open the thread's cwd: " + err.Error())
		}
		*startCwd = fd
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		return errors.New("no_new_privs: " + e.Error())
	}
	if cr != nil {
		if err := cr.become(); err != nil {
			return errors.New("take the caller's credentials: " + err.Error())
		}
	}
	if s.cfg.Host != nil {
		if rs := s.cfg.Host.RulesetFD; rs >= 0 {
			if _, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); e != 0 {
				return errors.New("landlock_restrict_self: " + e.Error())
			}
		}
	}
	return nil
}
