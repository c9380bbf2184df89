package run

import (
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
)

// ParseRequest reads the fields of a run request (or of a pipeline stage, at
// "stages[i]."; extra: the further fields the caller reads).
func ParseRequest(m map[string]any, at, what string, probs *policy.Problems, extra ...string) *Request {
	allowed := append([]string{"op", "argv", "stdin", "timeout", "env", "cwd", "tag", "max_output"}, extra...)
	*probs = append(*probs, protocol.Fields(m, at, what, allowed...)...)
	req := &Request{StdinFD: -1, StdoutFD: -1}
	req.Argv = protocol.Argv(m["argv"], at, probs)
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
