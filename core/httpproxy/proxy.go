package httpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Origin is the sandbox process whose connect reached the proxy: what it is
// refused is recorded as its run's denial (core/supervise: Caller).
type Origin interface {
	Deny(detail string)
}

// Config is one sandbox's proxy.
type Config struct {
	Rules Rules
	// Ports are the TCP ports whose connects come here; a CONNECT or an absolute
	// URL may name only these.
	Ports []uint16
	// Resolve looks up the host a request names; the proxy dials what it answers
	// (never the address the sandbox connected to).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// CA, when set, intercepts TLS (ca.go, intercept.go): requests inside are
	// checked as plain HTTP's and sent on over TLS verified against UpstreamRoots
	// (nil: the host's trust store).
	CA            *CA
	UpstreamRoots *x509.CertPool
	// Auth adds credentials to the requests its rules match, after the rule check
	// (the first that matches): over intercepted TLS only, unless AuthPlain.
	Auth      []Auth
	AuthPlain bool
}

// Timeouts of the sandbox's side.
const (
	headerTimeout = 30 * time.Second // to send a request's header once it started
	idleTimeout   = 2 * time.Minute  // between requests of a kept-alive connection
	expectTTL     = 30 * time.Second // a connect announced and not accepted is forgotten
	maxExpected   = 4096
	maxHeader     = 64 << 10
	smallAnswer   = 16 << 10 // written at once (request)
)

// Proxy is a sandbox's HTTP proxy: listeners on 127.0.0.1 and ::1 (when this host
// has it) that serve only the connections the supervisor announced (Expect).
type Proxy struct {
	cfg      Config
	ports    map[uint16]bool
	ln4, ln6 net.Listener
	tr       *http.Transport
	ctx      context.Context
	cancel   context.CancelFunc

	mu     sync.Mutex
	expect map[netip.AddrPort]expected
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type expected struct {
	dst    netip.AddrPort
	origin Origin
	at     time.Time
}

// Start listens and serves.
func Start(cfg Config) (*Proxy, error) {
	p := &Proxy{cfg: cfg, ports: map[uint16]bool{}, expect: map[netip.AddrPort]expected{}, conns: map[net.Conn]struct{}{}}
	for _, port := range cfg.Ports {
		p.ports[port] = true
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	var err error
	if p.ln4, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("http proxy: %w", err)
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		p.ln6 = ln
	}
	p.tr = &http.Transport{
		Proxy:                 nil, // never the host's HTTP_PROXY
		DialContext:           p.dialUpstream,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // bodies pass as they are
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.UpstreamRoots},
	}
	for _, ln := range []net.Listener{p.ln4, p.ln6} {
		if ln != nil {
			p.wg.Add(1)
			go p.accept(ln)
		}
	}
	return p, nil
}

// Addr4 and Addr6 are the listeners' addresses (Addr6 invalid without IPv6).
func (p *Proxy) Addr4() netip.AddrPort { return addrOf(p.ln4) }

// Addr6 is the IPv6 listener's address (invalid when this host has no ::1).
func (p *Proxy) Addr6() netip.AddrPort { return addrOf(p.ln6) }

func addrOf(ln net.Listener) netip.AddrPort {
	if ln == nil {
		return netip.AddrPort{}
	}
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// Expect announces a connection from src (the sandbox's socket, as the proxy will
// see it) that was headed for dst, made by origin. The supervisor calls it before
// it performs the connect.
func (p *Proxy) Expect(src, dst netip.AddrPort, origin Origin) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.expect) >= maxExpected {
		for k, e := range p.expect {
			if now.Sub(e.at) > expectTTL {
				delete(p.expect, k)
			}
		}
		if len(p.expect) >= maxExpected {
			clear(p.expect) // a flood of connects never accepted: they fail closed
		}
	}
	p.expect[src] = expected{dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()), origin: origin, at: now}
}

func (p *Proxy) take(src netip.AddrPort) (expected, bool) {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.expect[src]
	delete(p.expect, src)
	if ok && time.Since(e.at) > expectTTL {
		return expected{}, false
	}
	return e, ok
}

// Close stops the listeners and ends every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.cancel()
	for _, ln := range []net.Listener{p.ln4, p.ln6} {
		if ln != nil {
			ln.Close()
		}
	}
	p.wg.Wait()
	p.tr.CloseIdleConnections()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			defer c.Close()
			p.serve(c)
		}()
	}
}

// session is one connection of the sandbox.
type session struct {
	p      *Proxy
	c      net.Conn
	lr     *io.LimitedReader // under br: bounds a request's header
	br     *bufio.Reader
	e      expected
	bw     *bufio.Writer // to c, made by writer
	up     *upstream     // plain HTTP's upstream connection (upstream.go)
	direct bool          // connected to the proxy's own address (http_proxy in its environment)
	https  bool          // inside intercepted TLS: requests go on over verified TLS
}

func (p *Proxy) serve(c net.Conn) {
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	e, ok := p.take(src)
	if !ok {
		// not a connect the supervisor performed: another process of this host
		writeStatus(c, http.StatusForbidden, "sandtrap: this proxy serves its sandbox's connections only\n")
		return
	}
	s := &session{p: p, c: c, lr: &io.LimitedReader{R: c, N: math.MaxInt64}, e: e}
	s.br = bufio.NewReaderSize(s.lr, 16<<10)
	s.direct = e.dst == p.Addr4() || (p.ln6 != nil && e.dst == p.Addr6())
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	first, err := s.br.Peek(1)
	if err != nil {
		return // closed without a byte: nothing was sent anywhere
	}
	if first[0] == 0x16 && !s.direct { // a TLS handshake record
		s.tls("", e.dst.Port())
		return
	}
	defer s.closeUp()
	s.http("", 0)
}

func (s *session) deny(what, why string) {
	if s.e.origin != nil {
		s.e.origin.Deny(what + " (" + why + ")")
	}
}

// refuse answers 403 naming the rule, records the denial and ends the connection.
func (s *session) refuse(what, why string) {
	s.deny(what, why)
	writeStatus(s.c, http.StatusForbidden, fmt.Sprintf("sandtrap: %s refused: %s\n", what, why))
}

func writeStatus(c net.Conn, code int, body string) {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

func (s *session) notHTTP(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) && s.lr.N > 0 {
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return
	}
	why := err.Error()
	if s.lr.N <= 0 {
		why = fmt.Sprintf("a request header longer than %d bytes", maxHeader)
	}
	s.deny(fmt.Sprintf("tcp to port %d: not an HTTP request", s.e.dst.Port()), why)
	writeStatus(s.c, http.StatusBadRequest, "sandtrap: not an HTTP request ("+why+")\n")
}

// http serves requests until the connection ends, checking every one. In a
// CONNECT tunnel (tunnelHost != "") every request goes to the tunnel's host and
// port whatever its Host header says.
func (s *session) http(tunnelHost string, tunnelPort uint16) {
	for n := 0; ; n++ {
		if n > 0 {
			s.c.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := s.br.Peek(1); err != nil {
				return
			}
			s.c.SetReadDeadline(time.Now().Add(headerTimeout))
		}
		s.lr.N = maxHeader - int64(s.br.Buffered())
		req, err := http.ReadRequest(s.br)
		s.lr.N = math.MaxInt64
		if err != nil {
			s.notHTTP(err)
			return
		}
		s.c.SetReadDeadline(time.Time{})
		if preface(req) {
			s.h2c(tunnelHost, tunnelPort) // HTTP/2 with prior knowledge (h2.go)
			return
		}
		if !s.request(req, tunnelHost, tunnelPort) {
			return
		}
	}
}

// request checks and forwards one request; false ends the connection.
func (s *session) request(req *http.Request, tunnelHost string, tunnelPort uint16) bool {
	defer req.Body.Close() // reads what is left of it: the next request starts after
	if req.Method == http.MethodConnect {
		if tunnelHost != "" {
			s.refuse("CONNECT "+req.RequestURI, "a CONNECT inside a tunnel")
			return false
		}
		s.connect(req)
		return false
	}
	t, what, why := s.check(req, tunnelHost, tunnelPort)
	if why != "" {
		s.refuse(what, why)
		return false
	}
	out := s.outbound(req, t, tunnelHost)
	ws := websocket(req)
	if ws {
		// a websocket's opening request, checked as any request: the upgrade is
		// passed on, and a 101 splices the two connections (websocket.go)
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", "websocket")
	}
	resp, err := s.roundTrip(out, t, ws)
	if err != nil {
		code, body := s.upstreamFailed(t, err)
		writeStatus(s.c, code, body)
		return false
	}
	defer resp.Body.Close()
	if ws && resp.StatusCode == http.StatusSwitchingProtocols {
		s.switched(resp)
		return false
	}
	if resp.Close && !ws && !s.https {
		defer s.closeUp() // the upstream ends its connection after this answer
	}
	removeHop(resp.Header)
	resp.Close = req.Close
	if req.ProtoMajor == 1 && req.ProtoMinor == 0 && !req.Close {
		resp.Close = true // HTTP/1.0 keep-alive is not offered
	}
	// a small answer of known length: the status line, header and body in one
	// write (Response.Write writes piecemeal, a segment and a syscall each: 2.7x
	// the time a request, BenchmarkHTTP1Proxy); others (a streamed answer,
	// chunked) as they come
	if resp.ContentLength >= 0 && resp.ContentLength <= smallAnswer {
		bw := s.writer()
		if err := resp.Write(bw); err != nil || bw.Flush() != nil {
			return false
		}
		return !resp.Close
	}
	if err := resp.Write(s.c); err != nil {
		return false
	}
	return !resp.Close
}

// writer is the session's buffered writer to the sandbox (one per session).
func (s *session) writer() *bufio.Writer {
	if s.bw == nil {
		s.bw = bufio.NewWriterSize(s.c, 16<<10)
	}
	return s.bw
}

// check judges a request (HTTP/1.1's, or an HTTP/2 stream's, whose Host is its
// :authority): where it goes, or what it was and why it is refused (why != "").
func (s *session) check(req *http.Request, tunnelHost string, tunnelPort uint16) (t target, what, why string) {
	t = target{method: strings.ToUpper(req.Method), path: CleanPath(req.URL.Path)}
	switch {
	case s.https && req.Host != "" && CleanHost(req.Host) != tunnelHost:
		// the TLS server name is the host (checked and verified): a Host header
		// (HTTP/2: :authority) naming another (domain fronting) is refused, not
		// obeyed or ignored
		return t, fmt.Sprintf("%s %s%s", t.method, CleanHost(req.Host), t.path), "the Host header is not the TLS server name " + tunnelHost
	case tunnelHost != "":
		t.host, t.port = tunnelHost, tunnelPort
	case req.URL.IsAbs():
		// absolute form (a client using this as its proxy, or a crafted one): the
		// URL names the host and port, which must be an HTTP port
		if req.URL.Scheme != "http" {
			return t, req.Method + " " + req.URL.Redacted(), "only http:// URLs are proxied (https goes through CONNECT)"
		}
		t.host = CleanHost(req.URL.Hostname())
		t.port = 80
		if ps := req.URL.Port(); ps != "" {
			v, err := strconv.ParseUint(ps, 10, 16)
			if err != nil {
				return t, req.Method + " " + req.URL.Redacted(), "a bad port"
			}
			t.port = uint16(v)
		}
	case s.direct:
		return t, t.method + " " + t.path, "a request to the proxy itself names no host (use an absolute URL)"
	default:
		t.host, t.port = CleanHost(req.Host), s.e.dst.Port()
	}
	if t.host == "" {
		return t, t.String(), "the request names no host (no Host header)"
	}
	if !s.p.ports[t.port] {
		return t, fmt.Sprintf("%s (port %d)", t, t.port), "not one of the http_ports"
	}
	ok, rule := s.p.cfg.Rules.Decide(t.method, t.host, t.path)
	if !ok {
		return t, t.String(), rule
	}
	return t, t.String(), ""
}

// outbound is the request sent upstream for req, checked as t: the cleaned
// path, no hop-by-hop header, the credentials of its http_auth rule.
func (s *session) outbound(req *http.Request, t target, tunnelHost string) *http.Request {
	out := req.WithContext(s.p.ctx)
	out.RequestURI = ""
	scheme := "http"
	if s.https {
		scheme = "https"
	}
	out.URL = &url.URL{Scheme: scheme, Host: net.JoinHostPort(t.host, strconv.Itoa(int(t.port))), Path: t.path, RawQuery: req.URL.RawQuery}
	if tunnelHost != "" || req.URL.IsAbs() || req.Host == "" {
		out.Host = out.URL.Host
		if s.https && t.port == 443 {
			out.Host = t.host
		}
	}
	out.Header = req.Header.Clone()
	removeHop(out.Header)
	s.authorize(out.Header, t)
	out.Close = false
	out.Proto, out.ProtoMajor, out.ProtoMinor = "HTTP/1.1", 1, 1
	if req.ContentLength == 0 {
		out.Body = nil
	}
	return out
}

// upstreamFailed is the answer to a request whose upstream failed: a bad
// certificate is a denial.
func (s *session) upstreamFailed(t target, err error) (int, string) {
	if why, bad := badCertificate(err); bad {
		s.deny(t.String(), why)
		return http.StatusBadGateway, fmt.Sprintf("sandtrap: %s refused: %s\n", t, why)
	}
	return http.StatusBadGateway, fmt.Sprintf("sandtrap: %s: the upstream: %v\n", t, err)
}

// connect serves CONNECT host:port: a tunnel to a host the rules name, to one of
// the HTTP ports; inside it TLS (checked by its server name, which must be the
// tunnel's host) or plain HTTP (every request checked).
func (s *session) connect(req *http.Request) {
	what := "CONNECT " + req.RequestURI
	host, ps, err := net.SplitHostPort(req.RequestURI)
	port, perr := strconv.ParseUint(ps, 10, 16)
	if err != nil || perr != nil {
		s.refuse(what, "not host:port")
		return
	}
	host = CleanHost(host)
	if !s.p.ports[uint16(port)] {
		s.refuse(what, fmt.Sprintf("port %d is not one of the http_ports", port))
		return
	}
	// a host no rule lets anything reach is refused at once (plain HTTP inside
	// would be checked request by request, TLS by its server name)
	if ok, why := s.p.cfg.Rules.DecideTLS(host); !ok {
		s.refuse(what, why)
		return
	}
	s.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(s.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	s.c.SetWriteDeadline(time.Time{})
	s.c.SetReadDeadline(time.Now().Add(headerTimeout))
	first, err := s.br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 0x16 {
		s.tls(host, uint16(port))
		return
	}
	s.http(host, uint16(port))
}

// target is where a request goes and what rules see of it.
type target struct {
	method, host, path string
	port               uint16
}

func (t target) String() string { return t.method + " " + t.host + t.path }

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// dialUpstream dials what the proxy's resolver answers for addr's host.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return nil, err
	}
	return p.dial(ctx, host, uint16(port))
}

func (p *Proxy) dial(ctx context.Context, host string, port uint16) (net.Conn, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if p.cfg.Resolve != nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err = p.cfg.Resolve(rctx, host)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s: no address", host)
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), port).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}
