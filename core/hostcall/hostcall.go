// Package hostcall is how the engine asks the host language something during an
// operation — today to run a granted function or to take the clones a fork has
// finished, tomorrow a policy callback or a syscall handler — over the same
// msgpack request/response ABI as everything else, with no callback into C.
//
// An operation that needs the host answers its request with a call instead of its
// result:
//
//	{"call": {"id": 1, "kind": "fn", ...}, "pending": 7}
//
// The binding does what the call asks and sends the answer as the next request on
// the same sandbox:
//
//	{"op": "answer", "pending": 7, "call": 1, "value": ...}
//	{"op": "answer", "pending": 7, "call": 1, "error": {"type": "ValueError", "message": "..."}}
//	{"op": "answer", "pending": 7, "call": 1, "abort": true}
//
// whose response is again either the operation's next call or its final response.
// The operation is parked in between: it holds no thread, its deadline is its own
// (it judges the time an answer took when it resumes), and sandtrap_sandbox_cancel
// on its tag still reaches it. A binding that gets a call kind it does not know
// answers with an error (type "NotImplemented"); one that cannot go on (its thread
// was interrupted) answers abort, which ends the operation. docs/protocol.md, "host
// calls", has every key.
package hostcall

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/sandtrap/sandtrap/core/rawmsg"
	"github.com/vmihailenco/msgpack/v5"
)

// MaxDepth bounds the nesting of an answer (a value the host function returned).
const MaxDepth = 128

// Call is what an operation asks the host: its kind and the kind's own keys (values
// may be msgpack.RawMessage, forwarded as they are).
type Call struct {
	Kind   string
	Fields map[string]any
}

// Error is an exception the host reports: its type name and message.
type Error struct {
	Type    string `msgpack:"type"`
	Message string `msgpack:"message"`
}

// Answer is the host's answer to a call: a value, an error, or abort.
type Answer struct {
	Value rawmsg.Value // absent: nil
	Error *Error
	Abort bool
	// HostTime is how many seconds of the call the host says were host time (the
	// seed's host_time): an operation with a deadline may refund them (at most the
	// time it waited for the answer). 0: none.
	HostTime float64
}

// Pending is an operation parked on a call. Resume continues it with the answer.
type Pending interface {
	Resume(a Answer) Step
}

// Dropper is a Pending that must clean up when its owner goes (the sandbox closed)
// before it was answered.
type Dropper interface {
	Drop()
}

// Step is where an operation stands: finished (Response, Kind) or asking (Call,
// Next: what continues it).
type Step struct {
	Response []byte
	Kind     string // the response's error kind ("" when the call itself succeeded)
	Call     *Call
	Next     Pending
}

// Final is a finished step.
func Final(resp []byte, kind string) Step { return Step{Response: resp, Kind: kind} }

// Ask is a step that asks the host c and continues with next.
func Ask(c Call, next Pending) Step { return Step{Call: &c, Next: next} }

type parked struct {
	owner any
	call  uint64 // the id of the call it waits on
	next  Pending
}

var (
	mu      sync.Mutex
	ops     = map[uint64]*parked{}
	opSeq   atomic.Uint64
	callSeq atomic.Uint64
)

// Deliver turns the first step of an operation run for owner into its response:
// the final response, or the call (the operation is parked).
func Deliver(owner any, st Step) ([]byte, string) { return deliver(owner, 0, st) }

func deliver(owner any, id uint64, st Step) ([]byte, string) {
	if st.Call == nil {
		return st.Response, st.Kind
	}
	if id == 0 {
		id = opSeq.Add(1)
	}
	cid := callSeq.Add(1)
	mu.Lock()
	ops[id] = &parked{owner: owner, call: cid, next: st.Next}
	mu.Unlock()
	return encodeCall(st.Call, cid, id), ""
}

// encodeCall is {"call": {fields..., "id": cid, "kind": kind}, "pending": id},
// written directly (no copy of the fields into a map of its own).
func encodeCall(c *Call, cid, id uint64) []byte {
	var buf bytes.Buffer
	buf.Grow(256)
	enc := msgpack.NewEncoder(&buf)
	n := len(c.Fields) + 2
	for k := range c.Fields {
		if k == "id" || k == "kind" {
			n-- // ours win
		}
	}
	err := enc.EncodeMapLen(2)
	if err == nil {
		err = enc.EncodeString("call")
	}
	if err == nil {
		err = enc.EncodeMapLen(n)
	}
	for k, v := range c.Fields {
		if err != nil {
			break
		}
		if k == "id" || k == "kind" {
			continue
		}
		if err = enc.EncodeString(k); err == nil {
			err = enc.Encode(v)
		}
	}
	if err == nil {
		err = enc.EncodeString("id")
	}
	if err == nil {
		err = enc.EncodeUint(cid)
	}
	if err == nil {
		err = enc.EncodeString("kind")
	}
	if err == nil {
		err = enc.EncodeString(c.Kind)
	}
	if err == nil {
		err = enc.EncodeString("pending")
	}
	if err == nil {
		err = enc.EncodeUint(id)
	}
	if err != nil {
		return encode(map[string]any{"success": false, "error": map[string]string{
			"kind": "internal", "message": "encoding a host call: " + err.Error()}})
	}
	return buf.Bytes()
}

// Resume handles an answer request (req is its msgpack map) sent to owner.
func Resume(owner any, req []byte) ([]byte, string) {
	if err := rawmsg.Check(req, MaxDepth); err != nil {
		return requestError("invalid request: answer: malformed msgpack: %v", err)
	}
	m, ok := rawmsg.Value(req).Fields()
	if !ok {
		return requestError("invalid request: answer: want a map with string keys")
	}
	var probs []string
	var unknown []string
	for k := range m {
		switch k {
		case "op", "pending", "call", "value", "error", "abort", "tag", "host_time":
		default:
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		probs = append(probs, fmt.Sprintf("answer: unknown field %q (known: op, pending, call, value, error, abort, tag, host_time)", k))
	}
	id, okID := m["pending"].Int()
	if !okID || id <= 0 {
		probs = append(probs, "answer: pending must be the id of the operation that asked")
	}
	cid, okCall := m["call"].Int()
	if !okCall || cid <= 0 {
		probs = append(probs, "answer: call must be the id of the call answered")
	}
	var a Answer
	_, hasValue := m["value"]
	a.Value = m["value"]
	if e, has := m["error"]; has && !e.IsNil() {
		f, ok := e.Fields()
		t, okT := f["type"].Str()
		msg, okM := f["message"].Str()
		if !ok || !okT || !okM {
			probs = append(probs, "answer: error must be {type: str, message: str}")
		}
		a.Error = &Error{Type: t, Message: msg}
	}
	if v, has := m["abort"]; has {
		b, ok := v.Bool()
		if !ok {
			probs = append(probs, "answer: abort must be a boolean")
		}
		a.Abort = b
	}
	if v, has := m["host_time"]; has && !v.IsNil() {
		f, ok := v.Number()
		if !ok || f < 0 || f != f {
			probs = append(probs, "answer: host_time must be a non-negative number of seconds")
		}
		a.HostTime = f
	}
	n := 0
	for _, b := range []bool{hasValue, a.Error != nil, a.Abort} {
		if b {
			n++
		}
	}
	if n > 1 {
		probs = append(probs, "answer: give one of value, error and abort")
	}
	if len(probs) > 0 {
		if len(probs) == 1 {
			return requestError("invalid request: %s", probs[0])
		}
		return requestError("invalid request (%d problems):\n- %s", len(probs), joinLines(probs))
	}
	mu.Lock()
	p := ops[uint64(id)]
	switch {
	case p == nil || p.owner != owner:
		mu.Unlock()
		return requestError("invalid request: answer: no operation %d is waiting for an answer on this sandbox", id)
	case p.call != uint64(cid):
		mu.Unlock()
		return requestError("invalid request: answer: operation %d waits for call %d, not %d", id, p.call, cid)
	}
	delete(ops, uint64(id))
	mu.Unlock()
	return deliver(owner, uint64(id), p.next.Resume(a))
}

// Drop forgets every operation of owner still waiting for an answer (its sandbox
// closed), letting each clean up.
func Drop(owner any) {
	mu.Lock()
	var gone []Pending
	for id, p := range ops {
		if p.owner == owner {
			gone = append(gone, p.next)
			delete(ops, id)
		}
	}
	mu.Unlock()
	for _, p := range gone {
		if d, ok := p.(Dropper); ok {
			d.Drop()
		}
	}
}

// Waiting is how many operations of owner wait for an answer (tests).
func Waiting(owner any) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, p := range ops {
		if p.owner == owner {
			n++
		}
	}
	return n
}

func joinLines(l []string) string {
	out := ""
	for i, s := range l {
		if i > 0 {
			out += "\n- "
		}
		out += s
	}
	return out
}

func requestError(format string, a ...any) ([]byte, string) {
	return encode(map[string]any{"success": false, "error": map[string]string{
		"kind": "invalid_request", "message": fmt.Sprintf(format, a...)}}), "invalid_request"
}

func encode(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		b, _ = msgpack.Marshal(map[string]any{"success": false, "error": map[string]string{
			"kind": "internal", "message": "encoding a host call: " + err.Error()}})
	}
	return b
}
