package engine

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/profile"
)

func policyOf(t *testing.T, pol map[string]any, drop string, extra map[string]any) map[string]any {
	t.Helper()
	m := map[string]any{"timeout": 30.0}
	for k, v := range pol {
		var list []any
		for _, p := range v.([]string) {
			if p != drop {
				list = append(list, p)
			}
		}
		m[k] = list
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// TestLearnFiles: learn a command that reads a file and writes another (in a
// directory under the base policy's fs_writable); the learned policy, narrower,
// runs it, and the same policy without any one learned path does not. A write
// outside fs_writable is refused while learning, and learned.
func TestLearnFiles(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	in := filepath.Join(dir, "in.txt")
	outDir := filepath.Join(dir, "out")
	os.WriteFile(in, []byte("hello\n"), 0o644)
	os.Mkdir(outDir, 0o777)
	os.Chmod(outDir, 0o777)
	out := filepath.Join(outDir, "result.txt")
	argv := []string{"/bin/sh", "-c", fmt.Sprintf("cat %s > %s && echo done", in, out)}
	// outside fs_writable: refused, learned
	sb := mustSandbox(t, map[string]any{"fs_readable": []any{"/usr"}, "timeout": 30.0})
	lr, err := sb.Learn(&RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if lr.Result.Success {
		t.Errorf("the learning run wrote outside fs_writable: %q", lr.Result.Stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the learning run created a file outside fs_writable")
	}
	if w, _ := lr.Policy["fs_writable"].([]string); !slices.Equal(w, []string{outDir}) {
		t.Errorf("the refused write was not learned: %v", lr.Policy)
	}
	// inside the base's fs_writable: done, learned narrower
	sb = mustSandbox(t, map[string]any{"fs_readable": []any{"/usr"}, "fs_writable": []any{dir}, "timeout": 30.0})
	lr, err = sb.Learn(&RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !lr.Result.Success {
		t.Fatalf("the learning run: %+v %s", lr.Result.Error, lr.Result.Stderr)
	}
	os.Remove(out)
	readable, _ := lr.Policy["fs_readable"].([]string)
	writable, _ := lr.Policy["fs_writable"].([]string)
	t.Logf("learned %v; profile:\n%s", lr.Policy, lr.Profile)
	if !slices.Contains(readable, in) || !slices.Equal(writable, []string{outDir}) {
		t.Fatalf("learned fs_readable %v fs_writable %v: want %s read and %s writable", readable, writable, in, outDir)
	}
	if !strings.Contains(lr.Profile, fmt.Sprintf("fs_writable = [\n  %q,\n]", outDir)) {
		t.Errorf("profile: %s", lr.Profile)
	}
	// the profile is one --profile-file and load_profile read: the learned policy
	if prof, err := profile.Parse("learned.toml", []byte(lr.Profile)); err != nil {
		t.Errorf("the learned profile does not load: %v\n%s", err, lr.Profile)
	} else if w, _ := prof.Policy["fs_writable"].([]any); len(w) != 1 || w[0] != outDir || len(prof.Policy["fs_readable"].([]any)) != len(readable) {
		t.Errorf("the learned profile holds %v, not %v", prof.Policy, lr.Policy)
	}
	good := mustSandbox(t, policyOf(t, lr.Policy, "", nil))
	if r := run(good, argv...); !r.Success || strings.TrimSpace(string(r.Stdout)) != "done" {
		t.Fatalf("the learned policy: %+v %q %q", r.Error, r.Stdout, r.Stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != "hello\n" {
		t.Fatalf("wrote %q", b)
	}
	// the paths the command cannot do without (the others it learned it used, but
	// tolerates missing: ld.so.cache, locale files)
	essential := []string{in, outDir, "/usr/bin/cat", "/usr/lib/x86_64-linux-gnu/libc.so.6"}
	for _, drop := range essential {
		if !slices.Contains(readable, drop) && !slices.Contains(writable, drop) {
			if _, err := os.Stat(drop); err == nil {
				t.Errorf("%s was not learned", drop)
			}
			continue
		}
		os.Remove(out)
		m := policyOf(t, lr.Policy, drop, nil)
		bad, err := NewFromMap(m)
		if err != nil {
			t.Fatalf("without %s: %v", drop, err)
		}
		r := run(bad, argv...)
		bad.Close()
		if r.Success {
			t.Errorf("succeeded without the learned path %s", drop)
		}
	}
}

// TestLearnConnect: a destination the learning run tried is learned (refused while
// learning); the learned policy reaches it.
func TestLearnConnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf("import socket,sys\ns=socket.socket()\nsys.exit(s.connect_ex(('127.0.0.1',%d)))", port)
	argv := []string{sysPython, "-S", "-c", script}
	sb := mustSandbox(t, map[string]any{"fs_readable": []any{"/usr"}, "timeout": 30.0})
	lr, err := sb.Learn(&RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if lr.Result.ExitCode == nil || *lr.Result.ExitCode != 13 {
		t.Errorf("the learning run's connect: exit %v, want EACCES (13): %s", lr.Result.ExitCode, lr.Result.Stderr)
	}
	want := fmt.Sprintf("127.0.0.1:%d", port)
	if nets, _ := lr.Policy["net_allow"].([]string); !slices.Contains(nets, want) || slices.Contains(nets, learnSentinel[0]) {
		t.Fatalf("learned net_allow %v, want %s (and no sentinel)", lr.Policy["net_allow"], want)
	}
	good := mustSandbox(t, policyOf(t, lr.Policy, "", nil))
	if r := run(good, argv...); !r.Success {
		t.Fatalf("the learned policy: exit %v %+v %s", r.ExitCode, r.Error, r.Stderr)
	}
	bad := mustSandbox(t, policyOf(t, lr.Policy, want, map[string]any{"net_allow": []any{"127.0.0.1:1"}}))
	if r := run(bad, argv...); r.Success {
		t.Errorf("connected without the learned destination")
	}
}

// TestLearnKeepsSetIDRefused: learning continues the path calls it traps, but a
// file created with a set-id mode is still refused (the filter's rule, which the
// trap overlaps).
func TestLearnKeepsSetIDRefused(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	sb := mustSandbox(t, map[string]any{"fs_readable": []any{"/usr"}, "fs_writable": []any{dir}, "timeout": 30.0})
	script := fmt.Sprintf(`import os
for name, f in (("open", lambda p: os.open(p, os.O_CREAT|os.O_WRONLY, 0o4755)), ("mkdir", lambda p: os.mkdir(p, 0o2755))):
    try:
        f(os.path.join(%q, name)); print(name, "OK")
    except OSError as e: print(name, e.errno)
`, dir)
	lr, err := sb.Learn(&RunRequest{Argv: []string{sysPython, "-S", "-c", script}, StdinFD: -1, StdoutFD: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(lr.Result.Stdout)); got != "open 1\nmkdir 1" {
		t.Errorf("set-id creation while learning: %q (want EPERM for both) %s", got, lr.Result.Stderr)
	}
	for _, n := range []string{"open", "mkdir"} {
		if st, err := os.Stat(filepath.Join(dir, n)); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s made a set-id file while learning", n)
		}
	}
}
