package session

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	"github.com/vmihailenco/msgpack/v5"
)

// MaxDepth bounds the nesting of a request of these ops and of a frame from a
// worker or template (a namespace converted by the guest runtime nests at most 64
// deep below the frame's own levels).
const MaxDepth = 128

// reader reads the fields of one request map, collecting every problem.
type reader struct {
	what  string
	m     map[string]rawmsg.Value
	probs []string
}

func newReader(req []byte, what string, known ...string) (*reader, error) {
	if err := rawmsg.Check(req, MaxDepth); err != nil {
		return nil, &engine.Error{Kind: engine.KindInvalidRequest, Message: fmt.Sprintf("%s: malformed msgpack: %v", what, err)}
	}
	m, ok := rawmsg.Value(req).Fields()
	if !ok {
		return nil, &engine.Error{Kind: engine.KindInvalidRequest, Message: what + ": want a map with string keys"}
	}
	r := &reader{what: what, m: m}
	ok2 := map[string]bool{}
	for _, k := range known {
		ok2[k] = true
	}
	var unknown []string
	for k := range m {
		if !ok2[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		r.addf("unknown field %q (known: %s)", k, strings.Join(known, ", "))
	}
	return r, nil
}

func (r *reader) addf(format string, a ...any) {
	r.probs = append(r.probs, r.what+": "+fmt.Sprintf(format, a...))
}

func (r *reader) has(k string) bool {
	v, ok := r.m[k]
	return ok && !v.IsNil()
}

func (r *reader) str(k string) string {
	if !r.has(k) {
		return ""
	}
	s, ok := r.m[k].Str()
	if !ok {
		r.addf("%s must be a string", k)
	}
	return s
}

func (r *reader) strs(k string) []string {
	if !r.has(k) {
		return nil
	}
	items, ok := r.m[k].Items()
	if !ok {
		r.addf("%s must be a list of strings", k)
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := it.Str()
		if !ok {
			r.addf("%s[%d] must be a string", k, i)
			continue
		}
		out = append(out, s)
	}
	return out
}

func (r *reader) boolean(k string) bool {
	if !r.has(k) {
		return false
	}
	b, ok := r.m[k].Bool()
	if !ok {
		r.addf("%s must be a boolean", k)
	}
	return b
}

// number is a non-negative number of seconds (0 when absent).
func (r *reader) number(k string) float64 {
	if !r.has(k) {
		return 0
	}
	f, ok := r.m[k].Number()
	if !ok || f < 0 {
		r.addf("%s must be a non-negative number", k)
		return 0
	}
	return f
}

// count is a positive integer (0 when absent).
func (r *reader) count(k string) int64 {
	if !r.has(k) {
		return 0
	}
	n, ok := r.m[k].Int()
	if !ok || n < 1 {
		r.addf("%s must be a positive integer", k)
		return 0
	}
	return n
}

// absPaths are absolute paths (each must be).
func (r *reader) absPaths(k string) []string {
	out := r.strs(k)
	for _, p := range out {
		if !filepath.IsAbs(p) {
			r.addf("%s: %q is not an absolute path", k, p)
		}
	}
	return out
}

func (r *reader) err() error {
	switch len(r.probs) {
	case 0:
		return nil
	case 1:
		return &engine.Error{Kind: engine.KindInvalidRequest, Message: "invalid request: " + r.probs[0]}
	}
	return &engine.Error{Kind: engine.KindInvalidRequest, Message: fmt.Sprintf("invalid request (%d problems):\n- %s",
		len(r.probs), strings.Join(r.probs, "\n- "))}
}

// raw is a value to encode as it is (nil: msgpack nil).
func raw(v rawmsg.Value) any {
	if len(v) == 0 {
		return nil
	}
	return msgpack.RawMessage(v)
}

// encodeSorted encodes v with map keys sorted: the same value always gives the
// same bytes (a template's start frame is part of its key).
func encodeSorted(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.SetCustomStructTag("msgpack")
	if err := enc.Encode(v); err != nil {
		// impossible for the plain data encoded here; a nil frame then fails
		// where it is read, with this message lost: say it in its place
		b, _ := msgpack.Marshal(map[string]any{"op": "error", "message": "BUG(session): encoding: " + err.Error()})
		return b
	}
	return buf.Bytes()
}

// toMap turns a struct (the engine's report) into plain msgpack data.
func toMap(v any) map[string]any {
	m, err := engine.DecodeMap(engine.Encode(v), "report")
	if err != nil {
		return map[string]any{}
	}
	return m
}

func errorResponse(err error) ([]byte, string) {
	if e, ok := err.(*engine.Error); ok {
		return engine.ErrorResponse(e), e.Kind
	}
	return engine.ErrorResponse(err), engine.KindInternal
}

// tail is the last 2000 bytes of a result's stderr, for messages.
func tail(res *engine.Result) string {
	if res == nil || len(res.Stderr) == 0 {
		return ""
	}
	e := res.Stderr
	if len(e) > 2000 {
		e = e[len(e)-2000:]
	}
	return strings.ToValidUTF8(string(e), "\uFFFD")
}

// mapWith is the encoded msgpack map m with extra's pairs added after its own (m
// must not have those keys): a report extended without decoding it.
func mapWith(m []byte, extra map[string]any) []byte {
	n, hl := 0, 0
	if len(m) == 0 {
		return m
	}
	switch c := m[0]; {
	case c >= 0x80 && c <= 0x8f:
		n, hl = int(c&0x0f), 1
	case c == 0xde && len(m) >= 3:
		n, hl = int(m[1])<<8|int(m[2]), 3
	case c == 0xdf && len(m) >= 5:
		n, hl = int(m[1])<<24|int(m[2])<<16|int(m[3])<<8|int(m[4]), 5
	default:
		return m // not a map: leave it (never the engine's report)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	total := n + len(keys)
	if total < 16 {
		buf.WriteByte(0x80 | byte(total))
	} else {
		buf.Write([]byte{0xdf, byte(total >> 24), byte(total >> 16), byte(total >> 8), byte(total)})
	}
	buf.Write(m[hl:])
	for _, k := range keys {
		buf.Write(encodeSorted(k))
		buf.Write(encodeSorted(extra[k]))
	}
	return buf.Bytes()
}
