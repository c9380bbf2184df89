package engine

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"golang.org/x/sys/unix"
)

// A session is a long-lived run that the caller talks to in frames: each frame is a
// 4-byte big-endian length and that many bytes, written to the program's stdin and
// read from its stdout. The cooperative Python sandbox's worker is one; everything
// else about it (confinement, limits, tree kill) is an ordinary run.
type session struct {
	id     uint64
	in     int // write end of the program's stdin
	out    int // read end of its stdout
	tag    string
	done   chan *Result
	mu     sync.Mutex // one exchange at a time
	closed bool
	gen    uint64 // confineGen when the program started
}

var sessionSeq atomic.Uint64

// MaxFrame bounds one frame from a session.
const MaxFrame = 256 << 20

func (s *Sandbox) sessionOpen(m map[string]any) (map[string]any, error) {
	var probs policy.Problems
	req := parseRun(m, "", "session_open", &probs, "template", "spawn")
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
		return nil, requestError(probs)
	}
	if hasTpl {
		return s.sessionFork(req, startFrame, spawn)
	}
	ss, err := s.startSession(req, false)
	if err != nil {
		return nil, err
	}
	return map[string]any{"session": ss.id}, nil
}

// startSession starts req as a session. Its channel is two pipes, or (sock) one
// unix stream socket on the program's stdin and stdout, over which fds can pass.
func (s *Sandbox) startSession(req *RunRequest, sock bool) (*session, error) {
	var inR, inW, outR, outW int
	if sock {
		p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, errorf(KindSpawn, "socketpair: %v", err)
		}
		inW, inR = p[0], p[1]
		outR, _ = unix.FcntlInt(uintptr(p[0]), unix.F_DUPFD_CLOEXEC, 0)
		outW, _ = unix.FcntlInt(uintptr(p[1]), unix.F_DUPFD_CLOEXEC, 0)
		if outR < 0 || outW < 0 {
			closeAll(inR, inW, outR, outW)
			return nil, errorf(KindSpawn, "dup: out of file descriptors")
		}
	} else {
		var err error
		if inR, inW, err = runs.Pipe(); err != nil {
			return nil, errorf(KindSpawn, "pipe: %v", err)
		}
		if outR, outW, err = runs.Pipe(); err != nil {
			closeAll(inR, inW)
			return nil, errorf(KindSpawn, "pipe: %v", err)
		}
	}
	ss := &session{id: sessionSeq.Add(1), in: inW, out: outR, done: make(chan *Result, 1), gen: confineGen.Load()}
	ss.tag = fmt.Sprintf("\x00session-%d", ss.id)
	req.StdinFD, req.StdoutFD, req.Stdin = inR, outW, nil
	req.Tag = ss.tag
	started := make(chan struct{})
	go func() {
		close(started)
		ss.done <- s.Run(req) // closes inR and outW once the program started
	}()
	<-started
	s.addSession(ss)
	return ss, nil
}

func (s *Sandbox) addSession(ss *session) {
	s.mu.Lock()
	if s.sessions == nil {
		s.sessions = map[uint64]*session{}
	}
	s.sessions[ss.id] = ss
	s.mu.Unlock()
}

func closeAll(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (s *Sandbox) getSession(m map[string]any) (*session, error) {
	n, ok := policy.AsInt(m["session"])
	if !ok {
		return nil, invalidRequest("session", "must be the id session_open returned")
	}
	s.mu.Lock()
	ss := s.sessions[uint64(n)]
	s.mu.Unlock()
	if ss == nil {
		return nil, invalidRequest("session", "%d is not open", n)
	}
	return ss, nil
}

// sessionSend writes one frame and waits (up to timeout) for one frame back. A
// program that dies or overruns the timeout ends the session (it is killed): the
// response says so, with the run's result.
func (s *Sandbox) sessionSend(m map[string]any) (map[string]any, error) {
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
		return nil, requestError(probs)
	}
	ss, err := s.getSession(m)
	if err != nil {
		return nil, err
	}
	reply, end, err := s.send(ss, frame, timeout)
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
func (s *Sandbox) send(ss *session, frame []byte, timeout float64) ([]byte, *SessionEnd, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, nil, invalidRequest("session", "is closed")
	}
	if ss.gen != confineGen.Load() {
		// the frame is not delivered: the program predates the host's confinement
		end := s.sessionEnded(ss, "the host process confined itself after this session started; "+
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
		return nil, s.sessionEnded(ss, "the session's program stopped reading: "+err.Error()), nil
	}
	hdr := buf[:4]
	if err := readFull(ss.out, hdr, deadline); err != nil {
		return nil, s.sessionEnded(ss, err.Error()), nil
	}
	n := binary.BigEndian.Uint32(hdr)
	if n > MaxFrame {
		return nil, s.sessionEnded(ss, fmt.Sprintf("the program sent a %d-byte frame (limit %d)", n, MaxFrame)), nil
	}
	reply := make([]byte, n)
	if err := readFull(ss.out, reply, deadline); err != nil {
		return nil, s.sessionEnded(ss, err.Error()), nil
	}
	return reply, nil, nil
}

// SessionEnd is why a session ended: its program exited, crashed or overran the
// timeout (it was killed), or the host confined itself after it started (the frame
// was not delivered). Result is the program's run result.
type SessionEnd struct {
	Reason   string
	Confined bool
	Result   *Result
}

// sessionEnded kills the session's tree, collects its result and forgets it.
func (s *Sandbox) sessionEnded(ss *session, why string) *SessionEnd {
	return &SessionEnd{Reason: why, Result: s.finishSession(ss)}
}

func (s *Sandbox) finishSession(ss *session) *Result {
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
	s.mu.Lock()
	delete(s.sessions, ss.id)
	s.mu.Unlock()
	return res
}

func (s *Sandbox) sessionClose(m map[string]any) (map[string]any, error) {
	if probs := protocol.Fields(m, "", "session_close", "op", "session", "tag"); len(probs) > 0 {
		return nil, requestError(probs)
	}
	ss, err := s.getSession(m)
	if err != nil {
		return nil, err
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return map[string]any{"result": s.finishSession(ss)}, nil
}

// closeSessions ends every session (sandbox close).
func (s *Sandbox) closeSessions() {
	s.mu.Lock()
	var all []*session
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		ss.mu.Lock()
		if !ss.closed {
			s.finishSession(ss)
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
