package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/vmihailenco/msgpack/v5"
)

var basePolicy = map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}, "timeout": 30.0}

func newSB(t *testing.T, extra map[string]any) *Sandbox {
	t.Helper()
	m := map[string]any{}
	for k, v := range basePolicy {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	sb, err := NewFromMap(m)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	t.Cleanup(sb.Close)
	return sb
}

func run(sb *Sandbox, argv ...string) *Result {
	return sb.Run(&RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1})
}

func request(t *testing.T, sb *Sandbox, req map[string]any) (map[string]any, string) {
	t.Helper()
	b, err := msgpack.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, kind := sb.Exec(b)
	var m map[string]any
	if err := msgpack.Unmarshal(resp, &m); err != nil {
		t.Fatalf("response is not msgpack: %v", err)
	}
	return m, kind
}

func TestInvalidPolicyListsEveryProblem(t *testing.T) {
	_, err := NewFromMap(map[string]any{
		"fs_readable":         []any{"relative/dir", "/no/such/path", "/tmp/a\x00b"},
		"max_memory":          int64(-5),
		"max_processes":       "ten",
		"bogus_field":         true,
		"net_allow_bind":      []any{int64(70000)},
		"extra_deny_syscalls": []any{"not_a_syscall"},
		"timeout":             -1.0,
	})
	if err == nil {
		t.Fatal("invalid policy accepted")
	}
	e := err.(*Error)
	if e.Kind != KindInvalidPolicy {
		t.Fatalf("kind %q", e.Kind)
	}
	for _, want := range []string{"relative/dir", "/no/such/path", "NUL", "max_memory", "max_processes", "bogus_field", "70000", "not_a_syscall", "timeout"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message lacks %q: %s", want, e.Message)
		}
	}
}

func TestDeniedInsideAllowedMustNotContainAllowed(t *testing.T) {
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr/lib"}, "fs_denied": []any{"/usr"}})
	if err == nil || !strings.Contains(err.Error(), "fs_denied: /usr contains /usr/lib, which is granted") {
		t.Fatalf("want a conflict error, got %v", err)
	}
}

func TestBadRequests(t *testing.T) {
	sb := newSB(t, nil)
	cases := []struct {
		name string
		raw  []byte
		want string
	}{
		{"malformed", []byte{0xc1, 0xff, 0x00}, "malformed msgpack"},
		{"empty", nil, "empty input"},
		{"not a map", mustPack([]any{1, 2}), "want a msgpack map"},
		{"trailing", append(mustPack(map[string]any{"op": "run", "argv": []any{"true"}}), 0x01), "trailing bytes"},
		{"no op", mustPack(map[string]any{"argv": []any{"true"}}), "op: missing"},
		{"unknown op", mustPack(map[string]any{"op": "explode"}), "unknown op"},
		{"unknown key", mustPack(map[string]any{"op": "run", "argv": []any{"true"}, "argz": 1}), "argz: unknown field"},
		{"nul in argv", mustPack(map[string]any{"op": "run", "argv": []any{"echo", "a\x00b"}}), "NUL"},
		{"empty argv", mustPack(map[string]any{"op": "run", "argv": []any{}}), "non-empty"},
		{"argv not strings", mustPack(map[string]any{"op": "run", "argv": []any{"echo", 5}}), "argv: element 1"},
		{"negative output cap", mustPack(map[string]any{"op": "run", "argv": []any{"true"}, "max_output": -1}), "negative"},
		{"relative cwd", mustPack(map[string]any{"op": "run", "argv": []any{"true"}, "cwd": "rel"}), "relative"},
		{"bad timeout", mustPack(map[string]any{"op": "run", "argv": []any{"true"}, "timeout": "soon"}), "timeout"},
		{"non-string key", []byte{0x81, 0x01, 0x02}, "not a string"},
		{"huge declared map", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "overruns"},
		{"huge declared string", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, "overruns"},
		{"deep nesting", bytes.Repeat([]byte{0x91}, 100000), "nested deeper"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, kind := sb.Exec(c.raw)
			if kind != KindInvalidRequest {
				t.Fatalf("kind %q", kind)
			}
			var m map[string]any
			if err := msgpack.Unmarshal(resp, &m); err != nil {
				t.Fatal(err)
			}
			e := m["error"].(map[string]any)
			if e["kind"] != KindInvalidRequest || !strings.Contains(e["message"].(string), c.want) {
				t.Fatalf("error %v, want message containing %q", e, c.want)
			}
			if probs, _ := e["problems"].([]any); len(probs) == 0 {
				t.Fatalf("error %v lists no problems", e)
			}
		})
	}
}

// Every problem of a request or a policy crosses as {field, message}: a binding
// reads the list, never the text.
func TestErrorResponsesCarryProblems(t *testing.T) {
	sb := newSB(t, nil)
	problems := func(req map[string]any) []policy.Problem {
		t.Helper()
		resp, _ := sb.Exec(mustPack(req))
		var m struct {
			Error ErrorInfo `msgpack:"error"`
		}
		if err := msgpack.Unmarshal(resp, &m); err != nil {
			t.Fatal(err)
		}
		return m.Error.Problems
	}
	got := problems(map[string]any{"op": "run", "argv": []any{"true"}, "cwd": "rel", "timeout": -1, "argz": 1})
	want := []policy.Problem{{Field: "argz", Message: "unknown field of run (known: op, argv, stdin, timeout, env, cwd, tag, max_output)"},
		{Field: "timeout", Message: "-1 must be a positive number of seconds"},
		{Field: "cwd", Message: `path "rel" is relative; give an absolute path`}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("run: %#v", got)
	}
	got = problems(map[string]any{"op": "pipeline", "stages": []any{map[string]any{"argv": []any{"true"}},
		map[string]any{"argv": []any{"true"}, "max_output": "lots", "stdin": "x"}}})
	want = []policy.Problem{{Field: "stages[1].max_output", Message: `"lots" is not a size (examples: 1048576, "512K", "256M", "1.5G")`},
		{Field: "stages[1].stdin", Message: "only the pipeline itself takes stdin"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pipeline: %#v", got)
	}
	// a relative path resolves against the working directory: the problem names the absolute path
	wd, _ := os.Getwd()
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"rel"}, "fs_readble": nil})
	var e *Error
	if !errors.As(err, &e) || !reflect.DeepEqual(e.Problems, []policy.Problem{
		{Field: "fs_readble", Message: "unknown field; did you mean fs_readable?"},
		{Field: "fs_readable", Message: filepath.Join(wd, "rel") + ": no such file or directory"}}) {
		t.Errorf("policy: %#v", err)
	}
}

func mustPack(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestRunThroughProtocol(t *testing.T) {
	sb := newSB(t, nil)
	m, kind := request(t, sb, map[string]any{"op": "run", "argv": []any{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if kind != "" {
		t.Fatalf("kind %q", kind)
	}
	if !bytes.Equal(m["stdout"].([]byte), []byte("out\n")) || !bytes.Equal(m["stderr"].([]byte), []byte("err\n")) {
		t.Fatalf("output %q %q", m["stdout"], m["stderr"])
	}
	if fmt.Sprint(m["exit_code"]) != "3" || m["success"] != false {
		t.Fatalf("exit %v success %v", m["exit_code"], m["success"])
	}
	iso := m["isolation"].(map[string]any)
	if iso["landlock"] == nil || iso["seccomp"] == nil || iso["no_new_privs"] != true {
		t.Fatalf("isolation report incomplete: %v", iso)
	}
	usage := m["usage"].(map[string]any)
	if usage["wall_s"].(float64) <= 0 {
		t.Fatalf("usage %v", usage)
	}
}

func TestTimeoutKillsWholeTree(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("sleep %d", 3000+os.Getpid()%1000)
	start := time.Now()
	res := sb.Run(&RunRequest{Argv: []string{"sh", "-c", "(setsid sh -c '" + marker + " & " + marker + "' &); " + marker}, StdinFD: -1, StdoutFD: -1, Timeout: 0.5})
	if !res.TimedOut || res.Error == nil || res.Error.Kind != KindTimeout {
		t.Fatalf("not timed out: %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Fatalf("%v survived the timeout", pids)
	}
}

func TestChildrenOfExitedMainAreKilled(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("sleep %d", 4000+os.Getpid()%1000)
	res := run(sb, "sh", "-c", marker+" >/dev/null 2>&1 & echo bye")
	if !res.Success || strings.TrimSpace(string(res.Stdout)) != "bye" {
		t.Fatalf("%+v", res)
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Fatalf("%v outlived the main process", pids)
	}
}

func TestCancelFromAnotherGoroutine(t *testing.T) {
	sb := newSB(t, nil)
	marker := fmt.Sprintf("sleep %d", 5000+os.Getpid()%1000)
	done := make(chan *Result)
	go func() {
		done <- sb.Run(&RunRequest{Argv: []string{"sh", "-c", marker + " & " + marker}, StdinFD: -1, StdoutFD: -1, Tag: "job-1"})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(survivors(marker)) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := sb.Cancel("other-tag", false); n != 0 {
		t.Fatalf("cancelled %d runs of another tag", n)
	}
	if n := sb.Cancel("job-1", false); n != 1 {
		t.Fatalf("cancelled %d runs, want 1", n)
	}
	res := <-done
	if !res.Cancelled || res.Error.Kind != KindCancelled {
		t.Fatalf("%+v", res)
	}
	if pids := survivors(marker); len(pids) > 0 {
		t.Fatalf("%v survived cancel", pids)
	}
}

func TestManyConcurrentRuns(t *testing.T) {
	sb := newSB(t, nil)
	run(sb, "true") // the zygote and its supervisor hold fds of their own
	fdsBefore := countFDs(t)
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				want := fmt.Sprintf("%d-%d", g, i)
				res := run(sb, "echo", want)
				if !res.Success || strings.TrimSpace(string(res.Stdout)) != want {
					errs <- fmt.Sprintf("%s: %+v", want, res.Error)
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if after := countFDs(t); after > fdsBefore+2 {
		t.Fatalf("fds leaked: %d before, %d after", fdsBefore, after)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestOutputFloodIsCappedAndDrained(t *testing.T) {
	sb := newSB(t, map[string]any{"max_output": "1M"})
	start := time.Now()
	res := run(sb, "sh", "-c", "head -c 104857600 /dev/zero; echo done >&2")
	if !res.Success || !res.StdoutTruncated || len(res.Stdout) != 1<<20 || string(res.Stderr) != "done\n" {
		t.Fatalf("success=%v truncated=%v len=%d stderr=%q", res.Success, res.StdoutTruncated, len(res.Stdout), res.Stderr)
	}
	t.Logf("100 MB drained in %v", time.Since(start))
}

func TestPipelineStagesKeepTheirOwnPolicy(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "secret.csv"), []byte("secret,data\n"), 0o644)
	trusted := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}})
	restricted := newSB(t, nil)
	Register(trusted)
	Register(restricted)
	defer Unregister(trusted)
	defer Unregister(restricted)
	m, kind := request(t, trusted, map[string]any{"op": "pipeline", "stages": []any{
		map[string]any{"argv": []any{"cat", filepath.Join(dir, "secret.csv")}},
		map[string]any{"argv": []any{"tr", "a-z", "A-Z"}, "sandbox": restricted.ID()},
	}})
	if kind != "" || string(m["stdout"].([]byte)) != "SECRET,DATA\n" {
		t.Fatalf("kind %q stdout %q err %v", kind, m["stdout"], m["error"])
	}
	if n := len(m["stages"].([]any)); n != 2 {
		t.Fatalf("%d stages", n)
	}
	// the second stage itself cannot read the file
	m, _ = request(t, trusted, map[string]any{"op": "pipeline", "stages": []any{
		map[string]any{"argv": []any{"echo", "x"}},
		map[string]any{"argv": []any{"cat", filepath.Join(dir, "secret.csv")}, "sandbox": restricted.ID()},
	}})
	if !strings.Contains(string(m["stderr"].([]byte)), "Permission denied") {
		t.Fatalf("restricted stage read the file: %v", m)
	}
}

func TestMaxCPUThrottles(t *testing.T) {
	f := kernel.Probe()
	if f.Cgroup == nil {
		t.Skip("no cgroup: max_cpu is unavailable here (tested as isolation_unavailable elsewhere)")
	}
	if _, ok := f.Cgroup.Dirs["cpu"]; !ok {
		t.Skip("no cpu controller")
	}
	sb := newSB(t, map[string]any{"max_cpu": int64(20)})
	res := sb.Run(&RunRequest{Argv: []string{"sh", "-c", "while :; do :; done"}, StdinFD: -1, StdoutFD: -1, Timeout: 1.5})
	if !res.TimedOut {
		t.Fatalf("%+v", res.Error)
	}
	share := res.Usage.CPUTreeS / res.Usage.WallS
	t.Logf("cpu %.2fs over %.2fs wall = %.0f%%", res.Usage.CPUTreeS, res.Usage.WallS, share*100)
	if share > 0.35 {
		t.Fatalf("max_cpu=20%% but the loop got %.0f%% of a CPU", share*100)
	}
}

func TestMemoryLimitReported(t *testing.T) {
	sb := newSB(t, map[string]any{"max_memory": "64M"})
	res := run(sb, "/usr/bin/python3", "-c", "x = bytearray(512 << 20); print('allocated')")
	if res.Success || strings.Contains(string(res.Stdout), "allocated") {
		t.Fatalf("512 MiB allocated under a 64 MiB limit: %+v", res)
	}
	via := res.Isolation.Limits["max_memory"].Via
	t.Logf("via %s, signal %v, error %+v, stderr %q", via, res.Signal, res.Error, res.Stderr)
	if strings.HasPrefix(via, "cgroup") && (res.Error == nil || res.Error.Kind != KindMemory) && !strings.Contains(string(res.Stderr), "MemoryError") {
		t.Fatalf("want memory_limit or MemoryError, got %+v", res.Error)
	}
}

func TestUIDSwitchAsRoot(t *testing.T) {
	if !kernel.Probe().Root {
		_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "uid": int64(65534), "gid": int64(65534)})
		if err == nil || !strings.Contains(err.Error(), "root") {
			t.Fatalf("non-root uid switch: %v", err)
		}
		return
	}
	sb := newSB(t, map[string]any{"uid": int64(65534), "gid": int64(65534)})
	res := run(sb, "id", "-u")
	if strings.TrimSpace(string(res.Stdout)) != "65534" {
		t.Fatalf("%+v %q", res.Error, res.Stderr)
	}
}

// A host name is resolved at build and enforced by the supervisor: no degradation;
// the report says who enforces what. A name that does not resolve is a problem of
// the policy, listed with the others.
func TestNetHostRules(t *testing.T) {
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "net_allow": []any{"localhost:443", "udp://127.0.0.1:53"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	iso := sb.isolation()
	if len(iso.Degraded) != 0 {
		t.Fatalf("degraded: %v", iso.Degraded)
	}
	n := iso.Net
	if n == nil || n.Mode != "allow" || !n.Supervised || len(n.Resolved["localhost"]) == 0 || !strings.Contains(n.Floor, "443") {
		t.Fatalf("net report: %+v", n)
	}
	if !slices.Contains(iso.Seccomp.Supervised, "connect") || !slices.Contains(iso.Seccomp.Supervised, "sendmsg") || !iso.Seccomp.UDP {
		t.Fatalf("seccomp report: %+v", iso.Seccomp)
	}
	// ports for any host: the kernel alone, nothing trapped
	plain, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "net_allow": []any{"443", "*:8080"}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if iso := plain.isolation(); iso.Net.Supervised || slices.Contains(iso.Seccomp.Supervised, "connect") {
		t.Fatalf("port rules trap connect: %+v %+v", iso.Net, iso.Seccomp.Supervised)
	}
	_, err = NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "net_allow": []any{"no-such-host.invalid:443", "udp://:99999"}})
	if err == nil || err.(*Error).Kind != KindInvalidPolicy || !strings.Contains(err.Error(), "does not resolve") || !strings.Contains(err.Error(), "99999") {
		t.Fatalf("bad rules: %v", err)
	}
}

func TestPipelineFailureShows(t *testing.T) {
	sb := newSB(t, nil)
	stage := func(argv ...string) Stage {
		return Stage{Sandbox: sb, Req: &RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1}}
	}
	for _, c := range []struct {
		name    string
		stages  []Stage
		success bool
		failed  int // -1: none
		kind    string
	}{
		{"first stage missing", []Stage{stage("/no/such/program"), stage("cat")}, false, 0, KindNotFound},
		{"middle stage exits 3", []Stage{stage("echo", "x"), stage("sh", "-c", "cat; exit 3"), stage("cat")}, false, 1, KindStageFailed},
		{"last stage exits 2", []Stage{stage("echo", "x"), stage("sh", "-c", "exit 2")}, false, 1, ""},
		{"upstream ended by SIGPIPE", []Stage{stage("yes"), stage("head", "-1")}, true, -1, ""},
	} {
		r := Pipeline(c.stages, nil)
		kind := ""
		if r.Error != nil {
			kind = r.Error.Kind
		}
		failed := -1
		if r.FailedStage != nil {
			failed = *r.FailedStage
		}
		if r.Success != c.success || failed != c.failed || kind != c.kind {
			t.Errorf("%s: success %v failed_stage %d kind %q (%+v), want %v %d %q", c.name, r.Success, failed, kind, r.Error, c.success, c.failed, c.kind)
		}
	}
}

// A denied path deep in a crowded tree, under a grant whose Landlock table pid 1
// builds (a run's own /proc), expands into more rules than the table holds: the
// policy is refused with the reason, not the run with an internal error.
func TestTooManyLandlockRules(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < spawn.MaxLandlockRules+10; i++ {
		if err := os.Mkdir(filepath.Join(dir, "d"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/"}, "fs_denied": []any{filepath.Join(dir, "d0")}})
	if err == nil {
		defer sb.Close()
		if v := sb.isolation().View; v == nil {
			t.Skip("no view of its own here: the engine builds the ruleset itself, with no table")
		}
		res := sb.Run(&RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1})
		t.Fatalf("built; the run gave %+v", res.Error)
	}
	e, _ := err.(*Error)
	if e == nil || e.Kind != KindInvalidPolicy || len(e.Problems) != 1 || e.Problems[0].Field != "fs_denied" ||
		!strings.Contains(e.Message, "Landlock rules, more than") {
		t.Fatalf("want invalid_policy on fs_denied naming the rule count, got %v", err)
	}
}

// icmp:// rules on a host whose ping_group_range leaves the sandbox's group out
// reach nothing: the report says so, rather than letting the rule look effective.
func TestNetICMPNote(t *testing.T) {
	const sysctl = "/proc/sys/net/ipv4/ping_group_range"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Skip(err)
	}
	note := func() []string {
		sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "net_allow": []any{"icmp://127.0.0.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		return sb.isolation().Net.Notes
	}
	if os.Geteuid() != 0 {
		t.Logf("%s is %q; notes: %q", sysctl, old, note())
		return
	}
	t.Cleanup(func() { os.WriteFile(sysctl, old, 0) })
	if err := os.WriteFile(sysctl, []byte("1 0"), 0); err != nil {
		t.Skip(err)
	}
	if n := note(); len(n) != 1 || !strings.Contains(n[0], "ping_group_range") {
		t.Errorf("ping sockets off: notes %q", n)
	}
	if err := os.WriteFile(sysctl, []byte("0 2147483647"), 0); err != nil {
		t.Fatal(err)
	}
	if n := note(); len(n) != 0 {
		t.Errorf("ping sockets on: notes %q", n)
	}
}

// No run outlives its supervisor: one that fails (Abort, as an error of its loop
// would) takes the zygote and its runs with it; the next run gets a new one.
func TestSupervisorFailureKillsTheRun(t *testing.T) {
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin"}, "net_allow": []any{"127.0.0.1:9"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	done := make(chan *Result, 1)
	go func() {
		done <- sb.Run(&RunRequest{Argv: []string{"/bin/sleep", "30"}, StdinFD: -1, StdoutFD: -1})
	}()
	var sup interface{ Abort(string) }
	for i := 0; i < 200 && sup == nil; i++ {
		time.Sleep(10 * time.Millisecond)
		sb.zmu.Lock()
		if sb.sup != nil {
			sup = sb.sup
		}
		sb.zmu.Unlock()
	}
	if sup == nil {
		t.Fatal("no supervisor started")
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	sup.Abort("test")
	select {
	case res := <-done:
		if res.Error == nil && res.Signal == nil && res.ExitCode != nil && *res.ExitCode == 0 {
			t.Fatalf("the run succeeded: %+v", res)
		}
		t.Logf("the run ended %v after the abort: signal %v, error %+v", time.Since(start), ptrVal(res.Signal), res.Error)
	case <-time.After(5 * time.Second):
		t.Fatal("the run outlived its supervisor")
	}
	if res := sb.Run(&RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1}); res.Error != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("the next run: %+v", res.Error)
	}
}

func ptrVal(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
