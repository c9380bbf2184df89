package httpproxy

//lint:file-ignore SA1019 x/net/http2 serves one already-accepted (hijacked, or TLS-intercepted) connection with ServeConn; net/http's own HTTP/2 (Go 1.24+) serves only a listener: moving to it is left to do

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// HTTP/2 from the sandbox (golang.org/x/net/http2's server): cleartext with
// prior knowledge (the connection, or a plain CONNECT tunnel, starts with the
// client preface) and under interception when the client's ALPN picks "h2".
// Every stream is one request, checked as an HTTP/1.1 request is (check: its
// method, the host of its :authority, its cleaned :path), refused with a 403
// naming the rule and a denial, or sent on upstream as HTTP/1.1 (the proxy's
// kept-alive pool) with the credentials of its http_auth rule; a refused stream
// ends only itself, the connection's other streams are each checked on their own.
// A Host header that differs from :authority is reset by the server (RFC 9113
// 8.3.1: malformed) and recorded as a denial. CONNECT over HTTP/2 is refused (a
// host the rules name too: tunnels are HTTP/1.1's CONNECT). "Upgrade: h2c" on
// HTTP/1.1 is not served: the header is dropped and the request answered as
// HTTP/1.1 (RFC 9110 7.8 lets a server ignore an upgrade).

const h2MaxStreams = 100

// copyBufs are the buffers streams copy answers through (one a stream in flight).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// preface reports whether req is HTTP/2's client preface read as HTTP/1
// ("PRI * HTTP/2.0", the "SM" line still unread).
func preface(req *http.Request) bool {
	return req.Method == "PRI" && req.RequestURI == "*" && req.Proto == "HTTP/2.0"
}

// h2c serves HTTP/2 with prior knowledge on the session's connection, whose
// preface's request line and blank line were read as an HTTP/1 request.
func (s *session) h2c(tunnelHost string, tunnelPort uint16) {
	rest := make([]byte, 6)
	if _, err := io.ReadFull(s.br, rest); err != nil || string(rest) != "SM\r\n\r\n" {
		s.deny(fmt.Sprintf("tcp to port %d: not an HTTP request", s.e.dst.Port()), "a broken HTTP/2 preface")
		writeStatus(s.c, http.StatusBadRequest, "sandtrap: not an HTTP request (a broken HTTP/2 preface)\n")
		return
	}
	s.serveH2(&readerConn{Conn: s.c, r: io.MultiReader(strings.NewReader(http2.ClientPreface), s.br)}, tunnelHost, tunnelPort)
}

// serveH2 serves c (its preface unread) until it ends.
func (s *session) serveH2(c net.Conn, tunnelHost string, tunnelPort uint16) {
	c.SetDeadline(time.Time{})
	srv := &http2.Server{
		MaxConcurrentStreams: h2MaxStreams,
		IdleTimeout:          idleTimeout,
		MaxReadFrameSize:     1 << 20,
		CountError: func(kind string) {
			// a stream the server resets as malformed before any handler sees it
			switch {
			case strings.HasSuffix(kind, "_authority_host_mismatch"):
				s.deny(fmt.Sprintf("http/2 stream to port %d", s.e.dst.Port()), "its Host header is not its :authority (the stream was reset)")
			case strings.HasSuffix(kind, "_multiple_host_headers"):
				s.deny(fmt.Sprintf("http/2 stream to port %d", s.e.dst.Port()), "two Host headers (the stream was reset)")
			}
		},
	}
	srv.ServeConn(c, &http2.ServeConnOpts{
		Context:    s.p.ctx,
		BaseConfig: &http.Server{MaxHeaderBytes: maxHeader, ReadHeaderTimeout: headerTimeout},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.stream(w, r, tunnelHost, tunnelPort)
		}),
	})
}

// refuseStream answers a stream 403 naming the rule and records the denial.
func (s *session) refuseStream(w http.ResponseWriter, what, why string) {
	s.deny(what, why)
	body := fmt.Sprintf("sandtrap: %s refused: %s\n", what, why)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusForbidden)
	io.WriteString(w, body)
}

// stream checks and forwards one HTTP/2 stream (run concurrently with the
// connection's others: it reads the session's fixed fields only).
func (s *session) stream(w http.ResponseWriter, r *http.Request, tunnelHost string, tunnelPort uint16) {
	if r.Method == http.MethodConnect {
		what := "CONNECT " + r.Host
		host, ps, err := net.SplitHostPort(r.Host)
		if err != nil {
			s.refuseStream(w, what, "not host:port")
			return
		}
		if ok, why := s.p.cfg.Rules.DecideTLS(CleanHost(host)); !ok {
			s.refuseStream(w, what, why)
			return
		}
		s.refuseStream(w, what, "CONNECT over HTTP/2 is not proxied (use HTTP/1.1's CONNECT, port "+ps+")")
		return
	}
	t, what, why := s.check(r, tunnelHost, tunnelPort)
	if why != "" {
		s.refuseStream(w, what, why)
		return
	}
	out := s.outbound(r, t, tunnelHost)
	out = out.WithContext(r.Context()) // the stream's: a reset stream stops its upstream request
	resp, err := s.p.tr.RoundTrip(out)
	if err != nil {
		code, body := s.upstreamFailed(t, err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		io.WriteString(w, body)
		return
	}
	defer resp.Body.Close()
	removeHop(resp.Header)
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if resp.ContentLength >= 0 && h.Get("Content-Length") == "" {
		h.Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	// an answer of unknown length (chunked: a streamed answer, server-sent
	// events) is sent read by read; one of known length as the server buffers it
	stream := resp.ContentLength < 0
	rc := http.NewResponseController(w)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if err == nil && stream {
				rc.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
