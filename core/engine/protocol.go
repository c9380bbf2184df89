package engine

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
	if err := scan(b); err != nil {
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

// NewFromMsgpack builds a sandbox from a msgpack policy map.
func NewFromMsgpack(b []byte) (*Sandbox, error) {
	m, err := DecodeMap(b, "policy")
	if err != nil {
		return nil, err
	}
	return NewFromMap(m)
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
	return Encode(map[string]any{"success": false, "error": errorInfo(err)})
}

// errorInfo is err as a response's error: its kind, message and problems.
func errorInfo(err error) ErrorInfo {
	if e, ok := err.(*Error); ok {
		return ErrorInfo{Kind: e.Kind, Message: e.Message, Problems: e.Problems}
	}
	return ErrorInfo{Kind: KindInternal, Message: err.Error()}
}

// kindOf is the kind of an engine error (internal for any other error).
func kindOf(err error) string {
	if e, ok := err.(*Error); ok {
		return e.Kind
	}
	return KindInternal
}

// fields checks a request map for unknown keys; at prefixes the problems' field
// ("stages[2]." inside a pipeline stage).
func fields(m map[string]any, at, what string, allowed ...string) policy.Problems {
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

func argv(v any, at string, probs *policy.Problems) []string {
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

// parseRun reads the fields of a run request (or of a pipeline stage, at
// "stages[i].").
func parseRun(m map[string]any, at, what string, probs *policy.Problems, extra ...string) *RunRequest {
	allowed := append([]string{"op", "argv", "stdin", "timeout", "env", "cwd", "tag", "max_output"}, extra...)
	*probs = append(*probs, fields(m, at, what, allowed...)...)
	req := &RunRequest{StdinFD: -1, StdoutFD: -1}
	req.Argv = argv(m["argv"], at, probs)
	switch s := m["stdin"].(type) {
	case nil:
	case []byte:
		req.Stdin = s
	case string:
		req.Stdin = []byte(s)
	default:
		probs.Add(at+"stdin", "must be bytes or a string, got %T", s)
	}
	// reuse the policy reader for typed scalar fields
	sub := map[string]any{}
	for _, k := range []string{"timeout", "env", "cwd", "max_output"} {
		if v, ok := m[k]; ok {
			sub[k] = v
		}
	}
	p, sp := policy.Decode(sub)
	if len(sp) > 0 {
		for _, pr := range sp {
			probs.Add(at+pr.Field, "%s", pr.Message)
		}
	} else {
		req.Timeout, req.Env, req.Cwd = p.Timeout, p.Env, p.Cwd
		if _, ok := m["max_output"]; ok {
			req.MaxOutput = p.MaxOutput
		}
	}
	if t, ok := m["tag"]; ok {
		s, isStr := t.(string)
		if !isStr {
			probs.Add(at+"tag", "must be a string")
		}
		req.Tag = s
	}
	return req
}

// Exec runs one msgpack request against the sandbox and returns the msgpack
// response and the error kind ("" when the call itself succeeded).
func (s *Sandbox) Exec(b []byte) ([]byte, string) {
	if resp, kind, ok := s.execRaw(b); ok { // host-call answers, ops of other packages
		return resp, kind
	}
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	op, _ := m["op"].(string)
	switch op {
	case "run":
		var probs policy.Problems
		req := parseRun(m, "", "run", &probs)
		if len(probs) > 0 {
			return ErrorResponse(requestError(probs)), KindInvalidRequest
		}
		res := s.Run(req)
		return Encode(res), CallKind(res.Error)
	case "pipeline":
		res, err := s.pipelineRequest(m)
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(res), CallKind(res.Error)
	case "learn":
		res, err := s.learnRequest(m)
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(res), CallKind(res.Result.Error)
	case "isolation":
		return Encode(s.isolation()), ""
	case "session_open", "session_send", "session_close":
		var out map[string]any
		var err error
		switch op {
		case "session_open":
			out, err = s.sessionOpen(m)
		case "session_send":
			out, err = s.sessionSend(m)
		default:
			out, err = s.sessionClose(m)
		}
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(out), ""
	case "":
		return ErrorResponse(invalidRequest("op", "missing (%s)", strings.Join(knownOps(), ", "))), KindInvalidRequest
	}
	return ErrorResponse(invalidRequest("op", "unknown op %q (%s)", op, strings.Join(knownOps(), ", "))), KindInvalidRequest
}

// CallKind maps a result error to a call status: errors about the run's own fate
// (timeout, cancel, limits, a pipeline stage that failed) are results, not call
// failures.
func CallKind(e *ErrorInfo) string {
	if e == nil {
		return ""
	}
	switch e.Kind {
	case KindTimeout, KindCancelled, KindCPUTime, KindMemory, KindStageFailed:
		return ""
	}
	return e.Kind
}

// requestError turns collected problems into an invalid_request error.
func requestError(probs policy.Problems) *Error {
	return &Error{Kind: KindInvalidRequest, Message: policy.FormatProblems("invalid request", probs),
		Problems: append([]policy.Problem(nil), probs...)}
}

// invalidRequest is an invalid_request error with one problem.
func invalidRequest(field, format string, a ...any) *Error {
	var probs policy.Problems
	probs.Add(field, format, a...)
	return requestError(probs)
}
