package policy

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// A valid value of every kind, as msgpack decodes it.
var sample = map[Kind]any{
	KindPaths: []any{"/usr"}, KindPath: "/tmp", KindTargets: []any{int64(443), "example.com:80"},
	KindPorts: []any{int64(8080), "9000-9001"}, KindBool: true, KindSize: "1M", KindCount: int64(4),
	KindSeconds: 1.5, KindID: int64(1000), KindEnv: map[string]any{"A": "b"}, KindNames: []any{"getcpu"},
	KindHost: "api.local", KindHTTP: []any{"GET example.com/*"}, KindCPUs: []any{int64(0)}, KindOptBool: false, KindBranch: "keep", KindHTTPAuth: []any{"POST api.test/* bearer k"},
	KindSeed: int64(42), KindTime: "2000-01-01T00:00:00Z",
	KindGPUs: []any{int64(0)},
	KindProt: []any{"fs_ioctl_dev"}, KindDegrade: []any{"signal_scope"},
	KindMounts: map[string]any{"/work": "/tmp"},
}

func TestSchemaIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	setters := map[string]CSetter{}
	for i := range Schema {
		f := &Schema[i]
		if seen[f.Key] || f.Key == "" || f.Key != strings.ToLower(f.Key) {
			t.Errorf("field %q: empty, repeated or not snake_case", f.Key)
		}
		seen[f.Key] = true
		if strings.Contains(f.Doc, "*/") {
			t.Errorf("%s: its doc holds */, which ends the C header's and index.d.ts's comments", f.Key)
		}
		if f.Supported() {
			if f.bind.read == nil || f.Kind() == "" || f.Doc == "" || f.Default == "" || len(f.C) == 0 {
				t.Errorf("%s: a supported field needs a reader, a doc, a default and a C setter", f.Key)
			}
			if _, ok := sample[f.Kind()]; !ok {
				t.Errorf("%s: kind %q has no sample", f.Key, f.Kind())
			}
		} else if f.bind.read != nil || len(f.C) > 0 || f.Doc != "" {
			t.Errorf("%s: an unsupported field has no reader, doc or setter", f.Key)
		}
		for _, ref := range regexp.MustCompile(`\{([^}]*)\}`).FindAllStringSubmatch(f.Unsupported, -1) {
			if g := Lookup(ref[1]); g == nil || !g.Supported() {
				t.Errorf("%s: the reason names {%s}, which is not a supported field", f.Key, ref[1])
			}
		}
		for _, c := range f.C {
			if prev, ok := setters[c.Name]; ok && (prev.Kind != CIDs || c.Kind != CIDs) {
				t.Errorf("setter %s is given twice", c.Name)
			}
			setters[c.Name] = c
		}
	}
	if len(Kinds) != len(sample) {
		t.Errorf("Kinds has %d kinds, the samples %d", len(Kinds), len(sample))
	}
}

// Every supported field is read into its own Policy field: setting one field alone
// changes the decoded policy, and no two fields change the same thing.
func TestEveryFieldIsDecoded(t *testing.T) {
	empty, probs := Decode(map[string]any{})
	if len(probs) != 0 {
		t.Fatal(probs)
	}
	for i := range Schema {
		f := &Schema[i]
		if !f.Supported() {
			continue
		}
		m := map[string]any{f.Key: sample[f.Kind()]}
		if f.Kind() == KindID { // uid and gid go together
			m = map[string]any{"uid": int64(1000), "gid": int64(1000)}
		}
		if f.Key == "http_ports" { // with the rules it is about
			m["http_allow"] = sample[KindHTTP]
		}
		if strings.HasPrefix(f.Key, "http_") && f.Key != "http_allow" && f.Key != "http_deny" && f.Key != "http_ports" || f.Key == "credentials" {
			// interception and credentials: with what they need
			m["http_allow"] = sample[KindHTTP]
			m["http_intercept"] = true
			switch f.Key {
			case "http_ca":
				m["http_key"] = "/tmp"
			case "http_key":
				m["http_ca"] = "/tmp"
			case "credentials", "http_auth", "http_auth_plain":
				m["credentials"] = map[string]any{"k": "env:K"}
				m["http_auth"] = sample[KindHTTPAuth]
			}
			if f.Key != "http_intercept" {
				m[f.Key] = sample[f.Kind()]
			}
			if f.Key == "credentials" {
				m[f.Key] = map[string]any{"k": "file:/k"}
			}
		}
		p, probs := Decode(m)
		if len(probs) != 0 {
			t.Errorf("%s: %v", f.Key, probs)
			continue
		}
		if reflect.DeepEqual(p, empty) {
			t.Errorf("%s: decoding it changes nothing", f.Key)
		}
	}
}

func TestUnknownAndUnsupportedFields(t *testing.T) {
	_, probs := Decode(map[string]any{"fs_readble": nil, "handlers": []any{}, "max_mem": "1G", "zzz": 1})
	want := Problems{
		{"fs_readble", "unknown field; did you mean fs_readable?"},
		{"handlers", "not supported by sandtrap yet: handlers are given per run: run_with_handlers, or the run_handlers op"},
		{"max_mem", "unknown field; did you mean max_memory?"},
		{"zzz", "unknown field"},
	}
	if !reflect.DeepEqual(probs, want) {
		t.Fatalf("got %#v", probs)
	}
	if s := Suggest("maxMemory", Fields); s != "max_memory" {
		t.Errorf("Suggest(maxMemory) = %q", s)
	}
	if s := Suggest("timeout", []string{"timeout", "max_cpu_time"}); s != "timeout" {
		t.Errorf("an exact name suggests itself, got %q", s)
	}
}

// Problems name their field in Field and no other field in the message (except
// uid and gid, spelt alike everywhere), so that a binding can show every problem
// under its own names without rewriting text.
func TestMessagesNameNoOtherField(t *testing.T) {
	bad := []map[string]any{
		{"fs_readable": "/usr", "fs_writable": []any{"rel", int64(1)}, "fs_denied": []any{""}, "net_allow": []any{"x:y", int64(0)},
			"net_allow_bind": []any{"9-1", 1.5}, "net_allow_udp": 1, "max_memory": "lots", "max_processes": int64(0),
			"max_open_files": "x", "max_disk": int64(-1), "max_cpu": int64(1 << 30), "max_cpu_time": -1.0, "timeout": "x",
			"max_output": uint64(1 << 63), "env": map[string]any{"A=": "x", "B": int64(1), "C": "\x00"}, "clean_env": "no",
			"cwd": "rel", "uid": int64(-1), "extra_allow_syscalls": []any{"a b", "ptrace"}, "extra_deny_syscalls": []any{"ptrace"},
			"allow_degraded": nil, "chroot": "rel", "cpu_cores": 2, "policy_fn": nil, "fs_mount": map[string]any{"rel": "/x:ro", "/a": int64(1), "/": "/tmp"}, "gpu_devices": nil},
		{"gid": int64(5)},
	}
	var names []string
	for i := range Schema {
		if f := &Schema[i]; f.Key != f.NodeName() && f.Key != "uid" && f.Key != "gid" {
			names = append(names, f.Key)
		}
	}
	n := 0
	for _, m := range bad {
		_, probs := Decode(m)
		for _, p := range probs {
			n++
			if f := Lookup(p.Field); f != nil && !f.Supported() {
				continue // its reason names fields by each binding's names ({key})
			}
			for _, k := range names {
				if strings.Contains(p.Message, k) {
					t.Errorf("%s: the message names %s: %q", p.Field, k, p.Message)
				}
			}
		}
	}
	if n < 25 {
		t.Errorf("only %d problems: the bad policies should break every field", n)
	}
}

func TestCamelCase(t *testing.T) {
	for in, want := range map[string]string{"max_cpu_time": "maxCpuTime", "cwd": "cwd", "net_allow_udp": "netAllowUdp", "http_ca": "httpCa"} {
		if got := CamelCase(in); got != want {
			t.Errorf("CamelCase(%q) = %q", in, got)
		}
	}
}

// Every field has a profile section (runtime arguments excepted), and the CLI's
// options of the supported ones are unique.
func TestSchemaSectionsAndFlags(t *testing.T) {
	sections := map[string]bool{}
	for _, s := range Sections {
		sections[s] = true
	}
	runtime := map[string]bool{"name": true, "policy_fn": true, "handlers": true}
	long, short := map[string]string{}, map[string]string{}
	for i := range Schema {
		f := &Schema[i]
		switch {
		case f.Section == "" && !runtime[f.Key]:
			t.Errorf("%s: no profile section", f.Key)
		case f.Section != "" && !sections[f.Section]:
			t.Errorf("%s: section %q is not one of %v", f.Key, f.Section, Sections)
		}
		if !f.Supported() {
			continue
		}
		if g, ok := long[f.FlagName()]; ok {
			t.Errorf("%s and %s have the same option --%s", g, f.Key, f.FlagName())
		}
		long[f.FlagName()] = f.Key
		if f.Short != "" {
			if len(f.Short) != 1 {
				t.Errorf("%s: short option %q is not one letter", f.Key, f.Short)
			}
			if g, ok := short[f.Short]; ok {
				t.Errorf("%s and %s have the same option -%s", g, f.Key, f.Short)
			}
			short[f.Short] = f.Key
		}
	}
}

func TestDeterminismFields(t *testing.T) {
	for _, c := range []struct {
		v    any
		want float64
	}{{"2000-01-01T00:00:00Z", 946684800}, {"2000-01-01", 946684800}, {"2000-01-01T01:00:00+01:00", 946684800},
		{"2000-01-01T00:00:00", 946684800}, {int64(946684800), 946684800}, {946684800.5, 946684800.5}, {"946684800", 946684800}} {
		p, probs := Decode(map[string]any{"time_start": c.v})
		if len(probs) > 0 || p.TimeStart == nil || *p.TimeStart != c.want {
			t.Errorf("time_start %v: %v %v", c.v, p.TimeStart, probs)
		}
	}
	for _, bad := range []any{"yesterday", int64(-1), "1969-12-31T23:59:59Z", true, "10000-01-01"} {
		if _, probs := Decode(map[string]any{"time_start": bad}); len(probs) != 1 || probs[0].Field != "time_start" {
			t.Errorf("time_start %v: %v", bad, probs)
		}
	}
	p, probs := Decode(map[string]any{"random_seed": int64(0), "deterministic_dirs": true})
	if len(probs) > 0 || p.RandomSeed == nil || *p.RandomSeed != 0 || !p.DeterministicDirs {
		t.Errorf("random_seed 0: %v %v", p.RandomSeed, probs)
	}
	for _, bad := range []any{int64(-1), "42", 1.5} {
		if _, probs := Decode(map[string]any{"random_seed": bad}); len(probs) != 1 || probs[0].Field != "random_seed" {
			t.Errorf("random_seed %v: %v", bad, probs)
		}
	}
}

// Every field's Value (what a binding's attribute reads when the field is not
// given) means what leaving the field out means, and every field has one.
func TestDefaultValuesMeanUnset(t *testing.T) {
	unset, probs := Decode(map[string]any{})
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	for i := range Schema {
		f := &Schema[i]
		if !f.Supported() {
			continue
		}
		got, probs := Decode(map[string]any{f.Key: f.Value})
		if len(probs) > 0 {
			t.Errorf("%s = %#v: %v", f.Key, f.Value, probs)
			continue
		}
		// the same effect: a branch action given is the default one; a limit given
		// is required where the default one is reported degraded
		if got.OnExit == BranchCommit {
			got.OnExit = ""
		}
		if got.OnError == BranchAbort {
			got.OnError = ""
		}
		got.MaxProcessesDefault = true
		if got.HTTPPorts != nil && len(got.HTTPPorts) == 0 {
			got.HTTPPorts = nil
		}
		norm := func(p *Policy) string { return fmt.Sprintf("%+v", *p) }
		if norm(got) != norm(unset) {
			t.Errorf("%s = %#v decodes to\n%s\nnot as unset\n%s", f.Key, f.Value, norm(got), norm(unset))
		}
	}
}

// Port lists take comma lists of ports and ranges in every ports field.
func TestPortCommaLists(t *testing.T) {
	got, probs := ParsePorts([]any{"22,443", " 8000-8002 , 9000", int64(80)})
	if len(probs) > 0 || fmt.Sprint(got) != "[22 80 443 8000 8001 8002 9000]" {
		t.Fatalf("%v %v", got, probs)
	}
	_, probs = ParsePorts([]any{"22,,443", "1-2,x"})
	want := []string{`port "": want "N", "LOW-HIGH" or a comma list of them ("22,443,8000-8005")`,
		`port "x": want "N", "LOW-HIGH" or a comma list of them ("22,443,8000-8005")`}
	if fmt.Sprint(probs) != fmt.Sprint(want) {
		t.Fatalf("%q", probs)
	}
	p, dp := Decode(map[string]any{"net_allow_bind": []any{"8080,8443"}, "http_ports": []any{"80,8080-8081"}, "http_allow": []any{"GET example.com/*"}})
	if len(dp) > 0 || fmt.Sprint(p.NetAllowBind) != "[8080 8443]" || fmt.Sprint(p.HTTPPorts) != "[80 8080 8081]" {
		t.Fatalf("%v %v %v", p.NetAllowBind, p.HTTPPorts, dp)
	}
}
