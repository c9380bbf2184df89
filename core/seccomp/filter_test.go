package seccomp

import "testing"

func TestCompileVariants(t *testing.T) {
	for _, c := range []Config{{}, {NoInet: true}, {AllowUDP: true, AllowUnix: true}, {ExtraAllow: []string{"chmod", "socket"}, ExtraDeny: []string{"getpid"}}} {
		p, err := Compile(c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		t.Logf("%+v: %d instructions, %d denied names", c, len(p.BPF)/8, len(p.Denied))
	}
}

func TestValidate(t *testing.T) {
	if probs := Validate("x", []string{"getpid", "no_such_call"}); len(probs) != 1 {
		t.Fatalf("want one problem, got %v", probs)
	}
}
