package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandtrap/sandtrap/core/kernel"
)

type vectorFile struct {
	Base    map[string]any `json:"base_policy"`
	Vectors []vector       `json:"vectors"`
}

type vector struct {
	Name     string         `json:"name"`
	Policy   map[string]any `json:"policy"`
	Argv     []string       `json:"argv"`
	Stdin    *string        `json:"stdin"`
	Timeout  float64        `json:"timeout"`
	Fixtures []string       `json:"fixtures"`
	Requires map[string]any `json:"requires"`
	Expect   map[string]any `json:"expect"`
	Note     string         `json:"note"`
}

// vectorsDir is tests/vectors, or $SANDTRAP_VECTORS (the unprivileged run copies it).
func vectorsDir() string {
	if d := os.Getenv("SANDTRAP_VECTORS"); d != "" {
		return d
	}
	return "../../tests/vectors"
}

func loadVectors(t *testing.T) vectorFile {
	b, err := os.ReadFile(filepath.Join(vectorsDir(), "attacks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(b, &vf); err != nil {
		t.Fatal(err)
	}
	return vf
}

// quietTempDir makes a 0755 directory, removed after the test, where few entries
// sit beside it (/var/tmp when writable): granting a tree and denying a path under
// a busy /tmp makes a Landlock rule per sibling and passes 1,024.
func quietTempDir(t *testing.T, prefix string) string {
	base := os.TempDir()
	if st, err := os.Stat("/var/tmp"); err == nil && st.IsDir() && unix.Access("/var/tmp", unix.W_OK) == nil {
		base = "/var/tmp"
	}
	tmp, err := os.MkdirTemp(base, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o755)
	return tmp
}

// layout creates the {tmp} tree of tests/vectors/README.md.
// {tmp} lives where few entries sit beside it (/var/tmp), as in the Python and Node
// runs: a vector granting "/" and denying a path under {tmp} makes a Landlock rule
// per sibling of each directory on the way, and a busy /tmp passes 1,024.
func layout(t *testing.T) string {
	tmp := quietTempDir(t, "sandtrap-vec-")
	attack, err := os.ReadFile(filepath.Join(vectorsDir(), "attack.py"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"bin/attack.py": string(attack), "work/public.txt": "PUBLIC",
		"work/denied/secret.txt": "TOPSECRET", "work/sub/keep.txt": "KEEP", "outside/secret.txt": "TOPSECRET",
		"outside/run.sh": "#!/bin/sh\necho escaped\n",
	}
	for name, content := range files {
		p := filepath.Join(tmp, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return tmp
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

func serve(t *testing.T, l net.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HELLO"))
			c.Close()
		}
	}()
}

func subst(v any, r *strings.Replacer) any {
	switch t := v.(type) {
	case string:
		s := r.Replace(t)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && s != t && !strings.Contains(t, "/") {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				return n
			}
		}
		return s
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = subst(x, r)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, x := range t {
			out[k] = subst(x, r)
		}
		return out
	case float64:
		if t == float64(int64(t)) {
			return int64(t)
		}
	}
	return v
}

func survivors(cmdline string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == cmdline {
			out = append(out, pid)
		}
	}
	return out
}

// TestVectors runs the shared attack vectors through the engine.
func TestVectors(t *testing.T) {
	vf := loadVectors(t)
	f := kernel.Probe()
	for _, vec := range vf.Vectors {
		vec := vec
		t.Run(vec.Name, func(t *testing.T) {
			if abi, ok := vec.Requires["landlock_abi"].(float64); ok && f.LandlockABI < int(abi) {
				t.Skipf("needs Landlock ABI %v, kernel has %d", abi, f.LandlockABI)
			}
			if root, ok := vec.Requires["root"].(bool); ok && root != f.Root {
				t.Skipf("needs root=%v", root)
			}
			tmp := layout(t)
			repl := []string{"{tmp}", tmp, "{python}", "/usr/bin/python3"}
			var hostProc *exec.Cmd
			env := &vecEnv{}
			for _, fx := range vec.Fixtures {
				switch fx {
				case "recording_listener":
					l, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					env.rec = record(t, l)
					repl = append(repl, "{rec_port}", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
				case "sink_listener":
					l, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { l.Close() }) // never accepts, never reads
					repl = append(repl, "{sink_port}", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
				case "host_ipc":
					key := hostFixture(t, "ipc-key")
					t.Cleanup(func() { hostFixture(t, "ipc-sweep", key, "1") })
					hostFixture(t, "ipc-create", key)
					repl = append(repl, "{ipc_key}", key)
				case "free_ipc_key":
					key := hostFixture(t, "ipc-key")
					env.freeKey = key
					t.Cleanup(func() { hostFixture(t, "ipc-sweep", key, "64") })
					repl = append(repl, "{free_ipc_key}", key)
				case "user_xattrs":
					hostFixture(t, "xattrs", tmp)
				case "symlinks":
					if err := os.Symlink(filepath.Join(tmp, "work"), filepath.Join(tmp, "worklink")); err != nil {
						t.Fatal(err)
					}
				case "mknod_zero":
					hostFixture(t, "mknod", filepath.Join(tmp, "bin", "zero"), "1", "5")
				case "root_block_device":
					dev := hostFixture(t, "rootdev")
					if dev == "" {
						t.Skip("fixture root_block_device: no block device node holds /")
					}
					repl = append(repl, "{rootdev}", dev)
				case "tcp_listener":
					l, err := net.Listen("tcp", "127.0.0.1:0")
					if err != nil {
						t.Fatal(err)
					}
					serve(t, l)
					p := l.Addr().(*net.TCPAddr).Port
					repl = append(repl, "{port}", strconv.Itoa(p), "{other_port}", strconv.Itoa(p+1))
				case "free_port":
					p := freePort(t)
					repl = append(repl, "{free_port}", strconv.Itoa(p), "{other_port}", strconv.Itoa(p+1))
				case "abstract_listener":
					name := fmt.Sprintf("sandtrap-test-%d-%d", os.Getpid(), time.Now().UnixNano())
					l, err := net.Listen("unix", "@"+name)
					if err != nil {
						t.Fatal(err)
					}
					serve(t, l)
					repl = append(repl, "{abstract}", name)
				case "host_process":
					hostProc = exec.Command("sleep", "60")
					if err := hostProc.Start(); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { hostProc.Process.Kill(); hostProc.Wait() })
					repl = append(repl, "{pid}", strconv.Itoa(hostProc.Process.Pid))
				default:
					t.Fatalf("unknown fixture %q", fx)
				}
			}
			r := strings.NewReplacer(repl...)
			pol := map[string]any{}
			for k, v := range vf.Base {
				pol[k] = subst(v, r)
			}
			for k, v := range vec.Policy {
				if v == nil {
					delete(pol, k)
				} else {
					pol[k] = subst(v, r)
				}
			}
			sb, err := NewFromMap(pol)
			if want, ok := vec.Expect["build_error_kind"].(string); ok {
				if err == nil {
					sb.Close()
					t.Fatalf("build: want a %s error, the sandbox was built", want)
				}
				e, _ := err.(*Error)
				if e == nil || e.Kind != want {
					t.Fatalf("build: want a %s error, got %v", want, err)
				}
				if subs, ok := vec.Expect["build_error_contains"].([]any); ok {
					for _, sub := range subs {
						if w := r.Replace(sub.(string)); !strings.Contains(e.Message, w) {
							t.Errorf("build error lacks %q: %s", w, e.Message)
						}
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("policy: %v", err)
			}
			defer sb.Close()
			req := &RunRequest{StdinFD: -1, StdoutFD: -1, Timeout: vec.Timeout}
			for _, a := range vec.Argv {
				req.Argv = append(req.Argv, r.Replace(a))
			}
			if vec.Stdin != nil {
				req.Stdin = []byte(*vec.Stdin)
			}
			start := time.Now()
			res := sb.Run(req)
			wall := time.Since(start)
			env.hostProc, env.r = hostProc, r
			for _, e := range expectErrors(vec.Expect, res, wall, env) {
				t.Error(e)
			}
		})
	}
}

// vecEnv is what a case's fixtures left for its expect keys.
type vecEnv struct {
	hostProc *exec.Cmd
	r        *strings.Replacer
	rec      *recorder
	freeKey  string
}

// expectErrors checks every expect key; nil when all hold.
func expectErrors(exp map[string]any, res *Result, wall time.Duration, env *vecEnv) []string {
	hostProc, r := env.hostProc, env.r
	var errs []string
	errorf := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	out := strings.TrimSpace(string(res.Stdout))
	ctx := func() string {
		kind := ""
		if res.Error != nil {
			kind = res.Error.Kind + ": " + res.Error.Message
		}
		ec, sig := "nil", "nil"
		if res.ExitCode != nil {
			ec = strconv.Itoa(*res.ExitCode)
		}
		if res.Signal != nil {
			sig = strconv.Itoa(*res.Signal)
		}
		so := out
		if len(so) > 200 {
			so = so[:200]
		}
		return fmt.Sprintf("stdout=%q stderr=%q exit=%s signal=%s error=%s", so, string(res.Stderr), ec, sig, kind)
	}
	for k, want := range exp {
		switch k {
		case "stdout":
			if out != want.(string) {
				errorf("stdout: want %q; %s", want, ctx())
			}
		case "stdout_in":
			ok := false
			for _, w := range want.([]any) {
				ok = ok || out == w.(string)
			}
			if !ok {
				errorf("stdout: want one of %v; %s", want, ctx())
			}
		case "stdout_startswith":
			if !strings.HasPrefix(out, want.(string)) {
				errorf("stdout: want prefix %q; %s", want, ctx())
			}
		case "stderr_contains":
			if !strings.Contains(string(res.Stderr), want.(string)) {
				errorf("stderr: want %q; %s", want, ctx())
			}
		case "exit_code":
			if want == nil {
				if res.ExitCode != nil {
					errorf("exit_code: want nil; %s", ctx())
				}
			} else if res.ExitCode == nil || *res.ExitCode != int(want.(float64)) {
				errorf("exit_code: want %v; %s", want, ctx())
			}
		case "signal":
			if res.Signal == nil || *res.Signal != int(want.(float64)) {
				errorf("signal: want %v; %s", want, ctx())
			}
		case "success":
			if res.Success != want.(bool) {
				errorf("success: want %v; %s", want, ctx())
			}
		case "timed_out":
			if res.TimedOut != want.(bool) {
				errorf("timed_out: want %v; %s", want, ctx())
			}
		case "stdout_truncated":
			if res.StdoutTruncated != want.(bool) {
				errorf("stdout_truncated: want %v; %s", want, ctx())
			}
		case "error_kind":
			if res.Error == nil || res.Error.Kind != want.(string) {
				errorf("error kind: want %v; %s", want, ctx())
			}
		case "stdout_len":
			if len(res.Stdout) != int(want.(float64)) {
				errorf("stdout length %d, want %v", len(res.Stdout), want)
			}
		case "max_wall_s":
			if wall.Seconds() > want.(float64) {
				errorf("took %v, want at most %vs", wall, want)
			}
		case "host_process_alive":
			if hostProc == nil || hostProc.Process.Signal(syscall.Signal(0)) != nil {
				errorf("host process did not survive; %s", ctx())
			}
		case "no_survivor":
			// a process of an earlier test's run that is still being killed can match
			// for a moment: a survivor is one still there 3 s on (the vectors' daemons
			// sleep 30 s)
			pids := survivors(r.Replace(want.(string)))
			for deadline := time.Now().Add(3 * time.Second); len(pids) > 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				pids = survivors(r.Replace(want.(string)))
			}
			if len(pids) > 0 {
				errorf("processes %v (%q) outlived the run", pids, want)
			}
		case "build_error_kind", "build_error_contains":
			errorf("the sandbox was built (build_error_kind is checked before the run)")
		case "no_setid_under":
			root := r.Replace(want.(string))
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if st, err := os.Lstat(p); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					errorf("%s is left with mode %v (set-id)", p, st.Mode())
				}
				return nil
			})
		case "free_ipc_key_unused":
			var found []string
			if err := json.Unmarshal([]byte(hostFixtureOut("ipc-sweep", env.freeKey, "64")), &found); err != nil {
				errorf("ipc-sweep: %v", err)
			} else if (len(found) == 0) != want.(bool) {
				errorf("IPC objects the run left on the host: %v", found)
			}
		case "rec_listener_connections", "rec_listener_got":
			if env.rec == nil {
				errorf("%s needs the recording_listener fixture", k)
				break
			}
			n, got := env.rec.settle()
			if k == "rec_listener_connections" && n != int(want.(float64)) {
				errorf("recording listener: %d connections, want %v (received %q); %s", n, want, got, ctx())
			}
			if k == "rec_listener_got" && got != want.(string) {
				errorf("recording listener received %q, want %q; %s", got, want, ctx())
			}
		case "one_of":
			var why []string
			ok := false
			for i, alt := range want.([]any) {
				e := expectErrors(alt.(map[string]any), res, wall, env)
				if len(e) == 0 {
					ok = true
					break
				}
				why = append(why, fmt.Sprintf("alternative %d: %s", i, strings.Join(e, "; ")))
			}
			if !ok {
				errorf("one_of: none holds: %s", strings.Join(why, " | "))
			}
		default:
			errorf("unknown expect key %q", k)
		}
	}
	return errs
}

// hostFixtureOut runs tests/vectors/host_fixtures.py (the fixtures every harness
// shares) and returns its output; "" on failure.
func hostFixtureOut(args ...string) string {
	out, err := exec.Command("/usr/bin/python3", append([]string{filepath.Join(vectorsDir(), "host_fixtures.py")}, args...)...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func hostFixture(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{filepath.Join(vectorsDir(), "host_fixtures.py")}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("host_fixtures.py %v: %v %s", args, err, msg)
	}
	return strings.TrimSpace(string(out))
}

// recorder is a TCP listener that accepts, sends HELLO, and records what it receives.
type recorder struct {
	mu    sync.Mutex
	conns int
	got   []byte
	wg    sync.WaitGroup
}

func record(t *testing.T, l net.Listener) *recorder {
	rc := &recorder{}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			rc.mu.Lock()
			rc.conns++
			rc.mu.Unlock()
			rc.wg.Add(1)
			go func() {
				defer rc.wg.Done()
				defer c.Close()
				c.Write([]byte("HELLO"))
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				b, _ := io.ReadAll(c)
				rc.mu.Lock()
				rc.got = append(rc.got, b...)
				rc.mu.Unlock()
			}()
		}
	}()
	return rc
}

// settle waits a moment for what is in flight, then reports connections and bytes.
func (rc *recorder) settle() (int, string) {
	time.Sleep(300 * time.Millisecond)
	done := make(chan struct{})
	go func() { rc.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.conns, string(rc.got)
}
