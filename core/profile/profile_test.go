package profile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const good = `# a profile
[program]
exec = "python3"
args = ["-c", "print(1)"]
clean_env = true
env = { LANG = "C.UTF-8" }

[filesystem]
fs_readable = ["/usr", "/lib"]
fs_writable = ["/tmp"]

[network]
net_allow = ["api.example.com:443", 53]
net_allow_bind = [8080, "9000-9001"]

[limits]
max_memory = "256M"
max_processes = 10
timeout = 30
`

func TestGoodProfile(t *testing.T) {
	p, err := Parse("good.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"clean_env": true, "env": map[string]any{"LANG": "C.UTF-8"},
		"fs_readable": []any{"/usr", "/lib"}, "fs_writable": []any{"/tmp"},
		"net_allow": []any{"api.example.com:443", int64(53)}, "net_allow_bind": []any{int64(8080), "9000-9001"},
		"max_memory": "256M", "max_processes": int64(10), "timeout": int64(30),
	}
	if !reflect.DeepEqual(p.Policy, want) {
		t.Errorf("policy:\n got %#v\nwant %#v", p.Policy, want)
	}
	if got := p.Argv(); !reflect.DeepEqual(got, []string{"python3", "-c", "print(1)"}) {
		t.Errorf("argv %q", got)
	}
}

const bad = `[filesytem]
fs_readable = ["/usr"]

[limits]
max_memory = ["256M"]
max_procs = 4
fs_writable = ["/tmp"]
timeout = 1979-05-27

[config]
fs_storage = 5

[network]
net_allow_bind = "x-y"
`

// Every problem at once, each with file, line and key, in the policy's words.
func TestBadProfile(t *testing.T) {
	_, err := Parse("bad.toml", []byte(bad))
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("want *Error, got %v", err)
	}
	want := []struct {
		line int
		key  string
		msg  string
	}{
		{1, "filesytem", "unknown section; did you mean [filesystem]?"},
		{5, "limits.max_memory", "want a byte count or a size string like \"256M\", got a list; for example: max_memory = \"256M\""},
		{6, "limits.max_procs", "did you mean max_processes?"},
		{7, "limits.fs_writable", "fs_writable belongs in [filesystem], not [limits]"},
		{8, "limits.timeout", "got a date or time"},
		{11, "config.fs_storage", "want a string"},
		{14, "network.net_allow_bind", "want a list"},
	}
	if len(pe.Problems) != len(want) {
		t.Fatalf("want %d problems, got %d:\n%v", len(want), len(pe.Problems), err)
	}
	for i, w := range want {
		p := pe.Problems[i]
		if p.File != "bad.toml" || p.Line != w.line || p.Key != w.key || !strings.Contains(p.Message, w.msg) {
			t.Errorf("problem %d: got %s, want line %d key %s containing %q", i, p, w.line, w.key, w.msg)
		}
	}
}

func TestSyntaxError(t *testing.T) {
	_, err := Parse("x.toml", []byte("[limits]\nmax_memory = \n"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Problems[0].Line != 2 || !strings.Contains(pe.Error(), "x.toml:2") {
		t.Fatalf("got %v", err)
	}
}

func TestNamedProfiles(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	if err := os.MkdirAll(filepath.Join(dir, "sandtrap", "profiles"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "sandtrap", "profiles", "py.toml"), []byte(good), 0o644)
	os.WriteFile(filepath.Join(dir, "sandtrap", "profiles", ".hidden.toml"), []byte(good), 0o644)
	if l, _ := List(); !reflect.DeepEqual(l, []string{"py"}) {
		t.Errorf("list %q", l)
	}
	if p, err := LoadAny("py"); err != nil || p.Name != "py" {
		t.Errorf("load py: %v", err)
	}
	if _, err := Load("nope"); err == nil || !strings.Contains(err.Error(), "saved profiles: py") {
		t.Errorf("load nope: %v", err)
	}
	if _, err := Load("../x"); err == nil {
		t.Error("a name with a '/' was accepted")
	}
}

// A chroot's mounts in a profile: tables of the path inside to the host path;
// the read-only form is a table of its own (fs_mount_ro).
func TestChrootProfile(t *testing.T) {
	p, err := Parse("chroot.toml", []byte(`[filesystem]
chroot = "/opt/rootfs"
fs_mount = { "/work" = "/tmp/sandbox-1/work" }
fs_mount_ro = { "/usr" = "/usr" }
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"chroot": "/opt/rootfs", "fs_mount": map[string]any{"/work": "/tmp/sandbox-1/work"},
		"fs_mount_ro": map[string]any{"/usr": "/usr"}}
	if !reflect.DeepEqual(p.Policy, want) {
		t.Errorf("policy:\n got %#v\nwant %#v", p.Policy, want)
	}
	if _, err := Parse("bad.toml", []byte("[filesystem]\nfs_mount = [\"/work\"]\n")); err == nil || !strings.Contains(err.Error(), "fs_mount") {
		t.Errorf("a list for fs_mount: %v", err)
	}
}
