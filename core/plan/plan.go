package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"golang.org/x/sys/unix"
)

// Plan is what a sandbox enforces for the process's current confinement (a host
// that confined itself cannot mount any more, so its later runs need another
// plan): a sequence of named steps (Steps), each with what it applies as typed
// fields and what it could not (its gaps), and the isolation report derived from
// them once (Isolation). Nothing reads the report back: decisions use the fields.
type Plan struct {
	Gen   uint64 // the confinement generation it was made for (engine: confine())
	Steps []Step // in order: view, landlock, process tree, limits, seccomp, zygote

	// the view step
	View       *fsview.Plan // nil: no view of its own
	Namespaces Namespaces
	// the landlock step
	Ruleset *landlock.Ruleset
	LLSpec  landlock.Spec
	Net     *NetReport // the net plan's part of the report (net.go)
	// the process tree step
	PidNS bool
	// the limits step
	Limits Limits
	// the seccomp step (and the supervisor it hands calls to)
	SCCfg     seccomp.Config
	BPF       *seccomp.Program
	Supervise supervise.Config // what the supervisor of each zygote of this plan enforces
	// the zygote step: the spawn specification that applies it all
	Zygote   *spawn.ZygoteSpec
	Hostname string // the sandbox's own (name), in the zygote's UTS namespace
	// CorePattern: core dumps are allowed (no_coredump=false), written by this
	// kernel.core_pattern; "": no core dumps.
	CorePattern string
	// CPUVia is what pins the run's CPUs (cpu_cores, num_cpus): "sched_setaffinity"
	// or "cpuset_cgroup_v1|2" (the affinity too); cpuFiles: the view shows them.
	CPUVia   string
	cpuFiles []string
	cpuInfo  *spawn.FileInode // laid over each run's /proc/cpuinfo
	// NoSupervisor: no_supervisor, the filter hands nothing on (nor may handlers)
	NoSupervisor bool
	gpu          *GPUReport

	disabled []string // features the test hook turned off (kernel.Features.Disabled)
	// protections: what became of each Landlock protection (Prot*); missingProt:
	// the protection of each missing entry of the landlock step
	protections map[string]string
	missingProt map[string]string
	tableFDs    []int // O_PATH fds of the Landlock table's paths (runs with their own /proc)
	report      Isolation
}

// Step names, in their order in a plan.
const (
	StepView     = "view"
	StepLandlock = "landlock"
	StepTree     = "process_tree"
	StepLimits   = "limits"
	StepSeccomp  = "seccomp"
	StepZygote   = "zygote"
)

// Step is one named step of a plan and what it could not do: Missing, a
// protection asked for that cannot be applied (it fails the plan unless
// allow_degraded, and is then reported degraded); Degraded, one applied weaker
// than asked; NotApplied, hardening this kernel or process lacks.
type Step struct {
	Name       string
	Missing    []string
	Degraded   []string
	NotApplied []string
}

// Namespaces are the namespaces of the sandbox and of each run.
type Namespaces struct {
	User     bool // the sandbox's own user namespace
	Mount    bool // the sandbox's own mount namespace (with View)
	IPC      bool // each run's own IPC namespace
	Unmapped bool // a user namespace that maps no id (a host without a view)
	HideProc bool // no /proc of each run's own: the host's is carved out of the grants
}

// Mechanism is what enforces a limit.
type Mechanism string

// The mechanisms of limits besides the cgroup's ("cgroup_v1", "cgroup_v2").
const (
	RlimitAS     Mechanism = "rlimit_as"
	RlimitNproc  Mechanism = "rlimit_nproc"
	RlimitNofile Mechanism = "rlimit_nofile"
	RlimitFsize  Mechanism = "rlimit_fsize"
)

// Limits are the limits step: each limit asked for and what enforces it.
type Limits struct {
	Cgroup    string // "" | cgroup_v1 | cgroup_v2: the sandbox's cgroup
	Memory    Mechanism
	Processes Mechanism // "": not enforced
	CPU       Mechanism
	CPUTime   Mechanism
	OpenFiles Mechanism
	Disk      Mechanism
}

// Close releases the plan's ruleset and descriptors (nil: nothing).
func (pl *Plan) Close() {
	if pl == nil {
		return
	}
	pl.Ruleset.Close()
	for _, fd := range pl.tableFDs {
		unix.Close(fd)
	}
	pl.tableFDs = nil
}

// Isolation returns a copy of the plan's report for one run (nil plan: an empty one).
func (pl *Plan) Isolation() *Isolation {
	if pl == nil {
		return &Isolation{Degraded: []string{}}
	}
	c := pl.report
	c.Degraded = append([]string{}, pl.report.Degraded...)
	if pl.report.Protections != nil {
		c.Protections = make(map[string]string, len(pl.report.Protections))
		for k, v := range pl.report.Protections {
			c.Protections[k] = v
		}
	}
	return &c
}

// WithTraps is a copy of pl whose filter hands traps (pl's own and more) to a
// supervisor configured with sup (core/handlers: a zygote for runs whose
// calls the host judges). The copy owns nothing of its own: its ruleset and
// descriptors are pl's (close pl, never the copy).
func (pl *Plan) WithTraps(traps []seccomp.Trap, sup supervise.Config) (*Plan, error) {
	if pl.BPF == nil || pl.Zygote == nil {
		return nil, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: traps need seccomp")
	}
	if pl.NoSupervisor {
		return nil, protocol.Errorf(protocol.KindInvalidRequest, "policy_fn and handlers need the syscall supervisor, which this sandbox's no_supervisor turns off")
	}
	c := *pl
	c.tableFDs = nil
	c.Supervise = sup
	c.SCCfg.Traps = traps
	prog, err := seccomp.Compile(c.SCCfg)
	if err != nil {
		return nil, protocol.Errorf(protocol.KindIsolation, "seccomp: %v", err)
	}
	c.BPF = prog
	zs := *pl.Zygote
	zs.BPF, zs.Listener = prog.BPF, len(prog.Notified) > 0
	c.Zygote = &zs
	if pl.report.Seccomp != nil {
		sr := *pl.report.Seccomp
		sr.Supervised = prog.Notified
		c.report.Seccomp = &sr
	}
	return &c, nil
}

// Missing is every protection the plan's steps could not apply.
func (pl *Plan) Missing() []string {
	var out []string
	for _, st := range pl.Steps {
		out = append(out, st.Missing...)
	}
	return out
}

// compiler holds what the steps of Compile share.
type compiler struct {
	in  *Input
	p   *policy.Policy
	pl  *Plan
	gen uint64
	cur *Step // the step being compiled

	userNS, canMount bool
	cookie           uint64
}

func (c *compiler) step(name string) *Step {
	c.pl.Steps = append(c.pl.Steps, Step{Name: name})
	c.cur = &c.pl.Steps[len(c.pl.Steps)-1]
	return c.cur
}

// need records what as missing from the current step unless ok.
func (c *compiler) need(ok bool, what string) bool {
	if !ok {
		c.cur.Missing = append(c.cur.Missing, what)
	}
	return ok
}

// Compile makes the plan of in for confinement generation gen (0: the host
// process has not confined itself). A protection that cannot be applied fails it
// (isolation_unavailable) unless allow_degraded, and then the report says so.
func Compile(in *Input, gen uint64) (*Plan, error) {
	c := &compiler{in: in, p: in.Policy, pl: &Plan{Gen: gen, disabled: in.Features.Disabled}, gen: gen}
	pl := c.pl
	fail := func(err error) (*Plan, error) {
		pl.Close()
		return nil, err
	}
	var err error
	if c.cookie, err = cloneCookie(); err != nil {
		return fail(err)
	}
	c.view()
	if err := c.chrootView(); err != nil {
		return fail(err)
	}
	if err := c.cowView(); err != nil {
		return fail(err)
	}
	if err := c.cpuView(); err != nil {
		return fail(err)
	}
	if err := c.landlock(); err != nil {
		return fail(err)
	}
	c.tree()
	c.limits()
	if err := c.seccomp(); err != nil {
		return fail(err)
	}
	// the zygote step is the plan's last; a protection missing from any step
	// fails the plan here (before the zygote is specified) unless allow_degraded
	if missing := c.fatal(); len(missing) > 0 {
		return fail(protocol.Errorf(protocol.KindIsolation, "isolation unavailable: %s (pass allow_degraded to run without it)", strings.Join(missing, "; ")))
	}
	if err := c.zygote(); err != nil {
		return fail(err)
	}
	pl.report = pl.derive(c.p)
	return pl, nil
}

// 1. The view: the sandbox's own user and mount namespaces, in which whatever it
// may only read is read-only (its metadata too), devices are usable only where
// named, /proc is its own or hidden. A host that confined itself cannot mount;
// nor can one without user namespaces (unprivileged) or mount_setattr. (A root
// host that switches the target's uid keeps the zygote in its own user
// namespace, which a namespace of the sandbox's would not map: the view is a
// mount namespace alone, and pid 1 switches.)
func (c *compiler) view() {
	p, f, pl, st := c.p, c.in.Features, c.pl, c.step(StepView)
	ns := &pl.Namespaces
	c.userNS = f.UserNS && p.UID == nil
	c.canMount = (c.userNS || (f.Root && f.PidNS)) && f.MountAPI && c.gen == 0
	if c.canMount {
		pl.View = c.in.ViewPlan
		ns.User, ns.Mount, ns.IPC = c.userNS, true, true
		return
	}
	why := "no user namespaces"
	switch {
	case !f.MountAPI:
		why = "the kernel lacks mount_setattr (5.12)"
	case c.gen > 0:
		why = "this process confined itself: Landlock forbids mounting"
	}
	st.NotApplied = append(st.NotApplied, "a view of the filesystem of its own ("+why+
		"): metadata changes and locks through a descriptor are refused everywhere instead, and device nodes inside granted trees are denied")
	if len(c.in.Net.Overlays()) > 0 {
		c.need(false, "http_inject_ca: the trust bundles with the interception CA are laid over in the sandbox's view ("+why+"); give the CA by http_ca_out instead")
	}
	allowed := append(append([]string{}, p.FSReadable...), p.FSWritable...)
	_, err := os.ReadDir("/proc")
	switch {
	case !c.in.ViewPlan.ProcOwn:
	case err != nil && c.gen > 0:
		// this process (confined) cannot read the host's /proc: nor can its sandbox
		st.NotApplied = append(st.NotApplied, "a /proc of each run's own pid namespace ("+why+"): this process cannot read /proc, nor can the sandbox")
	case !slices.Contains(allowed, "/proc") && carvable(allowed, "/proc"):
		// granted only through a tree above it: the host's /proc is carved out instead
		ns.HideProc = true
		st.NotApplied = append(st.NotApplied, "a /proc of each run's own pid namespace ("+why+"): /proc is denied instead")
	default:
		c.need(false, "a /proc of each run's own pid namespace ("+why+")")
	}
	// each run's namespaces need the zygote to hold CAP_SYS_ADMIN: root does; an
	// unprivileged host gets it in a user namespace it cannot even map (confined)
	ns.Unmapped = !f.Root && f.UserNS && p.UID == nil
	ns.IPC = f.PidNS && (f.Root || ns.Unmapped)
	ns.User = ns.Unmapped
	c.need(ns.IPC, "an IPC namespace of each run's own ("+why+")")
}

// 2. Landlock: files always; TCP ports when any are allowed (otherwise seccomp
// refuses inet sockets outright, which holds without Landlock's network rules):
// the floor under the supervisor's checks of destinations (net.go). Each
// protection (policy.Protections) is required where the sandbox needs it: a
// kernel without it fails the plan unless allow_degraded names it (or is true);
// disable leaves it out on any kernel.
func (c *compiler) landlock() error {
	p, f, pl := c.p, c.in.Features, c.pl
	c.step(StepLandlock)
	np := c.in.Net
	pl.Net = np.report
	pl.protections = map[string]string{}
	var off uint
	offBit := map[string]uint{policy.ProtFSRefer: landlock.OffRefer, policy.ProtFSTruncate: landlock.OffTruncate,
		policy.ProtNetTCP: landlock.OffNetTCP, policy.ProtFSIoctlDev: landlock.OffIoctlDev,
		policy.ProtAbstractScope: landlock.OffAbstractScope, policy.ProtSignalScope: landlock.OffSignalScope}
	fsOff := p.Disables(policy.ProtFS)
	for _, pr := range policy.Protections {
		switch {
		case p.Disables(pr.Name) || (fsOff && pr.Name != policy.ProtFS):
			pl.protections[pr.Name] = ProtDisabled
			off |= offBit[pr.Name]
		case pr.Name == policy.ProtNetTCP && !np.wanted:
			pl.protections[pr.Name] = ProtNotNeeded // inet sockets are refused by seccomp
		case f.LandlockABI >= pr.MinABI:
			pl.protections[pr.Name] = ProtEnforced
		case f.LandlockABI == 0 && pr.Name != policy.ProtFS:
			// no Landlock at all: "fs" is the one missing (and degraded with it)
			pl.protections[pr.Name] = ProtDegraded
		default:
			pl.protections[pr.Name] = ProtDegraded
			what := fmt.Sprintf("landlock %s (kernel ABI %d < %d)", pr.Name, f.LandlockABI, pr.MinABI)
			if pr.Name == policy.ProtFS {
				what = "landlock (filesystem rules)"
			}
			c.needProtection(pr.Name, what)
		}
	}
	if fsOff || f.LandlockABI == 0 {
		return nil
	}
	pl.LLSpec = landlock.Spec{
		Readable: p.FSReadable, Writable: p.FSWritable, Denied: p.FSDenied,
		Devices: c.in.Devices, ConnectPorts: np.connectPorts, BindPorts: p.NetAllowBind,
		AnyConnect: np.anyConnect, Scope: true, Off: off,
		View: landlockView(ChrootOf(p)),
	}
	if gp := c.in.GPU; gp != nil {
		// the GPUs left out: carved out of the trees that hold them, view or not
		pl.LLSpec.GPU = gp.granted
		pl.LLSpec.Denied = append(slices.Clone(pl.LLSpec.Denied), gp.deniedIn(append(slices.Clone(p.FSReadable), p.FSWritable...))...)
	}
	if pl.View == nil {
		// no nodev view: a device node inside a granted tree is carved out
		pl.LLSpec.Denied = append(slices.Clone(pl.LLSpec.Denied), UnnamedDevices(pl.LLSpec)...)
		if pl.Namespaces.HideProc {
			pl.LLSpec.Denied = append(pl.LLSpec.Denied, "/proc")
		}
	}
	rs, err := landlock.Build(f.LandlockABI, pl.LLSpec)
	if err != nil {
		return protocol.Errorf(protocol.KindIsolation, "landlock: %v", err)
	}
	pl.Ruleset = rs
	return nil
}

// What became of each Landlock protection (the report's "protections").
const (
	ProtEnforced  = "enforced"
	ProtDegraded  = "degraded"   // the kernel lacks it; allow_degraded let the sandbox run without it
	ProtDisabled  = "disabled"   // disable named it (or "fs")
	ProtNotNeeded = "not_needed" // net_tcp without network rules: seccomp refuses inet sockets
)

// needProtection records what as missing from the current step: protection
// prot, which fails the plan unless allow_degraded names it.
func (c *compiler) needProtection(prot, what string) {
	c.need(false, what)
	if c.pl.missingProt == nil {
		c.pl.missingProt = map[string]string{}
	}
	c.pl.missingProt[what] = prot
}

// fatal is every missing protection allow_degraded does not cover.
func (c *compiler) fatal() []string {
	if c.p.AllowDegraded {
		return nil
	}
	var out []string
	for _, m := range c.pl.Missing() {
		if prot, ok := c.pl.missingProt[m]; ok && c.p.Degradable(prot) {
			continue
		}
		out = append(out, m)
	}
	return out
}

// 3. The process tree: a pid namespace per run kills every descendant with the
// main process and when the host dies.
func (c *compiler) tree() {
	f, pl := c.in.Features, c.pl
	c.step(StepTree)
	pl.PidNS = f.PidNS && (f.Root || c.canMount || pl.Namespaces.Unmapped)
	c.need(pl.PidNS, "process-tree containment (no pid namespace)")
}

// 4. Limits, and what enforces each.
func (c *compiler) limits() {
	p, f, pl, st := c.p, c.in.Features, c.pl, c.step(StepLimits)
	lim := &pl.Limits
	cg := c.in.Group
	var cgVia Mechanism
	if f.Cgroup != nil {
		cgVia = Mechanism(fmt.Sprintf("cgroup_v%d", f.Cgroup.Version))
	}
	has := func(ctl string) bool {
		if f.Cgroup == nil || cg == nil {
			return false
		}
		_, ok := f.Cgroup.Dirs[ctl]
		return ok
	}
	if c.in.GroupErr != "" {
		st.Degraded = append(st.Degraded, "cgroup: "+c.in.GroupErr)
	}
	if cg != nil {
		lim.Cgroup = string(cgVia)
		for _, n := range cg.Notes() {
			c.need(false, n)
		}
	}
	if p.MaxMemory > 0 {
		if has("memory") {
			lim.Memory = cgVia
		} else {
			lim.Memory = RlimitAS
			st.Degraded = append(st.Degraded, "max_memory enforced per process by RLIMIT_AS (no memory cgroup)")
		}
	}
	if p.MaxProcesses > 0 {
		switch {
		case has("pids"):
			lim.Processes = cgVia
		case !f.Root && c.canMount && c.userNS:
			lim.Processes = RlimitNproc
		case p.MaxProcessesDefault:
			// not asked for: the default limit holds where it can
			st.Degraded = append(st.Degraded, fmt.Sprintf("max_processes: the default limit of %d is not enforced (no pids cgroup, and RLIMIT_NPROC needs the sandbox's own user namespace and a host that is not root); give max_processes to require a limit", p.MaxProcesses))
		default:
			c.need(false, "max_processes (no pids cgroup, and RLIMIT_NPROC needs the sandbox's own user namespace and a host that is not root)")
		}
	}
	if p.MaxCPU > 0 && c.need(has("cpu"), "max_cpu (no cpu cgroup controller)") {
		lim.CPU = cgVia
	}
	if p.MaxCPUTime > 0 {
		lim.CPUTime = "rlimit_cpu+proc_tree"
		if cg != nil && cg.HasCPUTime() {
			lim.CPUTime = "rlimit_cpu+" + cgVia
		}
	}
	if p.MaxOpenFiles > 0 {
		lim.OpenFiles = RlimitNofile
	}
	if p.MaxDisk > 0 {
		lim.Disk = diskMechanism(p) // cow.go
	}
}

// 5. seccomp: the base deny list always, and what the supervisor judges (core/
// supervise: locks on what is read-only, listen without bind, inotify outside the
// policy, destinations). Without a view, locks are refused by the filter itself.
func (c *compiler) seccomp() error {
	p, f, pl := c.p, c.in.Features, c.pl
	c.step(StepSeccomp)
	np := c.in.Net
	if !c.need(f.Seccomp, "seccomp") {
		return nil
	}
	if pl.Ruleset != nil {
		for _, pr := range pl.Ruleset.Table.Paths {
			pl.Supervise.Allowed = append(pl.Supervise.Allowed, pr.Path)
		}
	}
	pl.Supervise.ListenNeedsBind = np.wanted
	pl.Supervise.Ports = np.ports
	pl.Supervise.HTTP = np.redirect()
	pl.Supervise.Learn = c.in.Learn
	if p.RandomSeed != nil || p.TimeStart != nil || p.DeterministicDirs {
		pl.Supervise.Det = &supervise.Determinism{Seed: p.RandomSeed, TimeStart: p.TimeStart, SortDirs: p.DeterministicDirs}
	}
	if p.NoSupervisor && c.in.Learn != nil {
		return protocol.Errorf(protocol.KindInvalidRequest, "learn mode needs the syscall supervisor, which no_supervisor turns off")
	}
	pl.NoSupervisor = p.NoSupervisor
	if np.sup != nil {
		pl.Supervise.Net = np.sup
		pl.Supervise.AbstractScoped = pl.Ruleset != nil && pl.protections[policy.ProtAbstractScope] == ProtEnforced
		// a send performed for the caller must not also be restarted by it
		pl.Supervise.Killable = np.sup.WatchesSends()
	}
	var traps []supervise.Trap
	for _, t := range supervise.Traps(pl.Supervise) {
		if (t.Syscall == "flock" || t.Syscall == "fcntl") && pl.View == nil {
			continue // locks are refused outright (NoMetadata)
		}
		if t.Syscall == "fcntl" {
			// leases are refused outright (a lease makes a host writer wait)
			t.Values = slices.DeleteFunc(slices.Clone(t.Values), func(v uint64) bool { return v == unix.F_SETLEASE })
		}
		traps = append(traps, t)
	}
	pl.SCCfg = seccomp.Config{
		NoInet: !np.wanted, AllowUDP: np.udp, AllowICMP: np.icmp, AllowUnix: p.NetAllowUnix,
		ExtraAllow: p.ExtraAllowSyscalls, ExtraDeny: append(slices.Clone(p.ExtraDenySyscalls), c.knobDenied()...),
		// no TCP Fast Open where connect is limited (its implicit connect is
		// seen by neither Landlock nor the supervisor's connect)
		CloneCookie: c.cookie, RestrictConnect: np.wanted && (!np.anyConnect || np.sup != nil),
		NoSourceRoute: np.sup != nil,
		MaxDisk:       p.MaxDisk > 0 && fileSizeLimit(p), NoSysVMemory: pl.Limits.Memory == RlimitAS, NoMetadata: pl.View == nil,
		Traps: traps, RefuseTraps: p.NoSupervisor,
	}
	prog, err := seccomp.Compile(pl.SCCfg)
	if err != nil {
		return protocol.Errorf(protocol.KindIsolation, "seccomp: %v", err)
	}
	pl.BPF = prog
	return nil
}

// 6. The zygote that applies it all.
func (c *compiler) zygote() error {
	p, f, pl, st := c.p, c.in.Features, c.pl, c.step(StepZygote)
	ns := pl.Namespaces
	// The hostname: a UTS namespace the zygote makes (it holds CAP_SYS_ADMIN in the
	// sandbox's user namespace, or as root), which every run shares.
	zygoteUserNS := (pl.View != nil && c.userNS) || ns.Unmapped
	if p.Name != "" && c.need(zygoteUserNS || f.Root, "a hostname of its own (name): a UTS namespace needs a user namespace of the sandbox's or a root host") {
		pl.Hostname = p.Name
	}
	zs := &spawn.ZygoteSpec{RulesetFD: -1, Cookie: c.cookie, NewPidNS: pl.PidNS,
		NewIPCNS: ns.IPC, UserNS: zygoteUserNS, Unmapped: ns.Unmapped, Hostname: pl.Hostname,
		MountNS: pl.View != nil && !c.userNS,
		View:    pl.View, DropGroups: f.Root,
		// pid 1 of each run needs these (in the sandbox's user namespace) until it
		// drops everything before the target: new namespaces, the /proc mount, and
		// emptying the bounding set
		KeepCaps: 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SETPCAP}
	switch {
	case !pl.PidNS:
		zs.KeepCaps = 0
	case p.UID != nil:
		zs.KeepCaps |= 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID
		zs.SetIDs, zs.UID, zs.GID = true, *p.UID, *p.GID
	}
	if pl.Limits.Memory == RlimitAS {
		zs.ASLimit = uint64(p.MaxMemory)
	}
	if zs.UserNS && !ns.Unmapped {
		zs.Sysctls = userSysctls()
		zs.Shares = userShares()
	} else {
		st.NotApplied = append(st.NotApplied, fmt.Sprintf("a per-sandbox share of the host user's inotify instances and watches (%d, %d), pending signals and message queue bytes: it needs the sandbox's own user namespace", InotifyInstances, InotifyWatches))
	}
	if pl.Ruleset != nil {
		zs.RulesetFD = pl.Ruleset.FD
		if pl.View != nil && (pl.View.ProcOwn || pl.View.DevOwn || p.Workdir != "") {
			// a rule for each run's /proc can only be made in the run: pid 1 builds
			// its ruleset from the table (the O_PATH fds of its paths live with the plan)
			if n := len(pl.Ruleset.Table.Paths) + len(pl.Ruleset.Table.Ports); n > spawn.MaxLandlockRules {
				// each entry beside the way from a grant down to a denied path is a
				// rule of its own: a denied path deep in a crowded tree makes many
				var probs policy.Problems
				probs.Add("fs_denied", "the grants and denied paths expand to %d Landlock rules, more than %d: every entry beside the way from a granted tree down to a denied path is a rule of its own; grant narrower trees or deny a path nearer to a grant", n, spawn.MaxLandlockRules)
				return &protocol.Error{Kind: protocol.KindInvalidPolicy, Message: policy.FormatProblems("invalid policy", probs), Problems: probs}
			}
			if err := pl.keepLandlockTable(zs); err != nil {
				return protocol.Errorf(protocol.KindIsolation, "landlock: %v", err)
			}
		}
	}
	if pl.View != nil && pl.View.DevOwn {
		if !pl.PidNS {
			return protocol.Errorf(protocol.KindIsolation, "BUG(plan): a chroot's /dev of each run's own without a pid 1 per run")
		}
		zs.Dev = &spawn.Dev{ShmSize: DevShmSize}
		if p.MaxDisk > 0 {
			zs.Dev.ShmSize = uint64(p.MaxDisk)
		}
		if t := zs.Landlock; t != nil {
			zs.Dev.DirRights = ll.AccessFSReadDir & t.HandledFS
			zs.Dev.PtsRights = t.Rights(landlock.GPUNode, false) | zs.Dev.DirRights // read, write, ioctl on the run's ptys
			zs.Dev.ShmRights = t.DirRights(landlock.ReadWrite)
		}
	}
	if p.Workdir != "" {
		c.cowZygote(zs)
		zs.COW.Storage = p.FSStorage
	}
	if pl.BPF != nil {
		zs.BPF = pl.BPF.BPF
		zs.Listener = len(pl.BPF.Notified) > 0
		zs.Killable = pl.Supervise.Killable
	}
	rl := func(res int, v int64) {
		zs.Rlimits = append(zs.Rlimits, spawn.Rlimit{Resource: res, Cur: uint64(v), Max: uint64(v)})
	}
	if p.MaxDisk > 0 && fileSizeLimit(p) {
		rl(unix.RLIMIT_FSIZE, p.MaxDisk)
	}
	if pl.Limits.Processes == RlimitNproc {
		// counted per user in the sandbox's user namespace: every run together
		rl(unix.RLIMIT_NPROC, p.MaxProcesses+helperProcesses)
	}
	if err := c.processKnobs(zs, rl); err != nil {
		return err
	}
	pl.Zygote = zs
	return nil
}

// derive is the isolation report of the plan's steps.
func (pl *Plan) derive(p *policy.Policy) Isolation {

	rep := Isolation{Degraded: []string{}, Net: pl.Net, Disabled: pl.disabled, Protections: pl.protections,
		UserNamespace: pl.Namespaces.User, MountNamespace: pl.Namespaces.Mount, IPCNamespace: pl.Namespaces.IPC,
		PidNamespace: pl.PidNS, NoNewPrivs: true, Capabilities: "dropped", Cgroup: pl.Limits.Cgroup, Workdir: p.Workdir,
		Limits: map[string]Limit{}}
	if pl.View != nil {
		rep.View = pl.View.Mounts
	}
	for _, st := range pl.Steps {
		rep.Degraded = append(rep.Degraded, st.Degraded...)
		rep.NotApplied = append(rep.NotApplied, st.NotApplied...)
	}
	for _, m := range pl.Missing() {
		rep.Degraded = append(rep.Degraded, "not applied: "+m)
	}
	if pl.Ruleset != nil {
		r := pl.Ruleset.Report
		rep.Landlock = &r
	}
	rep.TreeKill = "process_group"
	if pl.PidNS {
		rep.TreeKill = "pid_namespace"
	}
	if p.UID != nil {
		rep.UID, rep.GID = p.UID, p.GID
	}
	rep.Hostname = pl.Hostname
	rep.GPU = pl.gpu
	rep.Process = ProcessReport{ASLR: true, HugePages: true, CoreDumps: "off"}
	if z := pl.Zygote; z != nil {
		rep.Process.ASLR = !(z.SetPersonality && z.Personality&addrNoRandomize != 0)
		rep.Process.HugePages = !z.NoTHP
		if len(z.CPUs) > 0 {
			rep.Process.CPUCores, rep.Process.CPUVia = z.CPUs, pl.CPUVia
		}
		if p.NumCPUs > 0 {
			rep.Process.NumCPUs = len(z.CPUs)
			rep.Process.CPUFiles = pl.cpuFiles
		}
	}
	if pl.CorePattern != "" {
		rep.Process.CoreDumps = pl.CorePattern
	}
	if d := pl.Supervise.Det; d != nil {
		rep.Determinism = determinismReport(d)
	}
	lim := pl.Limits
	if lim.Memory != "" {
		l := Limit{Value: p.MaxMemory, Via: string(lim.Memory)}
		if lim.Memory == RlimitAS {
			l.Note = "per process address space: kernel memory (socket and pipe buffers) and files in tmpfs are not counted; SysV shared memory and message queues are refused"
		}
		rep.Limits["max_memory"] = l
	}
	if lim.Processes != "" {
		l := Limit{Value: p.MaxProcesses, Via: string(lim.Processes)}
		if lim.Processes == RlimitNproc {
			l.Note = "counts every process of the sandbox in its user namespace, sandtrap's zygote, its next run's pid 1 made ahead and each run's pid 1 included (+3 allowed)"
		}
		rep.Limits["max_processes"] = l
	}
	if lim.CPU != "" {
		rep.Limits["max_cpu"] = Limit{Value: p.MaxCPU, Via: string(lim.CPU), Note: "percent of one CPU, throttled"}
	}
	if lim.CPUTime != "" {
		rep.Limits["max_cpu_time"] = Limit{Seconds: p.MaxCPUTime, Via: string(lim.CPUTime), Note: "the whole run's CPU time, checked every 20 ms"}
	}
	if lim.OpenFiles != "" {
		rep.Limits["max_open_files"] = Limit{Value: p.MaxOpenFiles, Via: string(lim.OpenFiles), Note: "per process"}
	}
	if lim.Disk != "" {
		rep.Limits["max_disk"] = Limit{Value: p.MaxDisk, Via: string(lim.Disk), Note: diskNote(p)}
	}
	if pl.BPF != nil {
		cfg := pl.SCCfg
		rep.Seccomp = &SeccompReport{Enforced: true, Action: "EPERM", Denied: pl.BPF.Denied, Supervised: pl.BPF.Notified,
			ForeignArch: "kill", Unreviewed: fmt.Sprintf("ENOSYS from syscall %d on", seccomp.Reviewed),
			InetSockets: !cfg.NoInet, UDP: cfg.AllowUDP, ICMP: cfg.AllowICMP, UnixSockets: cfg.AllowUnix,
			NoSupervisor: cfg.RefuseTraps}
		if cfg.RefuseTraps {
			rep.Seccomp.Supervised, rep.Seccomp.Refused = nil, refusedTraps(cfg.Traps)
		}
	}
	return rep
}

// keepLandlockTable opens the paths of the plan's Landlock table for its zygote
// (runs with a /proc of their own build their ruleset from it).
func (pl *Plan) keepLandlockTable(zs *spawn.ZygoteSpec) error {
	t := pl.Ruleset.Table
	kept := t.Paths[:0:0]
	for _, pr := range t.Paths {
		fd, err := landlock.OpenRulePath(pr.Path)
		if err == landlock.ErrGone {
			continue // removed, or made a symlink, since it was listed: it allows nothing
		}
		if err != nil {
			return fmt.Errorf("%s: %v", pr.Path, err)
		}
		kept = append(kept, pr)
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %v", pr.Path, err)
		}
		pl.tableFDs = append(pl.tableFDs, high)
	}
	t.Paths = kept
	zs.Landlock, zs.LandlockFDs, zs.ProcRights = t, pl.tableFDs, t.DirRights(landlock.ReadOnly)
	return nil
}

// UnnamedDevices are the device nodes under /dev that a grant of s covers without
// naming them (for a sandbox without a nodev view).
func UnnamedDevices(s landlock.Spec) []string {
	covered := false
	for _, a := range append(append([]string{}, s.Readable...), s.Writable...) {
		if policy.Within("/dev", a) {
			covered = true
		}
	}
	if !covered {
		return nil
	}
	named := map[string]bool{}
	for _, d := range append(slices.Clone(s.Devices), s.GPU...) {
		named[d] = true
	}
	var out []string
	filepath.WalkDir("/dev", func(path string, d os.DirEntry, err error) error {
		if err != nil || len(out) > 4096 {
			return filepath.SkipDir
		}
		if d.Type()&(os.ModeDevice|os.ModeCharDevice) != 0 && !named[path] {
			out = append(out, path)
		}
		return nil
	})
	allowed := append(append([]string{}, s.Readable...), s.Writable...)
	if len(out) > 0 && !carvable(allowed, "/dev") {
		return nil // this process cannot list the way there: nor can the sandbox, nested in it, reach them
	}
	return out
}

// carvable reports whether path can be carved out of the allowed trees that hold
// it: Landlock can only allow, so every directory on the way from such a tree
// down to path must be listable by this process (see landlock.expand).
func carvable(allowed []string, path string) bool {
	for _, a := range allowed {
		if a == path || !policy.Within(path, a) {
			continue
		}
		for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
			if _, err := os.ReadDir(dir); err != nil {
				return false
			}
			if dir == a || dir == "/" {
				break
			}
		}
	}
	return true
}

// DevShmSize is the size of a chroot's /dev/shm (each run's own tmpfs) without
// max_disk.
const DevShmSize = 64 << 20
