package plan

import (
	"crypto/rand"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// Input is what a sandbox's plans are compiled from: its policy, checked against
// this machine and with its paths resolved, and what building it found.
type Input struct {
	Policy   *policy.Policy
	Features kernel.Features
	Devices  []string      // device nodes it may open
	CPUs     []int         // the CPUs it is pinned to (cpu_cores, num_cpus; place.go)
	GPU      *gpuPlan      // gpu_devices (nil: not asked)
	ViewPlan *fsview.Plan  // its view, where it can have one
	Group    *cgroup.Group // the sandbox's cgroup (nil: no limit needs one)
	GroupErr string        // why it has none although a limit wanted one (allow_degraded)
	Net      NetPlan       // who enforces the network rules (net.go)
	// Learn, in learn mode (core/engine/learn.go), is told every path call the
	// supervisor sees (supervise.Config.Learn).
	Learn func(kind, path string)
}

// Prepare checks p against this machine (with the problems decoding found: every
// problem is reported at once), resolves its paths and host names and plans its
// view and network rules. The cgroup is the caller's to make (Group, GroupErr).
func Prepare(p *policy.Policy, f kernel.Features, probs policy.Problems) (*Input, error) {
	chroot := resolveChroot(p, &probs) // chroot.go: the paths inside it made host paths
	resolvePaths(p, &probs)
	checkWorkdir(p, &probs)
	if p.Cwd != "" && chroot == nil && p.Chroot == "" {
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
	checkNoSupervisor(p, &np, &probs)
	cpus := runCPUs(p, &probs)
	gpu := planGPU(p, &probs)
	devices := devicePaths(p)
	if gpu != nil {
		devices = append(devices, gpu.granted...) // the view's dev mounts; Landlock: LLSpec.GPU
	}
	if p.Chroot != "" {
		// what lays files or nodes over the host's tree is not carried into a chroot yet
		for _, c := range []struct {
			field string
			set   bool
		}{{"num_cpus", p.NumCPUs > 0}, {"gpu_devices", p.GPUDevices != nil}} {
			if c.set {
				probs.Add(c.field, "not supported with chroot yet (it lays files over the host's tree, which a chroot does not show)")
			}
		}
	}
	if chroot != nil {
		// /dev/pts and /dev/shm of each run's own: its pid 1 mounts them
		chroot.OwnDev = f.PidNS
		for _, d := range chroot.Dev {
			if !slices.Contains(devices, "/dev/"+d) {
				devices = append(devices, "/dev/"+d)
			}
		}
	}
	var view *fsview.Plan
	if err := probs.Err(); err == nil {
		var verr error
		// fs_storage is writable in the view (pid 1 makes each run's layer
		// there), never granted by Landlock
		viewWritable := p.FSWritable
		if p.FSStorage != "" {
			viewWritable = append(slices.Clone(p.FSWritable), p.FSStorage)
		}
		if view, verr = fsview.Build(fsview.Spec{Readable: p.FSReadable, Writable: viewWritable, Devices: devices, Chroot: chroot, Overlays: np.Overlays()}); verr != nil {
			probs.Add("", "%v", verr)
		}
	}
	if err := probs.Err(); err != nil {
		np.CloseHTTP() // the bundles' directory, if any
		return nil, &protocol.Error{Kind: protocol.KindInvalidPolicy, Message: err.Error(), Problems: err.Problems}
	}
	if _, err := cloneCookie(); err != nil {
		np.CloseHTTP()
		return nil, err
	}
	if err := np.startHTTP(); err != nil {
		np.CloseHTTP()
		return nil, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: %v", err)
	}
	return &Input{Policy: p, Features: f, Devices: devicePaths(p), CPUs: cpus, GPU: gpu, ViewPlan: view, Net: np}, nil
}

// DevicePaths are granted read/write to every sandbox: harmless character devices
// that nearly every program opens.
var DevicePaths = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

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

// CgroupLimits are the cgroup limits of p; pids.max also counts sandtrap's own
// processes (helperProcesses).
func CgroupLimits(p *policy.Policy) cgroup.Limits {
	procs := p.MaxProcesses
	if procs > 0 {
		procs += helperProcesses
	}
	var probs policy.Problems // Prepare reports them
	return cgroup.Limits{Memory: p.MaxMemory, Processes: procs, CPUPct: p.MaxCPU, CPUTime: p.MaxCPUTime > 0, CPUs: runCPUs(p, &probs)}
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

var (
	cookieOnce sync.Once
	cookie     uint64
	cookieErr  error
)

// cloneCookie is this host process's secret that lets its zygotes (and nothing
// they start) create pid namespaces through the seccomp filter (0 with an error:
// no randomness).
func cloneCookie() (uint64, error) {
	cookieOnce.Do(func() {
		var b [8]byte
		for cookie == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				cookieErr = err
				return
			}
			cookie = binary.LittleEndian.Uint64(b[:])
		}
	})
	if cookieErr != nil {
		return 0, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: no randomness for the clone cookie: %v", cookieErr)
	}
	return cookie, nil
}
