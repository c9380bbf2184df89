package engine

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// layout creates the {tmp} tree of tests/vectors/README.md.
func layout(t *testing.T) string {
	tmp := t.TempDir()
	os.Chmod(tmp, 0o755)
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
			for _, fx := range vec.Fixtures {
				switch fx {
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
			checkExpect(t, vec.Expect, res, wall, hostProc, r)
		})
	}
}

func checkExpect(t *testing.T, exp map[string]any, res *Result, wall time.Duration, hostProc *exec.Cmd, r *strings.Replacer) {
	t.Helper()
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
				t.Errorf("stdout: want %q; %s", want, ctx())
			}
		case "stdout_in":
			ok := false
			for _, w := range want.([]any) {
				ok = ok || out == w.(string)
			}
			if !ok {
				t.Errorf("stdout: want one of %v; %s", want, ctx())
			}
		case "stdout_startswith":
			if !strings.HasPrefix(out, want.(string)) {
				t.Errorf("stdout: want prefix %q; %s", want, ctx())
			}
		case "stderr_contains":
			if !strings.Contains(string(res.Stderr), want.(string)) {
				t.Errorf("stderr: want %q; %s", want, ctx())
			}
		case "exit_code":
			if want == nil {
				if res.ExitCode != nil {
					t.Errorf("exit_code: want nil; %s", ctx())
				}
			} else if res.ExitCode == nil || *res.ExitCode != int(want.(float64)) {
				t.Errorf("exit_code: want %v; %s", want, ctx())
			}
		case "signal":
			if res.Signal == nil || *res.Signal != int(want.(float64)) {
				t.Errorf("signal: want %v; %s", want, ctx())
			}
		case "success":
			if res.Success != want.(bool) {
				t.Errorf("success: want %v; %s", want, ctx())
			}
		case "timed_out":
			if res.TimedOut != want.(bool) {
				t.Errorf("timed_out: want %v; %s", want, ctx())
			}
		case "stdout_truncated":
			if res.StdoutTruncated != want.(bool) {
				t.Errorf("stdout_truncated: want %v; %s", want, ctx())
			}
		case "error_kind":
			if res.Error == nil || res.Error.Kind != want.(string) {
				t.Errorf("error kind: want %v; %s", want, ctx())
			}
		case "stdout_len":
			if len(res.Stdout) != int(want.(float64)) {
				t.Errorf("stdout length %d, want %v", len(res.Stdout), want)
			}
		case "max_wall_s":
			if wall.Seconds() > want.(float64) {
				t.Errorf("took %v, want at most %vs", wall, want)
			}
		case "host_process_alive":
			if hostProc == nil || hostProc.Process.Signal(syscall.Signal(0)) != nil {
				t.Errorf("host process did not survive; %s", ctx())
			}
		case "no_survivor":
			if pids := survivors(r.Replace(want.(string))); len(pids) > 0 {
				t.Errorf("processes %v (%q) outlived the run", pids, want)
			}
		default:
			t.Fatalf("unknown expect key %q", k)
		}
	}
}
