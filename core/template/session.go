// Package template holds sessions — long-lived runs the caller talks to in
// length-prefixed frames (docs/protocol.md, "sessions") — and templates: a program
// started and prepared once, whose forks serve sessions of other sandboxes with
// their own confinement (docs/protocol.md, "templates"). The sandbox they belong
// to is core/engine's, seen through Host.
package template

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"golang.org/x/sys/unix"
)

// A session is a long-lived run that the caller talks to in frames: each frame is a
// 4-byte big-endian length and that many bytes, written to the program's stdin and
// read from its stdout. The cooperative Python sandbox's worker is one; everything
// else about it (confinement, limits, tree kill) is an ordinary run.
type Session struct {
	id     uint64
	in     int // write end of the program's stdin
	out    int // read end of its stdout
	tag    string
	done   chan *runs.Result
	mu     sync.Mutex // one exchange at a time
	closed bool
	gen    uint64 // confineGen when the program started
}

var sessionSeq atomic.Uint64

// Host is the sandbox sessions and templates belong to (core/engine's Sandbox).
type Host interface {
	runs.Host
	Sessions() *Table                // its open sessions
	Plan() (*plan.Plan, error)       // its plan for the process's current confinement
	Features() kernel.Features       // what this machine enforces
	AdoptGroup(g *cgroup.Group) bool // takes g as its cgroup in place of its own, if that is unused
	Cancel(tag string, all bool) int
	Close()
}

// Set by core/engine: the sandbox of a template (its own policy), and the count of
// the host process's confine() calls (what predates the latest serves nothing).
var (
	NewHost    func(p *policy.Policy) (Host, error)
	ConfineGen func() uint64
)

// MaxFrame bounds one frame from a session.
const MaxFrame = 256 << 20

func Open(s Host, m map[string]any) (map[string]any, error) {
	var probs policy.Problems
	req := runs.ParseRequest(m, "", "session_open", &probs, "template", "spawn")
	start, hasTpl := m["template"]
	startFrame, ok := start.([]byte)
	if hasTpl && !ok {
		probs.Add("template", "must be bytes (the frame that prepares the template)")
	}
	spawn := true
	if v, has := m["spawn"]; has {
		b, isBool := v.(bool)
		switch {
		case !isBool:
			probs.Add("spawn", "must be a boolean")
		case !hasTpl:
			probs.Add("spawn", "applies to template forks only")
		}
		spawn = b
	}
	if len(probs) > 0 {
		return nil, protocol.RequestError(probs)
	}
	if hasTpl {
		return Fork(s, req, startFrame, spawn)
	}
	ss, err := Start(s, req, false)
	if err != nil {
		return nil, err
	}
	return map[string]any{"session": ss.id}, nil
}

// startSession starts req as a session. Its channel is two pipes, or (sock) one
// unix stream socket on the program's stdin and stdout, over which fds can pass.
func Start(s Host, req *runs.Request, sock bool) (*Session, error) {
	var inR, inW, outR, outW int
	if sock {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, protocol.Errorf(protocol.KindSpawn, "socketpair: %v", err)
		}
		inW, inR = p[0], p[1]
		outR, _ = unix.FcntlInt(uintptr(p[0]), unix.F_DUPFD_CLOEXEC, 0)
		outW, _ = unix.FcntlInt(uintptr(p[1]), unix.F_DUPFD_CLOEXEC, 0)
		if outR < 0 || outW < 0 {
			closeAll(inR, inW, outR, outW)
			return nil, protocol.Errorf(protocol.KindSpawn, "dup: out of file descriptors")
		}
	} else {
		var err error
		if inR, inW, err = runs.Pipe(); err != nil {
			return nil, protocol.Errorf(protocol.KindSpawn, "pipe: %v", err)
		}
		if outR, outW, err = runs.Pipe(); err != nil {
			closeAll(inR, inW)
			return nil, protocol.Errorf(protocol.KindSpawn, "pipe: %v", err)
		}
	}
	ss := &Session{id: sessionSeq.Add(1), in: inW, out: outR, done: make(chan *runs.Result, 1), gen: ConfineGen()}
	ss.tag = fmt.Sprintf("\x00session-%d", ss.id)
	req.StdinFD, req.StdoutFD, req.Stdin = inR, outW, nil
	req.Tag = ss.tag
	started := make(chan struct{})
	go func() {
		close(started)
		ss.done <- runs.Run(s, req) // closes inR and outW once the program started
	}()
	<-started
	s.Sessions().add(ss)
	return ss, nil
}

// Table holds a sandbox's open sessions.
type Table struct {
	mu sync.Mutex
	m  map[uint64]*Session
}

func (t *Table) add(ss *Session) {
	t.mu.Lock()
	if t.m == nil {
		t.m = map[uint64]*Session{}
	}
	t.m[ss.id] = ss
	t.mu.Unlock()
}

// Get is the open session id (nil: none).
func (t *Table) Get(id uint64) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (t *Table) remove(id uint64) {
	t.mu.Lock()
	delete(t.m, id)
	t.mu.Unlock()
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func get(s Host, m map[string]any) (*Session, error) {
	n, ok := policy.AsInt(m["session"])
	if !ok {
		return nil, protocol.InvalidRequest("session", "must be the id session_open returned")
	}
	ss := s.Sessions().Get(uint64(n))
	if ss == nil {
		return nil, protocol.InvalidRequest("session", "%d is not open", n)
	}
	return ss, nil
}

// sessionSend writes one frame and waits (up to timeout) for one frame back. A
// program that dies or overruns the timeout ends the session (it is killed): the
// response says so, with the run's result.
func Send(s Host, m map[string]any) (map[string]any, error) {
	var probs policy.Problems
	probs = append(probs, protocol.Fields(m, "", "session_send", "op", "session", "frame", "timeout", "tag")...)
	frame, ok := m["frame"].([]byte)
	if !ok {
		probs.Add("frame", "must be bytes")
	}
	timeout := 0.0
	if t, has := m["timeout"]; has {
		p, tp := policy.Decode(map[string]any{"timeout": t})
		if len(tp) > 0 {
			probs = append(probs, tp...)
		} else {
			timeout = p.Timeout
		}
	}
	if len(probs) > 0 {
		return nil, protocol.RequestError(probs)
	}
	ss, err := get(s, m)
	if err != nil {
		return nil, err
	}
	reply, end, err := SendFrame(s, ss, frame, timeout)
	if err != nil {
		return nil, err
	}
	if end != nil {
		out := map[string]any{"ended": true, "reason": end.Reason, "result": end.Result}
		if end.Confined {
			out["confined"] = true
		}
		return out, nil
	}
	return map[string]any{"frame": reply}, nil
}

// send writes one frame to ss and waits (up to timeout seconds; 0: no limit) for
// one frame back, or says why the session ended.
func SendFrame(s Host, ss *Session, frame []byte, timeout float64) ([]byte, *SessionEnd, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, nil, protocol.InvalidRequest("session", "is closed")
	}
	if ss.gen != ConfineGen() {
		// the frame is not delivered: the program predates the host's confinement
		end := ended(s, ss, "the host process confined itself after this session started; "+
			"the session was ended (a new one is confined too)")
		end.Confined = true
		return nil, end, nil
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(time.Duration(timeout * float64(time.Second)))
	}
	buf := make([]byte, 4+len(frame))
	binary.BigEndian.PutUint32(buf, uint32(len(frame)))
	copy(buf[4:], frame)
	if err := writeAll(ss.in, buf, deadline); err != nil {
		return nil, ended(s, ss, "the session's program stopped reading: "+err.Error()), nil
	}
	hdr := buf[:4]
	if err := readFull(ss.out, hdr, deadline); err != nil {
		return nil, ended(s, ss, err.Error()), nil
	}
	n := binary.BigEndian.Uint32(hdr)
	if n > MaxFrame {
		return nil, ended(s, ss, fmt.Sprintf("the program sent a %d-byte frame (limit %d)", n, MaxFrame)), nil
	}
	reply := make([]byte, n)
	if err := readFull(ss.out, reply, deadline); err != nil {
		return nil, ended(s, ss, err.Error()), nil
	}
	return reply, nil, nil
}

// SessionEnd is why a session ended: its program exited, crashed or overran the
// timeout (it was killed), or the host confined itself after it started (the frame
// was not delivered). Result is the program's run result.
type SessionEnd struct {
	Reason   string
	Confined bool
	Result   *runs.Result
}

// sessionEnded kills the session's tree, collects its result and forgets it.
func ended(s Host, ss *Session, why string) *SessionEnd {
	return &SessionEnd{Reason: why, Result: Finish(s, ss)}
}

func Finish(s Host, ss *Session) *runs.Result {
	if !ss.closed {
		ss.closed = true
		unix.Shutdown(ss.in, unix.SHUT_RDWR) // sockets: EOF even though out stays open
		unix.Close(ss.in)
		s.Cancel(ss.tag, false)
	}
	res := <-ss.done
	ss.done <- res // later callers see it too
	unix.Close(ss.out)
	ss.out = -1
	s.Sessions().remove(ss.id)
	return res
}

func CloseRequest(s Host, m map[string]any) (map[string]any, error) {
	if probs := protocol.Fields(m, "", "session_close", "op", "session", "tag"); len(probs) > 0 {
		return nil, protocol.RequestError(probs)
	}
	ss, err := get(s, m)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return map[string]any{"result": Finish(s, ss)}, nil
}

// CloseAll ends every session of s (sandbox close).
func CloseAll(s Host) {
	t := s.Sessions()
	t.mu.Lock()
	var all []*Session
	for _, ss := range t.m {
		all = append(all, ss)
	}
	t.mu.Unlock()
	for _, ss := range all {
		ss.mu.Lock()
		if !ss.closed {
			Finish(s, ss)
		}
		ss.mu.Unlock()
	}
}

// writeAll writes b, waiting at most until deadline (zero: no limit) for room.
func writeAll(fd int, b []byte, deadline time.Time) error {
	unix.SetNonblock(fd, true)
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			wait := -1
			if !deadline.IsZero() {
				if wait = runs.MsUntil(time.Now(), deadline); wait == 0 {
					return fmt.Errorf("timed out writing to the program; the session was killed")
				}
			}
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, wait)
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFull reads len(b) bytes, waiting at most until deadline (zero: no limit).
func readFull(fd int, b []byte, deadline time.Time) error {
	for len(b) > 0 {
		wait := -1
		if !deadline.IsZero() {
			wait = runs.MsUntil(time.Now(), deadline)
			if wait == 0 {
				return fmt.Errorf("timed out waiting for the program; the session was killed")
			}
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, wait); err != nil && err != unix.EINTR {
			return err
		}
		if pfd[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(fd, b)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the session's program exited")
		}
		b = b[n:]
	}
	return nil
}

// OpenSession starts req as a session of s, or — with a template start frame —
// opens a fork of that template (spawn false: the fork refuses new processes and
// programs). It returns the session's id.
func OpenSession(s Host, req *runs.Request, startFrame []byte, spawn bool) (uint64, error) {
	req.StdinFD, req.StdoutFD = -1, -1
	if startFrame != nil {
		out, err := Fork(s, req, startFrame, spawn)
		if err != nil {
			return 0, err
		}
		id, ok := out["session"].(uint64)
		if !ok {
			return 0, protocol.Internal("a fork's session id is a %T", out["session"])
		}
		return id, nil
	}
	ss, err := Start(s, req, false)
	if err != nil {
		return 0, err
	}
	return ss.id, nil
}

// Lookup is s's open session id.
func Lookup(s Host, id uint64) (*Session, error) {
	if ss := s.Sessions().Get(id); ss != nil {
		return ss, nil
	}
	return nil, protocol.Errorf(protocol.KindInvalidRequest, "invalid request: session %d is not open", id)
}

// Close ends ss (its program is killed) and returns its result.
func Close(s Host, ss *Session) *runs.Result {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return Finish(s, ss)
}
