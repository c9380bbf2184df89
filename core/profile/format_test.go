package profile

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/policy"
)

// Every supported field, written by Format from the value a profile gave, reads
// back to the same policy; the program too, with characters TOML must escape.
func TestFormatRoundTrip(t *testing.T) {
	var src strings.Builder
	for _, sec := range policy.Sections {
		src.WriteString("[" + sec + "]\n")
		for i := range policy.Schema {
			f := &policy.Schema[i]
			if f.Section != sec || !f.Supported() {
				continue
			}
			v := Example(f.Kind())
			switch f.Key {
			case "uid", "gid":
				v = "0" // the pair: both given
			case "net_deny", "net_allow_udp":
				continue // not with net_allow (below)
			case "credentials":
				v = `{ openai = "env:OPENAI_API_KEY" }`
			case "extra_deny_syscalls":
				v = `["kexec_load"]`
			}
			src.WriteString(f.Key + " = " + v + "\n")
		}
	}
	in, err := Parse("all.toml", []byte(src.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, src.String())
	}
	argv := []string{"/bin/sh", "-c", "echo \"a\\b\" 'c'\n\tx=\x01 ü"}
	text, err := Format(in.Policy, argv, "made by a test\nsecond line")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Parse("formatted.toml", []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !reflect.DeepEqual(in.Policy, out.Policy) {
		t.Errorf("policy changed:\n in  %v\n out %v\n%s", in.Policy, out.Policy, text)
	}
	if !reflect.DeepEqual(out.Argv(), argv) {
		t.Errorf("argv %q, want %q", out.Argv(), argv)
	}
	if !strings.HasPrefix(text, "# made by a test\n# second line\n[") {
		t.Errorf("comment: %q", text)
	}
	// net_deny, in a profile of its own
	deny, err := Parse("deny.toml", []byte("[network]\nnet_deny = "+Example(policy.KindTargets)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if text, err = Format(deny.Policy, nil, ""); err != nil {
		t.Fatal(err)
	}
	if out, err = Parse("deny2.toml", []byte(text)); err != nil || !reflect.DeepEqual(out.Policy, deny.Policy) {
		t.Errorf("net_deny: %v %v\n%s", err, out, text)
	}
	// the engine's own types (a learned policy's []string, int64 from the options)
	text, err = Format(map[string]any{"fs_readable": []string{"/usr"}, "max_processes": int64(8), "timeout": 1.5,
		"env": map[string]any{"A B": "1"}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err = Parse("f.toml", []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	want := map[string]any{"fs_readable": []any{"/usr"}, "max_processes": int64(8), "timeout": 1.5, "env": map[string]any{"A B": "1"}}
	if !reflect.DeepEqual(out.Policy, want) {
		t.Errorf("got %v, want %v\n%s", out.Policy, want, text)
	}
}

// What a profile cannot hold is refused, not written wrong.
func TestFormatRefuses(t *testing.T) {
	for _, c := range []struct {
		pol  map[string]any
		argv []string
		want string
	}{
		{map[string]any{"no_such": true}, nil, "no_such: not a field a profile holds"},
		{map[string]any{"policy_fn": true}, nil, "policy_fn: not a field a profile holds"},
		{map[string]any{"fs_readable": []string{"/a\xff"}}, nil, "not UTF-8"},
		{nil, []string{"/bin/\xfe"}, "exec: "},
		{map[string]any{"max_memory": struct{}{}}, nil, "cannot be written"},
	} {
		_, err := Format(c.pol, c.argv, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Format(%v, %q): %v, want %q", c.pol, c.argv, err, c.want)
		}
	}
}
