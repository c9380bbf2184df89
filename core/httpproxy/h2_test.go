package httpproxy

//lint:file-ignore SA1019 the tests drive the proxy with x/net/http2's client connection and h2c upstreams, as the proxy serves with x/net/http2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"golang.org/x/net/http2/hpack"

	"github.com/sandtrap/sandtrap/core/policy"
)

// denials records what the proxy refused (an Origin).
type denials struct {
	mu  sync.Mutex
	got []string
}

func (d *denials) Deny(detail string) {
	d.mu.Lock()
	d.got = append(d.got, detail)
	d.mu.Unlock()
}

func (d *denials) has(sub string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.got {
		if strings.Contains(g, sub) {
			return true
		}
	}
	return false
}

func (d *denials) n() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.got)
}

// seen is an upstream's record of the requests it was sent.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, r)
		s.mu.Unlock()
		fmt.Fprintf(w, "hit %s %s %s host=%s auth=%q upgrade=%q", r.Proto, r.Method, r.URL.Path, r.Host, r.Header.Get("Authorization"), r.Header.Get("Upgrade"))
	})
}

func (s *seen) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p []string
	for _, r := range s.reqs {
		p = append(p, r.Method+" "+r.URL.Path)
	}
	return p
}

func rules(t *testing.T, allow, deny []string) Rules {
	t.Helper()
	var r Rules
	for _, a := range allow {
		h, bad := policy.ParseHTTPRule(a)
		if bad != "" {
			t.Fatal(bad)
		}
		r.Allow = append(r.Allow, h)
	}
	for _, d := range deny {
		h, bad := policy.ParseHTTPRule(d)
		if bad != "" {
			t.Fatal(bad)
		}
		r.Deny = append(r.Deny, h)
	}
	return r
}

func portOf(t *testing.T, u string) uint16 {
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.Atoi(pu.Port())
	return uint16(v)
}

// testProxy starts a proxy for cfg whose resolver answers 127.0.0.1 for every name.
func testProxy(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	cfg.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// dialAs connects to the proxy as a sandbox's connect to dst announced by the
// supervisor (its source port chosen first, announced, then bound).
func dialAs(t *testing.T, p *Proxy, dst uint16, o Origin) net.Conn {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	p.Expect(src, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), dst), o)
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(src), Timeout: 5 * time.Second}
	c, err := d.Dial("tcp4", p.Addr4().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// h2conn is an HTTP/2 client connection over c (prior knowledge, or TLS whose ALPN chose h2).
func h2conn(t *testing.T, c net.Conn) *http2.ClientConn {
	t.Helper()
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(c)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func get(t *testing.T, cc *http2.ClientConn, scheme, authority, path string, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", scheme+"://"+authority+path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, "ERR " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Cleartext HTTP/2 with prior knowledge: on one connection an allowed stream
// goes through (upstream HTTP/1.1), then denied ones (by path, by the host of
// :authority) are each a 403 naming the rule and a denial, and the upstream never
// sees them; an allowed stream after them still works. (The upstream port is the
// one the sandbox connected to, as for HTTP/1.1's Host.)
func TestH2PriorKnowledge(t *testing.T) {
	up := &seen{}
	srv := httptest.NewServer(up.handler())
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/ok/*"}, []string{"* */admin/*"}), Ports: []uint16{port}})
	d := &denials{}
	cc := h2conn(t, dialAs(t, p, port, d))
	auth := "api.test:" + strconv.Itoa(int(port))

	code, body := get(t, cc, "http", auth, "/ok/1", nil)
	if code != 200 || !strings.HasPrefix(body, "hit HTTP/1.1 GET /ok/1 host="+auth) {
		t.Fatalf("allowed stream: %d %q", code, body)
	}
	for _, c := range []struct{ authority, path, want, deny string }{
		{auth, "/ok/../admin/x", `sandtrap: GET api.test/admin/x refused: http_deny "* */admin/*"`, "GET api.test/admin/x (http_deny"},
		{auth, "/v1/x", "sandtrap: GET api.test/v1/x refused: no http_allow rule matches", "GET api.test/v1/x"},
		{"other.test:" + strconv.Itoa(int(port)), "/ok/1", "sandtrap: GET other.test/ok/1 refused: no http_allow rule matches", "GET other.test/ok/1"},
	} {
		code, body = get(t, cc, "http", c.authority, c.path, nil)
		if code != 403 || strings.TrimSpace(body) != c.want || !d.has(c.deny) {
			t.Errorf("%s%s: %d %q, denials %v", c.authority, c.path, code, body, d.got)
		}
	}
	code, body = get(t, cc, "http", auth, "/ok/2", nil)
	if code != 200 || !strings.Contains(body, "GET /ok/2") {
		t.Errorf("allowed stream after the denied ones: %d %q", code, body)
	}
	if got := strings.Join(up.paths(), ","); got != "GET /ok/1,GET /ok/2" {
		t.Errorf("the upstream saw %s", got)
	}
	if d.n() != 3 {
		t.Errorf("denials %v", d.got)
	}
	// concurrent streams, allowed and denied interleaved, each judged alone
	var wg sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/ok/c%d", i)
			if i%2 == 1 {
				path = fmt.Sprintf("/admin/c%d", i)
			}
			codes[i], _ = get(t, cc, "http", auth, path, nil)
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if want := []int{200, 403}[i%2]; c != want {
			t.Errorf("concurrent stream %d: %d, want %d", i, c, want)
		}
	}
	if n := len(up.paths()); n != 2+20 || d.n() != 3+20 {
		t.Errorf("after the concurrent streams: the upstream saw %d, %d denials", n, d.n())
	}
	for _, p := range up.paths() {
		if strings.Contains(p, "admin") {
			t.Errorf("the upstream saw %s", p)
		}
	}
}

// HTTP/2 prior knowledge inside a plain CONNECT tunnel: the tunnel's host is the
// host of every stream, each stream checked (before h2 the preface was read as
// one request "PRI *", which a "* host/*" rule let through with every frame after
// it as its body).
func TestH2InConnectTunnel(t *testing.T) {
	up := &seen{}
	srv := httptest.NewServer(up.handler())
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"* api.test/*"}, []string{"* */admin/*"}), Ports: []uint16{port}})
	d := &denials{}
	c := dialAs(t, p, port, d)
	fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	cc := h2conn(t, &readerConn{Conn: c, r: br})
	code, body := get(t, cc, "http", "whatever.test", "/ok/1", nil)
	if code != 200 || !strings.Contains(body, "GET /ok/1 host=api.test:") {
		t.Fatalf("allowed stream: %d %q, the upstream saw %v, denials %v", code, body, up.paths(), d.got)
	}
	code, body = get(t, cc, "http", "whatever.test", "/admin/1", nil)
	if code != 403 || !strings.Contains(body, `refused: http_deny "* */admin/*"`) || !d.has("GET api.test/admin/1") {
		t.Errorf("denied stream: %d %q %v", code, body, d.got)
	}
	for _, r := range up.paths() {
		if strings.HasPrefix(r, "PRI") || strings.Contains(r, "admin") {
			t.Errorf("the upstream saw %s", r)
		}
	}
}

// "Upgrade: h2c" on HTTP/1.1 is not served: the proxy drops it (and
// HTTP2-Settings), the upstream (which would upgrade, h2c.NewHandler) answers
// HTTP/1.1, and the next request on the connection is still checked as HTTP/1.1.
func TestH2UpgradeH2cRefused(t *testing.T) {
	up := &seen{}
	srv := httptest.NewServer(h2c.NewHandler(up.handler(), &http2.Server{}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/ok/*"}, nil), Ports: []uint16{port}})
	d := &denials{}
	c := dialAs(t, p, port, d)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /ok/1 HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 || !strings.HasPrefix(string(b), `hit HTTP/1.1 GET /ok/1 host=api.test auth="" upgrade=""`) {
		t.Fatalf("upgrade request: %d %s %q", resp.StatusCode, resp.Proto, b)
	}
	// the upgrade did not happen: HTTP/1.1 goes on, checked
	fmt.Fprintf(c, "GET /nope HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(b), "GET api.test/nope refused") || !d.has("GET api.test/nope") {
		t.Errorf("after the upgrade: %d %q", resp.StatusCode, b)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.reqs) != 1 || up.reqs[0].Header.Get("Http2-Settings") != "" || up.reqs[0].Header.Get("Upgrade") != "" {
		t.Errorf("the upstream saw %d requests, %v", len(up.reqs), up.reqs)
	}
}

// interception returns an HTTPS upstream for api.test (its certificate from a CA
// the proxy trusts for upstreams) and a proxy intercepting with its own CA.
func interception(t *testing.T, up *seen, allow, deny []string, auth []Auth) (*Proxy, uint16, *x509.CertPool) {
	t.Helper()
	upCA, err := NewCA("upstream test CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := upCA.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(up.handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := portOf(t, srv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Cert)
	ca, err := NewCA("sandbox CA")
	if err != nil {
		t.Fatal(err)
	}
	p := testProxy(t, Config{Rules: rules(t, allow, deny), Ports: []uint16{port}, CA: ca, UpstreamRoots: roots, Auth: auth})
	trust := x509.NewCertPool()
	trust.AddCert(ca.Cert)
	return p, port, trust
}

// tlsTo is the sandbox's TLS to name through the proxy, offering protos.
func tlsTo(t *testing.T, c net.Conn, name string, trust *x509.CertPool, protos ...string) *tls.Conn {
	t.Helper()
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: trust, NextProtos: protos})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	return tc
}

// ALPN h2 under interception: the proxy offers h2, and each stream inside TLS is
// checked (method, :authority which must be the server name, path); upstream is
// HTTPS/1.1 verified against the upstream roots. An HTTP/1.1-only client still
// gets HTTP/1.1.
func TestH2Intercepted(t *testing.T) {
	up := &seen{}
	p, port, trust := interception(t, up, []string{"GET api.test/ok/*"}, []string{"* */admin/*"}, nil)
	d := &denials{}
	tc := tlsTo(t, dialAs(t, p, port, d), "api.test", trust, "h2", "http/1.1")
	if np := tc.ConnectionState().NegotiatedProtocol; np != "h2" {
		t.Fatalf("ALPN chose %q", np)
	}
	cc := h2conn(t, tc)
	auth := "api.test:" + strconv.Itoa(int(port))
	code, body := get(t, cc, "https", auth, "/ok/1", nil)
	if code != 200 || !strings.HasPrefix(body, "hit HTTP/1.1 GET /ok/1 host="+auth) {
		t.Fatalf("allowed stream: %d %q", code, body)
	}
	code, body = get(t, cc, "https", auth, "/admin/1", nil)
	if code != 403 || !strings.Contains(body, `sandtrap: GET api.test/admin/1 refused: http_deny "* */admin/*"`) || !d.has("GET api.test/admin/1") {
		t.Errorf("denied stream: %d %q %v", code, body, d.got)
	}
	// :authority naming another host than the TLS server name (domain fronting)
	code, body = get(t, cc, "https", "other.test:"+strconv.Itoa(int(port)), "/ok/1", nil)
	if code != 403 || !strings.Contains(body, "the Host header is not the TLS server name api.test") || !d.has("GET other.test/ok/1") {
		t.Errorf("fronted stream: %d %q %v", code, body, d.got)
	}
	code, body = get(t, cc, "https", auth, "/ok/2", nil)
	if code != 200 {
		t.Errorf("allowed stream after the refused: %d %q", code, body)
	}
	// through CONNECT (a client honouring https_proxy), then TLS choosing h2
	c := dialAs(t, p, port, d)
	fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\n", port, port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc = tlsTo(t, &readerConn{Conn: c, r: br}, "api.test", trust, "h2")
	cc = h2conn(t, tc)
	if code, body := get(t, cc, "https", auth, "/ok/3", nil); code != 200 || !strings.Contains(body, "GET /ok/3") {
		t.Errorf("h2 in CONNECT, allowed: %d %q", code, body)
	}
	if code, body := get(t, cc, "https", auth, "/admin/3", nil); code != 403 || !d.has("GET api.test/admin/3") {
		t.Errorf("h2 in CONNECT, denied: %d %q", code, body)
	}
	if got := strings.Join(up.paths(), ","); got != "GET /ok/1,GET /ok/2,GET /ok/3" {
		t.Errorf("the upstream saw %s", got)
	}
	// a client offering HTTP/1.1 only is served HTTP/1.1
	h1 := tlsTo(t, dialAs(t, p, port, d), "api.test", trust, "http/1.1")
	if np := h1.ConnectionState().NegotiatedProtocol; np != "http/1.1" {
		t.Errorf("ALPN http/1.1 only: %q", np)
	}
}

// Credentials per stream over intercepted h2: the http_auth header goes on the
// stream its rule matches (replacing the sandbox's own), not on another allowed
// stream, and a denied stream on the same connection sends nothing upstream.
func TestH2CredentialsPerStream(t *testing.T) {
	up := &seen{}
	a, bad := policy.ParseHTTPAuth("GET api.test/ok/* bearer key")
	if bad != "" {
		t.Fatal(bad)
	}
	p, port, trust := interception(t, up, []string{"GET api.test/ok/*", "GET api.test/pub/*"}, []string{"* */admin/*"},
		[]Auth{NewAuth(a, "s3cret-value")})
	d := &denials{}
	cc := h2conn(t, tlsTo(t, dialAs(t, p, port, d), "api.test", trust, "h2"))
	auth := "api.test:" + strconv.Itoa(int(port))
	mine := http.Header{"Authorization": {"Bearer sandbox-own"}}
	code, body := get(t, cc, "https", auth, "/ok/1", mine)
	if code != 200 || !strings.Contains(body, `auth="Bearer s3cret-value"`) {
		t.Errorf("the credential's stream: %d %q", code, body)
	}
	code, body = get(t, cc, "https", auth, "/pub/1", mine)
	if code != 200 || !strings.Contains(body, `auth="Bearer sandbox-own"`) {
		t.Errorf("another allowed stream: %d %q", code, body)
	}
	code, body = get(t, cc, "https", auth, "/ok/../admin/1", mine)
	if code != 403 || strings.Contains(body, "s3cret") {
		t.Errorf("denied stream: %d %q", code, body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.reqs) != 2 {
		t.Fatalf("the upstream saw %d requests", len(up.reqs))
	}
	for _, r := range up.reqs {
		if got := r.Header.Get("Authorization"); (r.URL.Path == "/ok/1") != (got == "Bearer s3cret-value") {
			t.Errorf("%s carried %q", r.URL.Path, got)
		}
	}
}

// rawH2 writes the preface, SETTINGS and one HEADERS frame of fields (in order)
// on c and returns what answered stream 1: its :status, or the RST_STREAM's code.
func rawH2(t *testing.T, c net.Conn, fields [][2]string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return "ERR " + err.Error()
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			return "RST " + f.ErrCode.String()
		case *http2.MetaHeadersFrame:
			return ":status " + f.PseudoValue("status")
		case *http2.GoAwayFrame:
			return "GOAWAY " + f.ErrCode.String()
		}
	}
}

// Smuggling by a Host header that differs from :authority (an allowed
// :authority, a Host naming a host the rules refuse): the stream is reset as
// malformed, recorded as a denial, and the upstream sees nothing; the same
// frames with a matching Host pass (the test can tell).
func TestH2AuthorityHostMismatch(t *testing.T) {
	up := &seen{}
	srv := httptest.NewServer(up.handler())
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/ok/*"}, nil), Ports: []uint16{port}})
	auth := "api.test:" + strconv.Itoa(int(port))
	req := func(host string) [][2]string {
		return [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", auth}, {":path", "/ok/1"}, {"host", host}}
	}
	d := &denials{}
	if got := rawH2(t, dialAs(t, p, port, d), req("evil.test")); got != "RST PROTOCOL_ERROR" {
		t.Errorf("mismatched Host: %s", got)
	}
	if !d.has("its Host header is not its :authority") {
		t.Errorf("denials %v", d.got)
	}
	if n := len(up.paths()); n != 0 {
		t.Fatalf("the upstream saw %v", up.paths())
	}
	if got := rawH2(t, dialAs(t, p, port, &denials{}), req(auth)); got != ":status 200" {
		t.Errorf("matching Host: %s", got)
	}
	// an absolute :path naming another host than :authority: refused by x/net, or
	// judged by the host it names (what would be dialed), never by :authority
	d = &denials{}
	got := rawH2(t, dialAs(t, p, port, d), [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", auth}, {":path", "http://evil.test/ok/1"}})
	if got != "RST PROTOCOL_ERROR" && !(got == ":status 403" && d.has("evil.test")) {
		t.Errorf("absolute :path: %s %v", got, d.got)
	}
	// no :authority, a Host only: the Host is the authority, checked
	d = &denials{}
	if got := rawH2(t, dialAs(t, p, port, d), [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/ok/1"}, {"host", "evil.test"}}); got != ":status 403" || !d.has("GET evil.test/ok/1") {
		t.Errorf("Host without :authority: %s %v", got, d.got)
	}
}

// CONNECT over HTTP/2: to a host outside the rules a 403 naming why, to a host
// they name a 403 too (tunnels are HTTP/1.1's); nothing is dialed.
func TestH2ConnectRefused(t *testing.T) {
	up := &seen{}
	srv := httptest.NewServer(up.handler())
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/ok/*"}, nil), Ports: []uint16{port}})
	d := &denials{}
	cc := h2conn(t, dialAs(t, p, port, d))
	connect := func(hostport string) (int, string) {
		pr, pw := io.Pipe()
		defer pw.Close()
		req := &http.Request{Method: "CONNECT", URL: &url.URL{Host: hostport}, Host: hostport, Header: http.Header{}, Body: pr}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ps := strconv.Itoa(int(port))
	if code, body := connect("evil.test:" + ps); code != 403 || !strings.Contains(body, "CONNECT evil.test:"+ps+" refused: no http_allow rule names the host") || !d.has("CONNECT evil.test") {
		t.Errorf("CONNECT outside the rules: %d %q %v", code, body, d.got)
	}
	if code, body := connect("api.test:" + ps); code != 403 || !strings.Contains(body, "CONNECT over HTTP/2 is not proxied") {
		t.Errorf("CONNECT to a named host: %d %q", code, body)
	}
	if n := len(up.paths()); n != 0 {
		t.Errorf("the upstream saw %v", up.paths())
	}
}

// okServer answers "ok" to everything (the benchmarks' upstream).
func okServer(b *testing.B) (*httptest.Server, uint16) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	v, _ := strconv.Atoi(u.Port())
	return srv, uint16(v)
}

// h1Loop makes b.N GETs one at a time on c (kept alive).
func h1Loop(b *testing.B, c net.Conn) {
	br := bufio.NewReader(c)
	req := []byte("GET /ok/x HTTP/1.1\r\nHost: api.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

func BenchmarkHTTP1Direct(b *testing.B) {
	srv, _ := okServer(b)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	h1Loop(b, c)
}

func benchProxy(b *testing.B, port uint16) *Proxy {
	r, bad := policy.ParseHTTPRule("GET api.test/ok/*")
	if bad != "" {
		b.Fatal(bad)
	}
	p, err := Start(Config{Rules: Rules{Allow: []policy.HTTPRule{r}}, Ports: []uint16{port},
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

func benchDial(b *testing.B, p *Proxy, port uint16) net.Conn {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	src := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	p.Expect(src, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), nil)
	c, err := (&net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(src)}).Dial("tcp4", p.Addr4().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkHTTP1Proxy(b *testing.B) {
	_, port := okServer(b)
	p := benchProxy(b, port)
	h1Loop(b, benchDial(b, p, port))
}

func BenchmarkH2cProxy(b *testing.B) {
	_, port := okServer(b)
	p := benchProxy(b, port)
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(benchDial(b, p, port))
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://api.test/ok/x", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := cc.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// A streamed answer (chunked, server-sent events) stays streamed through the
// proxy, over HTTP/1.1 and HTTP/2: the upstream sends its second part only once
// the sandbox's client has read the first (a proxy that buffered the answer
// would deadlock until the timeout).
func TestH2StreamedAnswer(t *testing.T) {
	got := map[string]chan struct{}{"/sse/1": make(chan struct{}, 1), "/sse/2": make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-got[r.URL.Path]:
			io.WriteString(w, "data: second\n\n")
		case <-time.After(5 * time.Second):
			io.WriteString(w, "data: timeout\n\n")
		}
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/sse/*"}, nil), Ports: []uint16{port}})
	read := func(name, path string, body io.Reader) {
		br := bufio.NewReader(body)
		first, err := br.ReadString('\n')
		if first != "data: first\n" {
			t.Errorf("%s: first %q %v", name, first, err)
		}
		got[path] <- struct{}{}
		rest, _ := io.ReadAll(br)
		if string(rest) != "\ndata: second\n\n" {
			t.Errorf("%s: then %q", name, rest)
		}
	}
	c := dialAs(t, p, port, &denials{})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /sse/1 HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	read("HTTP/1.1", "/sse/1", resp.Body)
	cc := h2conn(t, dialAs(t, p, port, &denials{}))
	req, _ := http.NewRequest("GET", "http://api.test/sse/2", nil)
	resp, err = cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	read("HTTP/2", "/sse/2", resp.Body)
}
