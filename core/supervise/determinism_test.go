//go:build linux

package supervise

import (
	"encoding/hex"
	"slices"
	"testing"
)

// TestDetStreamDerivation pins the documented derivation (docs/security.md,
// "Determinism"): AES-256-CTR, zero IV, keyed by SHA-256("sandtrap random_seed
// v1" || seed || index || kind || n). The vector was computed with openssl enc
// -aes-256-ctr and Python's hashlib, not with this code: seed 42, the process with
// pid 1 in its run's namespace (index 2^32 + 1), getrandom's stream.
func TestDetStreamDerivation(t *testing.T) {
	got := hex.EncodeToString(fill(detStream(42, 1<<32|1, 0, 0), 32))
	if want := "86ae5f0ea05d26d1474e7376357288a925fc6bb2b0828ed6ef0e55bde65afdd3"; got != want {
		t.Fatalf("stream = %s, want %s", got, want)
	}
	if hex.EncodeToString(fill(detStream(42, 1<<32|1, 1, 0), 32)) == got {
		t.Fatal("the /dev/urandom stream repeats getrandom's")
	}
}

// TestDetTrapsOnlyWhenAsked: without the fields nothing more is trapped (no path
// that does not use them pays), and each field traps only its own calls.
func TestDetTrapsOnlyWhenAsked(t *testing.T) {
	names := func(cfg Config) []string {
		var out []string
		for _, tr := range Traps(cfg) {
			out = append(out, tr.Syscall)
		}
		return out
	}
	plain := names(Config{})
	if !slices.Equal(names(Config{Det: &Determinism{}}), plain) {
		t.Fatalf("an empty Determinism traps more: %v", names(Config{Det: &Determinism{}}))
	}
	seed, ts := uint64(1), 1.0
	for _, c := range []struct {
		d    Determinism
		want []string
	}{
		{Determinism{Seed: &seed}, []string{"open", "openat", "getrandom"}},
		{Determinism{TimeStart: &ts}, []string{"open", "openat", "clock_gettime", "gettimeofday", "time"}},
		{Determinism{SortDirs: true}, []string{"getdents64"}},
	} {
		got := names(Config{Det: &c.d})
		if !slices.Equal(got[len(plain):], c.want) {
			t.Errorf("%+v traps %v, want %v", c.d, got[len(plain):], c.want)
		}
	}
}
