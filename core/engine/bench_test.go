package engine

import (
	"testing"

	runs "github.com/sandtrap/sandtrap/core/run"
)

func benchRun(b *testing.B, extra map[string]any) {
	m := map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}}
	for k, v := range extra {
		m[k] = v
	}
	sb, err := NewFromMap(m)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r := sb.Run(&RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1}); !r.Success {
			b.Fatal(r.Error)
		}
	}
}

func BenchmarkRunNoLimits(b *testing.B) { benchRun(b, nil) }
func BenchmarkRunMemory(b *testing.B)   { benchRun(b, map[string]any{"max_memory": "256M"}) }
func BenchmarkRunPids(b *testing.B)     { benchRun(b, map[string]any{"max_processes": int64(64)}) }
func BenchmarkRunCPUTime(b *testing.B)  { benchRun(b, map[string]any{"max_cpu_time": 10.0}) }

// BenchmarkRunDenials: /bin/true with the per-run denial log (attach and detach of
// its pid namespace, the result's denial keys) and without (the sandbox's log only):
//
//	go test -tags sandtrap_testhook -run '^$' -bench RunDenials -count 5 ./core/engine
func BenchmarkRunDenials(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(map[bool]string{false: "per-run", true: "sandbox-log-only"}[off], func(b *testing.B) {
			runs.NoAttribution = off
			defer func() { runs.NoAttribution = false }()
			benchRun(b, nil)
		})
	}
}
