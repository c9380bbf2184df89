package engine

import (
	"testing"

	"github.com/sandtrap/sandtrap/core/policy"
)

func TestSmoke(t *testing.T) {
	p, err := policy.FromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/etc"}, "max_memory": "256M", "max_processes": int64(10), "clean_env": true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	res := sb.Run(&RunRequest{Argv: []string{"python3", "-c", "print('hello')"}, StdinFD: -1, StdoutFD: -1})
	t.Logf("%+v %s %s err=%+v", res.Success, res.Stdout, res.Stderr, res.Error)
	t.Logf("iso %+v", res.Isolation)
	t.Logf("usage %+v", res.Usage)
	res = sb.Run(&RunRequest{Argv: []string{"cat", "/root/.bashrc"}, StdinFD: -1, StdoutFD: -1})
	t.Logf("%+v %s %s err=%+v code=%v", res.Success, res.Stdout, res.Stderr, res.Error, *res.ExitCode)
}
