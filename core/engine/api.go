package engine

import (
	"github.com/sandtrap/sandtrap/core/hostcall"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	"github.com/sandtrap/sandtrap/core/template"
)

// The engine's API for the drivers built on it outside this package (core/session:
// the cooperative sandbox and map-reduce): ops they add to the protocol, sessions as
// Go calls, the isolation report, cancel tags and close hooks.

// OpFunc handles a request of an op registered with RegisterOp. It gets the request
// as it came (its own decoding: values it forwards stay raw msgpack) and returns the
// response and its error kind, as Exec does.
type OpFunc = protocol.OpFunc[*Sandbox]

// ops are the protocol's ops: the ones Exec decodes itself, and those other
// packages register.
var ops = &protocol.Registry[*Sandbox]{Core: []string{"run", "dry_run", "commit", "abort", "pipeline", "isolation", "session_open", "session_send", "session_close", "answer"}}

// RegisterOp adds an op to the protocol (from an init function).
func RegisterOp(name string, fn OpFunc) { ops.Register(name, fn) }

// execRaw handles the requests that are not decoded into Go maps: host-call
// answers (hostcall) and registered ops. ok is false for every other request.
func (s *Sandbox) execRaw(b []byte) (resp []byte, kind string, ok bool) {
	op := rawmsg.Peek(b, "op")
	if op == "" {
		return nil, "", false
	}
	if op == "answer" {
		resp, kind = hostcall.Resume(s, b)
		return resp, kind, true
	}
	fn := ops.Lookup(op)
	if fn == nil {
		return nil, "", false
	}
	resp, kind = fn(s, b)
	return resp, kind, true
}

// OpenSession starts req as a session (docs/protocol.md, "sessions"), or — with a
// template start frame — opens a fork of that template; spawn false makes the fork
// refuse new processes and programs. It returns the session's id.
func (s *Sandbox) OpenSession(req *RunRequest, startFrame []byte, spawn bool) (uint64, error) {
	return template.OpenSession(s, req, startFrame, spawn)
}

// SessionEnd is why a session ended (core/template).
type SessionEnd = template.SessionEnd

// SendFrame writes one frame to a session and waits up to timeout seconds (0: no
// limit) for one back. When the session ended instead (its program exited or
// overran the timeout and was killed, or the host confined itself since), the reply
// is nil and end says why.
func (s *Sandbox) SendFrame(id uint64, frame []byte, timeout float64) (reply []byte, end *SessionEnd, err error) {
	ss, err := template.Lookup(s, id)
	if err != nil {
		return nil, nil, err
	}
	return template.SendFrame(s, ss, frame, timeout)
}

// CloseSession ends a session (its program is killed) and returns its result.
func (s *Sandbox) CloseSession(id uint64) (*Result, error) {
	ss, err := template.Lookup(s, id)
	if err != nil {
		return nil, err
	}
	return template.Close(s, ss), nil
}

// Isolation is what every run of this sandbox enforces (the isolation report).
func (s *Sandbox) Isolation() *Isolation { return s.isolation() }

// Track registers cancel under tag until untrack is called: Cancel(tag) and
// Cancel("", true) (sandtrap_sandbox_cancel) call it, as they do for runs.
func (s *Sandbox) Track(tag string, cancel func()) (untrack func()) { return s.track(tag, cancel) }

// OnClose registers f to run when the sandbox closes, before it waits for what is in
// flight (f should end what it started: sessions, other sandboxes).
func (s *Sandbox) OnClose(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closers = append(s.closers, f)
}

func (s *Sandbox) runClosers() {
	s.mu.Lock()
	fs := s.closers
	s.closers = nil
	s.mu.Unlock()
	hostcall.Drop(s) // operations waiting for an answer from the host
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Enter registers an operation in flight (Close waits for it); false once the
// sandbox is closed. Leave ends it.
func (s *Sandbox) Enter() bool { return s.enter() }

// Leave ends an operation Enter registered.
func (s *Sandbox) Leave() { s.inflight.Done() }
