package engine

import (
	"bytes"
	"testing"

	"github.com/sandtrap/sandtrap/core/policy"
)

// FuzzDecodeRequest feeds arbitrary bytes to the request decoder: it must return a
// request or an error, never panic or hang.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(mustPack(map[string]any{"op": "run", "argv": []any{"echo", "hi"}, "stdin": []byte("x"), "timeout": 1.5}))
	f.Add(mustPack(map[string]any{"op": "pipeline", "stages": []any{map[string]any{"argv": []any{"cat"}}}}))
	f.Add([]byte{0xc1})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa2, 'o', 'p', 0xc0})
	f.Add(bytes.Repeat([]byte{0x91}, 100000))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMap(b, "request")
		if err != nil {
			if err.(*Error).Kind != KindInvalidRequest {
				t.Fatalf("kind %q", err.(*Error).Kind)
			}
			return
		}
		var probs policy.Problems
		parseRun(m, "", "run", &probs)
		if st, ok := m["stages"].([]any); ok {
			for _, s := range st {
				if sm, ok := s.(map[string]any); ok {
					parseRun(sm, "stages[0].", "a pipeline stage", &probs)
				}
			}
		}
		if _, err := policy.FromMap(m); err == nil && len(m) > 0 {
			// a request map that is also a valid policy is fine; nothing to check
		}
	})
}
