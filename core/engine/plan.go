package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"golang.org/x/sys/unix"
)

// plan is what a sandbox enforces for the process's current confinement (a host
// that confined itself cannot mount any more, so its later runs need another
// plan): the steps below, in order, and the report derived from them.
type plan struct {
	gen      uint64 // confineGen it was made for
	report   Isolation
	ruleset  *landlock.Ruleset
	llspec   landlock.Spec
	sccfg    seccomp.Config
	bpf      *seccomp.Program
	view     *fsview.Plan // nil: no view of its own
	zspec    *spawn.ZygoteSpec
	pidNS    bool
	tableFDs []int // O_PATH fds of the Landlock table's paths (runs with their own /proc)
	// supervise is what the supervisor of each zygote of this plan enforces
	supervise supervise.Config
}

func (pl *plan) close() {
	if pl == nil {
		return
	}
	pl.ruleset.Close()
	closeAll(pl.tableFDs...)
	pl.tableFDs = nil
}

// compile makes the plan for confinement generation gen. A protection that cannot
// be applied fails it (isolation_unavailable) unless allow_degraded, and then the
// report says so.
func (s *Sandbox) compile(gen uint64) (*plan, error) {
	p, f := s.Policy, s.features
	pl := &plan{gen: gen}
	rep := &pl.report
	rep.Degraded = []string{}
	var missing []string
	need := func(ok bool, what string) bool {
		if !ok {
			missing = append(missing, what)
		}
		return ok
	}
	fail := func(err error) (*plan, error) {
		pl.close()
		return nil, err
	}

	// 1. The view: the sandbox's own user and mount namespaces, in which whatever
	// it may only read is read-only (its metadata too), devices are usable only
	// where named, /proc is its own or hidden. A host that confined itself cannot
	// mount; nor can one without user namespaces (unprivileged) or mount_setattr.
	// (A root host that switches the target's uid keeps the zygote in its own user
	// namespace, which a namespace of the sandbox's would not map: the view is a
	// mount namespace alone, and pid 1 switches.)
	userNS := f.UserNS && p.UID == nil
	hideProc, unmapped := false, false
	canMount := (userNS || (f.Root && f.PidNS)) && f.MountAPI && gen == 0
	if canMount {
		pl.view = s.viewPlan
		rep.UserNamespace, rep.MountNamespace, rep.IPCNamespace = userNS, true, true
		rep.View = pl.view.Mounts
	} else {
		why := "no user namespaces"
		switch {
		case !f.MountAPI:
			why = "the kernel lacks mount_setattr (5.12)"
		case gen > 0:
			why = "this process confined itself: Landlock forbids mounting"
		}
		rep.NotApplied = append(rep.NotApplied, "a view of the filesystem of its own ("+why+
			"): metadata changes and locks through a descriptor are refused everywhere instead, and device nodes inside granted trees are denied")
		allowed := append(append([]string{}, p.FSReadable...), p.FSWritable...)
		_, err := os.ReadDir("/proc")
		switch {
		case !s.viewPlan.ProcOwn:
		case err != nil && gen > 0:
			// this process (confined) cannot read the host's /proc: nor can its sandbox
			rep.NotApplied = append(rep.NotApplied, "a /proc of each run's own pid namespace ("+why+"): this process cannot read /proc, nor can the sandbox")
		case !slices.Contains(allowed, "/proc") && carvable(allowed, "/proc"):
			// granted only through a tree above it: the host's /proc is carved out instead
			hideProc = true
			rep.NotApplied = append(rep.NotApplied, "a /proc of each run's own pid namespace ("+why+"): /proc is denied instead")
		default:
			need(false, "a /proc of each run's own pid namespace ("+why+")")
		}
		// each run's namespaces need the zygote to hold CAP_SYS_ADMIN: root does; an
		// unprivileged host gets it in a user namespace it cannot even map (confined)
		unmapped = !f.Root && f.UserNS && p.UID == nil
		rep.IPCNamespace = f.PidNS && (f.Root || unmapped)
		rep.UserNamespace = unmapped
		need(rep.IPCNamespace, "an IPC namespace of each run's own ("+why+")")
	}

	// 2. Landlock: files always; TCP ports when any are allowed (otherwise seccomp
	// refuses inet sockets outright, which holds without Landlock's network rules):
	// the floor under the supervisor's checks of destinations (net.go).
	np := s.net
	anyConnect, connect, netWanted := np.anyConnect, np.connectPorts, np.wanted
	rep.Net = np.report
	if need(f.LandlockABI > 0, "landlock (filesystem rules)") {
		if netWanted {
			need(f.LandlockABI >= 4, fmt.Sprintf("landlock network rules (kernel ABI %d < 4)", f.LandlockABI))
		}
		pl.llspec = landlock.Spec{
			Readable: p.FSReadable, Writable: p.FSWritable, Denied: p.FSDenied,
			Devices: s.devices, ConnectPorts: connect, BindPorts: p.NetAllowBind,
			AnyConnect: anyConnect, Scope: true,
		}
		if pl.view == nil {
			// no nodev view: a device node inside a granted tree is carved out
			pl.llspec.Denied = append(append([]string{}, p.FSDenied...), unnamedDevices(pl.llspec)...)
			if hideProc {
				pl.llspec.Denied = append(pl.llspec.Denied, "/proc")
			}
		}
		rs, err := landlock.Build(f.LandlockABI, pl.llspec)
		if err != nil {
			return fail(errorf(KindIsolation, "landlock: %v", err))
		}
		pl.ruleset = rs
		r := rs.Report
		rep.Landlock = &r
		if f.LandlockABI < 6 {
			rep.NotApplied = append(rep.NotApplied, "landlock scoping of abstract unix sockets and signals (kernel ABI < 6)")
		}
	}

	// 3. The process tree: a pid namespace per run kills every descendant with the
	// main process and when the host dies.
	pl.pidNS = f.PidNS && (f.Root || canMount || unmapped)
	rep.PidNamespace = pl.pidNS
	if pl.pidNS {
		rep.TreeKill = "pid_namespace"
	} else {
		need(false, "process-tree containment (no pid namespace)")
		rep.TreeKill = "process_group"
	}
	rep.NoNewPrivs = true
	rep.Capabilities = "dropped"
	if p.UID != nil {
		rep.UID, rep.GID = p.UID, p.GID
	}

	// 4. Limits, and what enforces each.
	rep.Limits = map[string]Limit{}
	var cgVia string
	if f.Cgroup != nil {
		cgVia = fmt.Sprintf("cgroup_v%d", f.Cgroup.Version)
	}
	has := func(c string) bool {
		if f.Cgroup == nil || s.cg == nil {
			return false
		}
		_, ok := f.Cgroup.Dirs[c]
		return ok
	}
	if s.cgErr != "" {
		rep.Degraded = append(rep.Degraded, "cgroup: "+s.cgErr)
	}
	if s.cg != nil {
		rep.Cgroup = cgVia
		for _, n := range s.cg.Notes() {
			need(false, n)
		}
	}
	if p.MaxMemory > 0 {
		if has("memory") {
			rep.Limits["max_memory"] = Limit{Value: p.MaxMemory, Via: cgVia}
		} else {
			rep.Limits["max_memory"] = Limit{Value: p.MaxMemory, Via: "rlimit_as",
				Note: "per process address space: kernel memory (socket and pipe buffers) and files in tmpfs are not counted; SysV shared memory and message queues are refused"}
			rep.Degraded = append(rep.Degraded, "max_memory enforced per process by RLIMIT_AS (no memory cgroup)")
		}
	}
	if p.MaxProcesses > 0 {
		switch {
		case has("pids"):
			rep.Limits["max_processes"] = Limit{Value: p.MaxProcesses, Via: cgVia}
		case !f.Root && canMount && userNS:
			rep.Limits["max_processes"] = Limit{Value: p.MaxProcesses, Via: "rlimit_nproc",
				Note: "counts every process of the sandbox in its user namespace, sandtrap's zygote, its next run's pid 1 made ahead and each run's pid 1 included (+3 allowed)"}
		default:
			need(false, "max_processes (no pids cgroup, and RLIMIT_NPROC needs the sandbox's own user namespace and a host that is not root)")
		}
	}
	if p.MaxCPU > 0 {
		if need(has("cpu"), "max_cpu (no cpu cgroup controller)") {
			rep.Limits["max_cpu"] = Limit{Value: p.MaxCPU, Via: cgVia, Note: "percent of one CPU, throttled"}
		}
	}
	if p.MaxCPUTime > 0 {
		via := "rlimit_cpu+proc_tree"
		if s.cg != nil && s.cg.HasCPUTime() {
			via = "rlimit_cpu+" + cgVia
		}
		rep.Limits["max_cpu_time"] = Limit{Seconds: p.MaxCPUTime, Via: via, Note: "the whole run's CPU time, checked every 20 ms"}
	}
	if p.MaxOpenFiles > 0 {
		rep.Limits["max_open_files"] = Limit{Value: p.MaxOpenFiles, Via: "rlimit_nofile", Note: "per process"}
	}
	if p.MaxDisk > 0 {
		rep.Limits["max_disk"] = Limit{Value: p.MaxDisk, Via: "rlimit_fsize", Note: "largest file the run may write (space reserved past a file's size is refused)"}
	}
	rlimitAS := rep.Limits["max_memory"].Via == "rlimit_as"

	// 5. seccomp: the base deny list always, and what the supervisor judges (core/
	// supervise: locks on what is read-only, listen without bind, inotify outside the
	// policy). Without a view, locks are refused by the filter itself.
	if need(f.Seccomp, "seccomp") {
		if pl.ruleset != nil {
			for _, pr := range pl.ruleset.Table.Paths {
				pl.supervise.Allowed = append(pl.supervise.Allowed, pr.Path)
			}
		}
		pl.supervise.ListenNeedsBind = netWanted
		pl.supervise.Learn = s.learn
		if np.sup != nil {
			pl.supervise.Net = np.sup
			pl.supervise.AbstractScoped = rep.Landlock != nil && f.LandlockABI >= 6
			// a send performed for the caller must not also be restarted by it
			pl.supervise.Killable = np.sup.WatchesSends()
		}
		var traps []supervise.Trap
		for _, t := range supervise.Traps(pl.supervise) {
			if (t.Syscall == "flock" || t.Syscall == "fcntl") && pl.view == nil {
				continue // locks are refused outright (NoMetadata)
			}
			if t.Syscall == "fcntl" {
				// leases are refused outright (a lease makes a host writer wait)
				t.Values = slices.DeleteFunc(slices.Clone(t.Values), func(v uint64) bool { return v == unix.F_SETLEASE })
			}
			traps = append(traps, t)
		}
		pl.sccfg = seccomp.Config{
			NoInet: !netWanted, AllowUDP: np.udp, AllowICMP: np.icmp, AllowUnix: p.NetAllowUnix,
			ExtraAllow: p.ExtraAllowSyscalls, ExtraDeny: p.ExtraDenySyscalls,
			// no TCP Fast Open where connect is limited (its implicit connect is
			// seen by neither Landlock nor the supervisor's connect)
			CloneCookie: cloneCookie(), RestrictConnect: netWanted && (!anyConnect || np.sup != nil),
			NoSourceRoute: np.sup != nil,
			MaxDisk:       p.MaxDisk > 0, NoSysVMemory: rlimitAS, NoMetadata: pl.view == nil,
			Traps: traps,
		}
		prog, err := seccomp.Compile(pl.sccfg)
		if err != nil {
			return fail(errorf(KindIsolation, "seccomp: %v", err))
		}
		pl.bpf = prog
		rep.Seccomp = &SeccompReport{Enforced: true, Action: "EPERM", Denied: prog.Denied, Supervised: prog.Notified,
			ForeignArch: "kill", Unreviewed: fmt.Sprintf("ENOSYS from syscall %d on", seccomp.Reviewed),
			InetSockets: netWanted, UDP: np.udp, ICMP: np.icmp, UnixSockets: p.NetAllowUnix}
	}
	if len(missing) > 0 {
		if !p.AllowDegraded {
			return fail(errorf(KindIsolation, "isolation unavailable: %s (pass allow_degraded to run without it)", strings.Join(missing, "; ")))
		}
		for _, m := range missing {
			rep.Degraded = append(rep.Degraded, "not applied: "+m)
		}
	}
	rep.Disabled = f.Disabled

	// 6. The zygote that applies it all.
	zs := &spawn.ZygoteSpec{RulesetFD: -1, Cookie: cloneCookie(), NewPidNS: pl.pidNS,
		NewIPCNS: rep.IPCNamespace, UserNS: (pl.view != nil && userNS) || unmapped, Unmapped: unmapped,
		MountNS: pl.view != nil && !userNS,
		View:    pl.view, DropGroups: f.Root,
		// pid 1 of each run needs these (in the sandbox's user namespace) until it
		// drops everything before the target: new namespaces, the /proc mount, and
		// emptying the bounding set
		KeepCaps: 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SETPCAP}
	switch {
	case !pl.pidNS:
		zs.KeepCaps = 0
	case p.UID != nil:
		zs.KeepCaps |= 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID
		zs.SetIDs, zs.UID, zs.GID = true, *p.UID, *p.GID
	}
	if rlimitAS {
		zs.ASLimit = uint64(p.MaxMemory)
	}
	if zs.UserNS && !unmapped {
		zs.Sysctls = userSysctls()
		zs.Shares = userShares()
	} else {
		rep.NotApplied = append(rep.NotApplied, fmt.Sprintf("a per-sandbox share of the host user's inotify instances and watches (%d, %d), pending signals and message queue bytes: it needs the sandbox's own user namespace", InotifyInstances, InotifyWatches))
	}
	if pl.ruleset != nil {
		zs.RulesetFD = pl.ruleset.FD
		if pl.view != nil && pl.view.ProcOwn {
			// a rule for each run's /proc can only be made in the run: pid 1 builds
			// its ruleset from the table (the O_PATH fds of its paths live with the plan)
			if err := pl.keepLandlockTable(zs); err != nil {
				return fail(errorf(KindIsolation, "landlock: %v", err))
			}
		}
	}
	if pl.bpf != nil {
		zs.BPF = pl.bpf.BPF
		zs.Listener = len(pl.bpf.Notified) > 0
		zs.Killable = pl.supervise.Killable
	}
	rl := func(res int, v int64) {
		zs.Rlimits = append(zs.Rlimits, spawn.Rlimit{Resource: res, Cur: uint64(v), Max: uint64(v)})
	}
	if p.MaxDisk > 0 {
		rl(unix.RLIMIT_FSIZE, p.MaxDisk)
	}
	if rep.Limits["max_processes"].Via == "rlimit_nproc" {
		// counted per user in the sandbox's user namespace: every run together
		rl(unix.RLIMIT_NPROC, p.MaxProcesses+helperProcesses)
	}
	rl(unix.RLIMIT_CORE, 0) // no core dumps of sandbox memory
	pl.zspec = zs
	return pl, nil
}

// keepLandlockTable opens the paths of the plan's Landlock table for its zygote
// (runs with a /proc of their own build their ruleset from it).
func (pl *plan) keepLandlockTable(zs *spawn.ZygoteSpec) error {
	t := pl.ruleset.Table
	for _, pr := range t.Paths {
		fd, err := unix.Open(pr.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %v", pr.Path, err)
		}
		high, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %v", pr.Path, err)
		}
		pl.tableFDs = append(pl.tableFDs, high)
	}
	zs.Landlock, zs.LandlockFDs, zs.ProcRights = t, pl.tableFDs, t.DirRights(landlock.ReadOnly)
	return nil
}

// unnamedDevices are the device nodes under /dev that a grant of s covers without
// naming them (for a sandbox without a nodev view).
func unnamedDevices(s landlock.Spec) []string {
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
	for _, d := range s.Devices {
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

// current is the sandbox's plan for the process's current confinement, made anew
// (and the old one kept for runs in flight) after a confine().
func (s *Sandbox) current() (*plan, error) {
	s.zmu.Lock()
	defer s.zmu.Unlock()
	return s.currentLocked()
}

func (s *Sandbox) currentLocked() (*plan, error) {
	gen := confineGen.Load()
	if s.pl != nil && s.pl.gen == gen {
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
