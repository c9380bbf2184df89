//go:build linux

package supervise

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/sandtrap/sandtrap/core/seccomp"
	"golang.org/x/sys/unix"
)

// Calls judged by the host (a policy callback, handlers: issue 14).
//
// The filter of a sandbox with handlers traps whole the syscalls they name. For
// each trapped call the supervisor first asks the sandbox's filter without those
// traps (Host.Base, run by seccomp.Eval on the call's registers) what the kernel
// would have answered: an error stays that error, a call the supervisor's own rules
// judge goes to them, and only a call the built-in rules let through is put to the
// host. The host can therefore only tighten: its continue lets the kernel run the
// call, which Landlock and the rest of the kernel's checks still see, or (connect
// with network rules by destination) has the supervisor perform it with the
// address the host judged, after the built-in destination check.
//
// A call belongs to the run whose pid namespace the calling thread is in (each run
// has its own): the engine attaches each run (AttachHost) and the supervisor finds
// it as it finds the run of a denial (denials.go: the caller's namespace through its
// cached pidfd), so one mechanism says which run made a call. A call of a namespace
// not attached yet waits while a run is being started (Starting); calls of a run's
// pid 1 (sandtrap's own init, before it forks the target) are continued. The host's
// decision is awaited on a goroutine of the call's own, so a slow host holds up
// only that call.

// Host is what the host judges in one sandbox.
type Host struct {
	// Syscalls are trapped whole for the host (names).
	Syscalls []string
	// Base is the sandbox's filter without these traps: what the kernel answers
	// when the host is not asked.
	Base []byte
	// RulesetFD is the sandbox's Landlock ruleset (-1: none): an open the host
	// allowed is performed in its domain (hostopen.go).
	RulesetFD int
}

// HostRun is one run whose calls the host judges.
type HostRun interface {
	// Refused is the run's own tightened state (ctx.restrict_network, deny_path):
	// non-zero refuses the call without asking the host.
	Refused(ev *Event) (syscall.Errno, string)
	// Ask puts ev to the host without waiting: done is called exactly once with
	// its action (ActGone: the run ended, or the host will never answer), on the
	// goroutine the answer arrives on (possibly within Ask). done answers the
	// kernel itself for the quick actions (continue, errno, returns, inject_fd,
	// kill); the others go on on a goroutine of their own.
	Ask(ev *Event, done func(Action))
	// Done is closed when the run ends (a held call waits for it).
	Done() <-chan struct{}
}

// ReceiverUser is a HostRun whose operation's thread receives the sandbox's
// notifications itself while it waits for the run's next call (Supervisor.Receive):
// UseReceiver lends it the listener at AttachHost, and takes it back (fd -1, serve
// nil: the thread stops polling it) at Detach and Close.
type ReceiverUser interface {
	UseReceiver(fd int, serve func() ServeResult)
}

// Event is a trapped call as the host sees it: the registers, and what the
// supervisor copied from the caller's memory once (never read again for the
// decision).
type Event struct {
	Syscall string
	Nr      int32
	Tid     uint32 // the calling thread, in the supervisor's pid namespace
	Args    [6]uint64
	// Path is the path argument copied (path calls), PathErr why it could not be.
	Path    string
	HasPath bool
	PathErr string
	// Path2 is the second path argument of rename, link and symlink calls (their
	// new name; Path is the old name or the symlink's target), copied as Path is.
	Path2    string
	HasPath2 bool
	Path2Err string
	// Argv (execve): the arguments copied, at most maxArgv of them and
	// maxArgvBytes in all (ArgvTruncated then).
	Argv          []string
	ArgvTruncated bool
	// Address (connect, bind, sendto with one): Family "inet", "inet6" or "unix",
	// Host the address (or the unix path), Port.
	Family string
	Host   string
	Port   int

	c      *call
	adr    *addr
	judged []memRegion // the caller's memory the paths (and execve's argv) were copied from
	run    HostRun
}

// PathDenier is a HostRun with paths denied (ctx.deny_path): the supervisor asks
// it about the file it opened, or the directory it removes or makes in, for the
// run (named p by the kernel: /proc/self/fd; its identity dev, ino). Non-empty:
// refused, and why.
type PathDenier interface {
	HasDenied() bool
	DeniedFile(p string, dev, ino uint64) string
}

// deniedFD: fd (the supervisor's, opened for ev's caller) is denied by the run.
func (ev *Event) deniedFD(fd int, name string) *reply {
	pd, ok := ev.run.(PathDenier)
	if !ok || !pd.HasDenied() {
		return nil
	}
	var st unix.Stat_t
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err == nil && name != "" {
		p += "/" + name
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			st = unix.Stat_t{} // not there (mkdir): the path alone
		}
	}
	if err != nil {
		r := deny(unix.EACCES, "deny_path: "+err.Error())
		return &r
	}
	if why := pd.DeniedFile(p, st.Dev, st.Ino); why != "" {
		r := deny(unix.EACCES, fmt.Sprintf("%s %s (%s)", ev.Syscall, p, why))
		return &r
	}
	return nil
}

// Bounds of what an event copies.
const (
	maxArgv      = 4096
	maxArgvBytes = 256 << 10
	maxHostRead  = 1 << 20
)

// Read copies n bytes of the caller's memory at addr now (ctx.read): valid only
// while the call waits for the host.
func (e *Event) Read(addr uint64, n int) ([]byte, error) {
	if n < 0 || n > maxHostRead {
		return nil, fmt.Errorf("read of %d bytes (at most %d)", n, maxHostRead)
	}
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	err := e.c.read(addr, buf)
	if !e.c.valid() {
		return nil, errors.New("the call is no longer waiting")
	}
	return buf, err
}

// ReadString copies a NUL-terminated string of at most max bytes (ctx.read_cstr).
func (e *Event) ReadString(addr uint64, max int) (string, error) {
	if max < 1 || max > maxHostRead {
		return "", fmt.Errorf("max %d out of range 1..%d", max, maxHostRead)
	}
	s, err := e.c.readString(addr, max)
	if !e.c.valid() {
		return "", errors.New("the call is no longer waiting")
	}
	return s, err
}

// ActionKind is what the host answers.
type ActionKind int

const (
	ActContinue ActionKind = iota // let the built-in rules' decision stand (the kernel runs the call)
	ActErrno                      // fail with Errno
	ActReturn                     // return Value without running the call
	ActInjectFD                   // return a new fd of the caller's, a copy of FD (ours, closed after)
	ActKill                       // send Signal to the caller's process group
	ActHold                       // never answer: the call waits until the run ends
	ActGone                       // the run ended or the host is gone: refuse
)

// Action is the host's decision on one call.
type Action struct {
	Kind    ActionKind
	Errno   syscall.Errno
	Value   int64
	FD      int
	FDFlags uint32 // O_CLOEXEC for the caller's new fd
	Signal  int
	Detail  string // for Denials
}

// PathArg is the index of the path argument of the single-path calls.
var PathArg = map[string]int{
	"openat": 1, "open": 0, "creat": 0, "unlinkat": 1, "unlink": 0, "mkdirat": 1, "mkdir": 0,
	"rmdir": 0, "newfstatat": 1, "statx": 1, "stat": 0, "lstat": 0, "faccessat": 1, "faccessat2": 1,
	"access": 0, "readlinkat": 1, "readlink": 0, "execve": 0, "execveat": 1, "truncate": 0,
	"chdir": 0, "mknodat": 1, "mknod": 0,
	"chmod": 0, "fchmodat": 1, "fchmodat2": 1, "chown": 0, "lchown": 0, "fchownat": 1, "utimensat": 1,
	// the first path of the two-path calls (the old name; symlink's target)
	"rename": 0, "renameat": 1, "renameat2": 1, "link": 0, "linkat": 1, "symlink": 0, "symlinkat": 0,
}

// PathArg2 is the index of the second path argument of the two-path calls (the new name).
var PathArg2 = map[string]int{
	"rename": 1, "renameat": 3, "renameat2": 3, "link": 1, "linkat": 3, "symlink": 1, "symlinkat": 2,
}

// Unjudgeable says why a handler cannot be registered on a syscall ("": it can):
// a path call that cannot be performed for the caller, so that a judge's continue
// would let the kernel re-read a path a thread of the caller can rewrite after the
// judge saw it (execve is held instead: hostexec.go).
func Unjudgeable(name string) string {
	if name == "chdir" {
		return "chdir cannot be performed for the caller (it changes the caller's own working directory) and a continued " +
			"chdir re-reads the path after the judge saw it: judge the calls made from the new directory (openat, …) instead"
	}
	return ""
}

// HostTraps are the traps the host's calls add to a filter.
func HostTraps(h *Host) []Trap { return hostTraps(Config{Host: h}) }

func hostTraps(cfg Config) []Trap {
	if cfg.Host == nil {
		return nil
	}
	var ts []Trap
	for _, n := range cfg.Host.Syscalls {
		ts = append(ts, Trap{Syscall: n, Arg: -1})
	}
	return append(ts, cloneVMTraps(cfg)...) // hostexec.go
}

// hostHandler serves a syscall the host judges; builtin is the supervisor's own
// handler of it (nil: none).
func hostHandler(name string, builtin handlerFunc) handlerFunc {
	return func(c *call) reply {
		h := c.s.cfg.Host
		v, err := seccomp.Eval(h.Base, c.n.Data.Nr, c.n.Data.Arch, c.n.Data.IP, c.n.Data.Args)
		if err != nil {
			return deny(unix.EACCES, "supervisor: "+err.Error())
		}
		switch v & seccomp.RetActionFull {
		case seccomp.RetAllow, seccomp.RetLog:
		case seccomp.RetErrno:
			return fail(syscall.Errno(v & seccomp.RetData)) // the filter's own answer
		case seccomp.RetUserNotif:
			if builtin == nil {
				return deny(unix.ENOSYS, "supervisor: no handler for "+name)
			}
		default:
			return deny(unix.EPERM, fmt.Sprintf("supervisor: the filter answers %#x", v))
		}
		// the caller's pid namespace names its run: taken here, on the loop, through
		// the cached pidfd of the thread (the call is checked valid after)
		ns, ok := c.callerNS()
		if !ok {
			return c.failure("the caller's pid namespace", errors.New("not readable"))
		}
		hc := &hostCall{c: c, name: name, builtin: builtin, builtinTraps: v&seccomp.RetActionFull == seccomp.RetUserNotif}
		if rl := c.s.hostRunOf(ns, false); rl != nil && (rl.noPid1 || int(c.n.Pid) != rl.pid) {
			// the common case, without a goroutine: the event is copied and put to
			// the host from the loop, and the host's thread answers the kernel
			hc.setRun(rl)
			return hc.ask(rl.host)
		}
		return c.detachHost(func() reply { return hc.find(ns) })
	}
}

// hostCall is one call put to the host.
type hostCall struct {
	c            *call
	name         string
	builtin      handlerFunc
	builtinTraps bool
	ev           *Event
	run          HostRun
	initPid      int     // the run's pid 1, sandtrap's init (0: the program is pid 1)
	rl           *RunLog // the run the call belongs to
}

func (h *hostCall) setRun(rl *RunLog) {
	h.rl = rl
	h.c.run = rl
	if !rl.noPid1 {
		h.initPid = rl.pid
	}
}

// detachHost is detach for calls whose goroutine may hand them on again (a
// built-in handler that detaches, the host): replyPending is then theirs to answer.
func (c *call) detachHost(f func() reply) reply {
	c.detached = true
	c.pidfd = -1
	c.s.handling.Add(1)
	go func() {
		defer c.s.handling.Done()
		c.deliver(f())
	}()
	return reply{kind: replyPending}
}

// deliver answers with r (replyPending: another took the call over).
func (c *call) deliver(r reply) {
	if r.kind == replyPending {
		return
	}
	if r.undo == nil {
		c.release()
	}
	c.s.answer(c, r)
	c.finish()
}

// innerPid is the calling thread's pid in its own pid namespace.
func (c *call) innerPid() (int, error) {
	b, err := os.ReadFile(c.proc("status"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.Atoi(f[len(f)-1])
		}
	}
	return 0, errors.New("no NSpid in status")
}

// find is the run of a call whose namespace had no run attached when it came (on
// a goroutine of its own): the next run's pid 1 setting itself up (its status
// says), or a run being started, waited for.
func (h *hostCall) find(ns uint64) reply {
	c := h.c
	rl := c.s.hostRunOf(ns, false)
	inner := 0
	switch {
	case rl != nil && !rl.noPid1 && int(c.n.Pid) == rl.pid:
		inner = 1
	case rl == nil:
		var err error
		if inner, err = c.innerPid(); err != nil {
			return c.failure("the caller's pid namespace", err)
		}
		if inner != 1 {
			rl = c.s.hostRunOf(ns, true)
		}
	}
	if inner == 1 {
		if !c.valid() {
			return gone()
		}
		// sandtrap's pid 1 (init.c), setting up its run: not the target's call
		if h.builtinTraps {
			return h.builtin(c)
		}
		return cont()
	}
	if rl == nil {
		if !c.valid() {
			return gone()
		}
		return deny(unix.EPERM, "supervisor: the call belongs to no run the host judges")
	}
	h.setRun(rl)
	return h.ask(rl.host)
}

// ask copies the event and puts it to run; replyPending: done answers.
func (h *hostCall) ask(run HostRun) reply {
	c := h.c
	ev := &Event{Syscall: h.name, Nr: c.n.Data.Nr, Tid: c.n.Pid, Args: c.n.Data.Args, c: c}
	if r := c.copyEvent(ev); r != nil {
		return *r
	}
	if c.s.privileged && performedAsCaller(ev) {
		// read here, through the loop's cached pidfd of the thread (a detached call
		// opens one of its own); the caller cannot change them while its call waits
		if cr, err := c.readCallerCreds(); err == nil {
			c.creds = cr
		}
	}
	if !c.valid() {
		return gone()
	}
	if e, why := run.Refused(ev); e != 0 {
		return deny(e, why)
	}
	h.ev, h.run, ev.run = ev, run, run
	c.detached = true
	c.pidfd = -1 // the cached one belongs to the loop
	c.s.handling.Add(1)
	run.Ask(ev, h.done)
	return reply{kind: replyPending}
}

// done: the host's action, on the thread it arrived on (the binding's, or the
// loop's for a judge answering within Ask), which also performs and answers it:
// a hand-off to a new goroutine costs a wake-up of another thread and, when the
// giver is still running, the stealing thread's 3 µs sleep (50 µs and more with a
// timer slack of 50 µs) — most of a judged call. Only what may wait long goes on
// on a goroutine of its own (waits): the thread it came on serves the run's other
// calls. A connect or send on a blocking socket, and a built-in handler that must
// wait, hand themselves over as they do on the loop (net.go, locks.go); an open
// and a held execve go to the thread that performs or holds them, which answers.
func (h *hostCall) done(act Action) {
	if h.waits(act) {
		go func() {
			defer h.c.s.handling.Done()
			h.c.deliver(h.act(act))
		}()
		return
	}
	defer h.c.s.handling.Done()
	h.c.deliver(h.act(act))
}

// waits: act's reply may wait without bound and nothing else hands it over — a
// hold (an open of a FIFO waits on its sandbox thread: hostopen.go; a held execve
// on its tracer thread: hostexec.go).
func (h *hostCall) waits(act Action) bool { return act.Kind == ActHold }

// performedAsCaller: a continue performs ev with the caller's credentials (a path
// call but execve, whose exec the kernel carries out, and chdir, never judged; an
// address call, which may name a unix socket's path).
func performedAsCaller(ev *Event) bool {
	switch ev.Syscall {
	case "execve", "execveat", "chdir":
		return false
	case "bind", "connect", "sendto":
		return true
	}
	_, ok := PathArg[ev.Syscall]
	return ok
}

// naiveContinue (tests only) continues every call the host allowed, as a naive
// supervisor would: the attack tests show the races they lose.
var naiveContinue bool

// act is the reply of the host's action.
func (h *hostCall) act(act Action) reply {
	c, ev, name := h.c, h.ev, h.name
	switch act.Kind {
	case ActContinue:
		switch {
		case naiveContinue && !h.builtinTraps:
			return cont()
		case name == "connect" && c.s.cfg.Net != nil:
			return connectCopy(c, ev.adr) // the address the host judged, checked and performed here
		case name == "sendto" && c.s.cfg.Net != nil && ev.adr != nil:
			return sendtoCopy(c, ev.adr)
		case h.builtinTraps:
			return h.builtin(c)
		}
		if r, ok := c.pathContinued(ev, h.rl); ok {
			return r // nothing but the kernel can change the paths the host judged: the caller's own call (hostpath.go)
		}
		switch {
		case openTarget(ev):
			return c.openForCaller(ev) // the path the host judged, opened here
		case name == "bind":
			return c.bindForCaller(ev.adr) // the address the host judged, bound here (hostperform.go)
		case unlinkTarget(ev), mkdirTarget(ev):
			return c.pathForCaller(ev) // the path the host judged, removed or made here
		case inodeTarget(ev):
			return c.inodeForCaller(ev) // stat, access, readlink, truncate, mknod of the judged path (hostpath.go)
		case twoPathTarget(ev):
			return c.twoPathForCaller(ev) // rename, link, symlink of the two judged paths (hostpath2.go)
		case metaTarget(ev):
			return c.metaForCaller(ev) // chmod, chown, utimensat of the judged path (hostmeta.go)
		case name == "execve":
			return c.execJudged(ev, h.initPid, h.rl) // continued with the memory it judged held still (hostexec.go)
		}
		return cont()
	case ActErrno:
		d := act.Detail
		if d == "" {
			d = ev.describe()
		}
		return deny(act.Errno, d) // what the judge refused: the path or address it saw (result.denials)
	case ActReturn:
		return ret(act.Value)
	case ActInjectFD:
		defer unix.Close(act.FD)
		return c.injectFD(act.FD, act.FDFlags)
	case ActKill:
		return c.kill(act.Signal)
	case ActHold:
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.run.Done():
				return gone()
			case <-t.C:
				if !c.valid() {
					return gone()
				}
			}
		}
	}
	return deny(unix.EPERM, "handler: no answer from the host ("+ev.describe()+")")
}

// describe names the call for Denials.
func (e *Event) describe() string {
	switch {
	case e.HasPath && e.HasPath2:
		return e.Path + " -> " + e.Path2
	case e.HasPath:
		return e.Path
	case e.Host != "":
		if e.Family == "unix" {
			return e.Host
		}
		return netip.AddrPortFrom(netip.MustParseAddr(e.Host), uint16(e.Port)).String()
	}
	return "-"
}

// copyEvent copies what the host is shown (once).
func (c *call) copyEvent(ev *Event) *reply {
	if i, ok := PathArg[ev.Syscall]; ok {
		p, err := c.readString(c.arg(i), unix.PathMax)
		if err != nil {
			ev.PathErr = err.Error()
		} else {
			ev.Path, ev.HasPath = p, true
		}
	}
	if i, ok := PathArg2[ev.Syscall]; ok {
		p, err := c.readString(c.arg(i), unix.PathMax)
		if err != nil {
			ev.Path2Err = err.Error()
		} else {
			ev.Path2, ev.HasPath2 = p, true
		}
	}
	// the memory each path was copied from, with its NUL: what a call continued
	// without a hold must read (hostexec.go: alone)
	if ev.HasPath {
		ev.judged = append(ev.judged, memRegion{c.arg(PathArg[ev.Syscall]), append([]byte(ev.Path), 0)})
	}
	if ev.HasPath2 {
		ev.judged = append(ev.judged, memRegion{c.arg(PathArg2[ev.Syscall]), append([]byte(ev.Path2), 0)})
	}
	if ev.Syscall == "execve" {
		ev.Argv, ev.ArgvTruncated = c.readArgv(c.arg(1), &ev.judged)
	}
	var ap, an uint64
	switch ev.Syscall {
	case "connect", "bind":
		ap, an = c.arg(1), uint64(uint32(c.arg(2)))
	case "sendto":
		ap, an = c.arg(4), uint64(uint32(c.arg(5)))
	}
	if ap != 0 && an > 0 {
		a, err := c.readAddr(ap, an)
		if err != nil {
			r := c.failure("read the address", err, unix.EFAULT, unix.EINVAL)
			return &r
		}
		ev.adr = a
		if ip, port, ok := inetAddr(&a.sa); ok {
			ev.Family, ev.Host, ev.Port = "inet", ip.Unmap().String(), int(port)
			if a.sa.Addr.Family == unix.AF_INET6 {
				ev.Family = "inet6"
			}
		} else if a.sa.Addr.Family == unix.AF_UNIX {
			p, abstract := sunPath(a)
			ev.Family, ev.Host = "unix", string(p)
			if abstract {
				ev.Host = "@" + ev.Host
			}
		}
	}
	return nil
}

// readArgv copies a NULL-terminated array of strings; judged gets the memory the
// copy was made from (the pointers and the strings with their NULs: hostexec.go).
func (c *call) readArgv(p uint64, judged *[]memRegion) ([]string, bool) {
	var out []string
	total := 0
	var ptrs []byte
	defer func() {
		if len(ptrs) > 0 {
			*judged = append(*judged, memRegion{p, ptrs})
		}
	}()
	for i := 0; i < maxArgv; i++ {
		var b [8]byte
		if err := c.read(p+uint64(8*i), b[:]); err != nil {
			return out, true
		}
		ptrs = append(ptrs, b[:]...)
		sp := *(*uint64)(unsafe.Pointer(&b[0]))
		if sp == 0 {
			return out, false
		}
		s, err := c.readString(sp, min(maxArgvBytes-total, 128<<10)+1)
		if err != nil {
			return out, true
		}
		*judged = append(*judged, memRegion{sp, append([]byte(s), 0)})
		total += len(s) + 1
		out = append(out, s)
		if total >= maxArgvBytes {
			return out, true
		}
	}
	return out, true
}

type seccompNotifAddfd struct {
	ID         uint64
	Flags      uint32
	Srcfd      uint32
	Newfd      uint32
	NewfdFlags uint32
}

// injectFD installs a copy of our fd in the caller and answers the call with its
// number (SECCOMP_ADDFD_FLAG_SEND: atomically, one ioctl).
func (c *call) injectFD(fd int, flags uint32) reply {
	if fd < 0 {
		return deny(unix.EBADF, "handler: inject_fd without a descriptor")
	}
	a := seccompNotifAddfd{ID: c.n.ID, Flags: unix.SECCOMP_ADDFD_FLAG_SEND, Srcfd: uint32(fd), NewfdFlags: flags & unix.O_CLOEXEC}
	if err := addfdSend(uintptr(c.s.fd), &a); err != nil {
		if !c.valid() {
			return gone()
		}
		return deny(unix.EMFILE, "handler: inject_fd: "+err.Error())
	}
	return gone() // answered by the ioctl
}

// kill sends sig to the caller's process group (through a pidfd of the caller,
// opened before the notification was found valid: never another process's).
func (c *call) kill(sig int) reply {
	if sig <= 0 || sig >= 65 {
		sig = int(unix.SIGKILL)
	}
	fd, err := unix.PidfdOpen(int(c.n.Pid), unix.PIDFD_THREAD)
	if err == unix.EINVAL {
		fd, err = unix.PidfdOpen(int(c.n.Pid), 0)
	}
	if err != nil {
		return c.failure("open the caller", err)
	}
	defer unix.Close(fd)
	if !c.valid() {
		return gone()
	}
	const pidfdSignalProcessGroup = 1 << 2
	if _, _, e := unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(fd), uintptr(sig), 0, pidfdSignalProcessGroup, 0, 0); e != 0 {
		const pidfdSignalThreadGroup = 1 << 1
		unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(fd), uintptr(sig), 0, pidfdSignalThreadGroup, 0, 0)
	}
	return deny(unix.EPERM, "handler: killed with signal "+strconv.Itoa(sig))
}
