//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Config is what the supervisor enforces for one sandbox.
type Config struct {
	// Allowed: the paths of the sandbox's Landlock path rules (after fs_denied
	// expansion), as the engine opened them on the host. A pinned inode is inside
	// the policy when it, or a directory reached from it by walking ".." (through
	// mount boundaries, up to the root of its mount namespace), has the (st_dev,
	// st_ino) of one of them — the inodes Landlock attaches those rules to.
	Allowed []string
	// ListenNeedsBind: refuse listen() on an AF_INET/AF_INET6 socket that is not
	// bound to a port (listen would autobind an ephemeral port no bind rule saw).
	ListenNeedsBind bool
	// Net: where inet sockets may connect and send (net.go); nil: not supervised.
	Net *NetPolicy
	// Ports: port virtualization (ports.go); nil: none.
	Ports *PortMap
	// HTTP: connects to HTTP ports go to the HTTP proxy (httpredirect.go); nil: none.
	HTTP *HTTPRedirect
	// AbstractScoped: Landlock keeps the sandbox from abstract unix sockets outside
	// its domain; the supervisor, outside every domain, then performs no connect or
	// send to an abstract address on its behalf (net.go).
	AbstractScoped bool
	// Killable: the filter was loaded with SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV,
	// so a signal does not interrupt a call the supervisor received (the calls it
	// performs for the caller are not restarted on top). A call that waits here (a
	// blocking lock) then ends with EINTR when the caller has a caught signal pending,
	// as the kernel's own wait would.
	Killable bool
	// Det: the run's randomness, clock and directory order (determinism.go); nil: the kernel's.
	Det *Determinism
	// Host: calls the host judges after the built-in rules (host.go); nil: none.
	Host *Host `json:"-"`
	// Learn, when set, is told every path the sandbox opens, executes, creates or
	// removes (learn.go): learn mode; those calls are then continued.
	Learn func(kind, path string) `json:"-"`
}

// Trap is one filter rule whose action must be SECCOMP_RET_USER_NOTIF: the filter's
// own type (core/seccomp), so that nothing is lost between the two. Mask is
// 0xffffffff for arguments the kernel reads as a C int: a filter comparing all 64
// bits would let a caller set high bits the kernel then ignores and slip past.
type Trap = seccomp.Trap

// Traps is what the sandbox's seccomp filter must send to the supervisor for cfg.
// Nothing else is trapped, so nothing else pays a round trip.
func Traps(cfg Config) []Trap {
	var ts []Trap
	whole := map[string]bool{}
	for _, h := range handlers {
		if h.traps != nil {
			for _, t := range h.traps(cfg) {
				if t.Arg < 0 && !t.NonZero {
					whole[t.Syscall] = true
				}
				ts = append(ts, t)
			}
		}
	}
	for _, t := range hostTraps(cfg) {
		if !whole[t.Syscall] {
			ts = append(ts, t)
		}
	}
	ts = append(ts, learnTraps(cfg)...)
	return append(ts, detTraps(cfg)...)
}

// Denial is what the supervisor refused: one entry per distinct (Syscall, Detail,
// Errno), counted.
type Denial struct {
	Syscall string
	Detail  string // the path or address the call named, or why the supervisor could not decide
	Errno   syscall.Errno
	Count   int
}

// Supervisor answers the trapped calls of one sandbox.
type Supervisor struct {
	cfg    Config
	fd     int // the listener, closed by Close once no call can use it
	wake   int // an eventfd: Close wakes the loop's poll with it
	table  map[int32]*handler
	pidfds map[uint32]int     // by thread id; used by the loop goroutine only (call.openPidfd)
	nsof   map[uint32]nsEntry // the pid namespaces of pidfds (denials.go), as pidfds

	closing   atomic.Bool
	closeOnce sync.Once
	// recvMu is held by the thread receiving and handling a notification: the
	// loop, or a host run's operation thread waiting for its next call (Receive)
	recvMu    sync.Mutex
	lentRecvs atomic.Uint64 // RECVs made by those threads (the loop's poll may be stale after one)
	failMu    sync.Mutex
	onFail    []func()
	loopDone  chan struct{}
	handling  sync.WaitGroup // detached calls
	waiting   atomic.Int64   // detached calls waiting for a lock (locks.go: maxWaiting)
	inflight  atomic.Int64   // calls being handled (tests wait for 0)
	received  atomic.Int64   // notifications received
	blocked   atomic.Int64   // calls performed on blocking sockets (net.go: maxBlocked)

	privileged bool // calls performed for the caller take its credentials (unix.go)
	// groupsFixed: the runs' pid 1 drops every capability (creds.go)
	groupsFixed bool
	noPidfdInfo atomic.Bool // PIDFD_GET_INFO is missing (Linux < 6.13): ids from /proc
	inPlaceOff  atomic.Bool // look-ups go to the sandbox thread (creds.go: lookUpAs)
	syncWake    bool        // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP took
	sockMu      sync.Mutex
	socks       map[int]int // the supervisor's duplicates of sockets a blocked call uses (shut down at Close)

	denials    denialLog
	runs       runLogs        // denials by run (denials.go)
	attributes atomic.Bool    // attribute denials to runs (AttributeRuns)
	audit      posixAudit     // POSIX locks continued: looked at soon after (posixaudit.go)
	det        *detState      // determinism (determinism.go); nil: none
	threads    sandboxThreads // the threads calls are performed on (sandboxthreads.go)
	idmaps     idMapCache     // the callers' user namespaces' id maps (hostpath.go)
}

// Start takes ownership of listenerFD (the fd SECCOMP_FILTER_FLAG_NEW_LISTENER
// returned in the sandbox; the caller must hold no other copy of it, or closing ours
// would not release the listener) and starts answering notifications. The Allowed
// paths must exist; they are looked up again at each call that needs them (no fd is
// held per path: a host with many sandboxes would run out). On error the fd is closed.
func Start(listenerFD int, cfg Config) (*Supervisor, error) {
	return start(listenerFD, cfg, nil)
}

func start(listenerFD int, cfg Config, override map[string]handlerFunc) (*Supervisor, error) {
	s := &Supervisor{cfg: cfg, pidfds: map[uint32]int{}, nsof: map[uint32]nsEntry{}, loopDone: make(chan struct{}), socks: map[int]int{},
		privileged: privileged(), groupsFixed: unix.Geteuid() == 0}
	fail := func(err error) (*Supervisor, error) {
		unix.Close(listenerFD)
		return nil, err
	}
	if _, err := notifSizes(); err != nil {
		return fail(err)
	}
	if nativeArch == 0 {
		return fail(errors.New("supervise: unsupported architecture"))
	}
	if _, err := allowedIDs(cfg.Allowed); err != nil {
		return fail(err)
	}
	s.table = map[int32]*handler{}
	for i := range handlers {
		h := handlers[i]
		if fn, ok := override[h.name]; ok {
			h.fn = fn
		}
		s.table[h.nr] = &h
	}
	if cfg.Host != nil {
		for _, name := range cfg.Host.Syscalls {
			nr, ok := seccomp.Nr(name)
			if !ok {
				return fail(fmt.Errorf("supervise: unknown syscall %q", name))
			}
			var builtin handlerFunc
			if b := s.table[nr]; b != nil {
				builtin = b.fn
			}
			s.table[nr] = &handler{name: name, nr: nr, fn: hostHandler(name, builtin)}
		}
	}
	s.addLearnHandlers()
	s.addDetHandlers()
	unix.CloseOnExec(listenerFD)
	// Synchronous wake-ups (6.6+): the kernel switches from the trapping thread to
	// the supervisor's and back on the same CPU. Older kernels refuse the ioctl and
	// keep the ordinary wake-ups.
	s.syncWake = setFlags(uintptr(listenerFD), unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) == nil
	if err := unix.SetNonblock(listenerFD, true); err != nil {
		return fail(fmt.Errorf("supervise: listener: %w", err))
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fail(fmt.Errorf("supervise: eventfd: %w", err))
	}
	s.fd, s.wake = listenerFD, wake
	go s.loop()
	return s, nil
}

// Close stops the supervisor and releases the listener: the kernel then fails the
// calls waiting for an answer, and every later trapped call, with ENOSYS (fail
// closed). It waits for the handlers in flight (a handler waiting for a lock gives
// up within its backoff, ≤10 ms) and is safe to call concurrently and more than once.
func (s *Supervisor) Close() {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		one := [8]byte{1}
		unix.Write(s.wake, one[:]) // wakes the loop
		<-s.loopDone
		// a host run's operation thread receiving now (Receive) finishes first; none
		// receives after (closing): the loop's state is Close's from here
		s.recvMu.Lock()
		defer s.recvMu.Unlock()
		s.sockMu.Lock()
		for fd := range s.socks {
			unix.Shutdown(fd, unix.SHUT_RDWR) // a blocked connect or send returns
		}
		s.sockMu.Unlock()
		s.handling.Wait()
		s.threads.close()
		s.idmaps.close()
		s.closeDet()
		s.dropPidfds()
		s.closeRuns()
		// no call can answer any more: the kernel fails the calls still waiting,
		// and every later trapped call, with ENOSYS (once no thread polls it any
		// more: closeRuns woke the operation threads that did)
		unix.Close(s.fd)
		s.failMu.Lock()
		unix.Close(s.wake)
		s.wake = -1
		s.failMu.Unlock()
	})
}

// track registers fd as used by a blocked call (false: closing, do not start).
func (s *Supervisor) track(fd int) bool {
	s.sockMu.Lock()
	defer s.sockMu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.socks[fd]++
	return true
}

func (s *Supervisor) untrack(fd int) {
	s.sockMu.Lock()
	defer s.sockMu.Unlock()
	if s.socks[fd]--; s.socks[fd] <= 0 {
		delete(s.socks, fd)
	}
}

// Denials returns what was refused so far, in the order first seen.
func (s *Supervisor) Denials() []Denial { return s.denials.list() }

// loop receives notifications and handles each in turn. Handlers make only
// non-blocking calls; one that must wait (a blocking lock held by another) hands its
// call to a goroutine of its own, so the loop never waits. Handling inline, rather
// than a goroutine per call, saves a scheduler hand-off on every call (about a third
// of the round trip here).
func (s *Supervisor) loop() {
	defer close(s.loopDone)
	defer s.abortIfNotClosing()
	// A thread of its own, blocked in poll: the kernel wakes it directly (on the
	// trapping thread's CPU, with synchronous wake-ups), without the runtime's
	// poller and a goroutine hand-off in between. An idle sandbox costs that thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(s.wake), Events: unix.POLLIN}}
	busy := 0 // the times in a row another thread was receiving
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		lent := s.lentRecvs.Load()
		timeout := -1
		fds[0].Events = unix.POLLIN
		if busy >= 16 {
			// it handles a call that takes a while: look again in a millisecond
			// rather than spin (Close's wake-up still ends the wait)
			fds[0].Events, timeout, busy = 0, 1, 0
		}
		if _, err := unix.Poll(fds, timeout); err != nil {
			if err == unix.EINTR {
				continue
			}
			s.denials.add("supervisor", "notification loop: poll: "+err.Error(), unix.ENOSYS)
			return
		}
		switch {
		case fds[1].Revents != 0 || s.closing.Load(): // Close
			return
		case fds[0].Revents&unix.POLLIN != 0:
		case fds[0].Revents&unix.POLLHUP != 0:
			return // the filter has no user left: nothing can trap any more
		case fds[0].Revents != 0:
			s.denials.add("supervisor", fmt.Sprintf("notification loop: the listener polled %#x", fds[0].Revents), unix.ENOSYS)
			return
		default:
			continue
		}
		if !s.recvMu.TryLock() {
			// a host run's operation thread is receiving (Receive): it may share
			// this CPU (both were woken on the trapping thread's), let it run
			busy++
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		busy = 0
		var n seccompNotif
		var err error
		if s.lentRecvs.Load() == lent {
			n, err = recv(uintptr(s.fd)) // nobody else received since the poll: one waits
		} else {
			n, err = s.recvReady()
		}
		if err == nil {
			s.handle(n)
		}
		s.recvMu.Unlock()
		switch err {
		case nil:
		case unix.ENOENT, unix.EINTR, unix.EAGAIN:
			// the caller died (or was interrupted) between poll and RECV, or another
			// thread received it (Receive)
		default:
			s.denials.add("supervisor", "notification loop: "+err.Error(), unix.ENOSYS)
			return
		}
	}
}

// Receive lets a thread that waits for a host run's next call receive the
// sandbox's notifications itself (host.go: a HostRun that is a ReceiverUser gets
// it at AttachHost). It polls the listener FD with its own wake-up; when FD is
// readable, serve receives and handles one notification as the loop would (one
// thread at a time: recvMu). A trapped call wakes every thread polling the
// listener on the trapping thread's CPU (synchronous wake-ups): the operation's
// thread is then woken directly, not by the loop through an eventfd, whose wake-up
// of an idle CPU cost 30-50 µs here. serve answers Closing once the supervisor is
// closing: FD is not to be polled any more. The threads never wait for each other
// (a Go mutex that parks a locked thread costs the scheduler's hand-offs): a
// thread that finds another receiving lets it.
func (s *Supervisor) Receive() (fd int, serve func() ServeResult) {
	return s.fd, s.serveOne
}

// ServeResult is what Receive's serve did.
type ServeResult int

const (
	Served    ServeResult = iota // received and handled a notification, or found none
	Receiving                    // another thread is receiving: wait for the run's own wake-up a while
	Closing                      // the supervisor is closing: stop polling its listener
)

func (s *Supervisor) serveOne() ServeResult {
	if !s.recvMu.TryLock() {
		return Receiving
	}
	defer s.recvMu.Unlock()
	if s.closing.Load() {
		return Closing
	}
	n, err := s.recvReady()
	if err != unix.EAGAIN {
		s.lentRecvs.Add(1)
	}
	if err == nil {
		s.handle(n)
	}
	return Served // an error is the loop's to report: it polls the same listener
}

// recvReady receives a notification if one waits (recvMu held): RECV itself
// blocks until one comes, whatever O_NONBLOCK says, and the one a thread polled
// for may have been received by the other meanwhile — it would then wait for a
// call that may only come once that thread has answered. EAGAIN: none.
func (s *Supervisor) recvReady() (seccompNotif, error) {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 || fds[0].Revents&unix.POLLIN == 0 {
		return seccompNotif{}, unix.EAGAIN // (the loop's own poll reports a listener gone bad)
	}
	return recv(uintptr(s.fd))
}

// abortIfNotClosing: a loop that stops on an error (or Abort) tells the OnFail
// callbacks — the engine kills the sandbox's processes: no run outlives its
// supervisor — and closes the listener, so trapped calls fail (ENOSYS) instead of
// waiting forever for an answer.
func (s *Supervisor) abortIfNotClosing() {
	if s.closing.Load() {
		return
	}
	s.failMu.Lock()
	fs := s.onFail
	s.onFail = nil
	s.failMu.Unlock()
	go func() {
		for _, f := range fs {
			f()
		}
		s.Close()
	}()
}

// OnFail registers f, called (once, on a goroutine of its own) when the supervisor
// stops for any reason but Close: an error of its loop, the listener gone bad, or
// Abort. The calls the sandbox makes afterwards could not be judged.
func (s *Supervisor) OnFail(f func()) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	s.onFail = append(s.onFail, f)
}

// Abort stops the supervisor as a failure (OnFail runs), recording why.
func (s *Supervisor) Abort(reason string) {
	s.denials.add("supervisor", "aborted: "+reason, unix.ENOSYS)
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.wake >= 0 { // not closed yet
		one := [8]byte{1}
		unix.Write(s.wake, one[:])
	}
}

// maxPidfds bounds the pidfd cache: about the threads of a sandbox that make trapped
// calls; when full it is emptied (an entry costs one fd).
const maxPidfds = 8

func (s *Supervisor) cachePidfd(tid uint32, fd int) {
	delete(s.nsof, tid) // it was the old pidfd's
	if old, ok := s.pidfds[tid]; ok {
		unix.Close(old)
	} else if len(s.pidfds) >= maxPidfds {
		s.dropPidfds()
	}
	s.pidfds[tid] = fd
}

func (s *Supervisor) dropPidfds() {
	clear(s.nsof)
	for tid, fd := range s.pidfds {
		unix.Close(fd)
		delete(s.pidfds, tid)
	}
}

func (s *Supervisor) idValid(id uint64) bool {
	if s.closing.Load() {
		return false
	}
	return idValid(uintptr(s.fd), id) == nil
}

func (s *Supervisor) handle(n seccompNotif) {
	s.received.Add(1)
	s.inflight.Add(1)
	c := &call{s: s, n: n, pidfd: -1}
	h := s.table[n.Data.Nr]
	var r reply
	switch {
	case n.Data.Arch != nativeArch:
		c.name = fmt.Sprint(n.Data.Nr)
		r = deny(unix.ENOSYS, fmt.Sprintf("supervisor: foreign architecture %#x", n.Data.Arch))
	case h == nil:
		c.name = fmt.Sprint(n.Data.Nr)
		r = deny(unix.ENOSYS, fmt.Sprintf("supervisor: no handler for syscall %d", n.Data.Nr))
	default:
		c.name = h.name
		r = h.fn(c)
	}
	if r.kind == replyPending {
		return // a goroutine took the call over (detach)
	}
	if r.undo == nil {
		c.release()
	}
	s.answer(c, r)
	c.finish()
}

// detach hands the call to a goroutine of its own, which runs f, answers with its
// reply and finishes the call; the handler then returns replyPending.
func (c *call) detach(f func() reply) reply {
	c.detached = true
	c.pidfd = -1 // the cached one belongs to the loop
	c.s.handling.Add(1)
	go func() {
		defer c.s.handling.Done()
		r := f()
		if r.undo == nil {
			c.release()
		}
		c.s.answer(c, r)
		c.finish()
	}()
	return reply{kind: replyPending}
}

// answer sends the reply and keeps the record of denials (the one place they are made).
func (s *Supervisor) answer(c *call, r reply) {
	if r.kind == replyGone {
		return
	}
	var unrecord func()
	if r.denied != "" {
		unrecord = s.record(c, c.name, r.denied, r.errno, false)
	}
	resp := seccompNotifResp{ID: c.n.ID}
	switch r.kind {
	case replyContinue:
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	case replyErrno:
		resp.Error = -int32(r.errno)
	case replyValue:
		resp.Val = r.val
	}
	err := send(uintptr(s.fd), resp)
	if err != nil && unrecord != nil {
		unrecord() // not delivered: not the program's (denials.go)
	}
	if err != nil && r.undo != nil {
		// not delivered (the caller died or was interrupted, or we are closing): what
		// was done on its behalf must not outlive the call
		r.undo()
	}
}

// reply is a handler's answer.
type reply struct {
	kind   replyKind
	val    int64
	errno  syscall.Errno
	denied string // non-empty: record a denial with this detail
	undo   func() // run when the answer could not be delivered
}

type replyKind int

const (
	replyGone     replyKind = iota // the notification is no longer valid: no answer
	replyContinue                  // let the kernel run the call (only for decisions no racing thread can change)
	replyErrno
	replyValue
	replyPending // the call was detached: its goroutine answers
)

func gone() reply                { return reply{kind: replyGone} }
func cont() reply                { return reply{kind: replyContinue} }
func ret(v int64) reply          { return reply{kind: replyValue, val: v} }
func fail(e syscall.Errno) reply { return reply{kind: replyErrno, errno: e} }

// result is the answer for a call performed on the child's behalf.
func result(v int64, err error) reply {
	if err != nil {
		var e syscall.Errno
		if errors.As(err, &e) {
			return fail(e)
		}
		return fail(unix.EIO)
	}
	return ret(v)
}

// deny is a refusal recorded in Denials.
func deny(e syscall.Errno, detail string) reply {
	if detail == "" {
		detail = "-"
	}
	return reply{kind: replyErrno, errno: e, denied: detail}
}

type handlerFunc func(*call) reply

// handler serves one system call. Handlers for more calls (connect, sendto, execve,
// open, … by destination or by a policy callback) are more entries of this table.
type handler struct {
	name  string
	nr    int32
	traps func(Config) []Trap
	fn    handlerFunc
}

var handlers = []handler{
	{name: "flock", nr: unix.SYS_FLOCK, traps: flockTraps, fn: handleFlock},
	{name: "fcntl", nr: unix.SYS_FCNTL, traps: fcntlTraps, fn: handleFcntl},
	{name: "listen", nr: unix.SYS_LISTEN, traps: listenTraps, fn: handleListen},
	{name: "inotify_add_watch", nr: unix.SYS_INOTIFY_ADD_WATCH, traps: inotifyTraps, fn: handleInotifyAddWatch},
	{name: "connect", nr: unix.SYS_CONNECT, traps: connectTraps, fn: handleConnect},
	{name: "sendto", nr: unix.SYS_SENDTO, traps: sendtoTraps, fn: handleSendto},
	{name: "sendmsg", nr: unix.SYS_SENDMSG, traps: sendmsgTraps, fn: handleSendmsg},
	{name: "sendmmsg", nr: unix.SYS_SENDMMSG, traps: sendmmsgTraps, fn: handleSendmmsg},
	{name: "bind", nr: unix.SYS_BIND, traps: portTraps, fn: handleBind},
	{name: "getsockname", nr: unix.SYS_GETSOCKNAME, traps: getsocknameTraps, fn: handleGetsockname},
}

// denialLog keeps at most maxDenials distinct entries; the rest are counted in one.
type denialLog struct {
	mu      sync.Mutex
	index   map[denialKey]int
	entries []Denial
	more    int
}

type denialKey struct {
	syscall, detail string
	errno           syscall.Errno
}

const (
	maxDenials      = 256
	maxDenialDetail = 512
)

func (l *denialLog) add(sc, detail string, e syscall.Errno) { l.addN(sc, detail, e, 1) }

func (l *denialLog) addN(sc, detail string, e syscall.Errno, n int) {
	if len(detail) > maxDenialDetail {
		detail = detail[:maxDenialDetail] + "…"
	}
	k := denialKey{sc, detail, e}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i, ok := l.index[k]; ok {
		l.entries[i].Count += n
		return
	}
	if len(l.entries) >= maxDenials {
		l.more += n
		return
	}
	if l.index == nil {
		l.index = map[denialKey]int{}
	}
	l.index[k] = len(l.entries)
	l.entries = append(l.entries, Denial{Syscall: sc, Detail: detail, Errno: e, Count: n})
}

func (l *denialLog) list() []Denial {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]Denial(nil), l.entries...)
	if l.more > 0 {
		out = append(out, Denial{Syscall: "*", Detail: fmt.Sprintf("more denials than the %d kept", maxDenials), Count: l.more})
	}
	return out
}

// fileID is an inode: what Landlock attaches a path rule to.
type fileID struct{ dev, ino uint64 }

// allowedIDs are the inodes the Allowed paths name now. A path that is gone since the
// sandbox was built (an entry of an expanded directory, removed on the host) allows
// nothing here; Landlock still holds the inode it was built with.
func allowedIDs(paths []string) (map[fileID]bool, error) {
	ids := make(map[fileID]bool, len(paths))
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if err == unix.ENOENT || err == unix.ENOTDIR {
				continue
			}
			return nil, fmt.Errorf("supervise: allowed path %s: %w", p, err)
		}
		ids[fileID{uint64(st.Dev), st.Ino}] = true
	}
	return ids, nil
}

func statID(fd int) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileID{}, err
	}
	return fileID{st.Dev, st.Ino}, nil
}
