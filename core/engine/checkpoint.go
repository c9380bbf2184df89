package engine

import (
	"bytes"
	"encoding/json"
	"strconv"

	runs "github.com/sandtrap/sandtrap/core/run"
	"golang.org/x/sys/unix"
)

// Application checkpoints of a popen'd process (core/run/checkpoint.go;
// docs/protocol.md, "checkpoints"): checkpoint writes one to a directory,
// restore starts the program again from one, in a sandbox of the same policy.

func init() {
	RegisterOp("checkpoint", opProcess(processCheckpoint))
	RegisterOp("restore", opRestore)
}

// processCheckpoint: {"dir", "name", "app_state": bin|nil} → {"dir", "checkpoint"}.
func processCheckpoint(s *Sandbox, p *runs.Process, m map[string]any) (map[string]any, error) {
	dir, _ := m["dir"].(string)
	name, _ := m["name"].(string)
	var state []byte
	switch v := m["app_state"].(type) {
	case nil:
	case []byte:
		state = v
	default:
		return nil, invalidRequest("app_state", "want bytes (what save_fn returned) or nil")
	}
	cp, err := p.Checkpoint(dir, name, runs.PolicySum(s.Policy), state)
	if err != nil {
		return nil, err
	}
	return map[string]any{"dir": dir, "checkpoint": asMap(cp)}, nil
}

// asMap is checkpoint.json's map (the response carries the file's keys).
func asMap(cp *runs.Checkpoint) map[string]any {
	b, _ := json.Marshal(cp)
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	d.Decode(&m)
	return ints(m).(map[string]any)
}

// ints turns the JSON numbers of v (all integers here) into int64s.
func ints(v any) any {
	switch t := v.(type) {
	case json.Number:
		n, _ := t.Int64()
		return n
	case map[string]any:
		for k, x := range t {
			t[k] = ints(x)
		}
	case []any:
		for i, x := range t {
			t[i] = ints(x)
		}
	}
	return v
}

// opRestore: popen's keys (stdio, timeout, tag, start) with "dir" in place of argv,
// env and cwd (the checkpoint's) → popen's answer, "app_state" and "checkpoint".
func opRestore(s *Sandbox, b []byte) ([]byte, string) {
	m, err := DecodeMap(b, "request")
	if err != nil {
		return ErrorResponse(err), KindInvalidRequest
	}
	dir, _ := m["dir"].(string)
	if dir == "" {
		return ErrorResponse(invalidRequest("dir", "want the checkpoint's directory")), KindInvalidRequest
	}
	for _, k := range []string{"argv", "env", "cwd"} {
		if _, ok := m[k]; ok {
			return ErrorResponse(invalidRequest(k, "a restore runs the checkpoint's %s", k)), KindInvalidRequest
		}
	}
	cp, state, err := runs.LoadCheckpoint(dir)
	if err != nil {
		return ErrorResponse(err), kindOf(err)
	}
	if cp.Policy != runs.PolicySum(s.Policy) {
		err := errorf(KindInvalidPolicy, "the checkpoint in %s was taken under another policy: it restores only into a sandbox of the same policy (fail closed)", dir)
		return ErrorResponse(err), KindInvalidPolicy
	}
	fd, err := runs.StateFD(state)
	if err != nil {
		return ErrorResponse(errorf(KindSpawn, "checkpoint state: %v", err)), KindSpawn
	}
	delete(m, "dir")
	m["op"] = "popen"
	argv := make([]any, len(cp.Process.Argv))
	for i, a := range cp.Process.Argv {
		argv[i] = a
	}
	m["argv"] = argv
	env := map[string]any{}
	for k, v := range cp.Process.Env {
		env[k] = v
	}
	env["SANDTRAP_CHECKPOINT_FD"] = strconv.Itoa(runs.CheckpointStateFD)
	env["SANDTRAP_CHECKPOINT_SIZE"] = strconv.Itoa(len(state))
	m["env"] = env
	if cp.Process.Cwd != "" {
		m["cwd"] = cp.Process.Cwd
	}
	resp, kind := popenWith(s, m, []int{fd})
	unix.Close(fd)
	if kind != "" {
		return resp, kind
	}
	out, _ := DecodeMap(resp, "response")
	out["app_state"] = state
	out["checkpoint"] = asMap(cp)
	return Encode(out), ""
}
