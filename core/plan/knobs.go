package plan

import (
	"fmt"
	"os"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// The policy's process knobs (no_randomize_memory, no_huge_pages, no_coredump,
// cpu_cores): set once on the zygote by its launcher, inherited by every process
// of the sandbox through fork and execve (core/spawn/launch.c, ST_STAGE_PROCESS).

// knobDenied is what the filter refuses the target so that it cannot undo a knob:
// sched_setaffinity under cpu_cores or num_cpus when the affinity is the only
// thing that pins the run (a cpuset cgroup holds any affinity the run sets to its
// CPUs; the personality flags are refused to every target already).
func (c *compiler) knobDenied() []string {
	if len(c.in.CPUs) > 0 && !c.cpuset() {
		return []string{"sched_setaffinity"}
	}
	return nil
}

// cpuset reports whether the sandbox's cgroup pins the run's CPUs.
func (c *compiler) cpuset() bool {
	return len(c.in.CPUs) > 0 && c.in.Group != nil && len(c.in.Group.Cpuset()) > 0
}

// addrNoRandomize is ADDR_NO_RANDOMIZE of <linux/personality.h>.
const addrNoRandomize = 0x0040000

// corePatternPath is where the kernel's core_pattern is read (a variable for tests).
var corePatternPath = "/proc/sys/kernel/core_pattern"

func (c *compiler) processKnobs(zs *spawn.ZygoteSpec, rl func(int, int64)) error {
	p := c.p
	if p.NoRandomizeMemory {
		zs.SetPersonality, zs.Personality = true, addrNoRandomize
	}
	zs.NoTHP = p.NoHugePages
	if len(c.in.CPUs) > 0 {
		// checked by Prepare (runCPUs); pinned by the affinity always, and by the
		// sandbox's cpuset where its cgroup has one
		zs.CPUs, zs.CPUInfo = c.in.CPUs, c.pl.cpuInfo
		c.pl.CPUVia = "sched_setaffinity"
		if c.cpuset() {
			c.pl.CPUVia = "cpuset_" + c.pl.Limits.Cgroup
		} else if c.in.Group != nil && c.in.Group.CpusetErr() != "" {
			c.cur.NotApplied = append(c.cur.NotApplied, "a cpuset cgroup for the run's CPUs ("+c.in.Group.CpusetErr()+"): the affinity pins them, and sched_setaffinity is refused")
		}
	}
	if p.NoCoredump == nil || *p.NoCoredump {
		rl(unix.RLIMIT_CORE, 0) // no core dumps of sandbox memory
		return nil
	}
	// Core dumps asked for: only where the sandbox may write anyway, and never
	// through a program of the host's (a piped core_pattern runs one, as root, on
	// the sandbox's memory).
	raw, err := os.ReadFile(corePatternPath)
	if err != nil {
		return protocol.Errorf(protocol.KindIsolation, "no_coredump=false: the kernel's core_pattern cannot be read (%v)", err)
	}
	pattern := strings.TrimSpace(string(raw))
	var probs policy.Problems
	switch {
	case strings.HasPrefix(pattern, "|"):
		probs.Add("no_coredump", "core dumps cannot be allowed: this host's kernel.core_pattern pipes them to a program (%q), which would run outside the sandbox on its memory", pattern)
	case strings.HasPrefix(pattern, "/"):
		dir := pattern[:strings.LastIndex(pattern, "/")+1]
		if strings.Contains(dir, "%") || !underAny(dir, p.FSWritable) {
			probs.Add("no_coredump", "core dumps cannot be allowed: this host's kernel.core_pattern writes them to %q, which is not under a writable path of the sandbox", pattern)
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &lim); err != nil || lim.Max == 0 {
		probs.Add("no_coredump", "core dumps cannot be allowed: this process's RLIMIT_CORE hard limit is 0 (raise it before starting the engine)")
	}
	if len(probs) > 0 {
		return &protocol.Error{Kind: protocol.KindInvalidPolicy, Message: policy.FormatProblems("invalid policy", probs), Problems: probs}
	}
	// a relative pattern lands in the dumping process's working directory, where
	// Landlock (the kernel opens the core file as that process) allows it only
	// under fs_writable; the soft limit goes up to the host's hard one
	zs.Rlimits = append(zs.Rlimits, spawn.Rlimit{Resource: unix.RLIMIT_CORE, Cur: lim.Max, Max: lim.Max})
	c.pl.CorePattern = pattern
	return nil
}

// underAny reports whether dir (ending in "/") is in one of the trees.
func underAny(dir string, trees []string) bool {
	for _, t := range trees {
		if t == "/" || strings.HasPrefix(dir, strings.TrimSuffix(t, "/")+"/") {
			return true
		}
	}
	return false
}

// cpuList writes a CPU set as "0-3,6".
func cpuList(s *unix.CPUSet) string {
	var parts []string
	for i := 0; i < policy.MaxCPU; i++ {
		if !s.IsSet(i) {
			continue
		}
		j := i
		for j+1 < policy.MaxCPU && s.IsSet(j+1) {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", i, j))
		} else {
			parts = append(parts, fmt.Sprint(i))
		}
		i = j
	}
	return strings.Join(parts, ",")
}
