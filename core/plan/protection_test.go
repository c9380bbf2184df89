package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
)

func abi(n int) func(*kernel.Features) {
	return func(f *kernel.Features) { f.LandlockABI = n }
}

func needLandlock(t *testing.T, n int) {
	t.Helper()
	if f := kernel.Probe(); f.LandlockABI < n || !f.Seccomp {
		t.Skipf("needs Landlock ABI %d and seccomp (have %d)", n, f.LandlockABI)
	}
}

func isolationErr(t *testing.T, err error) string {
	t.Helper()
	var e *protocol.Error
	if !errors.As(err, &e) || e.Kind != protocol.KindIsolation {
		t.Fatalf("want isolation_unavailable, got %v", err)
	}
	return e.Message
}

// A kernel below a protection's ABI fails the sandbox naming exactly the
// protections it lacks; allow_degraded naming one lets that one go (reported),
// the others stay required.
func TestProtectionsRequiredByName(t *testing.T) {
	needLandlock(t, 6)
	base := map[string]any{"fs_readable": []any{"/usr"}}
	_, err := Compile(input(t, base, abi(5)), 0)
	msg := isolationErr(t, err)
	if want := "isolation unavailable: landlock abstract_unix_socket_scope (kernel ABI 5 < 6); landlock signal_scope (kernel ABI 5 < 6) (pass allow_degraded to run without it)"; msg != want {
		t.Fatalf("message\n%q, want\n%q", msg, want)
	}

	one := map[string]any{"fs_readable": []any{"/usr"}, "allow_degraded": []any{"signal_scope"}}
	_, err = Compile(input(t, one, abi(5)), 0)
	if msg := isolationErr(t, err); msg != "isolation unavailable: landlock abstract_unix_socket_scope (kernel ABI 5 < 6) (pass allow_degraded to run without it)" {
		t.Fatalf("one degraded: %q", msg)
	}

	both := map[string]any{"fs_readable": []any{"/usr"}, "allow_degraded": []any{"signal_scope", "abstract_unix_socket_scope"}}
	pl, err := Compile(input(t, both, abi(5)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	rep := pl.Isolation()
	for _, d := range []string{"not applied: landlock signal_scope (kernel ABI 5 < 6)", "not applied: landlock abstract_unix_socket_scope (kernel ABI 5 < 6)"} {
		if !slices.Contains(rep.Degraded, d) {
			t.Errorf("degraded %q lacks %q", rep.Degraded, d)
		}
	}
	want := map[string]string{"fs": "enforced", "fs_refer": "enforced", "fs_truncate": "enforced", "net_tcp": "not_needed",
		"fs_ioctl_dev": "enforced", "abstract_unix_socket_scope": "degraded", "signal_scope": "degraded"}
	for k, v := range want {
		if rep.Protections[k] != v {
			t.Errorf("protections[%s] = %q, want %q (%v)", k, rep.Protections[k], v, rep.Protections)
		}
	}
	if pl.Ruleset.Table.Scoped != 0 || rep.Landlock.ABI != 5 {
		t.Fatalf("scoped %#x on ABI %d", pl.Ruleset.Table.Scoped, rep.Landlock.ABI)
	}
	// the boolean still degrades every one
	all := map[string]any{"fs_readable": []any{"/usr"}, "allow_degraded": true}
	pl2, err := Compile(input(t, all, abi(3)), 0)
	if err != nil {
		t.Fatal(err)
	}
	pl2.Close()
	if got := pl2.Isolation().Protections; got["fs_ioctl_dev"] != "degraded" || got["fs_truncate"] != "enforced" {
		t.Fatalf("ABI 3 with allow_degraded=true: %v", got)
	}
}

// net_tcp is required only with network rules: ABI 3 with a TCP port fails
// naming it, and without network rules it is not needed.
func TestNetTCPProtection(t *testing.T) {
	needLandlock(t, 4)
	scopes := []any{"signal_scope", "abstract_unix_socket_scope", "fs_ioctl_dev"}
	_, err := Compile(input(t, map[string]any{"net_allow": []any{int64(443)}, "allow_degraded": scopes}, abi(3)), 0)
	if msg := isolationErr(t, err); msg != "isolation unavailable: landlock net_tcp (kernel ABI 3 < 4) (pass allow_degraded to run without it)" {
		t.Fatalf("%q", msg)
	}
	pl, err := Compile(input(t, map[string]any{"allow_degraded": scopes}, abi(3)), 0)
	if err != nil {
		t.Fatal(err)
	}
	pl.Close()
	if p := pl.Isolation().Protections; p["net_tcp"] != "not_needed" {
		t.Fatalf("%v", p)
	}
	withNet := append(slices.Clone(scopes), "net_tcp")
	pl, err = Compile(input(t, map[string]any{"net_allow": []any{int64(443)}, "allow_degraded": withNet}, abi(3)), 0)
	if err != nil {
		t.Fatal(err)
	}
	pl.Close()
	if r := pl.Isolation(); r.Protections["net_tcp"] != "degraded" || r.Landlock.Net || pl.Ruleset.Table.HandledNet != 0 {
		t.Fatalf("net_tcp degraded: %v, landlock net %v", r.Protections, r.Landlock.Net)
	}
}

// disable leaves a protection out on a kernel that has it: the ruleset does not
// handle it, the report says disabled; the rest stays.
func TestDisableProtection(t *testing.T) {
	needLandlock(t, 6)
	pl, err := Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}, "disable": []any{"fs_ioctl_dev", "signal_scope"}}, abi(kernel.Probe().LandlockABI)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	tb := pl.Ruleset.Table
	if tb.HandledFS&ll.AccessFSIoctlDev != 0 || tb.HandledFS&ll.AccessFSTruncate == 0 {
		t.Errorf("handled fs %#x: ioctl_dev handled or truncate not", tb.HandledFS)
	}
	if tb.Scoped != ll.ScopeAbstractUnixSocket {
		t.Errorf("scoped %#x, want only abstract unix sockets", tb.Scoped)
	}
	rep := pl.Isolation()
	if rep.Protections["fs_ioctl_dev"] != "disabled" || rep.Protections["signal_scope"] != "disabled" || rep.Protections["abstract_unix_socket_scope"] != "enforced" {
		t.Errorf("%v", rep.Protections)
	}
	if !slices.Equal(rep.Landlock.Scoped, []string{"abstract_unix_socket"}) {
		t.Errorf("report scoped %v", rep.Landlock.Scoped)
	}
	// an abstract scope disabled: the supervisor judges abstract connects itself
	pl2, err := Compile(input(t, map[string]any{"net_allow": []any{"127.0.0.1:80"}, "net_allow_unix": true, "disable": []any{"abstract_unix_socket_scope"}}, abi(kernel.Probe().LandlockABI)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl2.Close()
	if pl2.Supervise.Net == nil || pl2.Supervise.AbstractScoped {
		t.Fatalf("abstract scope disabled, yet the supervisor relies on it (net %v)", pl2.Supervise.Net != nil)
	}
	// disabling fs: no Landlock at all, and every protection disabled
	pl3, err := Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}, "disable": []any{"fs"}}, abi(kernel.Probe().LandlockABI)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl3.Close()
	if pl3.Ruleset != nil || pl3.Isolation().Landlock != nil {
		t.Fatal("disable fs: a ruleset was built")
	}
	for _, pr := range policy.Protections {
		if got := pl3.Isolation().Protections[pr.Name]; got != "disabled" {
			t.Errorf("disable fs: %s %q", pr.Name, got)
		}
	}
}

// Names that are not protections, and values of the wrong type, are problems of
// their field.
func TestProtectionNamesChecked(t *testing.T) {
	_, probs := policy.Decode(map[string]any{"allow_degraded": []any{"signal_scope", "sigscope"}, "disable": []any{int64(3)}, "max_processes": "x"})
	var got []string
	for _, p := range probs {
		got = append(got, p.String())
	}
	want := []string{
		`max_processes: want an integer, got a string`,
		`allow_degraded: "sigscope" is not a protection (fs, fs_refer, fs_truncate, net_tcp, fs_ioctl_dev, abstract_unix_socket_scope, signal_scope)`,
		`disable: want a string, got an integer`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, probs = policy.Decode(map[string]any{"allow_degraded": "yes"})
	if len(probs) != 1 || !strings.HasPrefix(probs[0].Message, "want true, false or a list of protections") {
		t.Fatalf("%v", probs)
	}
}

// The default max_processes (64) applies where it can be enforced and is
// reported degraded where it cannot; a value given fails closed there.
func TestDefaultMaxProcesses(t *testing.T) {
	p, _ := policy.Decode(map[string]any{})
	if p.MaxProcesses != 64 || !p.MaxProcessesDefault {
		t.Fatalf("default max_processes %d (%v)", p.MaxProcesses, p.MaxProcessesDefault)
	}
	p, _ = policy.Decode(map[string]any{"max_processes": int64(0)})
	if p.MaxProcesses != 0 || p.MaxProcessesDefault {
		t.Fatalf("max_processes 0: %d", p.MaxProcesses)
	}
	noLimits := func(f *kernel.Features) { f.Cgroup, f.Root = nil, true }
	pl, err := Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}}, noLimits), 0)
	if f := kernel.Probe(); f.LandlockABI == 0 || !f.Seccomp || !f.PidNS {
		t.Skip("needs a host that can sandbox")
	}
	if err != nil {
		t.Fatal(err)
	}
	pl.Close()
	want := "max_processes: the default limit of 64 is not enforced (no pids cgroup, and RLIMIT_NPROC needs the sandbox's own user namespace and a host that is not root); give max_processes to require a limit"
	if r := pl.Isolation(); !slices.Contains(r.Degraded, want) || pl.Limits.Processes != "" {
		t.Fatalf("degraded %q, processes by %q", r.Degraded, pl.Limits.Processes)
	}
	_, err = Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}, "max_processes": int64(64)}, noLimits), 0)
	if msg := isolationErr(t, err); !strings.Contains(msg, "max_processes (no pids cgroup") {
		t.Fatalf("%q", msg)
	}
}

// Without Landlock at all, "fs" is the one protection missing: the others go
// with it.
func TestNoLandlockIsOneMissingProtection(t *testing.T) {
	needLandlock(t, 1)
	_, err := Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}}, abi(0)), 0)
	if msg := isolationErr(t, err); msg != "isolation unavailable: landlock (filesystem rules) (pass allow_degraded to run without it)" {
		t.Fatalf("%q", msg)
	}
	pl, err := Compile(input(t, map[string]any{"fs_readable": []any{"/usr"}, "allow_degraded": []any{"fs"}}, abi(0)), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	rep := pl.Isolation()
	if rep.Landlock != nil || rep.Protections["fs"] != "degraded" || rep.Protections["signal_scope"] != "degraded" ||
		!slices.Contains(rep.Degraded, "not applied: landlock (filesystem rules)") {
		t.Fatalf("%v %v", rep.Protections, rep.Degraded)
	}
}
