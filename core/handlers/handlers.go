// Package handlers runs the calls the host judges (policy_fn, handlers: issue 14):
// the request's judges, the zygotes that trap their syscalls, each run's state
// (what it was restricted to) and the decoding of the host's answers. The engine
// registers its ops (run_handlers, handler_decide, handler_read); the supervisor
// (core/supervise) asks a run's judges through the HostRun it is attached with.
package handlers

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/hostcall"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"
)

// Runs whose calls the host judges: a policy callback (policy_fn) and handlers
// (run_with_handlers), issue 14. docs/protocol.md, "host calls", has the ops:
//
//   - run_handlers: a run request with "handlers" [{syscall, id, on_exception}] and/or
//     "policy_fn" {on_exception}. It is an operation that asks the host (kind
//     "syscall") for each trapped call and ends with the run's result.
//   - handler_decide: the answer to a call the binding deferred (it answered
//     {"action": "defer"}: an async handler), sent on any thread while the operation
//     goes on serving other calls.
//   - handler_read: ctx.read / read_cstr of the caller's memory while its call waits.
//
// The traps are the zygote's: a sandbox has one zygote per distinct set of trapped
// syscalls (cached), whose supervisor routes each call to its run by the caller's pid
// namespace (the run is attached to it as for its denials: core/run's spawnRun).
// Runs without handlers keep the sandbox's own zygote.

// PolicyEvents are the calls a policy_fn sees.
var PolicyEvents = []string{"execve", "connect", "sendto", "bind", "openat", "open"}

// exception policies (what a handler that raises, or answers what is not an action,
// gets): handlers default to kill, policy_fn to deny_eperm.
var exceptionPolicies = []string{"kill", "deny_eperm", "continue", "deny_eio"}

type handlerSpec struct {
	id      int64 // the binding's; 0 is policy_fn
	onError string
}

// hostRun is one run the host judges: its handlers, its tightened state, and the
// calls waiting for the host.
type hostRun struct {
	token    uint64
	syscalls []string                 // trapped, sorted
	chain    map[string][]handlerSpec // by syscall: policy_fn first, then handlers in order
	// wakefd (an eventfd) wakes the operation's thread blocked for the next call:
	// a read in the kernel, woken directly by the supervisor's loop, rather than a
	// channel, whose hand-off to a cgo thread takes the Go scheduler two wake-ups
	wakefd   int
	sleeping atomic.Bool // the operation's thread is (about to be) blocked on wakefd
	// listener, serve: the supervisor's listener lent to the operation's thread
	// while it waits (UseReceiver; nil serve: not lent, or no longer)
	listener      int
	serve         func() supervise.ServeResult
	otherReceives bool // the operation's thread found the loop receiving (wait)
	done          chan struct{}
	doneOnce      sync.Once
	eventSeq      atomic.Uint64

	mu          sync.Mutex
	cancel      func()
	aborted     bool
	queue       []*hostEvent          // to ask, in order
	ended       bool                  // the run is over: calls are answered ActGone
	outstanding map[uint64]*hostEvent // asked, not answered yet (deferred included)
	netSets     [][]netip.Prefix      // restrict_network: an address must be in every set
	pidNets     []pidNet              // restrict_pid_network (restrict.go)
	denied      []deniedPath          // deny_path (restrict.go)
	group       *cgroup.Group         // the sandbox's (restrict_max_memory, _processes); nil: none
	undo        []func()              // restores what the run lowered, at its end
	audited     []map[string]any
}

type hostEvent struct {
	id   uint64
	spec handlerSpec
	ev   *supervise.Event
	idx  int                    // its judge's place in the chain
	done func(supervise.Action) // the supervisor's: called once
}

var (
	hostRunsMu sync.Mutex
	hostRuns   = map[uint64]*hostRun{}
	hostSeq    atomic.Uint64
)

// Sandbox is what a host run needs of its sandbox (core/engine's Sandbox).
type Sandbox interface {
	RunPolicy() *policy.Policy
	Plan() (*plan.Plan, error) // the current plan (compiled, confined)
	NetPlan() plan.NetPlan     // who enforces its network rules
	Group() *cgroup.Group
	OnClose(func())
	Run(req *runs.Request) *runs.Result
}

// unconditionallyRefused: a handler there would never see a call.
func unconditionallyRefused(p *policy.Policy, name string) bool {
	return slices.Contains(seccomp.Denied, name) || slices.Contains(seccomp.NotSupported, name) ||
		slices.Contains(p.ExtraDenySyscalls, name) || name == "clone3" || name == "openat2"
}

func parseHostRun(s Sandbox, m map[string]any, probs *policy.Problems) *hostRun {
	r := &hostRun{chain: map[string][]handlerSpec{}, wakefd: -1, done: make(chan struct{}),
		outstanding: map[uint64]*hostEvent{}}
	set := map[string]bool{}
	onErr := func(field string, v any, def string) string {
		if v == nil {
			return def
		}
		str, ok := v.(string)
		if !ok || !slices.Contains(exceptionPolicies, str) {
			probs.Add(field, "must be one of %s", strings.Join(exceptionPolicies, ", "))
			return def
		}
		return str
	}
	if pf, ok := m["policy_fn"]; ok && pf != nil {
		pm, isMap := pf.(map[string]any)
		if !isMap {
			probs.Add("policy_fn", "must be a map ({on_exception})")
		} else {
			spec := handlerSpec{id: 0, onError: onErr("policy_fn.on_exception", pm["on_exception"], "deny_eperm")}
			for _, n := range PolicyEvents {
				if _, ok := seccomp.Nr(n); !ok {
					continue
				}
				r.chain[n] = append(r.chain[n], spec)
				set[n] = true
			}
		}
	}
	if hv, ok := m["handlers"]; ok && hv != nil {
		list, isList := hv.([]any)
		if !isList {
			probs.Add("handlers", "must be a list of {syscall, id, on_exception}")
		}
		for i, e := range list {
			at := fmt.Sprintf("handlers[%d]", i)
			hm, isMap := e.(map[string]any)
			if !isMap {
				probs.Add(at, "must be a map {syscall, id, on_exception}")
				continue
			}
			var name string
			switch sc := hm["syscall"].(type) {
			case string:
				if _, ok := seccomp.Nr(sc); !ok {
					probs.Add(at+".syscall", "unknown syscall %q", sc)
					continue
				}
				name = sc
			case int64, uint64, int8, int16, int32, uint8, uint16, uint32:
				n, _ := strconv.ParseInt(fmt.Sprint(sc), 10, 32)
				if name = seccomp.Name(int32(n)); name == "" {
					probs.Add(at+".syscall", "unknown syscall number %v", sc)
					continue
				}
			default:
				probs.Add(at+".syscall", "must be a syscall name or number")
				continue
			}
			if unconditionallyRefused(s.RunPolicy(), name) {
				probs.Add(at+".syscall", "%s is refused by the sandbox's deny list: a handler there would never run", name)
				continue
			}
			if why := supervise.Unjudgeable(name); why != "" {
				probs.Add(at+".syscall", "%s", why)
				continue
			}
			id, okID := policy.AsInt(hm["id"])
			if !okID || id <= 0 {
				probs.Add(at+".id", "must be a positive integer (the binding's handler id)")
				continue
			}
			r.chain[name] = append(r.chain[name], handlerSpec{id: id, onError: onErr(at+".on_exception", hm["on_exception"], "kill")})
			set[name] = true
		}
	}
	for n := range set {
		r.syscalls = append(r.syscalls, n)
	}
	sort.Strings(r.syscalls)
	if len(r.syscalls) == 0 {
		probs.Add("handlers", "run_handlers needs handlers or policy_fn")
	}
	return r
}

// setCancel: what kills the run (an abort before it is set kills it at once).
func (r *hostRun) setCancel(f func()) {
	r.mu.Lock()
	r.cancel = f
	ab := r.aborted
	r.mu.Unlock()
	if ab {
		f()
	}
}

// abort kills the run: the host will not answer (fail closed).
func (r *hostRun) abort() {
	r.mu.Lock()
	r.aborted = true
	f := r.cancel
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// end: the run is over; the calls still queued or asked are answered ActGone.
func (r *hostRun) end() {
	r.doneOnce.Do(func() {
		r.mu.Lock()
		r.ended = true
		left := r.queue
		for _, e := range r.outstanding {
			left = append(left, e)
		}
		r.queue, r.outstanding = nil, map[uint64]*hostEvent{}
		r.wakeUpLocked()
		undo := r.undo
		r.undo = nil
		r.mu.Unlock()
		for _, f := range undo {
			f()
		}
		r.closePidNets()
		close(r.done)
		for _, e := range left {
			e.done(supervise.Action{Kind: supervise.ActGone})
		}
	})
}

func (r *hostRun) Done() <-chan struct{} { return r.done }

// hostHooks run a host run on its trap set's zygote (core/run's Hooks).
type hostHooks struct {
	s Sandbox
	r *hostRun
}

func (h *hostHooks) Zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	return hostZygote(h.s, h.r, fresh)
}

func (h *hostHooks) Started(cancel func()) { h.r.setCancel(cancel) }

func (h *hostHooks) Ended() { h.r.end() }

// Host: the run's calls are routed to r (core/run attaches it to the supervisor).
func (h *hostHooks) Host() supervise.HostRun { return h.r }

// Refused: the run's tightened state (ctx.restrict_network, restrict_pid_network,
// deny_path).
func (r *hostRun) Refused(ev *supervise.Event) (syscall.Errno, string) {
	if e, why := r.pathRefused(ev); e != 0 {
		return e, why
	}
	if ev.Family != "inet" && ev.Family != "inet6" {
		return 0, ""
	}
	a, err := netip.ParseAddr(ev.Host)
	if err != nil {
		return unix.EACCES, "restrict_network: " + ev.Host
	}
	if e, why := r.pidRefused(ev, a); e != 0 {
		return e, why
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, set := range r.netSets {
		if !slices.ContainsFunc(set, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return unix.EACCES, fmt.Sprintf("%s %s (restrict_network)", ev.Syscall, netip.AddrPortFrom(a, uint16(ev.Port)))
		}
	}
	return 0, ""
}

// Ask puts the call to every judge of it in turn (policy_fn, then the handlers in
// the order given); the first that does not continue decides. It only queues: the
// operation's thread asks the host, and answers the supervisor from there.
func (r *hostRun) Ask(ev *supervise.Event, done func(supervise.Action)) {
	r.askJudge(ev, 0, done)
}

func (r *hostRun) askJudge(ev *supervise.Event, idx int, done func(supervise.Action)) {
	chain := r.chain[ev.Syscall]
	if idx >= len(chain) {
		done(supervise.Action{Kind: supervise.ActContinue})
		return
	}
	e := &hostEvent{id: r.eventSeq.Add(1), spec: chain[idx], ev: ev, idx: idx, done: done}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		done(supervise.Action{Kind: supervise.ActGone})
		return
	}
	r.queue = append(r.queue, e)
	r.wakeUpLocked()
	r.mu.Unlock()
}

// wakeUpLocked wakes the operation's thread if it sleeps (r.mu held: the eventfd
// is closed under it).
func (r *hostRun) wakeUpLocked() {
	if r.sleeping.Swap(false) && r.wakefd >= 0 {
		one := [8]byte{1}
		unix.Write(r.wakefd, one[:])
	}
}

// judged: a judge's action on e (taken from outstanding by the caller); a continue
// goes on to the next judge, under the restrictions this one made.
func (r *hostRun) judged(e *hostEvent, act supervise.Action) {
	if act.Kind != supervise.ActContinue {
		e.done(act)
		return
	}
	if code, why := r.Refused(e.ev); code != 0 {
		e.done(supervise.Action{Kind: supervise.ActErrno, Errno: code, Detail: why})
		return
	}
	r.askJudge(e.ev, e.idx+1, e.done)
}

// take removes e from the calls waiting for an answer: false when it waits no more
// (answered, or the run ended).
func (r *hostRun) take(e *hostEvent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, still := r.outstanding[e.id]
	delete(r.outstanding, e.id)
	return still
}

// exception is the action of a judge's exception policy.
func exception(policy, why string) supervise.Action {
	switch policy {
	case "continue":
		return supervise.Action{Kind: supervise.ActContinue}
	case "deny_eperm":
		return supervise.Action{Kind: supervise.ActErrno, Errno: unix.EPERM, Detail: "supervisor: the judge failed: " + why}
	case "deny_eio":
		return supervise.Action{Kind: supervise.ActErrno, Errno: unix.EIO, Detail: "supervisor: the judge failed: " + why}
	}
	return supervise.Action{Kind: supervise.ActKill, Signal: int(unix.SIGKILL)}
}

// decode turns an answer into an action (applying the restrictions it carries):
// defer is (nil, true).
func (r *hostRun) decode(e *hostEvent, a hostcall.Answer) (act *supervise.Action, deferred bool) {
	if a.Error != nil {
		x := exception(e.spec.onError, a.Error.Type+": "+a.Error.Message)
		return &x, false
	}
	// read in place (rawmsg): no decoding into Go values on the common path
	m, isMap := a.Value.Fields()
	if !isMap {
		x := exception(e.spec.onError, "the answer is not an action map")
		return &x, false
	}
	bad := func(why string) (*supervise.Action, bool) {
		x := exception(e.spec.onError, why)
		return &x, false
	}
	if rv, ok := m["restrict_network"]; ok {
		var rn any
		if err := msgpack.Unmarshal(rv, &rn); err != nil {
			return bad("restrict_network: " + err.Error())
		}
		sets, why := parseNetSets(rn)
		if why != "" {
			return bad(why)
		}
		r.mu.Lock()
		r.netSets = append(r.netSets, sets...)
		r.mu.Unlock()
	}
	if rv, ok := m["restrict_pid_network"]; ok {
		ps, why := parsePidNets(rv)
		if why == "" {
			why = r.addPidNets(ps)
		}
		if why != "" {
			return bad(why)
		}
	}
	if rv, ok := m["deny_path"]; ok {
		ds, why := parseDenyPaths(rv)
		if why != "" {
			return bad(why)
		}
		r.mu.Lock()
		r.denied = append(r.denied, ds...)
		r.mu.Unlock()
	}
	var lower [2]int64
	for i, k := range []string{"restrict_max_memory", "restrict_max_processes"} {
		if v, ok := m[k]; ok {
			n, isInt := v.Int()
			if !isInt || n <= 0 {
				return bad(k + " must be a positive integer")
			}
			lower[i] = n
		}
	}
	if lower[0] > 0 || lower[1] > 0 {
		if why := r.lowerLimits(lower[0], lower[1]); why != "" {
			return bad(why)
		}
	}
	kind, _ := m["action"].Str()
	num := func(k string) int64 { n, _ := m[k].Int(); return n }
	switch kind {
	case "defer":
		return nil, true
	case "continue", "allow":
		return &supervise.Action{Kind: supervise.ActContinue}, false
	case "audit":
		r.mu.Lock()
		if len(r.audited) < 256 {
			r.audited = append(r.audited, map[string]any{"syscall": e.ev.Syscall, "detail": eventDetail(e.ev)})
		}
		r.mu.Unlock()
		return &supervise.Action{Kind: supervise.ActContinue}, false
	case "errno", "deny":
		n := num("errno")
		if kind == "deny" && n == 0 {
			n = int64(unix.EPERM)
		}
		if n <= 0 || n > 4095 {
			return bad(fmt.Sprintf("errno %d out of range 1..4095", n))
		}
		return &supervise.Action{Kind: supervise.ActErrno, Errno: syscall.Errno(n)}, false
	case "returns":
		return &supervise.Action{Kind: supervise.ActReturn, Value: num("value")}, false
	case "inject_fd":
		fd := num("fd")
		if fd < 0 {
			return bad("inject_fd needs a descriptor")
		}
		// the binding's fd is ours (one process): take a copy, so that closing it
		// is the supervisor's business whatever the binding does next
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return bad("inject_fd: " + err.Error())
		}
		unix.Close(int(fd)) // ownership passed (documented)
		return &supervise.Action{Kind: supervise.ActInjectFD, FD: nfd, FDFlags: uint32(num("flags"))}, false
	case "kill":
		return &supervise.Action{Kind: supervise.ActKill, Signal: int(num("signal"))}, false
	case "hold":
		return &supervise.Action{Kind: supervise.ActHold}, false
	}
	return bad(fmt.Sprintf("unknown action %q", kind))
}

// lowerLimits lowers the sandbox's cgroup limits until the run ends (ctx.
// restrict_max_memory, restrict_max_processes); non-empty: why it cannot.
func (r *hostRun) lowerLimits(memory, processes int64) string {
	if r.group == nil {
		return "restrict_max_memory/restrict_max_processes: the sandbox has no cgroup (give its policy max_memory or max_processes)"
	}
	undo, err := r.group.Restrict(memory, processes)
	if err != nil {
		return "restrict_max_memory/restrict_max_processes: " + err.Error()
	}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		undo()
		return ""
	}
	r.undo = append(r.undo, undo)
	r.mu.Unlock()
	return ""
}

// parseNetSets reads an answer's restrict_network: a list of addresses or CIDR
// prefixes (one set), or a list of such lists (several sets, one per
// ctx.restrict_network call: an address must then be in each, by membership).
func parseNetSets(v any) ([][]netip.Prefix, string) {
	list, isList := v.([]any)
	if !isList {
		return nil, "restrict_network must be a list"
	}
	nested := len(list) > 0
	for _, x := range list {
		if _, isList := x.([]any); !isList {
			nested = false
		}
	}
	if !nested {
		set, why := parseNetSet(list)
		if why != "" {
			return nil, why
		}
		return [][]netip.Prefix{set}, ""
	}
	var sets [][]netip.Prefix
	for _, x := range list {
		set, why := parseNetSet(x.([]any))
		if why != "" {
			return nil, why
		}
		sets = append(sets, set)
	}
	return sets, ""
}

func parseNetSet(list []any) ([]netip.Prefix, string) {
	set := []netip.Prefix{}
	for _, v := range list {
		str, isStr := v.(string)
		if !isStr {
			return nil, fmt.Sprintf("restrict_network: %v is not an address or CIDR (a string)", v)
		}
		p, err := netip.ParsePrefix(str)
		if err != nil {
			a, aerr := netip.ParseAddr(str)
			if aerr != nil {
				return nil, fmt.Sprintf("restrict_network: %q is not an address or CIDR", str)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		set = append(set, p.Masked())
	}
	return set, ""
}

func eventDetail(ev *supervise.Event) string {
	switch {
	case ev.HasPath && ev.Syscall == "execve" && len(ev.Argv) > 0:
		return strings.Join(ev.Argv, " ")
	case ev.HasPath && ev.HasPath2:
		return ev.Path + " -> " + ev.Path2
	case ev.HasPath:
		return ev.Path
	case ev.Host != "":
		return fmt.Sprintf("%s:%d", ev.Host, ev.Port)
	}
	return "-"
}

// call is the host call for an event.
func (r *hostRun) call(e *hostEvent) hostcall.Call {
	ev := e.ev
	args := make([]uint64, 6)
	copy(args, ev.Args[:])
	f := map[string]any{"run": r.token, "event": e.id, "handler": e.spec.id, "syscall": ev.Syscall,
		"nr": ev.Nr, "pid": ev.Tid, "args": args, "category": category(ev.Syscall)}
	if ev.HasPath {
		f["path"] = ev.Path
	}
	if ev.HasPath2 {
		f["path2"] = ev.Path2
	}
	if ev.Syscall == "execve" {
		f["argv"] = ev.Argv
		if ev.ArgvTruncated {
			f["argv_truncated"] = true
		}
	}
	if ev.Family != "" {
		f["family"], f["host"], f["port"] = ev.Family, ev.Host, ev.Port
	}
	return hostcall.Call{Kind: "syscall", Fields: f}
}

func category(sc string) string {
	switch sc {
	case "connect", "sendto", "sendmsg", "sendmmsg", "bind", "listen", "accept", "accept4", "socket":
		return "network"
	case "execve", "execveat", "clone", "fork", "vfork", "kill", "tgkill":
		return "process"
	case "mmap", "mprotect", "brk", "munmap", "mremap":
		return "memory"
	}
	return "file"
}

// hostOp is the operation of one run_handlers request.
type hostOp struct {
	r      *hostRun
	result chan *runs.Result
	cur    *hostEvent
}

func (o *hostOp) next() hostcall.Step {
	r := o.r
	for {
		r.mu.Lock()
		if len(r.queue) > 0 {
			e := r.queue[0]
			r.queue[0] = nil
			r.queue = r.queue[1:]
			r.outstanding[e.id] = e
			r.mu.Unlock()
			r.sleeping.Store(false)
			o.cur = e
			return hostcall.Ask(r.call(e), o)
		}
		ended := r.ended
		r.mu.Unlock()
		if ended {
			// nothing more will be queued: the result follows
			return o.final(<-o.result)
		}
		if !r.sleeping.Load() {
			// announced, then the queue looked at again: a call queued in between
			// writes the eventfd
			r.sleeping.Store(true)
			continue
		}
		r.wait()
	}
}

// wait blocks the operation's thread until its eventfd is written, receiving the
// sandbox's notifications meanwhile when the supervisor lends its listener
// (supervise.Receive): the run's next trapped call then wakes this thread itself,
// on the CPU of the thread that made it, and is queued by this thread.
func (r *hostRun) wait() {
	var b [8]byte
	r.mu.Lock()
	lfd, serve := r.listener, r.serve
	r.mu.Unlock()
	if serve == nil {
		if _, err := unix.Read(r.wakefd, b[:]); err != nil && err != unix.EINTR {
			time.Sleep(time.Millisecond) // not expected (a blocking eventfd): poll instead
		}
		return
	}
	fds := []unix.PollFd{{Fd: int32(r.wakefd), Events: unix.POLLIN}, {Fd: int32(lfd), Events: unix.POLLIN}}
	timeout := -1
	if r.otherReceives {
		// the supervisor's loop was receiving: it wakes this thread for the run's
		// call; the listener again once that is done
		fds, timeout = fds[:1], 1
	}
	if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
		r.dropListener()
		return
	}
	r.otherReceives = false
	if fds[0].Revents != 0 {
		unix.Read(r.wakefd, b[:])
	}
	if len(fds) < 2 {
		return
	}
	switch {
	case fds[1].Revents&unix.POLLIN != 0:
		switch serve() {
		case supervise.Closing:
			r.dropListener()
		case supervise.Receiving:
			r.otherReceives = true
		}
	case fds[1].Revents != 0: // the loop reports it
		r.dropListener()
	}
}

// UseReceiver: the supervisor lends its listener to the operation's thread, or
// takes it back (serve nil: the thread, woken, stops polling it).
func (r *hostRun) UseReceiver(fd int, serve func() supervise.ServeResult) {
	r.mu.Lock()
	r.listener, r.serve = fd, serve
	if serve == nil {
		r.wakeUpLocked()
	}
	r.mu.Unlock()
}

func (r *hostRun) dropListener() {
	r.mu.Lock()
	r.serve = nil
	r.mu.Unlock()
}

func (o *hostOp) final(res *runs.Result) hostcall.Step {
	hostRunsMu.Lock()
	delete(hostRuns, o.r.token)
	hostRunsMu.Unlock()
	o.r.mu.Lock()
	aud := o.r.audited
	if o.r.wakefd >= 0 {
		unix.Close(o.r.wakefd)
		o.r.wakefd = -1
	}
	o.r.mu.Unlock()
	b := protocol.Encode(res)
	if len(aud) > 0 {
		var m map[string]any
		if msgpack.Unmarshal(b, &m) == nil {
			m["audited"] = aud
			b = protocol.Encode(m)
		}
	}
	return hostcall.Final(b, protocol.CallKind(res.Error))
}

func (o *hostOp) Resume(a hostcall.Answer) hostcall.Step {
	if a.Abort {
		o.r.abort()
		return o.final(<-o.result)
	}
	o.r.settle(o.cur, a)
	return o.next()
}

// Drop: the sandbox closed while the host was asked: the run dies (fail closed).
func (o *hostOp) Drop() {
	o.r.abort()
	go func() { o.final(<-o.result) }() // releases what the run held
}

// settle delivers an answer to the event that waits for it (a deferred one stays
// outstanding until handler_decide).
func (r *hostRun) settle(e *hostEvent, a hostcall.Answer) {
	act, deferred := r.decode(e, a)
	if deferred {
		return
	}
	if r.take(e) {
		r.judged(e, *act)
	}
}

// RunOp is the run_handlers op: the run, asking the host (hostcall) for each trapped
// call, and its result.
func RunOp(s Sandbox, b []byte) ([]byte, string) {
	m, err := protocol.DecodeMap(b, "request")
	if err != nil {
		return protocol.ErrorResponse(err), protocol.KindInvalidRequest
	}
	var probs policy.Problems
	req := runs.ParseRequest(m, "", "run_handlers", &probs, "handlers", "policy_fn")
	r := parseHostRun(s, m, &probs)
	if len(probs) > 0 {
		return protocol.ErrorResponse(protocol.RequestError(probs)), protocol.KindInvalidRequest
	}
	if r.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return protocol.ErrorResponse(protocol.Errorf(protocol.KindInternal, "eventfd: %v", err)), protocol.KindInternal
	}
	r.token = hostSeq.Add(1)
	r.group = s.Group()
	req.Hooks = &hostHooks{s: s, r: r}
	hostRunsMu.Lock()
	hostRuns[r.token] = r
	hostRunsMu.Unlock()
	o := &hostOp{r: r, result: make(chan *runs.Result, 1)}
	go func() { o.result <- s.Run(req) }()
	return hostcall.Deliver(s, o.next())
}

func lookupEvent(m map[string]any) (*hostRun, *hostEvent, *protocol.Error) {
	tok, _ := policy.AsInt(m["run"])
	id, _ := policy.AsInt(m["event"])
	hostRunsMu.Lock()
	r := hostRuns[uint64(tok)]
	hostRunsMu.Unlock()
	if r == nil {
		return nil, nil, protocol.InvalidRequest("run", "no run %d waits for its handlers", tok)
	}
	r.mu.Lock()
	e := r.outstanding[uint64(id)]
	r.mu.Unlock()
	if e == nil {
		return nil, nil, protocol.InvalidRequest("event", "event %d of run %d waits for no answer", id, tok)
	}
	return r, e, nil
}

// DecideOp is handler_decide: the answer to a deferred call.
func DecideOp(s Sandbox, b []byte) ([]byte, string) {
	m, err := protocol.DecodeMap(b, "request")
	if err != nil {
		return protocol.ErrorResponse(err), protocol.KindInvalidRequest
	}
	r, e, perr := lookupEvent(m)
	if perr != nil {
		return protocol.ErrorResponse(perr), protocol.KindInvalidRequest
	}
	var a hostcall.Answer
	if em, ok := m["error"].(map[string]any); ok {
		t, _ := em["type"].(string)
		msg, _ := em["message"].(string)
		a.Error = &hostcall.Error{Type: t, Message: msg}
	} else {
		v, _ := msgpack.Marshal(m["value"])
		a.Value = v
	}
	act, deferred := r.decode(e, a)
	if deferred {
		x := exception(e.spec.onError, "a deferred answer deferred again")
		act = &x
	}
	if r.take(e) {
		r.judged(e, *act)
	}
	return protocol.Encode(map[string]any{"success": true}), ""
}

// ReadOp is handler_read: the caller's memory while its call waits.
func ReadOp(s Sandbox, b []byte) ([]byte, string) {
	m, err := protocol.DecodeMap(b, "request")
	if err != nil {
		return protocol.ErrorResponse(err), protocol.KindInvalidRequest
	}
	_, e, perr := lookupEvent(m)
	if perr != nil {
		return protocol.ErrorResponse(perr), protocol.KindInvalidRequest
	}
	addr, _ := policy.AsInt(m["addr"])
	if cs, ok := policy.AsInt(m["cstr"]); ok {
		str, err := e.ev.ReadString(uint64(addr), int(cs))
		if err != nil {
			return protocol.Encode(map[string]any{"success": false, "error": map[string]string{"kind": "read_failed", "message": err.Error()}}), ""
		}
		return protocol.Encode(map[string]any{"success": true, "data": []byte(str)}), ""
	}
	n, _ := policy.AsInt(m["len"])
	data, err := e.ev.Read(uint64(addr), int(n))
	if err != nil {
		return protocol.Encode(map[string]any{"success": false, "error": map[string]string{"kind": "read_failed", "message": err.Error()}}), ""
	}
	return protocol.Encode(map[string]any{"success": true, "data": data}), ""
}
