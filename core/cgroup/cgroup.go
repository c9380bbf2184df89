// Package cgroup gives one run its own cgroup (v2, or v1 per controller) beneath the
// host's own cgroup: limits for the whole process tree, its peak memory and CPU time,
// and a kill that reaches every member. Cgroups are pooled and reused across runs.
package cgroup

import (
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
	Track     bool  // membership only: the tree must be killable without a pid namespace
}

// Needed reports whether l needs a cgroup at all.
func (l Limits) Needed() bool {
	return l.Memory > 0 || l.Processes > 0 || l.CPUPct > 0 || l.CPUTime || l.Track
}

// Group is one run's cgroup set.
type Group struct {
	*entry
	info *kernel.CgroupInfo
	pool *pool
	key  string
}

var seq atomic.Uint64

// controllers lists the v1 controllers l needs ("unified" for v2).
func controllers(l Limits, v int) []string {
	if v == 2 {
		return []string{"unified"}
	}
	var cs []string
	if l.Processes > 0 || l.Track {
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

// entry is a configured cgroup set, reusable by any run with the same limits.
type entry struct {
	dirs    map[string]string // controller -> dir (v2: "unified")
	procFDs []int
	cpuBase time.Duration
}

type pool struct {
	mu   sync.Mutex
	free map[string][]*entry
}

var groups = &pool{free: map[string][]*entry{}}

// New takes a cgroup set with limits l from the pool, or creates one. Call Close
// when the run ends.
func New(info *kernel.CgroupInfo, l Limits) (*Group, error) {
	var use []string
	for _, c := range controllers(l, info.Version) {
		if _, ok := info.Dirs[c]; ok {
			use = append(use, c)
		}
	}
	key := fmt.Sprintf("%s|%d|%d|%d", strings.Join(use, ","), l.Memory, l.Processes, l.CPUPct)
	g := &Group{info: info, pool: groups, key: key}
	groups.mu.Lock()
	if free := groups.free[key]; len(free) > 0 {
		g.entry = free[len(free)-1]
		groups.free[key] = free[:len(free)-1]
	}
	groups.mu.Unlock()
	if g.entry != nil {
		if l.CPUTime {
			g.resetCPU()
		}
		return g, nil
	}
	janitor(info)
	name := fmt.Sprintf("sandtrap-%d-%d", os.Getpid(), seq.Add(1))
	g.entry = &entry{dirs: map[string]string{}}
	for _, c := range use {
		d := filepath.Join(info.Dirs[c], name)
		if err := os.Mkdir(d, 0o755); err != nil {
			g.remove()
			return nil, fmt.Errorf("cgroup %s: %w", c, err)
		}
		g.dirs[c] = d
	}
	if err := g.apply(l); err != nil {
		g.remove()
		return nil, err
	}
	for _, d := range g.dirs {
		fd, err := unix.Open(filepath.Join(d, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			g.remove()
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
	g.resetCPU()
	return nil
}

// resetCPU zeroes the tree's CPU accounting (v1; v2 keeps a baseline instead).
func (g *Group) resetCPU() {
	if d, ok := g.dirs["cpuacct"]; ok {
		write(d, "cpuacct.usage", "0")
	}
	if g.info.Version == 2 {
		g.cpuBase = g.rawCPU()
	}
}

// ProcFDs are open cgroup.procs files the child writes "0" to.
func (g *Group) ProcFDs() []int { return g.procFDs }

func (g *Group) closeFDs() {
	for _, fd := range g.procFDs {
		unix.Close(fd)
	}
	g.procFDs = nil
}

// CPUTime is the CPU time used by every member of this run so far.
func (g *Group) CPUTime() time.Duration { return g.rawCPU() - g.cpuBase }

func (g *Group) rawCPU() time.Duration {
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

// OOMKilled reports whether the memory limit killed a member.
func (g *Group) OOMKilled() bool {
	var path, key string
	if g.info.Version == 2 {
		path, key = filepath.Join(g.dirs["unified"], "memory.events"), "oom_kill "
	} else if d, ok := g.dirs["memory"]; ok {
		path, key = filepath.Join(d, "memory.oom_control"), "oom_kill "
	} else {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n > 0
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

// Pids lists the members.
func (g *Group) Pids() []int {
	var out []int
	for _, d := range g.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
		break
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

// Close returns the group to the pool once it is empty. treeDead says the kernel
// already killed every member (pid namespace); otherwise members are killed first.
func (g *Group) Close(treeDead bool) {
	if !treeDead {
		g.Kill()
		if len(g.Pids()) != 0 {
			g.closeFDs()
			return // leave it rather than block; the janitor of a later host removes it
		}
	}
	g.pool.mu.Lock()
	if len(g.pool.free[g.key]) < 64 {
		g.pool.free[g.key] = append(g.pool.free[g.key], g.entry)
		g.pool.mu.Unlock()
		return
	}
	g.pool.mu.Unlock()
	g.closeFDs()
	g.remove()
}

func (g *Group) remove() {
	g.closeFDs()
	for _, d := range g.dirs {
		os.Remove(d)
	}
}

// Drain removes every pooled cgroup (tests and library unload).
func Drain() {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	for k, list := range groups.free {
		for _, e := range list {
			for _, fd := range e.procFDs {
				unix.Close(fd)
			}
			for _, d := range e.dirs {
				os.Remove(d)
			}
		}
		delete(groups.free, k)
	}
}
