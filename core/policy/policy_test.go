package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{"0": 0, "1024": 1024, "64K": 64 << 10, "256M": 256 << 20, "256MB": 256 << 20,
		"1.5G": 3 << 29, "2GiB": 2 << 30, "1T": 1 << 40, " 8m ": 8 << 20}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "ten", "1Q", "NaN", "1e30G"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestParsePorts(t *testing.T) {
	got, probs := ParsePorts([]any{int64(80), "443", "8000-8005", int64(80)})
	want := []uint16{80, 443, 8000, 8001, 8002, 8003, 8004, 8005}
	if len(probs) != 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v %v", got, probs)
	}
	_, probs = ParsePorts([]any{int64(0), "70000", "9-1", "x", 1.5})
	if len(probs) != 5 {
		t.Fatalf("want 5 problems, got %v", probs)
	}
}

func TestFromMapCollectsEverything(t *testing.T) {
	_, err := FromMap(map[string]any{"fs_readable": "/usr", "clean_env": "yes", "env": map[string]any{"A=B": "x", "C": int64(1)},
		"uid": int64(5), "qqqq": 1, "net_allow": []any{"host:notaport"}})
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{"fs_readable: want a list", "clean_env", "A=B", `env: the value of "C" is an integer, not a string`,
		"uid: must be given together with gid", "qqqq: unknown field", "host:notaport"} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in %s", want, msg)
		}
	}
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != 7 {
		t.Fatalf("want 7 problems, got %#v", err)
	}
	if pe.Problems[0] != (Problem{Field: "qqqq", Message: "unknown field"}) {
		t.Errorf("unknown keys come first, by name: %+v", pe.Problems[0])
	}
}

func TestNetAllowAndDeny(t *testing.T) {
	p, err := FromMap(map[string]any{"net_allow": []any{int64(443), "80", "example.com:8443", "[::1]:22", "*"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.NetAllow {
		got = append(got, fmt.Sprintf("%s %s %v %v %v", r.Proto, r.Host, r.Nets, r.Any, r.Ports))
	}
	want := []string{"tcp  [] true [{443 443}]", "tcp  [] true [{80 80}]", "tcp example.com [] false [{8443 8443}]",
		"tcp  [::1/128] false [{22 22}]", "tcp  [] true []"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q", got)
	}
	_, err = FromMap(map[string]any{"net_allow": []any{"a.example:1"}, "net_deny": []any{"10.0.0.0/8"}, "net_allow_udp": true})
	if err == nil || !strings.Contains(err.Error(), "cannot be combined") || !strings.Contains(err.Error(), "net_allow_udp: means nothing") {
		t.Fatalf("both lists: %v", err)
	}
}

func TestHostname(t *testing.T) {
	for _, ok := range []string{"api.local", "a", "x-1.example", strings.Repeat("a", 63) + "b"} {
		if p, probs := Decode(map[string]any{"name": ok}); len(probs) != 0 || p.Name != ok {
			t.Errorf("%q: %v", ok, probs)
		}
	}
	for _, bad := range []any{"", strings.Repeat("a", 65), "a b", "a..b", ".a", "-a", "a-", "a/b", "a\x00", "é", int64(1)} {
		if _, probs := Decode(map[string]any{"name": bad}); len(probs) != 1 || probs[0].Field != "name" {
			t.Errorf("%q: %v", bad, probs)
		}
	}
}

// Relative paths of the filesystem fields resolve against the working directory
// of the process building the sandbox; cwd stays absolute-only.
func TestRelativePathsResolveAgainstTheWorkingDirectory(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	p, probs := Decode(map[string]any{"fs_readable": []any{".", "sub/../x"}, "fs_writable": []any{"w"},
		"fs_denied": []any{"./d"}, "workdir": "..", "cwd": "rel"})
	if want := (Problems{{"cwd", `path "rel" is relative; give an absolute path`}}); !reflect.DeepEqual(probs, want) {
		t.Fatalf("problems %v, want %v", probs, want)
	}
	for _, c := range []struct{ got, want string }{{p.FSReadable[0], wd}, {p.FSReadable[1], filepath.Join(wd, "x")},
		{p.FSWritable[0], filepath.Join(wd, "w")}, {p.FSDenied[0], filepath.Join(wd, "d")}, {p.Workdir, filepath.Dir(wd)}} {
		if c.got != c.want {
			t.Errorf("resolved to %q, want %q", c.got, c.want)
		}
	}
}

func TestBranchActions(t *testing.T) {
	p, probs := Decode(map[string]any{"on_exit": "KEEP", "on_error": "commit"})
	if len(probs) != 0 || p.OnExit != BranchKeep || p.OnError != BranchCommit {
		t.Fatalf("%+v %v", p, probs)
	}
	if p.ExitAction(true) != BranchKeep || p.ExitAction(false) != BranchCommit {
		t.Fatal("actions")
	}
	if d := (&Policy{}); d.ExitAction(true) != BranchCommit || d.ExitAction(false) != BranchAbort {
		t.Fatal("defaults: commit on success, abort on failure")
	}
	_, probs = Decode(map[string]any{"on_exit": "merge", "on_error": int64(1)})
	want := Problems{{"on_error", "want a string, got an integer"}, {"on_exit", `"merge" is not a branch action (commit, abort or keep)`}}
	sort.Slice(probs, func(i, j int) bool { return probs[i].Field < probs[j].Field })
	if !reflect.DeepEqual(probs, want) {
		t.Fatalf("got %v", probs)
	}
}
