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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/confine"
	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
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
	KindStageFailed    = "stage_failed" // a pipeline stage other than the last failed (a result)
	KindForked         = "forked_child"
	KindClosed         = "closed"
	KindInternal       = "internal"
)

// Error is an engine error with a stable kind.
type Error struct {
	Kind     string
	Message  string
	Problems []policy.Problem // what was wrong, field by field (invalid_policy, invalid_request)
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
	devices  []string      // device nodes it may open
	viewPlan *fsview.Plan  // its view, where it can have one
	cg       *cgroup.Group // the sandbox's cgroup (nil: no limit needs one)
	cgErr    string        // why it has none although a limit wanted one (allow_degraded)
	env      []string      // base environment (policy applied)
	net      netPlan       // who enforces the network rules (net.go)

	learn func(kind, path string) // learn mode: told every path call (learn.go)

	zmu        sync.Mutex // guards the fields below
	pl         *plan      // the plan for the process's current confinement
	retiredPls []*plan    // plans from before a confine(), kept for their runs in flight
	zyg        *spawn.Zygote
	zygPlan    *plan           // the plan zyg serves
	retired    []*spawn.Zygote // zygotes from before a confine(), kept for their runs in flight

	id       uint64
	inflight sync.WaitGroup
	mu       sync.Mutex
	closed   bool
	running  map[string]map[uint64]func() // cancel tag -> run id -> cancel
	sessions map[uint64]*session
	closers  []func() // OnClose
}

// NewFromMap decodes a policy map, validates it (as data and against this machine,
// every problem reported at once) and compiles it.
func NewFromMap(m map[string]any) (*Sandbox, error) {
	p, probs := policy.Decode(m)
	return build(p, probs)
}

// New validates p against this machine and compiles its plan.
func New(p *policy.Policy) (*Sandbox, error) { return build(p, nil) }

func build(p *policy.Policy, probs policy.Problems, opts ...func(*Sandbox)) (*Sandbox, error) {
	f := kernel.Probe()
	resolvePaths(p, &probs)
	if p.Cwd != "" {
		if st, err := os.Stat(p.Cwd); err != nil {
			probs.Add("cwd", "%s: %v", p.Cwd, unwrapPathErr(err))
		} else if !st.IsDir() {
			probs.Add("cwd", "%s is not a directory", p.Cwd)
		}
	}
	for _, names := range []struct {
		field string
		list  []string
	}{{"extra_allow_syscalls", p.ExtraAllowSyscalls}, {"extra_deny_syscalls", p.ExtraDenySyscalls}} {
		for _, n := range names.list {
			if len(seccomp.Validate(names.field, []string{n})) > 0 {
				probs.Add(names.field, "unknown syscall %q", n)
			}
		}
	}
	if p.UID != nil && !f.Root {
		probs.Add("uid", "switching users needs a host running as root")
	}
	np := planNet(p, &probs)
	devices := devicePaths(p)
	var view *fsview.Plan
	if err := probs.Err(); err == nil {
		var verr error
		if view, verr = fsview.Build(fsview.Spec{Readable: p.FSReadable, Writable: p.FSWritable, Devices: devices}); verr != nil {
			probs.Add("", "%v", verr)
		}
	}
	if err := probs.Err(); err != nil {
		return nil, &Error{Kind: KindInvalidPolicy, Message: err.Error(), Problems: err.Problems}
	}

	nullFD()
	sb := &Sandbox{Policy: p, features: f, running: map[string]map[uint64]func(){},
		devices: devices, viewPlan: view, env: baseEnv(p), net: np}
	if limits := cgroupLimits(p); f.Cgroup != nil && limits.Needed() {
		cg, err := cgroup.New(f.Cgroup, limits)
		if err != nil {
			if !p.AllowDegraded {
				return nil, errorf(KindIsolation, "isolation unavailable: %v (pass allow_degraded to run without it)", err)
			}
			sb.cgErr = err.Error()
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

// resolvePaths resolves every fs_* path through its symlinks (Landlock's rules and
// the view are about the file reached, so the policy must name it) and checks
// them: allowed paths must exist, and writable ones be on a writable mount; a
// denied path must exist and lie inside an allowed tree, or it would deny nothing.
func resolvePaths(p *policy.Policy, probs *policy.Problems) {
	resolve := func(field string, list []string, mustExist string) []string {
		out := make([]string, 0, len(list))
		for _, path := range list {
			real, err := filepath.EvalSymlinks(path)
			if err != nil {
				probs.Add(field, "%s: %v%s", path, unwrapPathErr(err), mustExist)
				continue
			}
			out = append(out, real)
		}
		return out
	}
	p.FSReadable = resolve("fs_readable", p.FSReadable, "")
	p.FSWritable = resolve("fs_writable", p.FSWritable, "")
	p.FSDenied = resolve("fs_denied", p.FSDenied, " (a denied path must exist: check its spelling)")
	for _, w := range p.FSWritable {
		if fsview.ReadOnlyMount(w) {
			probs.Add("fs_writable", "%s is on a read-only mount", w)
		}
	}
	allowed := append(append([]string{}, p.FSReadable...), p.FSWritable...)
	for _, d := range p.FSDenied {
		inside := false
		for _, a := range allowed {
			if policy.Within(d, a) {
				inside = true
			}
			if d != a && policy.Within(a, d) {
				probs.Add("fs_denied", "%s contains %s, which is granted: deny a narrower path", d, a)
			}
		}
		if !inside {
			probs.Add("fs_denied", "%s lies outside every readable and writable tree: it would deny nothing", d)
		}
	}
}

// devicePaths are the device nodes a sandbox may open: the harmless ones every
// program uses, and those its policy names directly (a device inside a granted
// directory is not openable: the view mounts everything nodev).
func devicePaths(p *policy.Policy) []string {
	devs := append([]string{}, DevicePaths...)
	for _, path := range append(append([]string{}, p.FSReadable...), p.FSWritable...) {
		if fsview.IsDevice(path) {
			devs = append(devs, path)
		}
	}
	return devs
}

// userSysctls bound what one sandbox can take of the host user's per-user kernel
// objects (its user namespace counts them for all its runs).
func userSysctls() []spawn.Sysctl {
	limit := func(name string, own, hostShare int64) spawn.Sysctl {
		v := own
		if b, err := os.ReadFile("/proc/sys/fs/inotify/" + strings.TrimPrefix(name, "max_inotify_")); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n/hostShare < v {
				v = max(n/hostShare, 1)
			}
		}
		return spawn.Sysctl{Path: "/proc/sys/user/" + name, Value: strconv.FormatInt(v, 10)}
	}
	return []spawn.Sysctl{
		limit("max_inotify_instances", InotifyInstances, 8),
		limit("max_inotify_watches", InotifyWatches, 4),
		{Path: "/proc/sys/user/max_user_namespaces", Value: "0"},
		{Path: "/proc/sys/user/max_fanotify_groups", Value: "0"},
	}
}

// userShares are the rlimits that bound one sandbox's share of the host user's
// pending signals and POSIX message queue bytes: an eighth of this process's own,
// as for inotify.
func userShares() []spawn.Rlimit {
	var out []spawn.Rlimit
	for _, res := range []int{unix.RLIMIT_SIGPENDING, unix.RLIMIT_MSGQUEUE} {
		var rl unix.Rlimit
		if unix.Getrlimit(res, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
			continue
		}
		v := max(rl.Cur/8, 1)
		out = append(out, spawn.Rlimit{Resource: res, Cur: v, Max: v})
	}
	return out
}

// Per-sandbox caps on the host user's inotify budget (at most an eighth of its
// instances and a quarter of its watches).
const (
	InotifyInstances = 16
	InotifyWatches   = 16384
)

// helperProcesses is what a process limit allows beyond max_processes: sandtrap's
// zygote, the next run's pid 1 it keeps made ahead, and one run's pid 1 (each
// further concurrent run's pid 1 counts against the limit).
const helperProcesses = 3

// cgroupLimits are the cgroup limits of p; pids.max also counts sandtrap's own
// processes (helperProcesses).
func cgroupLimits(p *policy.Policy) cgroup.Limits {
	procs := p.MaxProcesses
	if procs > 0 {
		procs += helperProcesses
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
	s.runClosers()
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
	s.pl.close()
	for _, pl := range s.retiredPls {
		pl.close()
	}
	s.pl, s.retiredPls = nil, nil
	s.zmu.Unlock()
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

// zygote returns the sandbox's zygote (started, again when fresh, if needed) and
// the plan it serves.
func (s *Sandbox) zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan, error) {
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
		zs := *pl.zspec
		if cg := s.group(); cg != nil {
			zs.CgroupFDs = cg.ProcFDs()
		}
		z, err := spawn.StartZygote(&zs)
		if err != nil {
			return nil, nil, err
		}
		if z.Listener >= 0 {
			// the zygote's supervisor: every trapped call of every run of it
			sup, err := supervise.Start(z.Listener, pl.supervise)
			if err != nil {
				z.Close()
				return nil, nil, errorf(KindIsolation, "isolation unavailable: the supervisor: %v", err)
			}
			z.OnClose(sup.Close)
			addSupervisor(z, sup, pl.pidNS)
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
	plan := confine.Plan{LandlockFD: -1, BlocksNamespaces: withSeccomp}
	if cur.ruleset != nil {
		// psx re-reads /proc/self/task while it walks the threads, some of them
		// already restricted: that one directory stays readable, or the host dies.
		spec := cur.llspec
		spec.Readable = append(append([]string{}, spec.Readable...), "/proc/self/task")
		spec.Denied = append(append([]string{}, spec.Denied...), unnamedDevices(spec)...) // no nodev view here
		rs, err := landlock.Build(s.features.LandlockABI, spec)
		if err != nil {
			return errorf(KindIsolation, "landlock: %v", err)
		}
		defer rs.Close()
		plan.LandlockFD = rs.FD
	} else if !s.Policy.AllowDegraded {
		return errorf(KindIsolation, "isolation unavailable: landlock")
	}
	// The filter: the sandbox's (withSeccomp), or by default what the policy says
	// about sockets and the file calls Landlock does not govern; never the traps
	// (this process has no supervisor of its own: they would answer ENOSYS).
	if cur.bpf == nil {
		if withSeccomp || !s.Policy.AllowDegraded {
			return errorf(KindIsolation, "isolation unavailable: seccomp")
		}
	} else {
		if cur.supervise.Net != nil {
			return errorf(KindIsolation, "isolation unavailable: confine() has no supervisor, which network rules by destination (addresses, UDP or ICMP rules, net_deny) need; only port rules for any host can confine this process")
		}
		cfg := cur.sccfg
		cfg.Traps, cfg.Confine = nil, !withSeccomp
		// no supervisor here to refuse a listen that would autobind: without bind
		// ports (and unix sockets, which listen too), listen is refused outright
		cfg.NoListen = !cfg.NoInet && len(s.Policy.NetAllowBind) == 0 && !cfg.AllowUnix
		prog, err := seccomp.Compile(cfg)
		if err != nil {
			return errorf(KindIsolation, "seccomp: %v", err)
		}
		plan.BPF = prog.BPF
	}
	nullFD() // keep /dev/null reachable for later runs
	if err := spawn.Ready(); err != nil {
		return errorf(KindIsolation, "isolation unavailable: %v", err)
	}
	if err := confine.Check(plan, ownChildren()); err != nil {
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
			s.zyg, s.zygPlan = nil, nil
		}
		for _, z := range s.retired {
			z.Close() // kills its runs' pid 1s (they die with it)
		}
		s.retired = nil
		s.zmu.Unlock()
	}
}
