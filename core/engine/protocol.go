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
		return nil, errorf(KindInvalidRequest, "%s: empty input", what)
	}
	if len(b) > MaxRequest {
		return nil, errorf(KindInvalidRequest, "%s: %d bytes is too large", what, len(b))
	}
	if err := scan(b); err != nil {
		return nil, errorf(KindInvalidRequest, "%s: malformed msgpack: %v", what, err)
	}
	defer func() {
		if r := recover(); r != nil { // never let a decoder bug take the host down
			m, err = nil, errorf(KindInvalidRequest, "%s: undecodable msgpack: %v", what, r)
		}
	}()
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	dec.SetMapDecoder(decodeStringMap)
	dec.UseLooseInterfaceDecoding(true)
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, errorf(KindInvalidRequest, "%s: malformed msgpack: %v", what, err)
	}
	m, err = stringKeys(v)
	if err != nil {
		return nil, errorf(KindInvalidRequest, "%s: %v", what, err)
	}
	return m, nil
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
	kind := KindInternal
	if e, ok := err.(*Error); ok {
		kind = e.Kind
	}
	return Encode(map[string]any{"success": false, "error": ErrorInfo{Kind: kind, Message: err.Error()}})
}

// fields checks a request map for unknown keys.
func fields(m map[string]any, what string, allowed ...string) policy.Problems {
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
		probs.Addf("%s: unknown field %q (known: %s)", what, k, strings.Join(allowed, ", "))
	}
	return probs
}

func argv(v any, what string, probs *policy.Problems) []string {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		probs.Addf("%s: argv must be a non-empty list of strings", what)
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
			probs.Addf("%s: argv[%d] is %T, not a string", what, i, a)
			continue
		}
		if strings.ContainsRune(s, 0) {
			probs.Addf("%s: argv[%d] contains a NUL byte", what, i)
			continue
		}
		out = append(out, s)
	}
	if len(out) > 0 && out[0] == "" {
		probs.Addf("%s: argv[0] is empty", what)
	}
	return out
}

// parseRun reads the fields of a run request (or of a pipeline stage).
func parseRun(m map[string]any, what string, probs *policy.Problems, extra ...string) *RunRequest {
	allowed := append([]string{"op", "argv", "stdin", "timeout", "env", "cwd", "tag", "max_output"}, extra...)
	*probs = append(*probs, fields(m, what, allowed...)...)
	req := &RunRequest{StdinFD: -1, StdoutFD: -1}
	req.Argv = argv(m["argv"], what, probs)
	switch s := m["stdin"].(type) {
	case nil:
	case []byte:
		req.Stdin = s
	case string:
		req.Stdin = []byte(s)
	default:
		probs.Addf("%s: stdin must be bytes or a string, got %T", what, s)
	}
	// reuse the policy reader for typed scalar fields
	sub := map[string]any{}
	for _, k := range []string{"timeout", "env", "cwd", "max_output"} {
		if v, ok := m[k]; ok {
			sub[k] = v
		}
	}
	p, err := policy.FromMap(sub)
	if err != nil {
		for _, pr := range err.(*policy.Error).Problems {
			probs.Addf("%s: %s", what, pr)
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
			probs.Addf("%s: tag must be a string", what)
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
		req := parseRun(m, "run", &probs)
		if err := probs.Err(); err != nil {
			return ErrorResponse(requestError(err)), KindInvalidRequest
		}
		res := s.Run(req)
		return Encode(res), CallKind(res.Error)
	case "pipeline":
		res, err := s.pipelineRequest(m)
		if err != nil {
			return ErrorResponse(err), err.(*Error).Kind
		}
		return Encode(res), CallKind(res.Error)
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
			return ErrorResponse(err), err.(*Error).Kind
		}
		return Encode(out), ""
	case "":
		return ErrorResponse(errorf(KindInvalidRequest, "request: missing \"op\" (run, pipeline, isolation)")), KindInvalidRequest
	}
	return ErrorResponse(errorf(KindInvalidRequest, "request: unknown op %q (%s)", op, strings.Join(knownOps(), ", "))), KindInvalidRequest
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
func requestError(err error) *Error {
	pe := err.(*policy.Error)
	if len(pe.Problems) == 1 {
		return errorf(KindInvalidRequest, "invalid request: %s", pe.Problems[0])
	}
	return errorf(KindInvalidRequest, "invalid request (%d problems):\n- %s", len(pe.Problems), strings.Join(pe.Problems, "\n- "))
}
