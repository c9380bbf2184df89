package httpproxy

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"syscall"

	"golang.org/x/sys/unix"
)

// upstream is a session's own kept-alive connection to one plain-HTTP upstream
// (host:port). A session's HTTP/1.1 requests come one at a time, so the session
// writes each and reads its answer itself, with no goroutine between
// (http.Transport hands every request to two of its own: on a loaded machine the
// wake-ups cost more than the proxy's work). HTTPS, websockets and HTTP/2's
// concurrent streams go through the Transport's pool.
type upstream struct {
	key string
	c   net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
}

var errUnasked = errors.New("101 Switching Protocols to a request that asked for no upgrade")

// closeUp drops the session's upstream connection.
func (s *session) closeUp() {
	if s.up != nil {
		s.up.c.Close()
		s.p.untrack(s.up.c)
		s.up = nil
	}
}

// idempotent requests without a body are sent again once when a kept-alive
// upstream connection turns out closed before any byte of the answer.
func idempotent(r *http.Request) bool {
	return r.Body == nil && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions)
}

// roundTrip sends out to t and reads its answer's header (the body is read from
// the session's upstream connection as the answer is passed on).
func (s *session) roundTrip(out *http.Request, t target, viaTransport bool) (*http.Response, error) {
	if viaTransport || s.https {
		return s.p.tr.RoundTrip(out)
	}
	key := out.URL.Host
	for attempt := 0; ; attempt++ {
		reused := s.up != nil && s.up.key == key
		if reused && attempt == 0 && !s.up.alive() {
			reused = false // the upstream closed it while idle: dial again, whatever the method
		}
		if !reused {
			s.closeUp()
			c, err := s.p.dial(s.p.ctx, t.host, t.port)
			if err != nil {
				return nil, err
			}
			if !s.p.track(c) { // the proxy closed meanwhile
				c.Close()
				return nil, net.ErrClosed
			}
			s.up = &upstream{key: key, c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 16<<10)}
		}
		up := s.up
		err := out.Write(up.bw)
		if err == nil {
			err = up.bw.Flush()
		}
		if err == nil {
			if _, err = up.br.Peek(1); err == nil {
				var resp *http.Response
				for {
					if resp, err = http.ReadResponse(up.br, out); err != nil {
						break
					}
					if resp.StatusCode == http.StatusSwitchingProtocols {
						// no upgrade was asked on this path (websockets take the
						// Transport's): what follows is not HTTP
						err = errUnasked
						break
					}
					// an interim answer (100 Continue, 103): the final one follows
					if resp.StatusCode >= 200 {
						return resp, nil
					}
				}
				s.closeUp()
				return nil, err // a broken answer is not sent again
			}
		}
		s.closeUp()
		if !reused || attempt > 0 || !idempotent(out) {
			return nil, err
		}
	}
}

// alive reports whether the upstream has not closed its idle connection (nor
// sent anything unasked): a non-blocking peek, as http.Transport's reader
// notices (a close racing the next request is the retry's).
func (u *upstream) alive() bool {
	if u.br.Buffered() > 0 {
		return false // bytes nobody asked for
	}
	sc, ok := u.c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		live = errors.Is(err, unix.EAGAIN) // 0 bytes: closed; some: unasked
		return true                        // never wait
	}); err != nil {
		return false
	}
	return live
}
