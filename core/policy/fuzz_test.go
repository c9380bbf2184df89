package policy_test

import (
	"testing"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/vmihailenco/msgpack/v5"
)

// FuzzPolicy: any input decodes, through the engine's guarded decoder, to a policy
// or a list of problems — never a panic, a hang or a huge allocation.
func FuzzPolicy(f *testing.F) {
	seed, _ := msgpack.Marshal(map[string]any{"fs_readable": []any{"/usr"}, "max_memory": "1G", "net_allow_bind": []any{"1-3"}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := engine.DecodeMap(b, "policy")
		if err != nil {
			return
		}
		p, err := policy.FromMap(m)
		if (p == nil) == (err == nil) {
			t.Fatalf("policy %v and error %v", p, err)
		}
	})
}
