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
}

// Group is one run's cgroup set.
type Group struct {
	info    *kernel.CgroupInfo
	dirs    map[string]string // controller -> dir (v2: "unified")
	procFDs []int
	pool    *pool
	key     string
}

var seq atomic.Uint64

// Needs reports which controllers limits need beyond tree tracking.
func controllers(l Limits, v int) []string {
	if v == 2 {
		return []string{"unified"}
	}
	cs := []string{"pids", "memory", "cpuacct"}
	if l.CPUPct > 0 {
		cs = append(cs, "cpu")
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

type pool struct {
	mu   sync.Mutex
	free map[string][]map[string]string
}

var groups = &pool{free: map[string][]map[string]string{}}

// New creates (or reuses) a cgroup set and applies l. Call Close when the run ends.
func New(info *kernel.CgroupInfo, l Limits) (*Group, error) {
	cs := controllers(l, info.Version)
	var use []string
	for _, c := range cs {
		if _, ok := info.Dirs[c]; ok {
			use = append(use, c)
		}
	}
	key := strings.Join(use, ",")
	g := &Group{info: info, pool: groups, key: key}
	groups.mu.Lock()
	if free := groups.free[key]; len(free) > 0 {
		g.dirs = free[len(free)-1]
		groups.free[key] = free[:len(free)-1]
	}
	groups.mu.Unlock()
	if g.dirs == nil {
		name := fmt.Sprintf("sandtrap-%d-%d", os.Getpid(), seq.Add(1))
		g.dirs = map[string]string{}
		for _, c := range use {
			d := filepath.Join(info.Dirs[c], name)
			if err := os.Mkdir(d, 0o755); err != nil {
				g.remove()
				return nil, fmt.Errorf("cgroup %s: %w", c, err)
			}
			g.dirs[c] = d
		}
	}
	if err := g.apply(l); err != nil {
		g.remove()
		return nil, err
	}
	for _, d := range g.dirs {
		fd, err := unix.Open(filepath.Join(d, "cgroup.procs"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			g.closeFDs()
			g.remove()
			return nil, fmt.Errorf("cgroup.procs: %w", err)
		}
		g.procFDs = append(g.procFDs, fd)
	}
	return g, nil
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
			write(d, "memory.peak", "0") // reset (kernel >= 6.12); ignored where unsupported
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
		// a reused group may still hold page cache of its last run: reclaim it first
		write(d, "memory.force_empty", "0")
		lim := "-1"
		if l.Memory > 0 {
			lim = strconv.FormatInt(l.Memory, 10)
		}
		if err := write(d, "memory.limit_in_bytes", lim); err != nil {
			return err
		}
		write(d, "memory.memsw.limit_in_bytes", lim) // absent without swap accounting
		write(d, "memory.max_usage_in_bytes", "0")
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
	if d, ok := g.dirs["cpuacct"]; ok {
		write(d, "cpuacct.usage", "0")
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

// CPUTime is the CPU time used by every member so far.
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

// PeakMemory is the highest memory use of the group, or -1 when unknown.
func (g *Group) PeakMemory() int64 {
	if g.info.Version == 2 {
		if n, err := readInt(filepath.Join(g.dirs["unified"], "memory.peak")); err == nil {
			return n
		}
		return -1
	}
	if d, ok := g.dirs["memory"]; ok {
		if n, err := readInt(filepath.Join(d, "memory.max_usage_in_bytes")); err == nil {
			return n
		}
	}
	return -1
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

// Close kills what is left and returns the group to the pool (or removes it).
func (g *Group) Close() {
	g.closeFDs()
	g.Kill()
	if len(g.Pids()) != 0 {
		return // leave it rather than block; it is empty once the kernel reaps
	}
	g.pool.mu.Lock()
	if len(g.pool.free[g.key]) < 64 {
		g.pool.free[g.key] = append(g.pool.free[g.key], g.dirs)
		g.pool.mu.Unlock()
		return
	}
	g.pool.mu.Unlock()
	g.remove()
}

func (g *Group) remove() {
	for _, d := range g.dirs {
		os.Remove(d)
	}
}

// Drain removes every pooled cgroup (tests and library unload).
func Drain() {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	for k, list := range groups.free {
		for _, dirs := range list {
			for _, d := range dirs {
				os.Remove(d)
			}
		}
		delete(groups.free, k)
	}
}
