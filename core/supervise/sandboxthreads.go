//go:build linux

package supervise

import (
	"errors"
	"runtime"
	"strconv"
	"sync"

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
//     openat2, *at calls on descriptors, stat, readlink, truncate, mknod, rename,
//     link, symlink, chmod, chown, utimensat);
//   - at most maxIdlePerKind threads wait per kind, maxKinds kinds are kept; a
//     thread beyond them ends after its call (its goroutine returns locked, so the
//     runtime ends the thread). Close ends every waiting one.
const (
	maxIdlePerKind = 4
	maxKinds       = 32
)

type sandboxJob struct {
	fs   *threadFS
	f    func() (int, error)
	done chan sandboxResult
}

type sandboxResult struct {
	v   int
	err error
}

type sandboxThreads struct {
	mu     sync.Mutex
	idle   map[string][]chan sandboxJob
	closed bool
}

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
func (t *sandboxThreads) take(k string) chan sandboxJob {
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

// park makes ch wait for another call of kind k (false: the thread is to end).
func (t *sandboxThreads) park(k string, ch chan sandboxJob) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.idle == nil {
		t.idle = map[string][]chan sandboxJob{}
	}
	l, ok := t.idle[k]
	if (!ok && len(t.idle) >= maxKinds) || len(l) >= maxIdlePerKind {
		return false
	}
	t.idle[k] = append(l, ch)
	return true
}

// close ends every waiting thread; threads busy now end after their call.
func (t *sandboxThreads) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, l := range t.idle {
		for _, ch := range l {
			close(ch)
		}
	}
	t.idle = nil
}

// runAsSandbox performs f on a thread of kind (cr, fs): a waiting one, or a new one.
func (s *Supervisor) runAsSandbox(cr *creds, fs *threadFS, f func() (int, error)) (int, error) {
	k := kindOf(cr, fs)
	j := sandboxJob{fs: fs, f: f, done: make(chan sandboxResult, 1)}
	if ch := s.threads.take(k); ch != nil {
		ch <- j
	} else {
		go s.sandboxThread(k, cr, fs != nil, j)
	}
	r := <-j.done
	return r.v, r.err
}

// sandboxThread sets its thread up for kind k, performs first and then every call
// it is given while it is kept. It never unlocks its thread.
func (s *Supervisor) sandboxThread(k string, cr *creds, ownFS bool, first sandboxJob) {
	runtime.LockOSThread()
	startCwd := -1
	defer func() {
		if startCwd >= 0 {
			unix.Close(startCwd)
		}
	}()
	if err := s.setUpSandboxThread(cr, ownFS, &startCwd); err != nil {
		first.done <- sandboxResult{-1, err}
		return
	}
	ch := make(chan sandboxJob, 1)
	for j, ok := first, true; ok; j, ok = <-ch {
		if j.fs != nil {
			unix.RawSyscall(unix.SYS_UMASK, uintptr(j.fs.umask&0o777), 0, 0)
			dir := j.fs.dir
			if dir < 0 {
				dir = startCwd
			}
			if _, _, e := unix.RawSyscall(unix.SYS_FCHDIR, uintptr(dir), 0, 0); e != 0 {
				j.done <- sandboxResult{-1, e}
				return // its cwd is unknown now: the thread ends
			}
		}
		v, err := j.f()
		j.done <- sandboxResult{v, err}
		if !s.threads.park(k, ch) {
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
