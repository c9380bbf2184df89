package plan

import (
	"runtime"

	"github.com/sandtrap/sandtrap/core/supervise"
)

// DeterminismReport is what the run's determinism fields took effect as
// (core/supervise/determinism.go; docs/security.md, "Determinism").
type DeterminismReport struct {
	RandomSeed        bool     `msgpack:"random_seed"`        // getrandom, /dev/urandom, /dev/random, AT_RANDOM from the seeded streams
	TimeStart         *float64 `msgpack:"time_start"`         // Unix seconds the run's wall clock started at
	DeterministicDirs bool     `msgpack:"deterministic_dirs"` // getdents64 sorted by name
	Via               string   `msgpack:"via"`                // "supervisor"
	VDSO              string   `msgpack:"vdso"`               // how programs that read the vDSO are covered
	NotDeterministic  []string `msgpack:"not_deterministic"`  // what these fields cannot make deterministic
}

func determinismReport(d *supervise.Determinism) *DeterminismReport {
	r := &DeterminismReport{RandomSeed: d.Seed != nil, TimeStart: d.TimeStart, DeterministicDirs: d.SortDirs, Via: "supervisor"}
	if d.Seed != nil || d.TimeStart != nil {
		r.VDSO = "clock_gettime, gettimeofday and time made system calls (getrandom: ENOSYS) in each program's vDSO at its first trapped call"
		if runtime.GOARCH != "amd64" {
			r.VDSO = "not patched on " + runtime.GOARCH + ": programs reading the clock through the vDSO see the host's time"
		}
	}
	r.NotDeterministic = []string{"thread and process scheduling: the order of concurrent work (two processes reading one pipe, threads sharing one stream), and pids where a runtime starts threads at varying times (a process's stream is named by its pid)",
		"the real network, other hosts and the host's files", "the rdtsc and rdrand/rdseed instructions",
		"CLOCK_MONOTONIC and CLOCK_BOOTTIME (they advance from the host's values)",
		"absolute CLOCK_REALTIME timers and sleeps (clock_nanosleep, timerfd, timer_settime with TIMER_ABSTIME): the host's clock",
		"file timestamps the kernel writes (mtime, ctime), /proc and /sys contents, pids outside a pid namespace",
		"a program that reads the vDSO clock before its first trapped call (normally none: the dynamic loader opens a file first)"}
	return r
}
