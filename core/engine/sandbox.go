// Package engine compiles a policy into a confinement plan and runs commands under
// it: one Sandbox per policy, many concurrent runs, every protection either applied
// before the target's first instruction or reported (and, unless allow_degraded,
// refused).
package engine

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/confine"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// Error kinds, stable across the C ABI and the bindings.
const (
	KindInvalidRequest = "invalid_request"
	KindInvalidPolicy  = "invalid_policy"
	KindIsolation      = "isolation_unavailable"
	KindNotFound       = "not_found"
	KindSpawn          = "spawn_failed"
	KindTimeout        = "timeout"
	KindCancelled      = "cancelled"
	KindCPUTime        = "cpu_time_limit"
	KindMemory         = "memory_limit"
	KindForked         = "forked_child"
	KindClosed         = "closed"
	KindInternal       = "internal"
)

// Error is an engine error with a stable kind.
type Error struct {
	Kind    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func errorf(kind, format string, a ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, a...)}
}

// DevicePaths are granted read/write to every sandbox: harmless character devices
// that nearly every program opens.
var DevicePaths = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// DefaultPath is the PATH a program sees under clean_env.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Sandbox is a compiled policy. It is safe for concurrent use.
type Sandbox struct {
	Policy   *policy.Policy
	features kernel.Features
	ruleset  *landlock.Ruleset
	llspec   landlock.Spec
	bpf      *seccomp.Program
	zspec    *spawn.ZygoteSpec
	zmu      sync.Mutex
	zyg      *spawn.Zygote
	zygGen   uint64          // confineGen when zyg started
	retired  []*spawn.Zygote // zygotes from before a confine(), kept for their runs in flight
	pidNS    bool
	userNS   bool
	cg       *cgroup.Group // the sandbox's cgroup (nil: no limit needs one)
	report   Isolation     // what every run of this sandbox enforces
	env      []string      // base environment (policy applied)

	id       uint64
	inflight sync.WaitGroup
	mu       sync.Mutex
	closed   bool
	running  map[string]map[uint64]func() // cancel tag -> run id -> cancel
	sessions map[uint64]*session
}

// NewFromMap decodes a policy map, validates it (as data and against this machine,
// every problem reported at once) and compiles it.
func NewFromMap(m map[string]any) (*Sandbox, error) {
	p, probs := policy.Decode(m)
	return build(p, probs)
}

// New validates p against this machine and compiles its plan.
func New(p *policy.Policy) (*Sandbox, error) { return build(p, nil) }

func build(p *policy.Policy, probs policy.Problems) (*Sandbox, error) {
	f := kernel.Probe()
	for _, fl := range []struct {
		field string
		list  []string
	}{{"fs_readable", p.FSReadable}, {"fs_writable", p.FSWritable}} {
		field := fl.field
		for _, path := range fl.list {
			if _, err := os.Stat(path); err != nil {
				probs.Addf("%s: %s: %v", field, path, unwrapPathErr(err))
			}
		}
	}
	if p.Cwd != "" {
		if st, err := os.Stat(p.Cwd); err != nil {
			probs.Addf("cwd %s: %v", p.Cwd, unwrapPathErr(err))
		} else if !st.IsDir() {
			probs.Addf("cwd %s: not a directory", p.Cwd)
		}
	}
	for _, m := range seccomp.Validate("extra_allow_syscalls", p.ExtraAllowSyscalls) {
		probs.Addf("%s", m)
	}
	for _, m := range seccomp.Validate("extra_deny_syscalls", p.ExtraDenySyscalls) {
		probs.Addf("%s", m)
	}
	if p.UID != nil && !f.Root {
		probs.Addf("uid/gid: switching users needs a host running as root")
	}
	if err := probs.Err(); err != nil {
		return nil, &Error{Kind: KindInvalidPolicy, Message: err.Error()}
	}

	nullFD()
	sb := &Sandbox{Policy: p, features: f, running: map[string]map[uint64]func(){}}
	rep := &sb.report
	rep.Degraded = []string{}
	var missing []string
	need := func(ok bool, what string) bool {
		if !ok {
			missing = append(missing, what)
		}
		return ok
	}

	// Landlock: files always; TCP ports when any are allowed (otherwise seccomp
	// refuses inet sockets outright, which holds without Landlock's network rules).
	anyConnect := false
	var connect []uint16
	for _, t := range p.NetAllow {
		if t.Any {
			anyConnect = true
			continue
		}
		if t.Host != "" {
			missing = append(missing, fmt.Sprintf("net_allow %q: the kernel enforces the port only; give %d alone to allow every host on it", t.Host+":"+fmt.Sprint(t.Port), t.Port))
		}
		connect = append(connect, t.Port)
	}
	connect = uniq(connect)
	netWanted := anyConnect || len(connect) > 0 || len(p.NetAllowBind) > 0
	if need(f.LandlockABI > 0, "landlock (filesystem rules)") {
		if netWanted {
			need(f.LandlockABI >= 4, fmt.Sprintf("landlock network rules (kernel ABI %d < 4)", f.LandlockABI))
		}
		sb.llspec = landlock.Spec{
			Readable: p.FSReadable, Writable: p.FSWritable, Denied: p.FSDenied,
			Devices: DevicePaths, ConnectPorts: connect, BindPorts: p.NetAllowBind,
			AnyConnect: anyConnect, Scope: true,
		}
		rs, err := landlock.Build(f.LandlockABI, sb.llspec)
		if err != nil {
			return nil, errorf(KindIsolation, "landlock: %v", err)
		}
		sb.ruleset = rs
		r := rs.Report
		rep.Landlock = &r
		if f.LandlockABI < 6 {
			rep.NotApplied = append(rep.NotApplied, "landlock scoping of abstract unix sockets and signals (kernel ABI < 6)")
		}
	}
	// seccomp: the base denylist always.
	if need(f.Seccomp, "seccomp") {
		prog, err := seccomp.Compile(seccomp.Config{
			NoInet: !netWanted, AllowUDP: p.NetAllowUDP, AllowUnix: p.NetAllowUnix,
			ExtraAllow: p.ExtraAllowSyscalls, ExtraDeny: p.ExtraDenySyscalls,
			CloneCookie: cloneCookie(),
		})
		if err != nil {
			return nil, errorf(KindIsolation, "seccomp: %v", err)
		}
		sb.bpf = prog
		rep.Seccomp = &SeccompReport{Enforced: true, Action: "EPERM", Denied: prog.Denied,
			ForeignArch: "kill", InetSockets: netWanted, UDP: p.NetAllowUDP, UnixSockets: p.NetAllowUnix}
	}
	// Process tree: a pid namespace kills every descendant with the main process and
	// when the host dies; a cgroup is the fallback for killing the tree.
	sb.pidNS = f.PidNS
	sb.userNS = f.PidNS && !f.Root
	limits := cgroupLimits(p)
	rep.PidNamespace = sb.pidNS
	rep.UserNamespace = sb.userNS
	switch {
	case sb.pidNS:
		rep.TreeKill = "pid_namespace"
	default:
		need(false, "process-tree containment (no pid namespace and no cgroup)")
		rep.TreeKill = "process_group"
	}
	rep.NoNewPrivs = true
	if f.Root || sb.userNS {
		rep.Capabilities = "dropped"
	} else {
		rep.Capabilities = "none held"
	}
	if p.UID != nil {
		rep.UID, rep.GID = p.UID, p.GID
	}
	rep.Limits = map[string]Limit{}
	var cgVia string
	if f.Cgroup != nil {
		cgVia = fmt.Sprintf("cgroup_v%d", f.Cgroup.Version)
	}
	has := func(c string) bool {
		if f.Cgroup == nil {
			return false
		}
		_, ok := f.Cgroup.Dirs[c]
		return ok
	}
	if p.MaxMemory > 0 {
		if has("memory") {
			rep.Limits["max_memory"] = Limit{Value: p.MaxMemory, Via: cgVia}
		} else {
			rep.Limits["max_memory"] = Limit{Value: p.MaxMemory, Via: "rlimit_as", Note: "per process address space, not the tree's memory"}
			rep.Degraded = append(rep.Degraded, "max_memory enforced per process by RLIMIT_AS (no memory cgroup)")
		}
	}
	if p.MaxProcesses > 0 {
		switch {
		case has("pids"):
			rep.Limits["max_processes"] = Limit{Value: p.MaxProcesses, Via: cgVia}
		case !f.Root:
			rep.Limits["max_processes"] = Limit{Value: p.MaxProcesses, Via: "rlimit_nproc", Note: "counts the user's processes in the sandbox's user namespace"}
		default:
			need(false, "max_processes (root ignores RLIMIT_NPROC and no pids cgroup is available)")
		}
	}
	if p.MaxCPU > 0 {
		if need(has("cpu"), "max_cpu (no cpu cgroup controller)") {
			rep.Limits["max_cpu"] = Limit{Value: p.MaxCPU, Via: cgVia, Note: "percent of one CPU, throttled"}
		}
	}
	if p.MaxCPUTime > 0 {
		via := "rlimit_cpu"
		if has("cpuacct") || (f.Cgroup != nil && f.Cgroup.Version == 2) {
			via = "rlimit_cpu+" + cgVia
		}
		rep.Limits["max_cpu_time"] = Limit{Seconds: p.MaxCPUTime, Via: via}
	}
	if p.MaxOpenFiles > 0 {
		rep.Limits["max_open_files"] = Limit{Value: p.MaxOpenFiles, Via: "rlimit_nofile", Note: "per process"}
	}
	if p.MaxDisk > 0 {
		rep.Limits["max_disk"] = Limit{Value: p.MaxDisk, Via: "rlimit_fsize", Note: "largest file the run may write"}
	}
	if len(missing) > 0 {
		if !p.AllowDegraded {
			sb.Close()
			return nil, errorf(KindIsolation, "isolation unavailable: %s (pass allow_degraded to run without it)", strings.Join(missing, "; "))
		}
		for _, m := range missing {
			rep.Degraded = append(rep.Degraded, "not applied: "+m)
		}
	}
	rep.Disabled = f.Disabled
	sb.env = baseEnv(p)
	var asLimit uint64
	if rep.Limits["max_memory"].Via == "rlimit_as" {
		asLimit = uint64(p.MaxMemory)
	}
	zs := &spawn.ZygoteSpec{NewPidNS: sb.pidNS, NewUserNS: sb.userNS, LandlockFD: -1,
		ASLimit: asLimit, Cookie: cloneCookie(), DropCaps: f.Root}
	if f.Root {
		// pid 1 of each run needs these until it drops everything before the target
		zs.KeepCaps = 1<<unix.CAP_SETPCAP | 1<<unix.CAP_SYS_ADMIN
		if p.UID != nil {
			zs.KeepCaps |= 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID
		}
	}
	if sb.ruleset != nil {
		zs.LandlockFD = sb.ruleset.FD
	}
	if sb.bpf != nil {
		zs.BPF = sb.bpf.BPF
	}
	rl := func(res int, v int64) {
		zs.Rlimits = append(zs.Rlimits, spawn.Rlimit{Resource: res, Cur: uint64(v), Max: uint64(v)})
	}
	if p.MaxOpenFiles > 0 {
		rl(unix.RLIMIT_NOFILE, p.MaxOpenFiles)
	}
	if p.MaxDisk > 0 {
		rl(unix.RLIMIT_FSIZE, p.MaxDisk)
	}
	rl(unix.RLIMIT_CORE, 0) // no core dumps of sandbox memory
	if f.Cgroup != nil && limits.Needed() {
		cg, err := cgroup.New(f.Cgroup, limits)
		if err != nil {
			if !p.AllowDegraded {
				sb.Close()
				return nil, errorf(KindIsolation, "isolation unavailable: %v (pass allow_degraded to run without it)", err)
			}
			rep.Degraded = append(rep.Degraded, "cgroup: "+err.Error())
		} else {
			sb.cg = cg
			zs.CgroupFDs = cg.ProcFDs()
			rep.Cgroup = fmt.Sprintf("cgroup_v%d", f.Cgroup.Version)
		}
	}
	sb.zspec = zs
	if err := spawn.Ready(); err != nil {
		sb.Close()
		return nil, errorf(KindIsolation, "isolation unavailable: preparing sandtrap-init: %v", err)
	}
	liveMu.Lock()
	live[sb] = struct{}{}
	liveMu.Unlock()
	return sb, nil
}

// cgroupLimits are the cgroup limits of p; pids.max also counts the zygote and each
// run's pid 1.
func cgroupLimits(p *policy.Policy) cgroup.Limits {
	procs := p.MaxProcesses
	if procs > 0 {
		procs += 2
	}
	return cgroup.Limits{Memory: p.MaxMemory, Processes: procs, CPUPct: p.MaxCPU, CPUTime: p.MaxCPUTime > 0}
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
	s.zspec.CgroupFDs = g.ProcFDs()
	s.mu.Unlock()
	go old.Close() // empty: removing it is no one's wait
	return true
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

func uniq(ps []uint16) []uint16 {
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

func baseEnv(p *policy.Policy) []string {
	env := map[string]string{}
	if p.CleanEnv {
		env["PATH"] = DefaultPath
	} else {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	for k, v := range p.Env {
		env[k] = v
	}
	return flatten(env)
}

func flatten(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
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
	s.closeSessions()
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
	s.zmu.Unlock()
	s.ruleset.Close()
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

var (
	cookieOnce sync.Once
	cookie     uint64
)

// cloneCookie is this host process's secret that lets its zygotes (and nothing
// they start) create pid namespaces through the seccomp filter.
func cloneCookie() uint64 {
	cookieOnce.Do(func() {
		var b [8]byte
		for cookie == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				panic("BUG(engine): no randomness: " + err.Error())
			}
			cookie = binary.LittleEndian.Uint64(b[:])
		}
	})
	return cookie
}

// zygote returns the sandbox's zygote, starting it (again, when fresh) if needed.
func (s *Sandbox) zygote(fresh *spawn.Zygote) (*spawn.Zygote, error) {
	s.zmu.Lock()
	defer s.zmu.Unlock()
	if s.zyg != nil && s.zyg == fresh {
		s.zyg.Close()
		s.zyg = nil
	}
	if s.zyg != nil && s.zygGen != confineGen.Load() {
		// started before this process confined itself: it holds none of that
		// confinement, so later runs need a new one (which inherits it)
		s.retired = append(s.retired, s.zyg)
		s.zyg = nil
	}
	if s.zyg == nil {
		gen := confineGen.Load()
		z, err := spawn.StartZygote(s.zspec)
		if err != nil {
			return nil, err
		}
		s.zyg, s.zygGen = z, gen
	}
	return s.zyg, nil
}

// confineGen counts successful Confine calls. Zygotes, sessions and templates
// started before the latest one serve no later run: everything a run or exec starts
// after confine() must be at least as restricted as the host.
var confineGen atomic.Uint64

// Confine applies this sandbox's Landlock ruleset (and, when withSeccomp, its
// seccomp filter) to every thread of the calling process, irreversibly.
func (s *Sandbox) Confine(withSeccomp bool) error {
	plan := confine.Plan{LandlockFD: -1}
	if s.ruleset != nil {
		// psx re-reads /proc/self/task while it walks the threads, some of them
		// already restricted: that one directory stays readable, or the host dies.
		spec := s.llspec
		spec.Readable = append(append([]string{}, spec.Readable...), "/proc/self/task")
		rs, err := landlock.Build(s.features.LandlockABI, spec)
		if err != nil {
			return errorf(KindIsolation, "landlock: %v", err)
		}
		defer rs.Close()
		plan.LandlockFD = rs.FD
	} else if !s.Policy.AllowDegraded {
		return errorf(KindIsolation, "isolation unavailable: landlock")
	}
	if withSeccomp {
		if s.bpf == nil {
			return errorf(KindIsolation, "isolation unavailable: seccomp")
		}
		plan.BPF = s.bpf.BPF
	}
	nullFD() // keep /dev/null reachable for later runs
	if err := spawn.Ready(); err != nil {
		return errorf(KindIsolation, "isolation unavailable: %v", err)
	}
	if err := confine.Check(plan); err != nil {
		return errorf(KindIsolation, "%v", err)
	}
	// Everything started before now holds none of the new confinement, and once it
	// scopes signals this process can no longer kill it: stop it all first.
	stopEverything()
	err := confine.Apply(plan)
	confineGen.Add(1) // even half applied: nothing from before may serve again
	if err != nil {
		return errorf(KindIsolation, "%v", err)
	}
	return nil
}

// live holds every sandbox not yet closed (confine stops all of their processes).
var (
	liveMu sync.Mutex
	live   = map[*Sandbox]struct{}{}
)

// stopEverything kills every run, session and template of this process and retires
// every zygote (for confine).
func stopEverything() {
	closeTemplates()
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
			s.zyg = nil
		}
		for _, z := range s.retired {
			z.Close() // kills its runs' pid 1s (they die with it)
		}
		s.retired = nil
		s.zmu.Unlock()
	}
}
