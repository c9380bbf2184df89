package engine_test

import (
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	_ "github.com/sandtrap/sandtrap/core/session" // its ops: coop_open, coop_exec, fork, reduce
	"github.com/vmihailenco/msgpack/v5"
)

// FuzzExec sends arbitrary bytes, and arbitrary fields under every op, to a
// sandbox's Exec — the path every binding's request takes through the C ABI: each
// must come back as a msgpack response (an error with a stable kind, or a result),
// never a panic (the fuzzer reports one) or a hang.
func FuzzExec(f *testing.F) {
	sb, err := engine.NewFromMap(map[string]any{"allow_degraded": true, "timeout": 2.0})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(sb.Close)
	pack := func(m map[string]any) []byte { b, _ := msgpack.Marshal(m); return b }
	for _, op := range []string{"run", "pipeline", "isolation", "session_open", "session_send", "session_close", "answer",
		"coop_open", "coop_exec", "fork", "reduce", "learn", "ports", "nope"} {
		f.Add(pack(map[string]any{"op": op}))
		f.Add(pack(map[string]any{"op": op, "session": -1, "frame": 3, "argv": []any{1, nil}, "stages": []any{map[string]any{"sandbox": "x"}},
			"tag": []any{}, "id": "x", "value": map[string]any{"a": nil}, "n": -5, "template": true, "timeout": "soon"}))
		f.Add(pack(map[string]any{"op": op, "session": uint64(1) << 63, "call": 1 << 40, "isolation": []any{}, "functions": "f",
			"clones": []any{1}, "argv": []any{}, "stages": []any{}, "stdin": 1.5}))
	}
	f.Add([]byte{0x81, 0xa2, 'o', 'p', 0xa3, 'r', 'u', 'n'})
	f.Add([]byte{0xc1})
	f.Fuzz(func(t *testing.T, b []byte) {
		done := make(chan []byte, 1)
		go func() {
			resp, _ := sb.Exec(b)
			done <- resp
		}()
		select {
		case resp := <-done:
			if err := rawmsg.Check(resp, engine.MaxDepth); err != nil {
				t.Fatalf("the response is not msgpack: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("Exec hung on %x", b)
		}
	})
}
