package httpproxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// TLS without interception: the ClientHello is read (not answered) for its server
// name (SNI); a name the rules let through is dialed as the proxy resolves it, the
// bytes read so far are sent there first, and the two connections are spliced.
// Method and path are not seen: the isolation report says so.

// errHello stops the handshake once the ClientHello is read.
var errHello = errors.New("hello read")

// helloConn reads through r, keeping what it read; it writes nothing.
type helloConn struct {
	net.Conn
	r   io.Reader
	buf bytes.Buffer
}

func (h *helloConn) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	h.buf.Write(b[:n])
	return n, err
}

func (h *helloConn) Write(b []byte) (int, error) { return 0, errors.New("read only") }

// readHello reads a ClientHello from r: its server name and the bytes consumed.
func readHello(c net.Conn, r io.Reader) (string, []byte, error) {
	hc := &helloConn{Conn: c, r: io.LimitReader(r, maxHeader)}
	var name string
	got := false
	err := tls.Server(hc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, got = h.ServerName, true
		return nil, errHello
	}}).Handshake()
	if !got {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return "", nil, err
	}
	return name, hc.buf.Bytes(), nil
}

// tls serves a TLS connection to port (inside CONNECT connectHost: the server
// name must be that host).
func (s *session) tls(connectHost string, port uint16) {
	name, raw, err := readHello(s.c, s.br)
	if err != nil {
		s.deny(fmt.Sprintf("tls to port %d", port), "no readable ClientHello: "+err.Error())
		return
	}
	host := CleanHost(name)
	what := fmt.Sprintf("tls %s:%d", host, port)
	switch {
	case host == "":
		s.deny(fmt.Sprintf("tls to port %d", port), "no server name (SNI): the host cannot be checked")
		return
	case connectHost != "" && host != connectHost:
		s.deny(what, fmt.Sprintf("the server name is not the CONNECT host %s", connectHost))
		return
	case strings.Trim(host, "0123456789.") == "" || strings.Contains(host, ":"):
		s.deny(what, "an address as server name")
		return
	}
	ok, why := s.p.cfg.Rules.DecideTLS(host)
	if !ok {
		s.deny(what, why)
		return
	}
	if s.p.cfg.CA != nil {
		s.intercept(host, port, raw)
		return
	}
	up, err := s.p.dial(s.p.ctx, host, port)
	if err != nil {
		return
	}
	defer up.Close()
	s.c.SetReadDeadline(time.Time{})
	if _, err := up.Write(raw); err != nil {
		return
	}
	splice(s.c, s.br, up)
}

// splice copies both ways until both are done (each direction's end is passed on
// as a half close).
func splice(c net.Conn, cr io.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		close(done)
	}()
	io.Copy(up, cr)
	if tc, ok := up.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	<-done
}
