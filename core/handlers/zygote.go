package handlers

import (
	"slices"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
)

// The zygotes of host runs: one per sandbox and distinct set of trapped syscalls,
// whose filter is the sandbox's with those syscalls trapped whole.

// hostZyg is a zygote whose filter traps a host run's syscalls.
type hostZyg struct {
	key  string
	zyg  *spawn.Zygote
	pl   *plan.Plan
	base *plan.Plan
}

var (
	hostZygMu sync.Mutex
	hostZygs  = map[Sandbox]map[string]*hostZyg{}
)

// hostZygote is the sandbox's zygote for r's trapped syscalls (started when none
// is, or when fresh died).
func hostZygote(s Sandbox, r *hostRun, fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error) {
	base, err := s.Plan()
	if err != nil {
		return nil, nil, err
	}
	if base.BPF == nil {
		return nil, nil, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: handlers and policy_fn need seccomp")
	}
	if !base.PidNS {
		return nil, nil, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: handlers and policy_fn need a pid namespace per run (to tell runs apart)")
	}
	key := strings.Join(r.syscalls, ",")
	hostZygMu.Lock()
	defer hostZygMu.Unlock()
	m := hostZygs[s]
	if m == nil {
		m = map[string]*hostZyg{}
		hostZygs[s] = m
		s.OnClose(func() { closeHostZygotes(s) })
	}
	if hz := m[key]; hz != nil {
		if hz.zyg != fresh && hz.base == base {
			return hz.zyg, hz.pl, nil
		}
		delete(m, key)
		go hz.zyg.Close()
	}
	sup := base.Supervise
	sup.Host = &supervise.Host{Syscalls: r.syscalls, Base: base.BPF.BPF, RulesetFD: -1}
	if base.Ruleset != nil {
		sup.Host.RulesetFD = base.Ruleset.FD
	}
	if sup.Net == nil && s.NetPlan().Wanted() && (slices.Contains(r.syscalls, "connect") || slices.Contains(r.syscalls, "sendto")) {
		// the host judges destinations: connect and sendto are performed with the
		// address it saw (a racing thread cannot change it), so the supervisor
		// enforces the Landlock floor itself (the calls it performs are not the
		// sandbox's: Landlock does not see them)
		sup.Net = s.NetPlan().Floor()
	}
	whole := map[string]bool{}
	for _, t := range base.SCCfg.Traps {
		if t.Arg < 0 && !t.NonZero {
			whole[t.Syscall] = true
		}
	}
	traps := append([]seccomp.Trap{}, base.SCCfg.Traps...)
	for _, t := range supervise.HostTraps(sup.Host) {
		if !whole[t.Syscall] {
			traps = append(traps, t)
		}
	}
	pl, err := base.WithTraps(traps, sup)
	if err != nil {
		return nil, nil, err
	}
	zs := *pl.Zygote
	if cg := s.Group(); cg != nil {
		zs.CgroupFDs = cg.ProcFDs()
	}
	z, err := spawn.StartZygote(&zs)
	if err != nil {
		return nil, nil, err
	}
	sv, err := supervise.Start(z.Listener, pl.Supervise)
	if err != nil {
		z.Close()
		return nil, nil, protocol.Errorf(protocol.KindIsolation, "isolation unavailable: the supervisor: %v", err)
	}
	z.OnClose(sv.Close)
	// no run outlives its supervisor: the zygote's runs die with it
	sv.OnFail(z.Close)
	// its runs are attached to it (core/run): denials and host calls by run
	runs.AddSupervisor(z, sv, true)
	m[key] = &hostZyg{key: key, zyg: z, pl: pl, base: base}
	return z, pl, nil
}

func closeHostZygotes(s Sandbox) {
	hostZygMu.Lock()
	m := hostZygs[s]
	delete(hostZygs, s)
	hostZygMu.Unlock()
	for _, hz := range m {
		hz.zyg.Close()
	}
}
