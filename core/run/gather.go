package run

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"golang.org/x/sys/unix"
)

// A gather: named producers, run at once, whose outputs feed one consumer — the last
// producer's on its stdin, the others' on fds 3, 4, … in order — with
// SANDTRAP_GATHER="name:fd,…" in its environment naming each (docs/protocol.md,
// "pipeline", gather). Each stage has its own policy; only the bytes cross.

// GatherEnv is the consumer's variable naming its inputs.
const GatherEnv = "SANDTRAP_GATHER"

// MaxGather bounds a gather's producers (the fds a run request carries).
const MaxGather = 12

var gatherName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// Named is one producer of a gather.
type Named struct {
	Name string
	Stage
}

// Gather runs the producers and the consumer chain (stages: the consumer first,
// then any stages it is piped into); stdoutFD >= 0 takes the last stage's stdout.
// The result is the last stage's, with every stage's (producers first) in Stages.
func Gather(sources []Named, stages []Stage, stdoutFD int) *PipelineResult {
	type pp struct{ r, w int }
	var pipes []pp
	fail := func(err error) *PipelineResult {
		for _, p := range pipes {
			unix.Close(p.r)
			unix.Close(p.w)
		}
		if stdoutFD >= 0 {
			unix.Close(stdoutFD)
		}
		res := failed(protocol.KindSpawn, "pipe: "+err.Error(), nil)
		return &PipelineResult{Result: *res, Stages: []*Result{}}
	}
	for range sources {
		r, w, err := Pipe()
		if err != nil {
			return fail(err)
		}
		pipes = append(pipes, pp{r, w})
	}
	for range stages[1:] {
		r, w, err := Pipe()
		if err != nil {
			return fail(err)
		}
		pipes = append(pipes, pp{r, w})
	}
	ns := len(sources)
	all := make([]Stage, 0, ns+len(stages))
	results := make([]*Result, ns+len(stages))
	var wg sync.WaitGroup
	start := func(i int, st Stage, req Request) {
		all = append(all, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = Run(st.Sandbox, &req)
		}()
	}
	var env []string
	var extra []int
	for i, src := range sources {
		req := *src.Req
		req.StdoutFD = pipes[i].w
		start(i, src.Stage, req)
		if i < ns-1 {
			env = append(env, fmt.Sprintf("%s:%d", src.Name, 3+i))
			extra = append(extra, pipes[i].r)
		} else {
			env = append(env, fmt.Sprintf("%s:0", src.Name))
		}
	}
	for j, st := range stages {
		req := *st.Req
		if j == 0 {
			req.StdinFD, req.ExtraFDs = pipes[ns-1].r, extra
			e := map[string]string{}
			for k, v := range req.Env {
				e[k] = v
			}
			e[GatherEnv] = strings.Join(env, ",")
			req.Env = e
		} else {
			req.StdinFD = pipes[ns+j-1].r
		}
		if j < len(stages)-1 {
			req.StdoutFD = pipes[ns+j].w
		} else if stdoutFD >= 0 {
			req.StdoutFD = stdoutFD
		}
		start(ns+j, st, req)
	}
	wg.Wait()
	return pipelineResult(all, results)
}

// gatherRequest reads a pipeline request's "gather" list (each a stage with "name").
func gatherRequest(h Host, list []any, lookup func(id uint64) Host, common *Request, probs *policy.Problems) []Named {
	if len(list) < 2 {
		probs.Add("gather", "a gather needs at least two named stages, got %d", len(list))
	}
	if len(list) > MaxGather {
		probs.Add("gather", "at most %d stages, got %d", MaxGather, len(list))
	}
	seen := map[string]bool{}
	var out []Named
	for i, st := range list {
		at := fmt.Sprintf("gather[%d].", i)
		sm, ok := st.(map[string]any)
		if !ok {
			probs.Add(fmt.Sprintf("gather[%d]", i), "is %T, not a map", st)
			continue
		}
		name, _ := sm["name"].(string)
		switch {
		case !gatherName.MatchString(name):
			probs.Add(at+"name", "want a name of letters, digits, '_', '-' and '.' (not starting with a digit), got %q", protocol.Text(name))
		case seen[name]:
			probs.Add(at+"name", "%q names two stages", name)
		}
		seen[name] = true
		stage, ok := parseStage(h, sm, at, lookup, common, probs, "name")
		if ok {
			out = append(out, Named{Name: name, Stage: stage})
		}
	}
	return out
}
