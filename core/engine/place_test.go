package engine

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Placement (issue 21): gpu_devices, num_cpus, cpu_cores' mechanism, no_supervisor.

// gpuStandIns makes a directory of stand-ins for NVIDIA's nodes (regular files:
// Landlock's rules do not care what an inode is; these machines have no GPU) and
// points the test hook at it.
func gpuStandIns(t *testing.T, gpus int) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	names := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"}
	for i := 0; i < gpus; i++ {
		names = append(names, "nvidia"+string(rune('0'+i)))
	}
	os.Mkdir(filepath.Join(dir, "nvidia-caps"), 0o755)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, n), 0o666)
	}
	t.Setenv("SANDTRAP_TEST_GPU_DIR", dir)
	return dir
}

// gpuNames are the stand-ins' names.
var gpuNames = []string{"nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
	"nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"}

// openEach opens every stand-in for reading and writing from inside the run, by
// name (a tree with paths carved out of it cannot be listed: Landlock only
// allows), and returns "ok" or "denied" by name.
func openEach(t *testing.T, sb *Sandbox, dir string) map[string]string {
	t.Helper()
	script := `cd "$1" || exit 9; shift; for f; do if (: <>"$f") 2>/dev/null; then echo "$f:ok"; else echo "$f:denied"; fi; done`
	r := run(sb, append([]string{"/bin/sh", "-c", script, "sh", dir}, gpuNames...)...)
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("run: %+v %s", r.Error, r.Stderr)
	}
	out := map[string]string{}
	for _, l := range strings.Fields(string(r.Stdout)) {
		k, v, _ := strings.Cut(l, ":")
		out[k] = v
	}
	return out
}

func TestGPUDevicesOpenOnlyTheChosenNodes(t *testing.T) {
	dir := gpuStandIns(t, 3)
	ro := []any{"/usr", "/lib", "/bin", dir}
	// without gpu_devices, the granted tree's files are all openable (stand-ins are
	// regular files): what follows is gpu_devices' doing
	sb := newSB(t, map[string]any{"fs_writable": []any{dir}})
	for f, v := range openEach(t, sb, dir) {
		if v != "ok" {
			t.Fatalf("control: %s %s", f, v)
		}
	}
	want := map[string]string{
		"nvidia0": "denied", "nvidia1": "ok", "nvidia2": "denied",
		"nvidiactl": "ok", "nvidia-uvm": "ok", "nvidia-uvm-tools": "ok", "nvidia-modeset": "ok",
		"nvidia-caps/nvidia-cap1": "denied", "nvidia-caps/nvidia-cap2": "denied",
	}
	for _, extra := range []map[string]any{
		{"fs_readable": ro}, // inside a readable tree: carved out
		{"fs_readable": []any{"/usr", "/lib", "/bin"}, "fs_writable": []any{dir}}, // inside a writable one
		{}, // no grant of the directory: only the chosen nodes' own rules
	} {
		extra["gpu_devices"] = []any{int64(1)}
		sb := newSB(t, extra)
		got := openEach(t, sb, dir)
		for n, w := range want {
			if got[n] != w {
				t.Errorf("%v: %s: %s, want %s", extra, n, got[n], w)
			}
		}
		rep := sb.Isolation().GPU
		if rep == nil || !slices.Equal(rep.Indices, []int{1}) || !rep.Present ||
			!slices.Contains(rep.Devices, filepath.Join(dir, "nvidia1")) || !slices.Contains(rep.Denied, filepath.Join(dir, "nvidia0")) {
			t.Errorf("report: %+v", rep)
		}
	}
	// "all": every GPU; the capability nodes (MIG) stay denied
	sb = newSB(t, map[string]any{"fs_readable": ro, "gpu_devices": "all"})
	got := openEach(t, sb, dir)
	for _, n := range []string{"nvidia0", "nvidia1", "nvidia2", "nvidiactl"} {
		if got[n] != "ok" {
			t.Errorf("all: %s %s", n, got[n])
		}
	}
	if got["nvidia-caps/nvidia-cap1"] != "denied" {
		t.Errorf("all: nvidia-caps: %v", got)
	}
}

func TestGPUDevicesRefusesWhatIsNotThere(t *testing.T) {
	dir := gpuStandIns(t, 2)
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "gpu_devices": []any{int64(1), int64(5)}})
	if err == nil || !strings.Contains(err.Error(), "gpu_devices: GPU 5 is not present on this host (it has 0-1)") {
		t.Fatalf("got %v", err)
	}
	// naming a node that gpu_devices leaves out is a contradiction
	_, err = NewFromMap(map[string]any{"fs_readable": []any{"/usr", filepath.Join(dir, "nvidia0")}, "gpu_devices": []any{int64(1)}})
	if err == nil || !strings.Contains(err.Error(), "nvidia0 is a GPU node gpu_devices leaves out") {
		t.Fatalf("got %v", err)
	}
	// no GPU at all: indices are refused; "all" runs and says so
	t.Setenv("SANDTRAP_TEST_GPU_DIR", t.TempDir())
	_, err = NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "gpu_devices": []any{int64(0)}})
	if err == nil || !strings.Contains(err.Error(), "no GPU is present on this host") {
		t.Fatalf("got %v", err)
	}
	sb := newSB(t, map[string]any{"gpu_devices": "all"})
	rep := sb.Isolation().GPU
	if rep == nil || rep.Present || len(rep.Devices) != 0 || !strings.Contains(rep.Note, "no GPU is present") {
		t.Fatalf("report: %+v", rep)
	}
	if r := run(sb, "/bin/true"); r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("run: %+v", r.Error)
	}
}

func allowedCPUs(t *testing.T) []int {
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &s); err != nil {
		t.Fatal(err)
	}
	var out []int
	for i := 0; i < 1024; i++ {
		if s.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

func TestNumCPUsIsWhatTheRunSees(t *testing.T) {
	cpus := allowedCPUs(t)
	// (allow_degraded: without a view, an unprivileged host cannot give each run a /proc)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", "/sys", "/proc"}, "num_cpus": int64(1), "allow_degraded": true})
	r := run(sb, "/bin/sh", "-c", "nproc; cat /sys/devices/system/cpu/online; getconf _NPROCESSORS_ONLN; grep -c ^processor /proc/cpuinfo")
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("run: %+v %s", r.Error, r.Stderr)
	}
	lines := strings.Fields(string(r.Stdout))
	rep := sb.Isolation().Process
	want := []string{"1", "1", "1", "1"}
	if rep.CPUFiles == nil {
		// no view: the files are the host's (the report says so: not_applied)
		lines = lines[:1]
		want = want[:1]
	} else {
		if !slices.Equal(rep.CPUFiles, []string{"/sys/devices/system/cpu/online", "/proc/cpuinfo"}) {
			t.Errorf("cpu_files: %v", rep.CPUFiles)
		}
		want[1] = itoa(cpus[0])
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("nproc, online, _NPROCESSORS_ONLN, cpuinfo's processors: %q, want %q (report %+v)", lines, want, rep)
	}
	if rep.NumCPUs != 1 || !slices.Equal(rep.CPUCores, cpus[:1]) {
		t.Fatalf("report: %+v", rep)
	}
	if os.Geteuid() == 0 {
		if rep.CPUVia != "cpuset_cgroup_v1" && rep.CPUVia != "cpuset_cgroup_v2" {
			t.Errorf("as root, the host's cgroup has a cpuset here: %+v", rep)
		}
	} else if rep.CPUVia != "sched_setaffinity" {
		t.Errorf("unprivileged: %+v", rep)
	}
	// the host's own file is untouched
	if got := strings.TrimSpace(readFile(t, "/sys/devices/system/cpu/online")); got == itoa(cpus[0]) && len(cpus) > 1 {
		t.Fatalf("the host's online file changed: %q", got)
	}
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "num_cpus": int64(len(cpus) + 1)})
	if err == nil || !strings.Contains(err.Error(), "num_cpus: ") || !strings.Contains(err.Error(), "a run sees only CPUs it can run on") {
		t.Fatalf("more CPUs than there are: %v", err)
	}
	if len(cpus) > 1 {
		_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "num_cpus": int64(2), "cpu_cores": []any{int64(cpus[0])}})
		if err == nil || !strings.Contains(err.Error(), "num_cpus: 2 is more than the 1 CPUs cpu_cores gives") {
			t.Fatalf("num_cpus above cpu_cores: %v", err)
		}
		sb := newSB(t, map[string]any{"num_cpus": int64(1), "cpu_cores": []any{int64(cpus[1])}})
		if rep := sb.Isolation().Process; !slices.Equal(rep.CPUCores, []int{cpus[1]}) {
			t.Fatalf("num_cpus within cpu_cores: %+v", rep)
		}
	}
}

// The program cannot widen its CPUs: refused (affinity alone) or held to the
// cpuset (the kernel intersects what it asks for with the cgroup's CPUs).
func TestPinnedRunCannotWidenItsCPUs(t *testing.T) {
	cpus := allowedCPUs(t)
	if len(cpus) < 2 {
		t.Skip("needs two CPUs")
	}
	sb := newSB(t, map[string]any{"cpu_cores": []any{int64(cpus[1])}})
	r := run(sb, "/bin/sh", "-c", "taskset -p -c "+itoa(cpus[0])+","+itoa(cpus[1])+" $$ >/dev/null 2>&1; echo rc=$?; grep Cpus_allowed_list /proc/self/status; taskset -c -p $$")
	out := string(r.Stdout)
	rep := sb.Isolation().Process
	if !strings.Contains(out, "current affinity list: "+itoa(cpus[1])+"\n") {
		t.Fatalf("widened: %q (report %+v)", out, rep)
	}
	if rep.CPUVia == "sched_setaffinity" && !strings.Contains(out, "rc=1") {
		t.Fatalf("sched_setaffinity not refused: %q", out)
	}
}

func TestNoSupervisorRunsWithoutOne(t *testing.T) {
	// inotify_add_watch is always the supervisor's to judge (it checks the path
	// against the policy): granted with one, refused by the filter without
	py := `import ctypes; l = ctypes.CDLL(None, use_errno=True); fd = l.inotify_init1(0); r = l.inotify_add_watch(fd, b"/usr", 1); print("watch", r >= 0, ctypes.get_errno())`
	sb := newSB(t, nil)
	if r := run(sb, "/usr/bin/python3", "-c", py); strings.TrimSpace(string(r.Stdout)) != "watch True 0" {
		t.Fatalf("supervised: %s %s", r.Stdout, r.Stderr)
	}
	if sb.sup == nil {
		t.Fatal("control: no supervisor")
	}
	sb = newSB(t, map[string]any{"no_supervisor": true})
	r := run(sb, "/usr/bin/python3", "-c", py)
	if got := strings.TrimSpace(string(r.Stdout)); got != "watch False 1" { // EPERM
		t.Fatalf("no_supervisor: the filter must refuse the watch: %q %s", got, r.Stderr)
	}
	if sb.sup != nil || sb.zyg == nil || sb.zyg.Listener >= 0 {
		t.Fatalf("a supervisor runs: sup %v", sb.sup)
	}
	rep := sb.Isolation().Seccomp
	if !rep.NoSupervisor || len(rep.Supervised) != 0 || !slices.Contains(append(rep.Refused, rep.Denied...), "flock") || !slices.Contains(rep.Refused, "inotify_add_watch") {
		t.Fatalf("report: %+v", rep)
	}
	// handlers need it
	res, _ := request(t, sb, map[string]any{"op": "run_handlers", "argv": []any{"/bin/true"},
		"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}})
	if e, _ := res["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "no_supervisor") {
		t.Fatalf("handlers: %v", res)
	}
}

func TestNoSupervisorRefusesTheFieldsThatNeedOne(t *testing.T) {
	for _, c := range []struct {
		extra map[string]any
		field string
	}{
		{map[string]any{"net_allow": []any{"10.0.0.0/8:22"}}, "net_allow: needs the syscall supervisor, which no_supervisor turns off"},
		{map[string]any{"net_allow": []any{"udp://1.1.1.1:53"}}, "net_allow: needs the syscall supervisor"},
		{map[string]any{"net_deny": []any{"10.0.0.0/8"}}, "net_deny: needs the syscall supervisor, which no_supervisor turns off"},
		{map[string]any{"http_allow": []any{"GET example.com/*"}}, "http_allow: needs the syscall supervisor, which no_supervisor turns off"},
		{map[string]any{"port_remap": true, "net_allow_bind": []any{int64(8080)}}, "port_remap: needs the syscall supervisor"},
		{map[string]any{"net_allow_bind": []any{int64(8080)}}, "net_allow_bind: needs the syscall supervisor"},
		{map[string]any{"random_seed": int64(7)}, "random_seed: needs the syscall supervisor"},
		{map[string]any{"time_start": "2000-01-01T00:00:00Z"}, "time_start: needs the syscall supervisor"},
		{map[string]any{"deterministic_dirs": true}, "deterministic_dirs: needs the syscall supervisor"},
		{map[string]any{"http_allow": []any{"GET example.com/*"}, "http_intercept": true}, "http_intercept: needs the syscall supervisor"},
	} {
		m := map[string]any{"fs_readable": []any{"/usr"}, "no_supervisor": true}
		for k, v := range c.extra {
			m[k] = v
		}
		_, err := NewFromMap(m)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%v: got %v", c.extra, err)
		}
	}
	// TCP ports alone are the kernel's (Landlock): allowed
	sb := newSB(t, map[string]any{"net_allow": []any{int64(443)}, "no_supervisor": true})
	if sb.Isolation().Net.Supervised {
		t.Fatal("ports alone are not supervised")
	}
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

// The file laid over /sys/devices/system/cpu/online lives in this process's
// temporary directory, which a sandbox of an unprivileged host (its own uid) may
// be able to write: a symlink (or another file) put in its place must not be
// mounted into a later sandbox's view, where the grant of /sys would reach it.
func TestNumCPUsFileCannotBeSwapped(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o644)
	ro := []any{"/usr", "/lib", "/bin", "/sys", "/proc"}
	// a sandbox whose zygote runs: each run's pid 1 opens the cpuinfo file anew
	early := newSB(t, map[string]any{"fs_readable": ro, "num_cpus": int64(1), "allow_degraded": true})
	if r := run(early, "/bin/cat", "/proc/cpuinfo"); r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("first run: %+v", r.Error)
	}
	sb := newSB(t, map[string]any{"fs_readable": ro, "num_cpus": int64(1), "allow_degraded": true})
	if sb.Isolation().Process.CPUFiles == nil {
		t.Skip("no view here: no file is laid over")
	}
	files, _ := filepath.Glob(filepath.Join(os.TempDir(), "sandtrap-cpus-"+itoa(os.Getpid()), "*-*"))
	if len(files) < 2 {
		t.Fatalf("files: %v", files)
	}
	for _, f := range files {
		os.Remove(f + ".swap")
		if err := os.Symlink(secret, f+".swap"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f+".swap", f); err != nil {
			t.Fatal(err)
		}
	}
	// the sandbox made before the swap starts its zygote now: the launcher finds
	// another inode at the path and refuses it
	r := run(sb, "/bin/cat", "/sys/devices/system/cpu/online")
	if strings.Contains(string(r.Stdout), "s3cret") || r.Error == nil || !strings.Contains(r.Error.Message, "stale") {
		t.Fatalf("the swapped file was mounted: %q %+v", r.Stdout, r.Error)
	}
	// (its next run's pid 1 was made ahead, before the swap: the one after it is
	// made now, and refuses the file)
	for i := 0; i < 2; i++ {
		r = run(early, "/bin/cat", "/proc/cpuinfo")
		if strings.Contains(string(r.Stdout), "s3cret") || i == 1 && (r.Error == nil || !strings.Contains(r.Error.Message, "stale")) {
			t.Fatalf("the swapped cpuinfo was mounted: %q %+v", r.Stdout, r.Error)
		}
	}
	// a sandbox made after it: refused by the plan (the path is a symlink)
	_, err := NewFromMap(map[string]any{"fs_readable": ro, "num_cpus": int64(1)})
	if err == nil || !strings.Contains(err.Error(), "num_cpus") {
		t.Fatalf("got %v", err)
	}
	for _, f := range files {
		os.Remove(f)
	}
	sb = newSB(t, map[string]any{"fs_readable": ro, "num_cpus": int64(1)})
	if r := run(sb, "/bin/cat", "/sys/devices/system/cpu/online"); r.ExitCode == nil || *r.ExitCode != 0 || strings.Contains(string(r.Stdout), "s3cret") {
		t.Fatalf("after removal: %q %+v", r.Stdout, r.Error)
	}
}
