// Package cgroup gives one sandbox its own cgroup (v2, or v1 per controller) beneath
// the host's own cgroup: limits for every process of the sandbox, their CPU time, and
// a kill that reaches every member. The sandbox's zygote joins it once; every run
// forked from the zygote is born inside it, at no cost per run (a v1 migration
// costs milliseconds).
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/kernel"
	"golang.org/x/sys/unix"
)

// Limits to apply; zero means unlimited.
type Limits struct {
	Memory    int64 // bytes
	Processes int64
	CPUPct    int64 // percent of one CPU
	CPUTime   bool  // account the tree's CPU time (max_cpu_time)
	CPUs      []int // cpuset.cpus (cpu_cores, num_cpus): where the host's cgroup has a cpuset controller
}

// Needed reports whether l needs a cgroup at all.
func (l Limits) Needed() bool {
	return l.Memory > 0 || l.Processes > 0 || l.CPUPct > 0 || l.CPUTime || len(l.CPUs) > 0
}

// Group is one sandbox's cgroup set.
type Group struct {
	info    *kernel.CgroupInfo
	dirs    map[string]string // controller -> dir (v2: "unified")
	procFDs []int
	mu      sync.Mutex
	ooms    int      // OOM kills already accounted to earlier runs
	notes   []string // limits that hold only in part (reported as degraded)
	base    Limits   // the policy's
	lowered map[*Lowered]struct{}
	cpus    []int  // cpuset.cpus written (Cpuset)
	noCPUs  string // why the CPUs asked for are not the group's (the affinity alone pins them)
}

// Cpuset is the CPUs the group's cpuset holds its members to (nil: none; see
// CpusetErr).
func (g *Group) Cpuset() []int { return g.cpus }

// CpusetErr says why a group asked for CPUs holds none ("" if it does, or was not
// asked).
func (g *Group) CpusetErr() string { return g.noCPUs }

// Lowered is a tightening of a group's memory and process limits (Restrict).
type Lowered struct{ Memory, Processes int64 }

// Notes are the limits of the group that hold only in part.
func (g *Group) Notes() []string { return g.notes }

var seq atomic.Uint64

// controllers lists the v1 controllers l needs ("unified" for v2).
func controllers(l Limits, v int) []string {
	if v == 2 {
		return []string{"unified"}
	}
	var cs []string
	if l.Processes > 0 {
		cs = append(cs, "pids")
	}
	if l.Memory > 0 {
		cs = append(cs, "memory")
	}
	if l.CPUPct > 0 {
		cs = append(cs, "cpu")
	}
	if l.CPUTime {
		cs = append(cs, "cpuacct")
	}
	if len(l.CPUs) > 0 {
		cs = append(cs, "cpuset")
	}
	return cs
}

// Missing returns the controllers needed by l that the host cannot use.
func Missing(info *kernel.CgroupInfo, l Limits) []string {
	var miss []string
	if info == nil {
		return []string{"cgroup"}
	}
	need := map[string]bool{}
	if l.Memory > 0 {
		need["memory"] = true
	}
	if l.Processes > 0 {
		need["pids"] = true
	}
	if l.CPUPct > 0 {
		need["cpu"] = true
	}
	for c := range need {
		if _, ok := info.Dirs[c]; !ok {
			miss = append(miss, c)
		}
	}
	return miss
}

// New creates a cgroup set with limits l. Close removes it.
func New(info *kernel.CgroupInfo, l Limits) (*Group, error) {
	var use []string
	for _, c := range controllers(l, info.Version) {
		if _, ok := info.Dirs[c]; ok {
			use = append(use, c)
		}
	}
	janitor(info)
	name := fmt.Sprintf("sandtrap-%d-%d", os.Getpid(), seq.Add(1))
	g := &Group{info: info, dirs: map[string]string{}}
	for _, c := range use {
		d := filepath.Join(info.Dirs[c], name)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.Close()
			return nil, fmt.Errorf("cgroup %s: %w", c, err)
		}
		g.dirs[c] = d
	}
	if err := g.apply(l); err != nil {
		g.Close()
		return nil, err
	}
	g.base = l
	g.cpuset(l.CPUs)
	for _, d := range g.dirs {
		fd, err := unix.Open(filepath.Join(d, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("cgroup.procs: %w", err)
		}
		g.procFDs = append(g.procFDs, fd)
	}
	return g, nil
}

var janitorOnce sync.Once

// janitor removes empty sandtrap cgroups left by host processes that are gone.
func janitor(info *kernel.CgroupInfo) {
	janitorOnce.Do(func() {
		for _, dir := range info.Dirs {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				var pid, n int
				if _, err := fmt.Sscanf(e.Name(), "sandtrap-%d-%d", &pid, &n); err != nil || pid == os.Getpid() {
					continue
				}
				if unix.Kill(pid, 0) == unix.ESRCH {
					os.Remove(filepath.Join(dir, e.Name())) // fails, harmlessly, if not empty
				}
			}
		}
	})
}

func write(dir, file, val string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
		return fmt.Errorf("cgroup %s: %w", file, err)
	}
	return nil
}

func max(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

func (g *Group) apply(l Limits) error {
	if g.info.Version == 2 {
		d := g.dirs["unified"]
		if _, ok := g.info.Dirs["memory"]; ok {
			if err := write(d, "memory.max", max(l.Memory)); err != nil {
				return err
			}
			write(d, "memory.swap.max", "0")
		}
		if _, ok := g.info.Dirs["pids"]; ok {
			if err := write(d, "pids.max", max(l.Processes)); err != nil {
				return err
			}
		}
		if _, ok := g.info.Dirs["cpu"]; ok {
			q := "max 100000"
			if l.CPUPct > 0 {
				q = fmt.Sprintf("%d 100000", l.CPUPct*1000)
			}
			if err := write(d, "cpu.max", q); err != nil {
				return err
			}
		}
		return nil
	}
	if d, ok := g.dirs["memory"]; ok {
		lim := "-1"
		if l.Memory > 0 {
			lim = strconv.FormatInt(l.Memory, 10)
		}
		if err := write(d, "memory.limit_in_bytes", lim); err != nil {
			return err
		}
		write(d, "memory.memsw.limit_in_bytes", lim) // absent without swap accounting
		// v1 does not count TCP socket buffers unless this is set (v2 always does);
		// a kernel without it (or that refuses it) leaves them uncounted: Group.Notes
		if err := write(d, "memory.kmem.tcp.limit_in_bytes", lim); err != nil && l.Memory > 0 {
			g.notes = append(g.notes, "TCP socket buffers are not counted by max_memory (cgroup v1 without memory.kmem.tcp)")
		}
	}
	if d, ok := g.dirs["pids"]; ok {
		if err := write(d, "pids.max", max(l.Processes)); err != nil {
			return err
		}
	}
	if d, ok := g.dirs["cpu"]; ok {
		if err := write(d, "cpu.cfs_period_us", "100000"); err != nil {
			return err
		}
		q := "-1"
		if l.CPUPct > 0 {
			q = strconv.FormatInt(l.CPUPct*1000, 10)
		}
		if err := write(d, "cpu.cfs_quota_us", q); err != nil {
			return err
		}
	}
	return nil
}

// cpuset writes the group's cpuset.cpus (and, v1, the memory nodes its parent's
// has, without which no task may join). A failure is not the group's: the CPUs
// are pinned by the affinity anyway, and the plan reports which holds them.
func (g *Group) cpuset(cpus []int) {
	if len(cpus) == 0 {
		return
	}
	var d string
	if g.info.Version == 2 {
		if _, ok := g.info.Dirs["cpuset"]; ok {
			d = g.dirs["unified"]
		}
	} else {
		d = g.dirs["cpuset"]
	}
	if d == "" {
		g.noCPUs = "no cpuset cgroup controller"
		return
	}
	list := make([]string, len(cpus))
	for i, c := range cpus {
		list[i] = strconv.Itoa(c)
	}
	if g.info.Version == 1 {
		mems, err := os.ReadFile(filepath.Join(filepath.Dir(d), "cpuset.mems"))
		if err == nil {
			err = write(d, "cpuset.mems", strings.TrimSpace(string(mems)))
		}
		if err != nil {
			g.noCPUs = err.Error()
			return
		}
	}
	if err := write(d, "cpuset.cpus", strings.Join(list, ",")); err != nil {
		g.noCPUs = err.Error()
		return
	}
	g.cpus = cpus
}

// Restrict lowers the group's memory and process limits (0: leave it) to at most
// these, for every member, until undo (the policy's limits, or the lowest of the
// restrictions still held, apply again). It never raises a limit. An error says the
// group cannot hold that limit (no memory or pids controller in it).
func (g *Group) Restrict(memory, processes int64) (undo func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if memory > 0 && !g.has("memory") {
		return nil, errors.New("the sandbox's cgroup has no memory controller (give the policy a max_memory)")
	}
	if processes > 0 && !g.has("pids") {
		return nil, errors.New("the sandbox's cgroup has no pids controller (give the policy a max_processes)")
	}
	r := &Lowered{Memory: memory, Processes: processes}
	if g.lowered == nil {
		g.lowered = map[*Lowered]struct{}{}
	}
	g.lowered[r] = struct{}{}
	if err := g.applyLowered(); err != nil {
		delete(g.lowered, r)
		g.applyLowered()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			delete(g.lowered, r)
			g.applyLowered()
		})
	}, nil
}

// has: the group holds controller c's limits.
func (g *Group) has(c string) bool {
	if g.info.Version == 2 {
		_, ok := g.info.Dirs[c]
		return ok && g.dirs["unified"] != ""
	}
	return g.dirs[c] != ""
}

// Limit is the memory and process limits in force (the lowest of the policy's and
// the restrictions held; 0: none).
func (g *Group) Limit() (memory, processes int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.effective()
	return l.Memory, l.Processes
}

func (g *Group) effective() Limits {
	l := g.base
	low := func(cur, v int64) int64 {
		if v > 0 && (cur <= 0 || v < cur) {
			return v
		}
		return cur
	}
	for r := range g.lowered {
		l.Memory, l.Processes = low(l.Memory, r.Memory), low(l.Processes, r.Processes)
	}
	return l
}

// applyLowered writes the memory and process limits in force (g.mu held).
func (g *Group) applyLowered() error {
	l := g.effective()
	if g.info.Version == 2 {
		d := g.dirs["unified"]
		if g.has("memory") {
			if err := write(d, "memory.max", max(l.Memory)); err != nil {
				return err
			}
		}
		if g.has("pids") {
			return write(d, "pids.max", max(l.Processes))
		}
		return nil
	}
	if d := g.dirs["memory"]; d != "" {
		lim := "-1"
		if l.Memory > 0 {
			lim = strconv.FormatInt(l.Memory, 10)
		}
		// memsw may not be below limit_in_bytes: written before (raising) and after
		// (lowering: the first write fails)
		write(d, "memory.memsw.limit_in_bytes", lim)
		if err := write(d, "memory.limit_in_bytes", lim); err != nil {
			return err
		}
		write(d, "memory.memsw.limit_in_bytes", lim)
		write(d, "memory.kmem.tcp.limit_in_bytes", lim)
	}
	if d := g.dirs["pids"]; d != "" {
		return write(d, "pids.max", max(l.Processes))
	}
	return nil
}

// ProcFDs are open cgroup.procs files the child writes "0" to.
func (g *Group) ProcFDs() []int { return g.procFDs }

func (g *Group) closeFDs() {
	for _, fd := range g.procFDs {
		unix.Close(fd)
	}
	g.procFDs = nil
}

// CPUTime is the CPU time used by every member since the group was made; a run
// measures its own as the difference from its start.
func (g *Group) CPUTime() time.Duration {
	if g.info.Version == 2 {
		b, err := os.ReadFile(filepath.Join(g.dirs["unified"], "cpu.stat"))
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond
			}
		}
		return 0
	}
	d, ok := g.dirs["cpuacct"]
	if !ok {
		return 0
	}
	n, _ := readInt(filepath.Join(d, "cpuacct.usage"))
	return time.Duration(n)
}

// HasCPUTime reports whether CPUTime measures the tree.
func (g *Group) HasCPUTime() bool {
	_, ok := g.dirs["cpuacct"]
	return ok || g.info.Version == 2
}

// NewOOMKill reports whether the kernel's OOM killer struck in the group since the
// last call that returned true.
func (g *Group) NewOOMKill() bool {
	var path string
	if g.info.Version == 2 {
		path = filepath.Join(g.dirs["unified"], "memory.events")
	} else if d, ok := g.dirs["memory"]; ok {
		path = filepath.Join(d, "memory.oom_control")
	} else {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			g.mu.Lock()
			defer g.mu.Unlock()
			if n > g.ooms {
				g.ooms = n
				return true
			}
			return false
		}
	}
	return false
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Pids lists the members (v2: with those of the runs' freezers beneath it).
func (g *Group) Pids() []int {
	var out []int
	for _, d := range g.dirs {
		dirs := []string{d}
		if g.info.Version == 2 {
			dirs = append(dirs, subdirs(d)...)
		}
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if n, err := strconv.Atoi(f); err == nil {
					out = append(out, n)
				}
			}
		}
		break
	}
	return out
}

// subdirs are the cgroups beneath d (the runs' freezers).
func subdirs(d string) []string {
	var out []string
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

// Kill SIGKILLs every member until the group is empty (bounded by 2 s).
func (g *Group) Kill() {
	if g.info.Version == 2 {
		write(g.dirs["unified"], "cgroup.kill", "1")
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := g.Pids()
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, p := range pids {
			unix.Kill(p, unix.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// Close kills every member and removes the group.
func (g *Group) Close() {
	g.closeFDs()
	if len(g.Pids()) > 0 {
		g.Kill()
	}
	for _, d := range g.dirs {
		if g.info.Version == 2 {
			for _, sub := range subdirs(d) {
				for i := 0; i < 100 && errors.Is(os.Remove(sub), unix.EBUSY); i++ {
					time.Sleep(time.Millisecond)
				}
			}
		}
		for i := 0; i < 100 && errors.Is(os.Remove(d), unix.EBUSY); i++ {
			time.Sleep(time.Millisecond) // members still exiting
		}
	}
}
