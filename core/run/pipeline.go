package run

import (
	"fmt"
	"sync"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"golang.org/x/sys/unix"
)

// PipelineResult is the last stage's result plus every stage's (see pipelineResult).
type PipelineResult struct {
	Result
	Stages      []*Result `msgpack:"stages"`
	FailedStage *int      `msgpack:"failed_stage"` // the first stage that failed, if any
}

// Stage is one command of a pipeline and the sandbox it runs in.
type Stage struct {
	Sandbox Host
	Req     *Request
}

// Pipeline runs stages joined by kernel pipes: stage i's stdout is stage i+1's stdin.
// Each stage has its own policy; only the bytes cross. stdin feeds the first stage.
func Pipeline(stages []Stage, stdin []byte) *PipelineResult {
	n := len(stages)
	results := make([]*Result, n)
	// pipes between stages; Run takes ownership of the fds it is given
	type pp struct{ r, w int }
	pipes := make([]pp, n-1)
	for i := range pipes {
		r, w, err := Pipe()
		if err != nil {
			for _, p := range pipes[:i] {
				unix.Close(p.r)
				unix.Close(p.w)
			}
			res := failed(protocol.KindSpawn, "pipe: "+err.Error(), nil)
			return &PipelineResult{Result: *res, Stages: []*Result{}}
		}
		pipes[i] = pp{r, w}
	}
	var wg sync.WaitGroup
	for i := range stages {
		req := *stages[i].Req
		if i == 0 {
			req.Stdin = stdin
		} else {
			req.StdinFD = pipes[i-1].r
		}
		if i < n-1 {
			req.StdoutFD = pipes[i].w
		}
		wg.Add(1)
		go func(i int, req Request) {
			defer wg.Done()
			results[i] = Run(stages[i].Sandbox, &req)
		}(i, req)
	}
	wg.Wait()
	return pipelineResult(stages, results)
}

// pipelineResult is the last stage's result, except that the pipeline succeeds
// only if every stage did: the first stage that failed — could not start, ended
// with an error or a non-zero status, or was killed — is named (failed_stage, and
// the error when the last stage has none). A stage before the last that was ended
// by SIGPIPE only stopped because its reader did (`yes | head -1`): not a failure.
func pipelineResult(stages []Stage, results []*Result) *PipelineResult {
	n := len(results)
	out := &PipelineResult{Result: *results[n-1], Stages: results}
	for i, r := range results {
		sigpipe := r.Signal != nil && *r.Signal == int(unix.SIGPIPE) && r.Error == nil
		if r.Success || (i < n-1 && sigpipe) {
			continue
		}
		idx := i
		out.FailedStage = &idx
		out.Success = false
		what := fmt.Sprintf("stage %d (%s)", i, protocol.Text(stages[i].Req.Argv[0]))
		switch {
		case r.Error != nil:
			out.Error = &ErrorInfo{Kind: r.Error.Kind, Message: what + ": " + r.Error.Message}
		case i == n-1:
			// the last stage's own status is the pipeline's: no error of its own
		case r.ExitCode != nil:
			out.Error = &ErrorInfo{Kind: protocol.KindStageFailed, Message: fmt.Sprintf("%s exited with status %d", what, *r.ExitCode)}
		case r.Signal != nil:
			out.Error = &ErrorInfo{Kind: protocol.KindStageFailed, Message: fmt.Sprintf("%s was killed by signal %d", what, *r.Signal)}
		}
		if i < n-1 && out.Error != nil {
			out.Reason = out.Error.Kind // an earlier stage ended it
		}
		break
	}
	return out
}

// PipelineRequest decodes a pipeline request for h (docs/protocol.md, "pipeline")
// and runs it; lookup finds the sandbox a stage names by its registry id (nil: no
// such sandbox).
func PipelineRequest(h Host, m map[string]any, lookup func(id uint64) Host) (*PipelineResult, error) {
	var probs policy.Problems
	probs = append(probs, protocol.Fields(m, "", "pipeline", "op", "stages", "stdin", "timeout", "tag", "gather", "stdout")...)
	list, ok := m["stages"].([]any)
	if !ok || len(list) == 0 {
		probs.Add("stages", "must be a non-empty list")
	}
	gather, hasGather := m["gather"].([]any)
	if _, present := m["gather"]; present && !hasGather {
		probs.Add("gather", "must be a list of named stages")
	}
	stdoutFD := -1
	if v, present := m["stdout"]; present {
		st := ParseStdio(v, 1, &probs)
		if st.FD < 0 {
			probs.Add("stdout", "want a file descriptor (an int): the last stage's stdout")
		}
		stdoutFD = st.FD
	}
	var stdin []byte
	switch v := m["stdin"].(type) {
	case nil:
	case []byte:
		stdin = v
	case string:
		stdin = []byte(v)
	default:
		probs.Add("stdin", "must be bytes or a string, got %T", v)
	}
	commonFields := map[string]any{"argv": []any{"x"}}
	for _, k := range []string{"timeout", "tag"} {
		if v, ok := m[k]; ok {
			commonFields[k] = v
		}
	}
	common := ParseRequest(commonFields, "", "pipeline", &probs)
	var stages []Stage
	for i, st := range list {
		sm, ok := st.(map[string]any)
		if !ok {
			probs.Add(fmt.Sprintf("stages[%d]", i), "is %T, not a map", st)
			continue
		}
		if stage, ok := parseStage(h, sm, fmt.Sprintf("stages[%d].", i), lookup, common, &probs); ok {
			stages = append(stages, stage)
		}
	}
	var sources []Named
	if hasGather {
		sources = gatherRequest(h, gather, lookup, common, &probs)
		if stdin != nil {
			probs.Add("stdin", "a gather's producers take no stdin")
		}
	}
	if len(probs) > 0 {
		return nil, protocol.RequestError(probs)
	}
	if stdoutFD >= 0 {
		fd, err := unix.FcntlInt(uintptr(stdoutFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, protocol.InvalidRequest("stdout", "fd %d: %v", stdoutFD, err)
		}
		stdoutFD = fd
	}
	if hasGather {
		return Gather(sources, stages, stdoutFD), nil
	}
	if stdoutFD >= 0 {
		last := *stages[len(stages)-1].Req
		last.StdoutFD = stdoutFD
		stages[len(stages)-1].Req = &last
	}
	return Pipeline(stages, stdin), nil
}

// parseStage reads one stage of a pipeline request (at: its field prefix).
func parseStage(h Host, sm map[string]any, at string, lookup func(id uint64) Host, common *Request, probs *policy.Problems, extra ...string) (Stage, bool) {
	sb := h
	if id, has := sm["sandbox"]; has {
		n, isInt := policy.AsInt(id)
		var found Host
		if isInt && n > 0 {
			found = lookup(uint64(n))
		}
		if found == nil {
			probs.Add(at+"sandbox", "%v is not a live sandbox id", id)
			return Stage{}, false
		}
		sb = found
	}
	req := ParseRequest(sm, at, "a pipeline stage", probs, append([]string{"sandbox"}, extra...)...)
	if _, has := sm["stdin"]; has {
		probs.Add(at+"stdin", "only the pipeline itself takes stdin")
	}
	if req.Timeout == 0 {
		req.Timeout = common.Timeout
	}
	req.Tag = common.Tag
	return Stage{Sandbox: sb, Req: req}, true
}
