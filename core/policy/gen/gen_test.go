package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files generated from the schema are what gen writes now: edit the schema
// (core/policy/schema.go) and run `go generate ./core/policy`, never the files.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outputs {
		cur, err := os.ReadFile(filepath.Join(root, o.Path))
		if err != nil {
			t.Fatal(err)
		}
		if err := o.check(cur); err != nil {
			t.Error(err)
		}
	}
}

// A hand edit of any generated line (or a lost marker) is caught.
func TestHandEditsAreCaught(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outputs {
		cur, err := os.ReadFile(filepath.Join(root, o.Path))
		if err != nil {
			t.Fatal(err)
		}
		want, err := o.want(cur)
		if err != nil {
			t.Fatal(err)
		}
		body := o.render()
		at := bytes.Index(want, []byte(body)) + len(body)/2
		edited := append(append(append([]byte{}, want[:at]...), 'X'), want[at:]...)
		if err := o.check(edited); err == nil || !strings.Contains(err.Error(), "out of date") {
			t.Errorf("%s: a hand edit is not caught (%v)", o.Path, err)
		}
		if o.Begin != "" {
			lost := bytes.Replace(want, []byte(o.End+"\n"), nil, 1)
			if err := o.check(lost); err == nil {
				t.Errorf("%s: a lost end marker is not caught", o.Path)
			}
		}
	}
}

// Every C setter's kind is one gen knows how to forward.
func TestEverySetterIsDefined(t *testing.T) {
	c := builderC()
	for _, s := range setters() {
		if !strings.Contains(c, "sandtrap_sandbox_builder_"+s.Name+"(sandtrap_sandbox_builder *b, "+s.Params+")\n{") {
			t.Errorf("builder_gen.c does not define %s", s.Name)
		}
		if !strings.Contains(header(), "int sandtrap_sandbox_builder_"+s.Name+"(") {
			t.Errorf("the header does not declare %s", s.Name)
		}
	}
}
