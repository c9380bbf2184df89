// Package protocol is the msgpack protocol of the engine: requests decoded (checked
// before any allocation, scan.go), responses encoded, errors with stable kinds and
// their problems field by field, and the registry of ops.
package protocol

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/vmihailenco/msgpack/v5"
)

// MaxRequest bounds a request; larger ones are refused before decoding.
const MaxRequest = 1 << 30

// DecodeMap decodes one msgpack map with string keys, refusing trailing bytes.
func DecodeMap(b []byte, what string) (m map[string]any, err error) {
	if len(b) == 0 {
		return nil, undecodable(what, "empty input")
	}
	if len(b) > MaxRequest {
		return nil, undecodable(what, "%d bytes is too large", len(b))
	}
	if err := Scan(b); err != nil {
		return nil, undecodable(what, "malformed msgpack: %v", err)
	}
	defer func() {
		if r := recover(); r != nil { // never let a decoder bug take the host down
			m, err = nil, undecodable(what, "undecodable msgpack: %v", r)
		}
	}()
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	dec.SetMapDecoder(decodeStringMap)
	dec.UseLooseInterfaceDecoding(true)
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, undecodable(what, "malformed msgpack: %v", err)
	}
	m, err = stringKeys(v)
	if err != nil {
		return nil, undecodable(what, "%v", err)
	}
	return m, nil
}

// undecodable is the invalid_request error of input that is not a msgpack map: one
// problem, about the input as a whole.
func undecodable(what, format string, a ...any) *Error {
	msg := fmt.Sprintf(format, a...)
	return &Error{Kind: KindInvalidRequest, Message: what + ": " + msg, Problems: []policy.Problem{{Message: msg}}}
}

// decodeStringMap decodes a map whose keys must be strings.
func decodeStringMap(d *msgpack.Decoder) (any, error) {
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	out := make(map[string]any, n)
	for i := 0; i < n; i++ {
		k, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("map key %v is not a string", k)
		}
		v, err := d.DecodeInterface()
		if err != nil {
			return nil, err
		}
		out[ks] = v
	}
	return out, nil
}

// stringKeys converts every map in v to map[string]any (keys must be strings).
func stringKeys(v any) (map[string]any, error) {
	conv, err := normalize(v)
	if err != nil {
		return nil, err
	}
	m, ok := conv.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a msgpack map at the top level, got %T", v)
	}
	return m, nil
}

func normalize(v any) (any, error) {
	switch t := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			n, err := normalize(val)
			if err != nil {
				return nil, err
			}
			out[ks] = n
		}
		return out, nil
	case map[string]any:
		for k, val := range t {
			n, err := normalize(val)
			if err != nil {
				return nil, err
			}
			t[k] = n
		}
		return t, nil
	case []any:
		for i, val := range t {
			n, err := normalize(val)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	}
	return v, nil
}

// Encode marshals a response.
func Encode(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("msgpack")
	if err := enc.Encode(v); err != nil {
		b, _ := msgpack.Marshal(map[string]any{"error": map[string]string{"kind": KindInternal, "message": "encoding the response: " + err.Error()}})
		return b
	}
	return buf.Bytes()
}

// ErrorResponse is the response for a request that could not run at all.
func ErrorResponse(err error) []byte {
	return Encode(map[string]any{"success": false, "error": Info(err)})
}

// Info is err as a response's error: its kind, message and problems.
func Info(err error) ErrorInfo {
	if e, ok := err.(*Error); ok {
		probs := make([]policy.Problem, len(e.Problems))
		for i, p := range e.Problems {
			probs[i] = policy.Problem{Field: Text(p.Field), Message: Text(p.Message)}
		}
		if len(probs) == 0 {
			probs = nil
		}
		return ErrorInfo{Kind: e.Kind, Message: Text(e.Message), Problems: probs}
	}
	return ErrorInfo{Kind: KindInternal, Message: Text(err.Error())}
}

// Text is s as a msgpack str may carry it: valid UTF-8 (a message that quotes
// the request's bytes — a key, an argv element — is decoded as text by every
// binding, and one invalid byte would fail the whole response there).
func Text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// KindOf is the kind of an engine error (internal for any other error).
func KindOf(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Kind
	}
	return KindInternal
}

// Fields checks a request map for unknown keys; at prefixes the problems' field
// ("stages[2]." inside a pipeline stage).
func Fields(m map[string]any, at, what string, allowed ...string) policy.Problems {
	var probs policy.Problems
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	var unknown []string
	for k := range m {
		if !ok[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		probs.Add(at+k, "unknown field of %s (known: %s)", what, strings.Join(allowed, ", "))
	}
	return probs
}

// Argv reads a request's argv (at prefixes the problems' field).
func Argv(v any, at string, probs *policy.Problems) []string {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		probs.Add(at+"argv", "must be a non-empty list of strings")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, a := range list {
		var s string
		switch t := a.(type) {
		case string:
			s = t
		case []byte:
			s = string(t)
		default:
			probs.Add(at+"argv", "element %d is %T, not a string", i, a)
			continue
		}
		if strings.ContainsRune(s, 0) {
			probs.Add(at+"argv", "element %d contains a NUL byte", i)
			continue
		}
		out = append(out, s)
	}
	if len(out) > 0 && out[0] == "" {
		probs.Add(at+"argv", "element 0 (the program) is empty")
	}
	return out
}

// CallKind maps a result error to a call status: errors about the run's own fate
// (timeout, cancel, limits, a pipeline stage that failed) are results, not call
// failures.
func CallKind(e *ErrorInfo) string {
	if e == nil {
		return ""
	}
	switch e.Kind {
	case KindTimeout, KindCancelled, KindKilled, KindCPUTime, KindMemory, KindStageFailed, KindDisk, KindCommit:
		return ""
	}
	return e.Kind
}

// RequestError turns collected problems into an invalid_request error.
func RequestError(probs policy.Problems) *Error {
	return &Error{Kind: KindInvalidRequest, Message: policy.FormatProblems("invalid request", probs),
		Problems: append([]policy.Problem(nil), probs...)}
}

// InvalidRequest is an invalid_request error with one problem.
func InvalidRequest(field, format string, a ...any) *Error {
	var probs policy.Problems
	probs.Add(field, format, a...)
	return RequestError(probs)
}
