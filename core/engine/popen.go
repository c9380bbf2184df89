package engine

import (
	"math"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"golang.org/x/sys/unix"
)

// The ops of popen'd runs (core/run/popen.go; docs/protocol.md, "processes"):
// popen starts one and hands the caller its pipes' ends; process_wait,
// process_kill, process_pause and process_resume act on it by its id.

func init() {
	RegisterOp("popen", opPopen)
	RegisterOp("process_wait", opProcess(processWait))
	RegisterOp("process_kill", opProcess(processKill))
	RegisterOp("process_pause", opProcess(processPause))
	RegisterOp("process_resume", opProcess(processResume))
	RegisterOp("process_start", opProcess(processStart))
	RegisterOp("process_signal", opProcess(processSignal))
}

// Processes are the sandbox's popen'd runs not yet waited for.
func (s *Sandbox) Processes() *runs.Processes { return &s.procs }

func opPopen(s *Sandbox, b []byte) ([]byte, string) {
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	return popenWith(s, m, nil)
}

// popenWith: popen of request m, extra fds placed on 3, 4, … of the program (restore).
func popenWith(s *Sandbox, m map[string]any, extra []int) ([]byte, string) {
	var probs policy.Problems
	var stdio [3]runs.Stdio
	rest := map[string]any{}
	for k, v := range m {
		rest[k] = v
	}
	for i, k := range []string{"stdin", "stdout", "stderr"} {
		stdio[i] = runs.ParseStdio(m[k], i, &probs)
		delete(rest, k)
	}
	park := false
	if v, ok := m["start"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			probs.Add("start", "must be a boolean (false: park the program before its execve until process_start)")
		}
		park = isBool && !b
		delete(rest, "start")
	}
	req := parseRun(rest, "", "popen", &probs, "stdin", "stdout", "stderr", "start")
	if len(probs) > 0 {
		return ErrorResponse(requestError(probs)), KindInvalidRequest
	}
	for _, fd := range extra {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return ErrorResponse(errorf(KindSpawn, "dup: %v", err)), KindSpawn
		}
		req.ExtraFDs = append(req.ExtraFDs, dup) // closed by the run once started
	}
	p, fds, err := runs.Popen(s, &s.procs, req, stdio, park)
	if err != nil {
		return ErrorResponse(err), kindOf(err)
	}
	out := map[string]any{"process": p.ID, "pid": p.Pid, "init_pid": p.InitPid, "parked": p.Parked(), "pause": p.PauseVia}
	if p.PauseNote != "" {
		out["pause_note"] = p.PauseNote
	}
	for i, k := range []string{"stdin", "stdout", "stderr"} {
		if fds[i] >= 0 {
			out[k] = fds[i]
		} else {
			out[k] = nil
		}
	}
	return Encode(out), ""
}

type processOp func(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error)

func opProcess(fn processOp) OpFunc {
	return func(s *Sandbox, b []byte) ([]byte, string) {
		m, err := DecodeMap(b, "request")
		if err != nil {
			return ErrorResponse(err), KindInvalidRequest
		}
		op, _ := m["op"].(string)
		allowed := []string{"op", "process", "tag"}
		switch op {
		case "process_wait":
			allowed = append(allowed, "timeout")
		case "process_signal":
			allowed = append(allowed, "signal", "to")
		case "checkpoint":
			allowed = append(allowed, "dir", "name", "app_state")
		}
		probs := protocol.Fields(m, "", op, allowed...)
		n, ok := policy.AsInt(m["process"])
		if !ok {
			probs.Add("process", "must be the id popen returned")
		}
		if len(probs) > 0 {
			return ErrorResponse(requestError(probs)), KindInvalidRequest
		}
		p := s.procs.Get(uint64(n))
		if p == nil {
			err := invalidRequest("process", "%d is not a process of this sandbox (or it was waited for already)", n)
			return ErrorResponse(err), KindInvalidRequest
		}
		out, err := fn(s, p, m)
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(out), ""
	}
}

// processWait: {"done": false} while it runs (after timeout seconds; 0 polls,
// none waits as long as it takes), else {"done": true, "result": ...}; a result is
// handed out once (the process is then forgotten).
func processWait(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	timeout := time.Duration(-1)
	if v, ok := m["timeout"]; ok && v != nil {
		f, isNum := asFloat(v)
		if !isNum || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, invalidRequest("timeout", "want seconds (a number >= 0) or nil (no limit)")
		}
		timeout = time.Duration(f * float64(time.Second))
	}
	res := p.Wait(timeout)
	if res == nil {
		return map[string]any{"done": false, "paused": p.Paused(), "parked": p.Parked()}, nil
	}
	s.procs.Remove(p.ID)
	return map[string]any{"done": true, "result": res}, nil
}

func processStart(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	if !p.Start() {
		if p.Done() {
			return nil, errorf(KindInvalidRequest, "process %d ended before it was started", p.ID)
		}
		return nil, errorf(KindInvalidRequest, "process %d is not parked (popen with \"start\": false parks one)", p.ID)
	}
	return map[string]any{"started": true}, nil
}

func processKill(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	done := p.Done()
	p.Kill()
	return map[string]any{"killed": !done}, nil
}

func processPause(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	if err := p.Pause(); err != nil {
		return nil, err
	}
	return map[string]any{"paused": p.Paused(), "via": p.PauseVia}, nil
}

// processSignal: {"signal": n, "to": "leader" (default) | "tree"} → {"sent": count}.
func processSignal(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	n, ok := policy.AsInt(m["signal"])
	if !ok {
		return nil, invalidRequest("signal", "must be a signal number")
	}
	tree := false
	switch v := m["to"]; v {
	case nil, "leader":
	case "tree":
		tree = true
	default:
		return nil, invalidRequest("to", "must be \"leader\" (the program) or \"tree\" (every process of the run)")
	}
	sent, err := p.Signal(int(n), tree)
	if err != nil {
		return nil, err
	}
	return map[string]any{"sent": sent}, nil
}

func processResume(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	if err := p.Resume(); err != nil {
		return nil, err
	}
	return map[string]any{"paused": p.Paused()}, nil
}

func asFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case float32:
		return float64(t), true
	}
	if n, ok := policy.AsInt(v); ok {
		return float64(n), true
	}
	return 0, false
}
