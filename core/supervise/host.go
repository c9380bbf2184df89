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
// has its own); calls of a run's pid 1 (sandtrap's own init, before it forks the
// target) are continued. The host's decision is awaited on a goroutine of the
// call's own, so a slow host holds up only that call.

// Host is what the host judges in one sandbox.
type Host struct {
	// Syscalls are trapped whole for the host (names).
	Syscalls []string
	// Base is the sandbox's filter without these traps: what the kernel answers
	// when the host is not asked.
	Base []byte
	// Route finds the run of a pid namespace (its inode) — with wait, waiting a
	// little for a run being started; nil: no run (the call is refused).
	Route func(ns uint64, wait bool) HostRun
	// RulesetFD is the sandbox's Landlock ruleset (-1: none): an open the host
	// allowed is performed in its domain (hostopen.go).
	RulesetFD int
}

// HostRun is one run whose calls the host judges.
type HostRun interface {
	// Refused is the run's own tightened state (ctx.restrict_network, deny_path):
	// non-zero refuses the call without asking the host.
	Refused(ev *Event) (syscall.Errno, string)
	// Decide asks the host and waits for its action (ActGone: the run ended, or
	// the host will never answer).
	Decide(ev *Event) Action
	// Done is closed when the run ends (a held call waits for it).
	Done() <-chan struct{}
	// Pid1 is the host pid of the run's pid 1 (sandtrap's init).
	Pid1() int
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
	// Argv (execve): the arguments copied, at most maxArgv of them and
	// maxArgvBytes in all (ArgvTruncated then).
	Argv          []string
	ArgvTruncated bool
	// Address (connect, bind, sendto with one): Family "inet", "inet6" or "unix",
	// Host the address (or the unix path), Port.
	Family string
	Host   string
	Port   int

	c   *call
	adr *addr
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
	return ts
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
		return c.detachHost(func() reply { return c.askHost(name, builtin, v&seccomp.RetActionFull == seccomp.RetUserNotif) })
	}
}

// detachHost is detach for calls whose goroutine may hand them on again (a
// built-in handler that detaches): replyPending is then that goroutine's to answer.
func (c *call) detachHost(f func() reply) reply {
	c.detached = true
	c.pidfd = -1
	c.s.handling.Add(1)
	go func() {
		defer c.s.handling.Done()
		r := f()
		if r.kind == replyPending {
			return
		}
		if r.undo == nil {
			c.release()
		}
		c.s.answer(c, r)
		c.finish()
	}()
	return reply{kind: replyPending}
}

// pidNS is the inode of the calling thread's pid namespace.
func (c *call) pidNS() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(c.proc("ns/pid"), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
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

func (c *call) askHost(name string, builtin handlerFunc, builtinTraps bool) reply {
	h := c.s.cfg.Host
	ns, err := c.pidNS()
	if err != nil {
		return c.failure("the caller's pid namespace", err)
	}
	// pid 1 of a run is the one whose host pid the run knows; a namespace not yet
	// registered may be the next run's pid 1 setting itself up (its status says)
	run := h.Route(ns, false)
	inner := 0
	switch {
	case run != nil && int(c.n.Pid) == run.Pid1():
		inner = 1
	case run == nil:
		if inner, err = c.innerPid(); err != nil {
			return c.failure("the caller's pid namespace", err)
		}
		if inner != 1 {
			run = h.Route(ns, true)
		}
	}
	if inner == 1 {
		if !c.valid() {
			return gone()
		}
		// sandtrap's pid 1 (init.c), setting up its run: not the target's call
		if builtinTraps {
			return builtin(c)
		}
		return cont()
	}
	if run == nil {
		if !c.valid() {
			return gone()
		}
		return deny(unix.EPERM, "supervisor: the call belongs to no run the host judges")
	}
	ev := &Event{Syscall: name, Nr: c.n.Data.Nr, Tid: c.n.Pid, Args: c.n.Data.Args, c: c}
	if r := c.copyEvent(ev); r != nil {
		return *r
	}
	if !c.valid() {
		return gone()
	}
	if e, why := run.Refused(ev); e != 0 {
		return deny(e, why)
	}
	act := run.Decide(ev)
	switch act.Kind {
	case ActContinue:
		switch {
		case name == "connect" && c.s.cfg.Net != nil:
			return connectCopy(c, ev.adr) // the address the host judged, checked and performed here
		case name == "sendto" && c.s.cfg.Net != nil && ev.adr != nil:
			return sendtoCopy(c, ev.adr)
		case builtinTraps:
			return builtin(c)
		case openTarget(ev):
			return c.openForCaller(ev) // the path the host judged, opened here
		}
		return cont()
	case ActErrno:
		d := act.Detail
		if d == "" {
			d = ev.describe()
		}
		return deny(act.Errno, "handler: "+d)
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
			case <-run.Done():
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
	if ev.Syscall == "execve" {
		ev.Argv, ev.ArgvTruncated = c.readArgv(c.arg(1))
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

// readArgv copies a NULL-terminated array of strings.
func (c *call) readArgv(p uint64) ([]string, bool) {
	var out []string
	total := 0
	for i := 0; i < maxArgv; i++ {
		var b [8]byte
		if err := c.read(p+uint64(8*i), b[:]); err != nil {
			return out, true
		}
		sp := *(*uint64)(unsafe.Pointer(&b[0]))
		if sp == 0 {
			return out, false
		}
		s, err := c.readString(sp, min(maxArgvBytes-total, 128<<10)+1)
		if err != nil {
			return out, true
		}
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
	if err := ioctlPtr(uintptr(c.s.fd), unix.SECCOMP_IOCTL_NOTIF_ADDFD, unsafe.Pointer(&a)); err != nil {
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
