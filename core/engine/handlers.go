package engine

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

	"github.com/sandtrap/sandtrap/core/hostcall"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
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
// namespace. Runs without handlers keep the sandbox's own zygote.

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
	queue    chan *hostEvent
	done     chan struct{}
	doneOnce sync.Once
	eventSeq atomic.Uint64
	pid1     atomic.Int64

	mu          sync.Mutex
	cancel      func()
	aborted     bool
	outstanding map[uint64]*hostEvent // asked, not answered yet (deferred included)
	netSets     [][]netip.Prefix      // restrict_network: an address must be in every set
	audited     []map[string]any
}

type hostEvent struct {
	id     uint64
	spec   handlerSpec
	ev     *supervise.Event
	answer chan supervise.Action
}

var (
	hostRunsMu sync.Mutex
	hostRuns   = map[uint64]*hostRun{}
	hostSeq    atomic.Uint64
)

func init() {
	RegisterOp("run_handlers", runHandlersOp)
	RegisterOp("handler_decide", handlerDecideOp)
	RegisterOp("handler_read", handlerReadOp)
}

// unconditionallyRefused: a handler there would never see a call.
func unconditionallyRefused(p *policy.Policy, name string) bool {
	return slices.Contains(seccomp.Denied, name) || slices.Contains(seccomp.NotSupported, name) ||
		slices.Contains(p.ExtraDenySyscalls, name) || name == "clone3" || name == "openat2"
}

func (s *Sandbox) parseHostRun(m map[string]any, probs *policy.Problems) *hostRun {
	r := &hostRun{chain: map[string][]handlerSpec{}, queue: make(chan *hostEvent, 64), done: make(chan struct{}),
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
			if unconditionallyRefused(s.Policy, name) {
				probs.Add(at+".syscall", "%s is refused by the sandbox's deny list: a handler there would never run", name)
				continue
			}
			id, okID := toInt(hm["id"])
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

func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	case int8, int16, int32, uint8, uint16, uint32, int:
		x, err := strconv.ParseInt(fmt.Sprint(n), 10, 64)
		return x, err == nil
	}
	return 0, false
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

func (r *hostRun) end() { r.doneOnce.Do(func() { close(r.done) }) }

func (r *hostRun) Done() <-chan struct{} { return r.done }

func (r *hostRun) Pid1() int { return int(r.pid1.Load()) }

// hostHooks run a host run on its trap set's zygote (core/run's Hooks).
type hostHooks struct {
	s *Sandbox
	r *hostRun
}

func (h *hostHooks) Zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	return h.s.hostZygote(h.r, fresh)
}

func (h *hostHooks) Started(cancel func()) { h.r.setCancel(cancel) }

func (h *hostHooks) Ended() { h.r.end() }

// Spawn starts rs on zyg, registered with the zygote's router by its pid namespace
// before any call of it is served.
func (h *hostHooks) Spawn(zyg *spawn.Zygote, rs *spawn.RunSpec) (*spawn.Process, error) {
	r := h.r
	hz := hostZygFor(zyg)
	if hz == nil {
		return nil, errorf(KindInternal, "BUG(engine): a host run on a zygote without a router")
	}
	hz.router.begin()
	defer hz.router.finish()
	proc, err := zyg.Spawn(rs)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(proc.Pid)+"/ns/pid", &st); err != nil {
		unix.Kill(proc.Pid, unix.SIGKILL)
		return proc, nil // the run is dead: it reports how
	}
	r.pid1.Store(int64(proc.Pid))
	hz.router.add(st.Ino, r)
	go func() {
		<-r.done
		hz.router.remove(st.Ino, r)
	}()
	return proc, nil
}

// Refused: the run's tightened state (ctx.restrict_network).
func (r *hostRun) Refused(ev *supervise.Event) (syscall.Errno, string) {
	if ev.Family != "inet" && ev.Family != "inet6" {
		return 0, ""
	}
	a, err := netip.ParseAddr(ev.Host)
	if err != nil {
		return unix.EACCES, "restrict_network: " + ev.Host
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

// Decide asks every judge of the call in turn (policy_fn, then the handlers in the
// order given); the first that does not continue decides.
func (r *hostRun) Decide(ev *supervise.Event) supervise.Action {
	for _, spec := range r.chain[ev.Syscall] {
		e := &hostEvent{id: r.eventSeq.Add(1), spec: spec, ev: ev, answer: make(chan supervise.Action, 1)}
		select {
		case r.queue <- e:
		case <-r.done:
			return supervise.Action{Kind: supervise.ActGone}
		}
		var act supervise.Action
		select {
		case act = <-e.answer:
		case <-r.done:
			return supervise.Action{Kind: supervise.ActGone}
		}
		if act.Kind != supervise.ActContinue {
			return act
		}
		// restrictions made by this judge hold for the rest of the chain
		if code, why := r.Refused(ev); code != 0 {
			return supervise.Action{Kind: supervise.ActErrno, Errno: code, Detail: why}
		}
	}
	return supervise.Action{Kind: supervise.ActContinue}
}

// exception is the action of a judge's exception policy.
func exception(policy, why string) supervise.Action {
	switch policy {
	case "continue":
		return supervise.Action{Kind: supervise.ActContinue}
	case "deny_eperm":
		return supervise.Action{Kind: supervise.ActErrno, Errno: unix.EPERM, Detail: "exception: " + why}
	case "deny_eio":
		return supervise.Action{Kind: supervise.ActErrno, Errno: unix.EIO, Detail: "exception: " + why}
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
	var m map[string]any
	if err := msgpack.Unmarshal(a.Value, &m); err != nil || m == nil {
		x := exception(e.spec.onError, "the answer is not an action map")
		return &x, false
	}
	bad := func(why string) (*supervise.Action, bool) {
		x := exception(e.spec.onError, why)
		return &x, false
	}
	if rn, ok := m["restrict_network"]; ok {
		list, isList := rn.([]any)
		if !isList {
			return bad("restrict_network must be a list")
		}
		var set []netip.Prefix
		for _, v := range list {
			str, _ := v.(string)
			p, err := netip.ParsePrefix(str)
			if err != nil {
				a, aerr := netip.ParseAddr(str)
				if aerr != nil {
					return bad(fmt.Sprintf("restrict_network: %q is not an address or CIDR", str))
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			set = append(set, p)
		}
		r.mu.Lock()
		r.netSets = append(r.netSets, set)
		r.mu.Unlock()
	}
	kind, _ := m["action"].(string)
	num := func(k string) int64 { n, _ := toInt(m[k]); return n }
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

func eventDetail(ev *supervise.Event) string {
	switch {
	case ev.HasPath && ev.Syscall == "execve" && len(ev.Argv) > 0:
		return strings.Join(ev.Argv, " ")
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
	result chan *Result
	cur    *hostEvent
}

func (o *hostOp) next() hostcall.Step {
	for {
		select {
		case e := <-o.r.queue:
			o.r.mu.Lock()
			o.r.outstanding[e.id] = e
			o.r.mu.Unlock()
			o.cur = e
			return hostcall.Ask(o.r.call(e), o)
		case res := <-o.result:
			return o.final(res)
		}
	}
}

func (o *hostOp) final(res *Result) hostcall.Step {
	hostRunsMu.Lock()
	delete(hostRuns, o.r.token)
	hostRunsMu.Unlock()
	o.r.mu.Lock()
	aud := o.r.audited
	o.r.mu.Unlock()
	b := Encode(res)
	if len(aud) > 0 {
		var m map[string]any
		if msgpack.Unmarshal(b, &m) == nil {
			m["audited"] = aud
			b = Encode(m)
		}
	}
	return hostcall.Final(b, CallKind(res.Error))
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
	go func() { <-o.result }()
}

// settle delivers an answer to the event that waits for it (a deferred one stays
// outstanding until handler_decide).
func (r *hostRun) settle(e *hostEvent, a hostcall.Answer) {
	act, deferred := r.decode(e, a)
	if deferred {
		return
	}
	r.mu.Lock()
	delete(r.outstanding, e.id)
	r.mu.Unlock()
	e.answer <- *act
}

func runHandlersOp(s *Sandbox, b []byte) ([]byte, string) {
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	var probs policy.Problems
	req := parseRun(m, "", "run_handlers", &probs, "handlers", "policy_fn")
	r := s.parseHostRun(m, &probs)
	if len(probs) > 0 {
		return ErrorResponse(requestError(probs)), KindInvalidRequest
	}
	r.token = hostSeq.Add(1)
	req.Hooks = &hostHooks{s: s, r: r}
	hostRunsMu.Lock()
	hostRuns[r.token] = r
	hostRunsMu.Unlock()
	o := &hostOp{r: r, result: make(chan *Result, 1)}
	go func() { o.result <- s.Run(req) }()
	return hostcall.Deliver(s, o.next())
}

func lookupEvent(m map[string]any) (*hostRun, *hostEvent, *Error) {
	tok, _ := toInt(m["run"])
	id, _ := toInt(m["event"])
	hostRunsMu.Lock()
	r := hostRuns[uint64(tok)]
	hostRunsMu.Unlock()
	if r == nil {
		return nil, nil, invalidRequest("run", "no run %d waits for its handlers", tok)
	}
	r.mu.Lock()
	e := r.outstanding[uint64(id)]
	r.mu.Unlock()
	if e == nil {
		return nil, nil, invalidRequest("event", "event %d of run %d waits for no answer", id, tok)
	}
	return r, e, nil
}

func handlerDecideOp(s *Sandbox, b []byte) ([]byte, string) {
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	r, e, perr := lookupEvent(m)
	if perr != nil {
		return ErrorResponse(perr), KindInvalidRequest
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
	r.mu.Lock()
	_, still := r.outstanding[e.id]
	delete(r.outstanding, e.id)
	r.mu.Unlock()
	if still {
		e.answer <- *act
	}
	return Encode(map[string]any{"success": true}), ""
}

func handlerReadOp(s *Sandbox, b []byte) ([]byte, string) {
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	_, e, perr := lookupEvent(m)
	if perr != nil {
		return ErrorResponse(perr), KindInvalidRequest
	}
	addr, _ := toInt(m["addr"])
	if cs, ok := toInt(m["cstr"]); ok {
		str, err := e.ev.ReadString(uint64(addr), int(cs))
		if err != nil {
			return Encode(map[string]any{"success": false, "error": map[string]string{"kind": "read_failed", "message": err.Error()}}), ""
		}
		return Encode(map[string]any{"success": true, "data": []byte(str)}), ""
	}
	n, _ := toInt(m["len"])
	data, err := e.ev.Read(uint64(addr), int(n))
	if err != nil {
		return Encode(map[string]any{"success": false, "error": map[string]string{"kind": "read_failed", "message": err.Error()}}), ""
	}
	return Encode(map[string]any{"success": true, "data": data}), ""
}

// hostZyg is a zygote whose filter traps a host run's syscalls, and its router.
type hostZyg struct {
	key    string
	zyg    *spawn.Zygote
	pl     *plan.Plan
	base   *plan.Plan
	router *router
}

var (
	hostZygMu sync.Mutex
	hostZygs  = map[*Sandbox]map[string]*hostZyg{}
	byZygote  = map[*spawn.Zygote]*hostZyg{}
)

func hostZygFor(z *spawn.Zygote) *hostZyg {
	hostZygMu.Lock()
	defer hostZygMu.Unlock()
	return byZygote[z]
}

// hostZygote is the sandbox's zygote for r's trapped syscalls (started when none
// is, or when fresh died).
func (s *Sandbox) hostZygote(r *hostRun, fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	base, err := s.current()
	if err != nil {
		return nil, nil, err
	}
	if base.BPF == nil {
		return nil, nil, errorf(KindIsolation, "isolation unavailable: handlers and policy_fn need seccomp")
	}
	if !base.PidNS {
		return nil, nil, errorf(KindIsolation, "isolation unavailable: handlers and policy_fn need a pid namespace per run (to tell runs apart)")
	}
	key := strings.Join(r.syscalls, ",")
	hostZygMu.Lock()
	defer hostZygMu.Unlock()
	m := hostZygs[s]
	if m == nil {
		m = map[string]*hostZyg{}
		hostZygs[s] = m
		s.OnClose(func() { closeHostZygotes(s) })
	}
	if hz := m[key]; hz != nil {
		if hz.zyg != fresh && hz.base == base {
			return hz.zyg, hz.pl, nil
		}
		delete(byZygote, hz.zyg)
		delete(m, key)
		go hz.zyg.Close()
	}
	rt := &router{runs: map[uint64]*hostRun{}, changed: make(chan struct{})}
	sup := base.Supervise
	sup.Host = &supervise.Host{Syscalls: r.syscalls, Base: base.BPF.BPF, Route: rt.route, RulesetFD: -1}
	if base.Ruleset != nil {
		sup.Host.RulesetFD = base.Ruleset.FD
	}
	if sup.Net == nil && s.in.Net.Wanted() && (slices.Contains(r.syscalls, "connect") || slices.Contains(r.syscalls, "sendto")) {
		// the host judges destinations: connect and sendto are performed with the
		// address it saw (a racing thread cannot change it), so the supervisor
		// enforces the Landlock floor itself (the calls it performs are not the
		// sandbox's: Landlock does not see them)
		sup.Net = s.in.Net.Floor()
	}
	whole := map[string]bool{}
	for _, t := range base.SCCfg.Traps {
		if t.Arg < 0 && !t.NonZero {
			whole[t.Syscall] = true
		}
	}
	traps := append([]seccomp.Trap{}, base.SCCfg.Traps...)
	for _, t := range supervise.HostTraps(sup.Host) {
		if !whole[t.Syscall] {
			traps = append(traps, t)
		}
	}
	pl, err := base.WithTraps(traps, sup)
	if err != nil {
		return nil, nil, err
	}
	zs := *pl.Zygote
	if cg := s.group(); cg != nil {
		zs.CgroupFDs = cg.ProcFDs()
	}
	z, err := spawn.StartZygote(&zs)
	if err != nil {
		return nil, nil, err
	}
	sv, err := supervise.Start(z.Listener, pl.Supervise)
	if err != nil {
		z.Close()
		return nil, nil, errorf(KindIsolation, "isolation unavailable: the supervisor: %v", err)
	}
	z.OnClose(sv.Close)
	// no run outlives its supervisor: the zygote's runs die with it
	sv.OnFail(z.Close)
	hz := &hostZyg{key: key, zyg: z, pl: pl, base: base, router: rt}
	m[key] = hz
	byZygote[z] = hz
	return z, pl, nil
}

func closeHostZygotes(s *Sandbox) {
	hostZygMu.Lock()
	m := hostZygs[s]
	delete(hostZygs, s)
	for _, hz := range m {
		delete(byZygote, hz.zyg)
	}
	hostZygMu.Unlock()
	for _, hz := range m {
		hz.zyg.Close()
	}
}

// router finds a run by its pid namespace.
type router struct {
	mu       sync.Mutex
	runs     map[uint64]*hostRun
	starting int
	changed  chan struct{}
}

func (rt *router) signal() {
	close(rt.changed)
	rt.changed = make(chan struct{})
}

func (rt *router) begin() {
	rt.mu.Lock()
	rt.starting++
	rt.mu.Unlock()
}

func (rt *router) finish() {
	rt.mu.Lock()
	rt.starting--
	rt.signal()
	rt.mu.Unlock()
}

func (rt *router) add(ns uint64, r *hostRun) {
	rt.mu.Lock()
	rt.runs[ns] = r
	rt.signal()
	rt.mu.Unlock()
}

// remove forgets ns for r (only: a namespace inode freed with r's run can already
// name a newer run's).
func (rt *router) remove(ns uint64, r *hostRun) {
	rt.mu.Lock()
	if rt.runs[ns] == r {
		delete(rt.runs, ns)
	}
	rt.mu.Unlock()
}

// route: the run of ns; a call made before its run was registered (its target
// starts before Spawn returns) waits for that, at most routeWait.
func (rt *router) route(ns uint64, wait bool) supervise.HostRun {
	deadline := time.Now().Add(routeWait)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for {
		if r := rt.runs[ns]; r != nil {
			return r
		}
		if !wait || rt.starting == 0 || time.Now().After(deadline) {
			return nil
		}
		ch := rt.changed
		rt.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
		}
		rt.mu.Lock()
	}
}

const routeWait = 5 * time.Second
