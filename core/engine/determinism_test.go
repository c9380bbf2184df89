package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// randomProbe prints every source of randomness random_seed covers: getrandom
// (os.urandom, random.random unseeded, uuid4), /dev/urandom and /dev/random by
// several spellings (relative to /dev, "..", a directory fd), and AT_RANDOM.
const randomProbe = `
import os, random, uuid, ctypes
print(os.urandom(32).hex())
print(random.random())
print(uuid.uuid4())
print(open("/dev/urandom", "rb").read(64).hex())
print(open("/dev/random", "rb").read(16).hex())
print(open("/dev/../dev/urandom", "rb").read(16).hex())
d = os.open("/dev", os.O_RDONLY | os.O_DIRECTORY)
print(os.read(os.open("urandom", os.O_RDONLY, dir_fd=d), 16).hex())
os.chdir("/dev")
print(open("urandom", "rb").read(16).hex())
libc = ctypes.CDLL(None)
libc.getauxval.restype = ctypes.c_ulong
print(ctypes.string_at(libc.getauxval(25), 16).hex())
`

func probeRandom(t *testing.T, extra map[string]any) []string {
	t.Helper()
	if extra == nil {
		extra = map[string]any{}
	}
	extra["fs_readable"] = []any{"/usr", "/lib", "/bin", "/dev"}
	sb := newSB(t, extra)
	r := run(sb, "/usr/bin/python3", "-I", "-c", randomProbe)
	if !r.Success {
		t.Fatalf("probe: %+v %s", r.Error, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	if len(lines) != 9 {
		t.Fatalf("probe printed %q", r.Stdout)
	}
	return lines
}

// TestRandomSeed: two runs with the same seed print the same bytes from every
// source, a different seed changes every one of them, and without a seed two runs
// differ (so that the equality is the seed's doing).
func TestRandomSeed(t *testing.T) {
	a := probeRandom(t, map[string]any{"random_seed": 42})
	b := probeRandom(t, map[string]any{"random_seed": 42})
	c := probeRandom(t, map[string]any{"random_seed": 43})
	n1 := probeRandom(t, nil)
	n2 := probeRandom(t, nil)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different output:\n%q\n%q", a, b)
	}
	for i := range a {
		if a[i] == c[i] {
			t.Errorf("line %d is the same under seeds 42 and 43: %s", i, a[i])
		}
		if n1[i] == n2[i] {
			t.Errorf("line %d is the same in two unseeded runs: %s", i, n1[i])
		}
		if a[i] == n1[i] {
			t.Errorf("line %d: the seeded run printed the unseeded run's %s", i, a[i])
		}
	}
	// streams of one run: the /dev/urandom opens differ from each other and from getrandom
	if a[3][:32] == a[0][:32] || a[5] == a[6] || a[6] == a[7] {
		t.Errorf("streams repeat within a run: %q", a)
	}
}

// TestRandomSeedPerProcess: each process of a run has its own stream, numbered by
// the order of its first call: a parent and its child print different bytes, and
// the pair is the same in two runs.
func TestRandomSeedPerProcess(t *testing.T) {
	prog := `import os, subprocess, sys
print(os.urandom(8).hex())
sys.stdout.flush()
subprocess.run(["/usr/bin/python3", "-I", "-c", "import os; print(os.urandom(8).hex())"])`
	var outs []string
	for i := 0; i < 2; i++ {
		sb := newSB(t, map[string]any{"random_seed": 7})
		r := run(sb, "/usr/bin/python3", "-I", "-c", prog)
		if !r.Success {
			t.Fatalf("%s exit %v signal %v stdout %q stderr %q denials %+v", r.Reason, ptrVal(r.ExitCode), ptrVal(r.Signal), r.Stdout, r.Stderr, r.Denials)
		}
		outs = append(outs, string(r.Stdout))
	}
	l := strings.Fields(outs[0])
	if outs[0] != outs[1] || len(l) != 2 || l[0] == l[1] {
		t.Errorf("per-process streams: %q", outs)
	}
}

// TestTimeStart: date +%s and Python's time.time() (the vDSO's clock_gettime,
// made a system call) are time_start plus the elapsed time, within a second, and
// advance; without time_start the host's clock is seen.
func TestTimeStart(t *testing.T) {
	const start = 946684800 // 2000-01-01T00:00:00Z
	sb := newSB(t, map[string]any{"time_start": "2000-01-01T00:00:00Z"})
	t0 := time.Now()
	r := run(sb, "/bin/sh", "-c", `date +%s; /usr/bin/python3 -I -c 'import time; print(int(time.time())); time.sleep(1.2); print(int(time.time()))'; date +%s`)
	elapsed := time.Since(t0).Seconds()
	if !r.Success {
		t.Fatalf("%+v %s", r.Error, r.Stderr)
	}
	var got []float64
	for _, f := range strings.Fields(string(r.Stdout)) {
		v, _ := strconv.ParseFloat(f, 64)
		got = append(got, v)
	}
	if len(got) != 4 {
		t.Fatalf("printed %q", r.Stdout)
	}
	for i, v := range got {
		if v < start || v > start+elapsed+1 {
			t.Errorf("reading %d: %v, want within [%d, %d+%.1f+1]", i, v, start, start, elapsed)
		}
	}
	if got[2]-got[1] < 1 {
		t.Errorf("the clock did not advance over a 1.2 s sleep: %v", got)
	}
	host := run(newSB(t, nil), "/bin/date", "+%s")
	if v, _ := strconv.ParseInt(strings.TrimSpace(string(host.Stdout)), 10, 64); v < time.Now().Unix()-5 {
		t.Errorf("without time_start: %q", host.Stdout)
	}
}

// TestDeterministicDirs: ls -f (getdents64 order, unsorted) lists a directory in
// name order, through many getdents64 calls (a large directory); without the field
// the same listing is not sorted (the filesystem's own order).
func TestDeterministicDirs(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	var want []string
	for i := 0; i < 600; i++ {
		name := fmt.Sprintf("f%03d-%s", (i*7919)%600, strings.Repeat("x", i%40))
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
		want = append(want, name)
	}
	want = append(want, ".", "..")
	slices.Sort(want)
	list := func(extra map[string]any) []string {
		extra["fs_readable"] = []any{"/usr", "/lib", "/bin", dir}
		r := run(newSB(t, extra), "/bin/ls", "-f", dir)
		if !r.Success {
			t.Fatalf("%+v %s", r.Error, r.Stderr)
		}
		return strings.Fields(string(r.Stdout))
	}
	if got := list(map[string]any{"deterministic_dirs": true}); !slices.Equal(got, want) {
		t.Errorf("ls -f under deterministic_dirs: %d entries, sorted %v; first %q", len(got), slices.IsSorted(got), got[:min(5, len(got))])
	}
	if got := list(map[string]any{}); slices.IsSorted(got) || len(got) != len(want) {
		t.Errorf("ls -f without deterministic_dirs is sorted already (%d entries): the test proves nothing", len(got))
	}
	// an O_PATH descriptor is not open for reading: the kernel's EBADF, never a
	// listing the supervisor made with its own rights
	atk := fmt.Sprintf(`import os, ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(%q, os.O_PATH | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(65536)
print(libc.syscall(217, fd, buf, 65536), ctypes.get_errno(), b"f000" in buf.raw)`, dir)
	for _, det := range []bool{true, false} {
		r := run(newSB(t, map[string]any{"deterministic_dirs": det, "fs_readable": []any{"/usr", "/lib", "/bin", dir}}), "/usr/bin/python3", "-I", "-c", atk)
		if got := strings.TrimSpace(string(r.Stdout)); got != "-1 9 False" {
			t.Errorf("getdents64 of an O_PATH fd (deterministic_dirs %v): %q %s", det, got, r.Stderr)
		}
	}
	// rewinddir and seekdir/telldir on the sorted listing
	prog := fmt.Sprintf(`import os
a = os.listdir(%q); b = os.listdir(%q)
print(a == b == sorted(a), len(a))`, dir, dir)
	r := run(newSB(t, map[string]any{"deterministic_dirs": true, "fs_readable": []any{"/usr", "/lib", "/bin", dir}}), "/usr/bin/python3", "-I", "-c", prog)
	if strings.TrimSpace(string(r.Stdout)) != "True 600" {
		t.Errorf("os.listdir twice: %q %s", r.Stdout, r.Stderr)
	}
}
