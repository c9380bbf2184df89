// Package engine is the façade capi/ calls: the sandbox registry and lifecycle
// (one Sandbox per policy, many concurrent runs; its plan from core/plan, its runs
// through core/run, its sessions and templates through core/template), the
// dispatch of protocol ops (core/protocol), cancellation and confine(). Every protection is either applied before
// the target's first instruction or reported (and, unless allow_degraded, refused).
package engine

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/confine"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"github.com/sandtrap/sandtrap/core/template"
)

// Sandbox is a compiled policy. It is safe for concurrent use.
type Sandbox struct {
	Policy *policy.Policy
	in     *plan.Input // what its plans are compiled from (core/plan)
	env    []string    // base environment (policy applied)

	zmu        sync.Mutex   // guards the fields below
	pl         *plan.Plan   // the plan for the process's current confinement
	retiredPls []*plan.Plan // plans from before a confine(), kept for their runs in flight
	zyg        *spawn.Zygote
	zygPlan    *plan.Plan            // the plan zyg serves
	sup        *supervise.Supervisor // zyg's supervisor, if it has one (tests)
	retired    []*spawn.Zygote       // zygotes from before a confine(), kept for their runs in flight

	id       uint64
	inflight sync.WaitGroup
	mu       sync.Mutex
	cg       *cgroup.Group // the sandbox's cgroup (nil: no limit needs one; see adoptGroup)
	closed   bool
	running  map[string]map[uint64]func() // cancel tag -> run id -> cancel
	sessions template.Table               // its open sessions (core/template)
	procs    runs.Processes               // its popen'd runs not yet waited for (popen.go)
	closers  []func()                     // OnClose
}

// NewFromMap decodes a policy map, validates it (as data and against this machine,
// every problem reported at once) and compiles it.
func NewFromMap(m map[string]any) (*Sandbox, error) {
	p, probs := policy.Decode(m)
	return build(p, probs)
}

// NewFromMsgpack builds a sandbox from a msgpack policy map.
func NewFromMsgpack(b []byte) (*Sandbox, error) {
	m, err := DecodeMap(b, "policy")
	if err != nil {
		return nil, err
	}
	return NewFromMap(m)
}

// New validates p against this machine and compiles its plan.
func New(p *policy.Policy) (*Sandbox, error) { return build(p, nil) }

// build makes the sandbox of p; opts (learn mode) adjust it before its plan is
// compiled.
func build(p *policy.Policy, probs policy.Problems, opts ...func(*Sandbox)) (*Sandbox, error) {
	in, err := plan.Prepare(p, kernel.Probe(), probs)
	if err != nil {
		return nil, err
	}
	f := in.Features
	runs.NullFD()
	sb := &Sandbox{Policy: p, in: in, running: map[string]map[uint64]func(){}, env: in.Net.ProxyEnv(runs.BaseEnv(p), p)}
	if limits := plan.CgroupLimits(p); f.Cgroup != nil && limits.Needed() {
		cg, err := cgroup.New(f.Cgroup, limits)
		if err != nil {
			// (a cgroup only for the default max_processes, not asked for, degrades)
			onlyDefault := p.MaxProcessesDefault && p.MaxMemory == 0 && p.MaxCPU == 0 && p.MaxCPUTime == 0
			if !p.AllowDegraded && !onlyDefault {
				in.Net.CloseHTTP()
				return nil, errorf(KindIsolation, "isolation unavailable: %v (pass allow_degraded to run without it)", err)
			}
			in.GroupErr = err.Error()
		} else {
			sb.cg = cg
		}
	}
	for _, o := range opts {
		o(sb)
	}
	pl, err := sb.compile(confineGen.Load())
	if err != nil {
		sb.Close()
		return nil, err
	}
	sb.pl = pl
	if err := spawn.Ready(); err != nil {
		sb.Close()
		return nil, errorf(KindIsolation, "isolation unavailable: preparing sandtrap-init: %v", err)
	}
	liveMu.Lock()
	live[sb] = struct{}{}
	liveMu.Unlock()
	return sb, nil
}

// compile makes the sandbox's plan for confinement generation gen.
func (s *Sandbox) compile(gen uint64) (*plan.Plan, error) {
	in := *s.in
	in.Group = s.group()
	return plan.Compile(&in, gen)
}

// group is the sandbox's cgroup (it can be swapped, see adoptGroup).
func (s *Sandbox) group() *cgroup.Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cg
}

// adoptGroup makes g the sandbox's cgroup in place of its own, which must be empty
// and not yet joined by a zygote; false (nothing changed) otherwise.
func (s *Sandbox) adoptGroup(g *cgroup.Group) bool {
	s.zmu.Lock()
	defer s.zmu.Unlock()
	if s.zyg != nil || len(s.retired) > 0 {
		return false
	}
	s.mu.Lock()
	old := s.cg
	if old == nil || s.closed || len(old.Pids()) > 0 {
		s.mu.Unlock()
		return false
	}
	s.cg = g
	s.mu.Unlock()
	go old.Close() // empty: removing it is no one's wait
	return true
}

// Close waits for runs in flight, then releases the ruleset; later runs fail.
func (s *Sandbox) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	liveMu.Lock()
	delete(live, s)
	liveMu.Unlock()
	s.runClosers()
	template.CloseAll(s)
	s.procs.KillAll()
	s.inflight.Wait() // runs in flight still need the zygote
	s.zmu.Lock()
	if s.zyg != nil {
		s.zyg.Close()
		s.zyg = nil
	}
	for _, z := range s.retired {
		z.Close()
	}
	s.retired = nil
	s.pl.Close()
	for _, pl := range s.retiredPls {
		pl.Close()
	}
	s.pl, s.retiredPls = nil, nil
	s.zmu.Unlock()
	s.in.Net.CloseHTTP() // its HTTP proxy, once no run can use it
	if cg := s.group(); cg != nil {
		cg.Close()
	}
}

// enter registers a run in flight; false once the sandbox is closed.
func (s *Sandbox) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

// ID is the sandbox's registry id (0 when unregistered).
func (s *Sandbox) ID() uint64 { return s.id }

// Cancel kills every run started with tag — in any sandbox, so that one tag stops a
// whole pipeline — or, when all is set, every run of this sandbox.
func (s *Sandbox) Cancel(tag string, all bool) int {
	var fns []func()
	if all {
		s.mu.Lock()
		for _, list := range s.running {
			for _, f := range list {
				fns = append(fns, f)
			}
		}
		s.mu.Unlock()
	} else if tag != "" {
		tagMu.Lock()
		for _, f := range tagged[tag] {
			fns = append(fns, f)
		}
		tagMu.Unlock()
	}
	for _, f := range fns {
		f()
	}
	return len(fns)
}

// tagged holds the cancel functions of every run in flight, by tag.
var (
	tagMu  sync.Mutex
	tagged = map[string]map[uint64]func(){}
)

func (s *Sandbox) track(tag string, cancel func()) (untrack func()) {
	id := runSeq.Add(1)
	s.mu.Lock()
	if s.running[tag] == nil {
		s.running[tag] = map[uint64]func(){}
	}
	s.running[tag][id] = cancel
	s.mu.Unlock()
	if tag != "" {
		tagMu.Lock()
		if tagged[tag] == nil {
			tagged[tag] = map[uint64]func(){}
		}
		tagged[tag][id] = cancel
		tagMu.Unlock()
	}
	return func() {
		s.mu.Lock()
		delete(s.running[tag], id)
		if len(s.running[tag]) == 0 {
			delete(s.running, tag)
		}
		s.mu.Unlock()
		tagMu.Lock()
		delete(tagged[tag], id)
		if len(tagged[tag]) == 0 {
			delete(tagged, tag)
		}
		tagMu.Unlock()
	}
}

var runSeq atomic.Uint64

// zygote returns the sandbox's zygote (started, again when fresh, if needed) and
// the plan it serves.
func (s *Sandbox) zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	s.zmu.Lock()
	defer s.zmu.Unlock()
	if s.zyg != nil && s.zyg == fresh {
		s.zyg.Close()
		s.zyg = nil
	}
	pl, err := s.currentLocked()
	if err != nil {
		return nil, nil, err
	}
	if s.zyg != nil && s.zygPlan != pl {
		// started before this process confined itself: it holds none of that
		// confinement, so later runs need a new one (which inherits it)
		s.retired = append(s.retired, s.zyg)
		s.zyg = nil
	}
	if s.zyg == nil {
		zs := *pl.Zygote
		if cg := s.group(); cg != nil {
			zs.CgroupFDs = cg.ProcFDs()
		}
		z, err := spawn.StartZygote(&zs)
		if err != nil {
			return nil, nil, err
		}
		if z.Listener >= 0 {
			// the zygote's supervisor: every trapped call of every run of it
			sup, err := supervise.Start(z.Listener, pl.Supervise)
			if err != nil {
				z.Close()
				return nil, nil, errorf(KindIsolation, "isolation unavailable: the supervisor: %v", err)
			}
			z.OnClose(sup.Close)
			// no run outlives its supervisor: the zygote's runs die with it
			sup.OnFail(z.Close)
			s.sup = sup
			runs.AddSupervisor(z, sup, pl.PidNS) // denials by run (core/run/denials.go)
		}
		s.zyg, s.zygPlan = z, pl
	}
	return s.zyg, pl, nil
}

// confineGen counts successful Confine calls. Zygotes, sessions and templates
// started before the latest one serve no later run: everything a run or exec starts
// after confine() must be at least as restricted as the host.
var confineGen atomic.Uint64

// Confine applies this sandbox's Landlock ruleset (and, when withSeccomp, its
// seccomp filter) to every thread of the calling process, irreversibly.
func (s *Sandbox) Confine(withSeccomp bool) error {
	// the rules and the filter (what confine applies) do not depend on whether
	// the process confined itself before: the build's plan has them
	s.zmu.Lock()
	cur := s.pl
	s.zmu.Unlock()
	if cur == nil {
		return errorf(KindClosed, "the sandbox is closed")
	}
	cp := confine.Plan{LandlockFD: -1, BlocksNamespaces: withSeccomp}
	if cur.Ruleset != nil {
		// psx re-reads /proc/self/task while it walks the threads, some of them
		// already restricted: that one directory stays readable, or the host dies.
		spec := cur.LLSpec
		spec.View = nil // this process sees the host's tree, whatever the sandbox's view
		// (by its real path: rule paths are opened without following symlinks)
		spec.Readable = append(append([]string{}, spec.Readable...), "/proc/"+strconv.Itoa(os.Getpid())+"/task")
		spec.Denied = append(append([]string{}, spec.Denied...), plan.UnnamedDevices(spec)...) // no nodev view here
		rs, err := landlock.Build(s.in.Features.LandlockABI, spec)
		if err != nil {
			return errorf(KindIsolation, "landlock: %v", err)
		}
		defer rs.Close()
		cp.LandlockFD = rs.FD
	} else if !s.Policy.Degradable(policy.ProtFS) && !s.Policy.Disables(policy.ProtFS) {
		return errorf(KindIsolation, "isolation unavailable: landlock")
	}
	// The filter: the sandbox's (withSeccomp), or by default what the policy says
	// about sockets and the file calls Landlock does not govern; never the traps
	// (this process has no supervisor of its own: they would answer ENOSYS).
	if cur.BPF == nil {
		if withSeccomp || !s.Policy.AllowDegraded {
			return errorf(KindIsolation, "isolation unavailable: seccomp")
		}
	} else {
		if cur.Supervise.Ports != nil {
			return errorf(KindIsolation, "isolation unavailable: confine() has no supervisor, which port_remap needs")
		}
		if cur.Supervise.Net != nil {
			return errorf(KindIsolation, "isolation unavailable: confine() has no supervisor, which network rules by destination (addresses, UDP or ICMP rules, net_deny) need; only port rules for any host can confine this process")
		}
		cfg := cur.SCCfg
		cfg.Traps, cfg.Confine = nil, !withSeccomp
		// no supervisor here to refuse a listen that would autobind: without bind
		// ports (and unix sockets, which listen too), listen is refused outright
		cfg.NoListen = !cfg.NoInet && len(s.Policy.NetAllowBind) == 0 && !cfg.AllowUnix
		prog, err := seccomp.Compile(cfg)
		if err != nil {
			return errorf(KindIsolation, "seccomp: %v", err)
		}
		cp.BPF = prog.BPF
	}
	runs.NullFD() // keep /dev/null reachable for later runs
	if err := spawn.Ready(); err != nil {
		return errorf(KindIsolation, "isolation unavailable: %v", err)
	}
	if err := confine.Check(cp, ownChildren()); err != nil {
		return errorf(KindIsolation, "%v", err)
	}
	// Everything started before now holds none of the new confinement, and once it
	// scopes signals this process can no longer kill it: stop it all first.
	stopEverything()
	err := confine.Apply(cp)
	confineGen.Add(1) // even half applied: nothing from before may serve again
	if err != nil {
		return errorf(KindIsolation, "%v", err)
	}
	return nil
}

// ownChildren are this process's children that sandtrap started (zygotes):
// confine() stops them; any other child would stay unconfined.
func ownChildren() map[int]bool {
	own := map[int]bool{}
	liveMu.Lock()
	defer liveMu.Unlock()
	for s := range live {
		s.zmu.Lock()
		for _, z := range append([]*spawn.Zygote{s.zyg}, s.retired...) {
			if z != nil {
				own[z.Pid()] = true
			}
		}
		s.zmu.Unlock()
	}
	return own
}

// live holds every sandbox not yet closed (confine stops all of their processes).
var (
	liveMu sync.Mutex
	live   = map[*Sandbox]struct{}{}
)

// stopEverything kills every run, session and template of this process and retires
// every zygote (for confine).
func stopEverything() {
	template.CloseTemplates()
	liveMu.Lock()
	all := make([]*Sandbox, 0, len(live))
	for s := range live {
		all = append(all, s)
	}
	liveMu.Unlock()
	for _, s := range all {
		s.Cancel("", true)
		s.zmu.Lock()
		if s.zyg != nil {
			s.retired = append(s.retired, s.zyg)
			s.zyg, s.zygPlan = nil, nil
		}
		for _, z := range s.retired {
			z.Close() // kills its runs' pid 1s (they die with it)
		}
		s.retired = nil
		s.zmu.Unlock()
	}
}

// current is the sandbox's plan for the process's current confinement, made anew
// (and the old one kept for runs in flight) after a confine().
func (s *Sandbox) current() (*plan.Plan, error) {
	s.zmu.Lock()
	defer s.zmu.Unlock()
	return s.currentLocked()
}

func (s *Sandbox) currentLocked() (*plan.Plan, error) {
	gen := confineGen.Load()
	if s.pl != nil && s.pl.Gen == gen {
		return s.pl, nil
	}
	pl, err := s.compile(gen)
	if err != nil {
		return nil, err
	}
	if s.pl != nil {
		s.retiredPls = append(s.retiredPls, s.pl)
	}
	s.pl = pl
	return pl, nil
}

// isolation returns a copy of the sandbox's current report for one run.
func (s *Sandbox) isolation() *Isolation {
	s.zmu.Lock()
	pl := s.pl
	s.zmu.Unlock()
	return pl.Isolation()
}

// The sandbox as a run's host (core/run).

// RunPolicy is the sandbox's policy.
func (s *Sandbox) RunPolicy() *policy.Policy { return s.Policy }

// BaseEnv is the environment of its runs.
func (s *Sandbox) BaseEnv() []string { return s.env }

// Group is its cgroup (nil: none).
func (s *Sandbox) Group() *cgroup.Group { return s.group() }

// Zygote is its zygote for its current plan (core/run).
func (s *Sandbox) Zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	return s.zygote(fresh)
}

// The sandbox as the host of sessions and templates (core/template).

// Sessions are its open sessions.
func (s *Sandbox) Sessions() *template.Table { return &s.sessions }

// Plan is its plan for the process's current confinement.
func (s *Sandbox) Plan() (*plan.Plan, error) { return s.current() }

// Features are what this machine enforces (as probed when it was built).
func (s *Sandbox) Features() kernel.Features { return s.in.Features }

// AdoptGroup makes g its cgroup in place of its own (see adoptGroup).
func (s *Sandbox) AdoptGroup(g *cgroup.Group) bool { return s.adoptGroup(g) }

func init() {
	template.NewHost = func(p *policy.Policy) (template.Host, error) {
		sb, err := New(p)
		if err != nil {
			return nil, err
		}
		return sb, nil
	}
	template.ConfineGen = confineGen.Load
}

// Run runs one command to completion under the sandbox.
func (s *Sandbox) Run(req *RunRequest) *Result { return runs.Run(s, req) }
