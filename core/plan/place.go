package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// Placement (issue 21): where the run may run (cpu_cores, num_cpus), the GPUs it
// may open (gpu_devices), and a sandbox without a supervisor (no_supervisor).

// runCPUs is the CPUs the run is pinned to: cpu_cores (or, without it, the CPUs
// this process may use, when num_cpus asks for a number), the first num_cpus of
// them. nil: no pinning. The problems name CPUs this process may not use, or a
// num_cpus larger than what it may.
func runCPUs(p *policy.Policy, probs *policy.Problems) []int {
	if len(p.CPUCores) == 0 && p.NumCPUs == 0 {
		return nil
	}
	var have unix.CPUSet
	if err := unix.SchedGetaffinity(0, &have); err != nil {
		probs.Add("cpu_cores", "the CPUs this process may use cannot be read: %v", err)
		return nil
	}
	base := p.CPUCores
	if len(base) > 0 {
		var missing []string
		for _, cpu := range base {
			if !have.IsSet(cpu) {
				missing = append(missing, fmt.Sprint(cpu))
			}
		}
		if len(missing) > 0 {
			probs.Add("cpu_cores", "CPU %s is not one this process may run on (it may use %s)", strings.Join(missing, ", "), cpuList(&have))
			return nil
		}
	} else {
		for i := 0; i < policy.MaxCPU; i++ {
			if have.IsSet(i) {
				base = append(base, i)
			}
		}
	}
	if n := p.NumCPUs; n > 0 {
		if n > int64(len(base)) {
			from := "this process may use"
			if len(p.CPUCores) > 0 {
				from = "cpu_cores gives"
			}
			probs.Add("num_cpus", "%d is more than the %d CPUs %s (%s): a run sees only CPUs it can run on", n, len(base), from, intList(base))
			return nil
		}
		base = base[:n]
	}
	return base
}

func intList(l []int) string {
	var s unix.CPUSet
	for _, c := range l {
		s.Set(c)
	}
	return cpuList(&s)
}

// cpuFiles are the files of the view that show the run its CPUs (num_cpus): the
// host's, rewritten for the run's CPUs, bind-mounted over them read-only.
var cpuFiles = []string{"/sys/devices/system/cpu/online"}

// cpuFileDir holds the rewritten files of this process's sandboxes (one file per
// content, kept while the process lives: they are a few bytes each).
var cpuFileDir = filepath.Join(os.TempDir(), fmt.Sprintf("sandtrap-cpus-%d", os.Getpid()))

// cpuFile is a file of cpuFileDir holding content, and its inode: the view binds
// that very inode (a mount op checks it), so that nothing a sandbox can write —
// an unprivileged host's sandboxes are its own uid — can put another file (a
// symlink to a secret, say) in its place. The directory must be this process's
// own and writable by it alone; the file a regular one of its own, with one link.
func cpuFile(kind, content string) (path string, dev, ino uint64, err error) {
	cpuFileJanitor.Do(removeStaleCPUFiles)
	if err := os.Mkdir(cpuFileDir, 0o755); err != nil && !os.IsExist(err) {
		return "", 0, 0, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(cpuFileDir, &st); err != nil {
		return "", 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
		return "", 0, 0, fmt.Errorf("%s is not a directory of this process's own", cpuFileDir)
	}
	sum := uint32(2166136261)
	for i := 0; i < len(content); i++ {
		sum = (sum ^ uint32(content[i])) * 16777619
	}
	path = filepath.Join(cpuFileDir, fmt.Sprintf("%s-%08x", kind, sum))
	if _, err := os.Lstat(path); err != nil {
		tmp, err := os.CreateTemp(cpuFileDir, kind+".*")
		if err != nil {
			return "", 0, 0, err
		}
		_, werr := tmp.WriteString(content)
		tmp.Chmod(0o444)
		if cerr := tmp.Close(); werr != nil || cerr != nil {
			os.Remove(tmp.Name())
			return "", 0, 0, fmt.Errorf("%s: %v %v", tmp.Name(), werr, cerr)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return "", 0, 0, err
		}
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", 0, 0, fmt.Errorf("%s: %v", path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, len(content)+1)
	n, _ := unix.Read(fd, buf)
	if err := unix.Fstat(fd, &st); err != nil {
		return "", 0, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Nlink != 1 || string(buf[:n]) != content {
		return "", 0, 0, fmt.Errorf("%s is not the file this process wrote", path)
	}
	return path, uint64(st.Dev), st.Ino, nil
}

var cpuFileJanitor sync.Once

// removeStaleCPUFiles removes the cpu file directories of this user's processes
// that are gone (each lives as long as its process; nothing removes it at exit).
func removeStaleCPUFiles() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "sandtrap-cpus-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "sandtrap-cpus-"))
		var st unix.Stat_t
		if err != nil || pid == os.Getpid() || unix.Lstat(d, &st) != nil || st.Uid != uint32(os.Geteuid()) ||
			st.Mode&unix.S_IFMT != unix.S_IFDIR || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		os.RemoveAll(d)
	}
}

// viewCPUFiles adds to the view the bind mounts of cpuFiles for cpus.
func (c *compiler) viewCPUFiles(cpus []int) error {
	if c.pl.View == nil {
		c.cur.NotApplied = append(c.cur.NotApplied, "num_cpus: /sys/devices/system/cpu/online shows the host's CPUs (no view of its own); the affinity (nproc, sched_getaffinity) shows the run's")
		return nil
	}
	name, dev, ino, err := cpuFile("online", intList(cpus)+"\n")
	if err != nil {
		return err
	}
	v := *c.pl.View
	v.Ops = append([]fsview.Op{}, v.Ops...)
	for _, target := range cpuFiles {
		if _, err := os.Stat(target); err != nil {
			continue
		}
		v.Ops = append(v.Ops, fileOver(name, dev, ino, target)...)
		v.Mounts = append(v.Mounts, fsview.Mount{Path: target, Mode: "cpus"})
	}
	c.pl.View = &v
	c.pl.cpuFiles = append(c.pl.cpuFiles, cpuFiles...)
	if v.ProcOwn {
		// each run mounts a proc of its own: pid 1 lays the file over it
		info, err := os.ReadFile("/proc/cpuinfo")
		if err != nil {
			return err
		}
		name, dev, ino, err := cpuFile("cpuinfo", cpuInfoOf(string(info), cpus))
		if err != nil {
			return err
		}
		c.pl.cpuInfo = &spawn.FileInode{Path: name, Dev: dev, Ino: ino}
		c.pl.cpuFiles = append(c.pl.cpuFiles, "/proc/cpuinfo")
	}
	return nil
}

// cpuInfoOf is /proc/cpuinfo with the entries of cpus alone (each entry is a
// paragraph beginning "processor\t: N"; other fields, "siblings" and "cpu cores"
// among them, are the host's).
func cpuInfoOf(info string, cpus []int) string {
	var b strings.Builder
	for _, para := range strings.Split(strings.TrimRight(info, "\n"), "\n\n") {
		first, _, _ := strings.Cut(para, "\n")
		k, v, ok := strings.Cut(first, ":")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if ok && strings.TrimSpace(k) == "processor" && err == nil && !slices.Contains(cpus, n) {
			continue
		}
		b.WriteString(para)
		b.WriteString("\n\n")
	}
	return b.String()
}

// The GPUs (gpu_devices): NVIDIA's nodes under gpuDir (/dev; the test hook moves
// it): /dev/nvidiaN per GPU, and the driver's control nodes every GPU program
// opens. DRM render nodes (/dev/dri/renderD*) are not granted: which render node
// is which GPU needs the PCI topology, and CUDA does not use them.
var gpuControl = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"}

var gpuNode = regexp.MustCompile(`^nvidia([0-9]+)$`)

// gpuPlan is what gpu_devices grants and denies.
type gpuPlan struct {
	granted []string // read, write and ioctl: the chosen GPUs and the control nodes
	denied  []string // every other NVIDIA node: carved out of any grant that holds it
	report  *GPUReport
}

// GPUReport is the gpu part of the isolation report.
type GPUReport struct {
	Indices []int    `msgpack:"indices"` // the GPUs the run may open
	Devices []string `msgpack:"devices"` // the nodes it may open (GPUs and control nodes)
	Denied  []string `msgpack:"denied"`  // the other NVIDIA nodes (denied even inside a granted tree)
	Present bool     `msgpack:"present"` // the host has a GPU at all
	Note    string   `msgpack:"note,omitempty"`
}

// planGPU lists the NVIDIA nodes and splits them by gpu_devices.
func planGPU(p *policy.Policy, probs *policy.Problems) *gpuPlan {
	g := p.GPUDevices
	if g == nil {
		return nil
	}
	dir := gpuDir()
	gp := &gpuPlan{report: &GPUReport{Indices: []int{}, Devices: []string{}, Denied: []string{}}}
	present := map[int]string{}
	var others []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "nvidia") {
			continue
		}
		path := filepath.Join(dir, name)
		if m := gpuNode.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			present[n] = path
			continue
		}
		isControl := false
		for _, c := range gpuControl {
			isControl = isControl || name == c
		}
		if isControl {
			gp.granted = append(gp.granted, path)
			continue
		}
		// nvidia-caps (MIG capabilities) and anything else of the driver's
		if e.IsDir() {
			sub, _ := os.ReadDir(path)
			for _, s := range sub {
				others = append(others, filepath.Join(path, s.Name()))
			}
		}
		others = append(others, path)
	}
	var have []int
	for n := range present {
		have = append(have, n)
	}
	sort.Ints(have)
	want := g.Indices
	if g.All {
		want = have
	}
	var missing []string
	chosen := map[int]bool{}
	for _, n := range want {
		if _, ok := present[n]; !ok {
			missing = append(missing, fmt.Sprint(n))
			continue
		}
		chosen[n] = true
	}
	if len(missing) > 0 {
		if len(have) == 0 {
			probs.Add("gpu_devices", "no GPU is present on this host (no %s/nvidiaN node): GPU %s cannot be granted", dir, strings.Join(missing, ", "))
		} else {
			probs.Add("gpu_devices", "GPU %s is not present on this host (it has %s)", strings.Join(missing, ", "), intList(have))
		}
		return nil
	}
	for _, n := range have {
		if chosen[n] {
			gp.granted = append(gp.granted, present[n])
			gp.report.Indices = append(gp.report.Indices, n)
		} else {
			gp.denied = append(gp.denied, present[n])
		}
	}
	if len(chosen) == 0 {
		gp.granted = nil // no GPU: nor its control nodes
	}
	gp.denied = append(gp.denied, others...)
	sort.Strings(gp.granted)
	sort.Strings(gp.denied)
	gp.report.Present = len(have) > 0
	if !gp.report.Present {
		gp.report.Note = "no GPU is present on this host (no " + dir + "/nvidiaN node)"
	}
	gp.report.Devices = append(gp.report.Devices, gp.granted...)
	gp.report.Denied = append(gp.report.Denied, gp.denied...)
	// a denied node the policy names itself is a contradiction
	for _, f := range []struct {
		key  string
		list []string
	}{{"fs_readable", p.FSReadable}, {"fs_writable", p.FSWritable}} {
		for _, path := range f.list {
			for _, d := range gp.denied {
				if path == d || policy.Within(d, path) && strings.HasPrefix(path, dir+"/nvidia") {
					probs.Add(f.key, "%s is a GPU node gpu_devices leaves out: grant the GPU by gpu_devices instead", path)
				}
			}
		}
	}
	return gp
}

// deniedIn is the nodes of gp.denied inside a granted tree of s (elsewhere
// Landlock denies them anyway).
func (gp *gpuPlan) deniedIn(allowed []string) []string {
	if gp == nil {
		return nil
	}
	var out []string
	for _, d := range gp.denied {
		for _, a := range allowed {
			if policy.Within(d, a) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// checkNoSupervisor adds a problem for every field that needs the supervisor,
// under no_supervisor: each names both fields.
func checkNoSupervisor(p *policy.Policy, np *NetPlan, probs *policy.Problems) {
	if !p.NoSupervisor {
		return
	}
	const off = "needs the syscall supervisor, which no_supervisor turns off"
	if len(p.NetDeny) > 0 {
		probs.Add("net_deny", "%s (the supervisor checks each destination against a deny list)", off)
	} else if np.byAddress {
		probs.Add("net_allow", "%s: rules by host or address, UDP or ICMP by destination, or more than %d ports are checked by it; with no_supervisor give TCP ports alone (\"443\", \"*:443\", \"*\")", off, maxFloorPorts)
	}
	if len(p.HTTPAllow) > 0 || len(p.HTTPDeny) > 0 || len(p.HTTPPorts) > 0 {
		probs.Add("http_allow", "%s: connects to the HTTP ports are handed to the engine's proxy by it (http_allow, http_deny, http_ports)", off)
	}
	if p.PortRemap {
		probs.Add("port_remap", "%s: it remaps the binds", off)
	}
	if len(p.NetAllowBind) > 0 {
		probs.Add("net_allow_bind", "%s: it tells a socket bound to an allowed port from one that listen() would bind to any port", off)
	}
	if p.HTTPIntercept || p.HTTPCA != "" || len(p.HTTPAuth) > 0 {
		probs.Add("http_intercept", "%s: interception and credentials ride on the proxy it hands the connects to (http_intercept, http_ca, http_auth)", off)
	}
	if p.RandomSeed != nil {
		probs.Add("random_seed", "%s: it answers getrandom and the opens of /dev/urandom and /dev/random", off)
	}
	if p.TimeStart != nil {
		probs.Add("time_start", "%s: it answers the clock calls", off)
	}
	if p.DeterministicDirs {
		probs.Add("deterministic_dirs", "%s: it answers getdents64", off)
	}
}

// fileOver is the view's operations that bind-mount file over target, read-only.
func fileOver(file string, dev, ino uint64, target string) []fsview.Op {
	const slot = fsview.MaxSlots
	return []fsview.Op{
		{Kind: fsview.Clone, Path: file, Slot: slot, Dev: dev, Ino: ino},
		{Kind: fsview.SetAttr, Slot: slot, Set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC},
		{Kind: fsview.Move, Path: target, Slot: slot},
	}
}

// cpuView shows the run its CPUs (num_cpus) in the view's CPU files.
func (c *compiler) cpuView() error {
	if gp := c.in.GPU; gp != nil {
		c.pl.gpu = gp.report
	}
	if c.p.NumCPUs == 0 || len(c.in.CPUs) == 0 {
		return nil
	}
	if err := c.viewCPUFiles(c.in.CPUs); err != nil {
		return protocol.Errorf(protocol.KindIsolation, "num_cpus: the view's CPU files: %v", err)
	}
	return nil
}

// refusedTraps names the calls of traps (once each, in order).
func refusedTraps(traps []seccomp.Trap) []string {
	var out []string
	for _, t := range traps {
		if !slices.Contains(out, t.Syscall) {
			out = append(out, t.Syscall)
		}
	}
	return out
}
