package hostcall

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// counter asks the host for a number three times and answers with their sum.
type counter struct {
	sum, asked int
	dropped    bool
}

func (c *counter) ask() Step {
	c.asked++
	return Ask(Call{Kind: "number", Fields: map[string]any{"n": c.asked}}, c)
}

func (c *counter) Resume(a Answer) Step {
	if a.Abort {
		return Final(enc(map[string]any{"aborted": true, "sum": c.sum}), "")
	}
	if a.Error != nil {
		return Final(enc(map[string]any{"error": a.Error.Message}), "")
	}
	var n int
	msgpack.Unmarshal(a.Value, &n)
	c.sum += n
	if c.asked == 3 {
		return Final(enc(map[string]any{"sum": c.sum}), "")
	}
	return c.ask()
}

func (c *counter) Drop() { c.dropped = true }

func enc(v any) []byte { b, _ := msgpack.Marshal(v); return b }

func dec(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func answer(pending, call any, extra map[string]any) []byte {
	m := map[string]any{"op": "answer", "pending": pending, "call": call}
	for k, v := range extra {
		m[k] = v
	}
	return enc(m)
}

func toU(v any) uint64 {
	switch n := v.(type) {
	case int8:
		return uint64(n)
	case uint8:
		return uint64(n)
	case uint64:
		return n
	case int64:
		return uint64(n)
	}
	return 0
}

func TestAskAnswerFinal(t *testing.T) {
	owner := new(int)
	b, kind := Deliver(owner, (&counter{}).ask())
	resp := dec(t, b)
	if kind != "" || Waiting(owner) != 1 {
		t.Fatalf("first step: %v %q", resp, kind)
	}
	for i := 1; i <= 3; i++ {
		p, c := toU(resp["pending"]), toU(resp["call"].(map[string]any)["id"])
		b, kind = Resume(owner, answer(p, c, map[string]any{"value": i * 10}))
		resp = dec(t, b)
		if kind != "" {
			t.Fatalf("answer %d: %v", i, resp)
		}
	}
	if toU(resp["sum"]) != 60 || Waiting(owner) != 0 {
		t.Fatalf("final: %v (waiting %d)", resp, Waiting(owner))
	}
}

func TestWrongAnswersAreRefusedAndTheOpWaitsOn(t *testing.T) {
	owner, other := new(int), new(int)
	resp := dec(t, first(owner))
	p, c := toU(resp["pending"]), toU(resp["call"].(map[string]any)["id"])
	for name, req := range map[string][]byte{
		"other owner":  nil,
		"stale call":   answer(p, c+100, nil),
		"two answers":  answer(p, c, map[string]any{"value": 1, "abort": true}),
		"bad error":    answer(p, c, map[string]any{"error": map[string]any{"type": 1}}),
		"unknown key":  answer(p, c, map[string]any{"valeu": 1}),
		"no such op":   answer(p+1000, c, nil),
		"not msgpack":  {0xc1},
		"string keys?": {0x81, 0x01, 0x02},
	} {
		o := any(owner)
		if req == nil {
			o, req = other, answer(p, c, nil)
		}
		b, kind := Resume(o, req)
		if kind != "invalid_request" {
			t.Errorf("%s: kind %q: %v", name, kind, dec(t, b))
		}
		if m := dec(t, b); !strings.HasPrefix(m["error"].(map[string]any)["message"].(string), "invalid request") {
			t.Errorf("%s: message %v", name, m)
		}
	}
	b, _ := Resume(owner, answer(p, c, map[string]any{"abort": true}))
	if m := dec(t, b); m["aborted"] != true {
		t.Fatalf("abort: %v", m)
	}
	if b, kind := Resume(owner, answer(p, c, nil)); kind != "invalid_request" {
		t.Fatalf("an answer after the end: %v", dec(t, b))
	}
}

func first(owner any) []byte {
	b, _ := Deliver(owner, (&counter{}).ask())
	return b
}

func TestErrorAnswerAndDrop(t *testing.T) {
	owner := new(int)
	resp := dec(t, first(owner))
	p, c := toU(resp["pending"]), toU(resp["call"].(map[string]any)["id"])
	b, _ := Resume(owner, answer(p, c, map[string]any{"error": map[string]any{"type": "ValueError", "message": "no"}}))
	if m := dec(t, b); m["error"] != "no" {
		t.Fatalf("error answer: %v", m)
	}
	cn := &counter{}
	Deliver(owner, cn.ask())
	Drop(owner)
	if !cn.dropped || Waiting(owner) != 0 {
		t.Fatal("Drop did not reach the waiting op")
	}
}

func TestAnswerHostTime(t *testing.T) {
	owner := new(int)
	c := &counter{}
	resp, _ := Deliver(owner, c.ask())
	m := dec(t, resp)
	call := m["call"].(map[string]any)
	// a negative or non-numeric host_time is refused (and the operation waits on)
	for _, bad := range []any{-1.0, "1s", true} {
		r, _ := Resume(owner, answer(m["pending"], call["id"], map[string]any{"value": 1, "host_time": bad}))
		if e, _ := dec(t, r)["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "host_time") {
			t.Fatalf("host_time %v accepted: %v", bad, dec(t, r))
		}
	}
	got := -1.0
	c2 := &hostTimed{got: &got}
	resp, _ = Deliver(owner, Ask(Call{Kind: "x"}, c2))
	m = dec(t, resp)
	call = m["call"].(map[string]any)
	Resume(owner, answer(m["pending"], call["id"], map[string]any{"value": 1, "host_time": 0.25}))
	if got != 0.25 {
		t.Fatalf("host_time: %v", got)
	}
	Drop(owner)
}

type hostTimed struct{ got *float64 }

func (h *hostTimed) Resume(a Answer) Step {
	*h.got = a.HostTime
	return Final(enc(map[string]any{}), "")
}
