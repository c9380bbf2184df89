package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
)

func input(t *testing.T, m map[string]any, edit func(*kernel.Features)) *Input {
	t.Helper()
	p, probs := policy.Decode(m)
	f := kernel.Probe()
	edit(&f)
	in, err := Prepare(p, f, probs)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// The plan is its named steps in order; what a step could not apply is the step's
// (typed), and the report's degraded list is derived from them.
func TestStepsAndDerivedReport(t *testing.T) {
	in := input(t, map[string]any{"fs_readable": []any{"/usr"}, "allow_degraded": true, "max_memory": int64(64 << 20)},
		func(f *kernel.Features) { f.LandlockABI, f.Seccomp, f.Cgroup = 0, false, nil })
	pl, err := Compile(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	var names []string
	for _, st := range pl.Steps {
		names = append(names, st.Name)
	}
	want := []string{StepView, StepLandlock, StepTree, StepLimits, StepSeccomp, StepZygote}
	if !slices.Equal(names, want) {
		t.Fatalf("steps %v, want %v", names, want)
	}
	if pl.Steps[1].Missing[0] != "landlock (filesystem rules)" || pl.Steps[4].Missing[0] != "seccomp" {
		t.Fatalf("missing: %+v", pl.Steps)
	}
	if pl.Limits.Memory != RlimitAS || pl.Zygote.ASLimit != 64<<20 || pl.SCCfg.NoSysVMemory {
		// (no seccomp step: no filter config either)
		t.Fatalf("memory by %q, zygote RLIMIT_AS %d", pl.Limits.Memory, pl.Zygote.ASLimit)
	}
	rep := pl.Isolation()
	for _, d := range []string{"max_memory enforced per process by RLIMIT_AS (no memory cgroup)",
		"not applied: landlock (filesystem rules)", "not applied: seccomp"} {
		if !slices.Contains(rep.Degraded, d) {
			t.Errorf("report's degraded %q lacks %q", rep.Degraded, d)
		}
	}
	if rep.Landlock != nil || rep.Seccomp != nil || rep.Limits["max_memory"].Via != "rlimit_as" {
		t.Errorf("report %+v", rep)
	}
	// the report is a copy: changing it changes no plan
	rep.Degraded[0] = "x"
	if pl.Isolation().Degraded[0] == "x" {
		t.Fatal("Isolation returned the plan's own report")
	}
}

// Without allow_degraded, a missing protection fails the plan (isolation
// unavailable) with every missing one named.
func TestMissingFailsClosed(t *testing.T) {
	in := input(t, map[string]any{"fs_readable": []any{"/usr"}},
		func(f *kernel.Features) { f.LandlockABI, f.Seccomp = 0, false })
	_, err := Compile(in, 0)
	var e *protocol.Error
	if !errors.As(err, &e) || e.Kind != protocol.KindIsolation || !strings.HasPrefix(e.Message, "isolation unavailable: ") ||
		!strings.Contains(e.Message, "landlock (filesystem rules); ") || !strings.HasSuffix(e.Message, "seccomp (pass allow_degraded to run without it)") {
		t.Fatalf("err %v", err)
	}
}
