package engine

import (
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/template"
)

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
		res, err := runs.PipelineRequest(s, m, runHost)
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(res), CallKind(res.Error)
	case "isolation":
		return Encode(s.isolation()), ""
	case "dry_run", "commit", "abort":
		return s.branchOp(op, m) // branches.go
	case "session_open", "session_send", "session_close":
		var out map[string]any
		var err error
		switch op {
		case "session_open":
			out, err = template.Open(s, m)
		case "session_send":
			out, err = template.Send(s, m)
		default:
			out, err = template.CloseRequest(s, m)
		}
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(out), ""
	case "":
		return ErrorResponse(invalidRequest("op", "missing (%s)", strings.Join(ops.KnownOps(), ", "))), KindInvalidRequest
	}
	return ErrorResponse(invalidRequest("op", "unknown op %q (%s)", op, strings.Join(ops.KnownOps(), ", "))), KindInvalidRequest
}
