//go:build sandtrap_testhook

package engine

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandtrap/sandtrap/core/httpproxy"
)

// tlsUpstream is an HTTPS server for name, its certificate signed by ca; it
// answers "hit METHOD PATH host=HOST" and records each request's headers.
type tlsUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newTLSUpstream(t *testing.T, ca *httpproxy.CA, name string) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{}
	leaf, err := ca.Leaf(name)
	if err != nil {
		t.Fatal(err)
	}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r)
		u.mu.Unlock()
		fmt.Fprintf(w, "hit %s %s host=%s", r.Method, r.URL.Path, r.Host)
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *tlsUpstream) port(t *testing.T) int { return portOfURL(t, u.srv.URL) }

func (u *tlsUpstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.seen...)
}

// upstreamCA makes a test CA that the proxy trusts for upstreams (the test hook
// SANDTRAP_TEST_UPSTREAM_CA: the host's store plus it).
func upstreamCA(t *testing.T) *httpproxy.CA {
	t.Helper()
	ca, err := httpproxy.NewCA("upstream test CA")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(f, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SANDTRAP_TEST_UPSTREAM_CA", f)
	return ca
}

func sha(t *testing.T, f string) [32]byte {
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

const hostBundle = "/etc/ssl/certs/ca-certificates.crt"

// curl inside the run, transparently redirected (no proxy variables: --noproxy,
// and the name resolved by --resolve to an address the proxy does not use).
func curl(sb *Sandbox, host string, port int, path string, extra ...string) (string, *Result) {
	ps := strconv.Itoa(port)
	argv := append([]string{"/usr/bin/curl", "-sS", "--noproxy", "*", "--max-time", "20", "--resolve", host + ":" + ps + ":127.0.0.1",
		"-w", "\n%{http_code}"}, extra...)
	argv = append(argv, "https://"+host+":"+ps+path)
	r := run(sb, argv...)
	return strings.TrimSpace(string(r.Stdout)), r
}

// HTTPS interception: a run trusting the sandbox's CA through the bundle laid
// over the host's (the host file unchanged) reaches the allowed path (200) and
// is refused another (403 naming the rule, a denial), over a transparent
// redirect and through https_proxy alike; a Host header naming another host than
// the server name is refused; an upstream whose certificate the host's store
// does not verify is a 502 naming the failure, and a denial; the CA is written
// to http_ca_out.
func TestHTTPSInterception(t *testing.T) {
	if _, err := os.Stat(hostBundle); err != nil {
		t.Skip("no " + hostBundle + " on this host")
	}
	before := sha(t, hostBundle)
	ca := upstreamCA(t)
	good := newTLSUpstream(t, ca, "api.test")
	rogue, err := httpproxy.NewCA("a CA no store holds")
	if err != nil {
		t.Fatal(err)
	}
	bad := newTLSUpstream(t, rogue, "bad.test")
	mapHosts(t, "api.test", "bad.test", "other.test")
	caOut := filepath.Join(t.TempDir(), "sandbox-ca.pem")
	gp, bp := good.port(t), bad.port(t)
	sb := newSB(t, map[string]any{
		"fs_readable":    []any{"/usr", "/lib", "/bin", "/etc"},
		"http_allow":     []any{"GET api.test/ok/*", "POST api.test/v1/*", "GET bad.test/*", "GET other.test/*"},
		"http_deny":      []any{"* */admin/*"},
		"http_ports":     []any{int64(gp), int64(bp)},
		"http_intercept": true,
		"http_inject_ca": []any{hostBundle},
		"http_ca_out":    caOut,
	})
	iso := sb.isolation()
	h := iso.Net.HTTP
	if h == nil || h.HTTPS != "intercepted" || !strings.HasPrefix(h.CA, "ephemeral") || len(h.InjectCA) != 1 || !strings.Contains(fmt.Sprint(h.Ports), "443") {
		t.Fatalf("report: %+v", h)
	}
	pem, err := os.ReadFile(caOut)
	if err != nil || !bytes.Contains(pem, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("http_ca_out: %q %v", pem, err)
	}

	out, r := curl(sb, "api.test", gp, "/ok/1")
	if !strings.HasPrefix(out, "hit GET /ok/1 host=api.test:"+strconv.Itoa(gp)) || !strings.HasSuffix(out, "200") || len(r.Denials) != 0 {
		t.Errorf("allowed path: %q %s %+v", out, r.Stderr, r.Denials)
	}
	out, r = curl(sb, "api.test", gp, "/v1/other")
	if !strings.Contains(out, "sandtrap: GET api.test/v1/other refused: no http_allow rule matches") || !strings.HasSuffix(out, "403") || !denied(r, "GET api.test/v1/other") {
		t.Errorf("another path: %q %s %+v", out, r.Stderr, r.Denials)
	}
	out, r = curl(sb, "api.test", gp, "/ok/../admin/x")
	if !strings.Contains(out, `refused: http_deny "* */admin/*"`) || !strings.HasSuffix(out, "403") {
		t.Errorf("denied path: %q %s", out, r.Stderr)
	}
	out, r = curl(sb, "api.test", gp, "/ok/front", "-H", "Host: other.test")
	if !strings.Contains(out, "the Host header is not the TLS server name api.test") || !strings.HasSuffix(out, "403") || !denied(r, "GET other.test/ok/front") {
		t.Errorf("domain fronting: %q %s %+v", out, r.Stderr, r.Denials)
	}
	out, r = curl(sb, "bad.test", bp, "/x")
	if !strings.Contains(out, "the upstream's certificate failed verification against the host's trust store") || !strings.Contains(out, "unknown authority") ||
		!strings.HasSuffix(out, "502") || !denied(r, "GET bad.test/x (the upstream's certificate failed verification") {
		t.Errorf("bad upstream certificate: %q %s %+v", out, r.Stderr, r.Denials)
	}
	if n := len(bad.requests()); n != 0 {
		t.Errorf("the bad upstream was sent %d requests", n)
	}
	// a client that honours https_proxy (CONNECT, then TLS), with the default trust
	prog := `import urllib.request, sys
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=20).read().decode())
    except Exception as e:
        print("ERR", e)
`
	ps := strconv.Itoa(gp)
	r = run(sb, "/usr/bin/python3", "-c", prog, "https://api.test:"+ps+"/ok/py", "https://api.test:"+ps+"/nope")
	if o := string(r.Stdout); !strings.Contains(o, "hit GET /ok/py host=api.test:"+ps) || !strings.Contains(o, "ERR HTTP Error 403") {
		t.Errorf("urllib through https_proxy: %q %s", o, r.Stderr)
	}
	// the run sees the host's bundle with the CA appended; the host's is unchanged
	r = run(sb, "/bin/cat", hostBundle)
	host, _ := os.ReadFile(hostBundle)
	if !bytes.HasPrefix(r.Stdout, host) || !bytes.HasSuffix(r.Stdout, pem) {
		t.Errorf("the run's bundle: %d bytes, host %d, not the host's plus the CA", len(r.Stdout), len(host))
	}
	r = run(sb, "/usr/bin/python3", "-c", "open('"+hostBundle+"', 'a').write('x')")
	if r.Success || !strings.Contains(string(r.Stderr), "Read-only file system") && !strings.Contains(string(r.Stderr), "Permission denied") {
		t.Errorf("the run wrote its bundle: %s", r.Stderr)
	}
	for _, req := range good.requests() {
		if strings.Contains(req.URL.Path, "admin") || req.URL.Path == "/nope" || req.URL.Path == "/v1/other" || req.URL.Path == "/ok/front" {
			t.Errorf("the upstream saw a refused request: %s", req.URL.Path)
		}
	}
	sb.Close()
	if sha(t, hostBundle) != before {
		t.Fatal("the host's bundle changed")
	}
}

// Without the CA in the run's trust, the interception is refused by the client
// (the protection is the client's check, and the report's denial names it).
func TestHTTPSInterceptionUntrusted(t *testing.T) {
	ca := upstreamCA(t)
	good := newTLSUpstream(t, ca, "api.test")
	mapHosts(t, "api.test")
	sb := newSB(t, map[string]any{
		"fs_readable":    []any{"/usr", "/lib", "/bin", "/etc"},
		"http_allow":     []any{"GET api.test/ok/*"},
		"http_ports":     []any{int64(good.port(t))},
		"http_intercept": true,
	})
	out, r := curl(sb, "api.test", good.port(t), "/ok/1")
	if !strings.HasSuffix(out, "000") || !strings.Contains(string(r.Stderr), "certificate") || !denied(r, "the interception handshake failed") {
		t.Errorf("untrusted CA: %q %s %+v", out, r.Stderr, r.Denials)
	}
	if len(good.requests()) != 0 {
		t.Error("the upstream was reached")
	}
}

// A given CA (http_ca, http_key) is the one the run must trust; a key that is not
// the certificate's is refused.
func TestHTTPSGivenCA(t *testing.T) {
	dir := t.TempDir()
	// an ECDSA CA made by openssl-like means: the proxy's own generator, exported
	ca, err := httpproxy.NewCA("given")
	if err != nil {
		t.Fatal(err)
	}
	certF, keyF := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	os.WriteFile(certF, ca.PEM(), 0o644)
	other, _ := httpproxy.NewCA("other")
	os.WriteFile(keyF, other.KeyPEM(), 0o600)
	_, err = NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "http_allow": []any{"GET a.test"}, "http_ca": certF, "http_key": keyF})
	if err == nil || !strings.Contains(err.Error(), "the key is not the certificate's") {
		t.Fatalf("a mismatched key: %v", err)
	}
	os.WriteFile(keyF, ca.KeyPEM(), 0o600)
	sb := newSB(t, map[string]any{"http_allow": []any{"GET a.test"}, "http_ca": certF, "http_key": keyF, "http_ca_out": filepath.Join(dir, "out.pem")})
	if h := sb.isolation().Net.HTTP; h.HTTPS != "intercepted" || !strings.HasPrefix(h.CA, certF) {
		t.Fatalf("report: %+v", h)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "out.pem")); !bytes.Equal(got, ca.PEM()) {
		t.Fatal("http_ca_out is not the given CA")
	}
}

// scanProg makes requests through https_proxy, then looks for the secret (given
// in two halves, never joined in its memory) in its environment, every file of
// /proc/self, every readable mapping of its memory, and every file it can read
// that changed since the secret was made (one older cannot hold it).
const scanProg = `import os, sys, time, urllib.request
A, B, since = sys.argv[1].encode(), sys.argv[2].encode(), float(sys.argv[3])
def has(d):
    i = d.find(A)
    while i >= 0:
        if d[i + len(A):i + len(A) + len(B)] == B:
            return True
        i = d.find(A, i + 1)
    return False
for url, data, hdr in ((sys.argv[4], b"{}", {"Authorization": "Bearer fake"}), (sys.argv[5], None, {}), (sys.argv[6], None, {})):
    try:
        req = urllib.request.Request(url, data=data, headers=hdr)
        print("RESP", urllib.request.urlopen(req, timeout=20).read().decode())
    except Exception as e:
        print("ERR", url, e)
found, files = [], 0
for k, v in os.environ.items():
    if has((k + "=" + v).encode()) or k == "SANDTRAP_TEST_SECRET":
        found.append("env " + k)
for n in os.listdir("/proc/self"):
    p = "/proc/self/" + n
    try:
        if os.path.isfile(p) and n not in ("mem", "pagemap", "clear_refs", "kpageflags"):
            with open(p, "rb") as f:
                if has(f.read()):
                    found.append(p)
    except OSError:
        pass
mem = open("/proc/self/mem", "rb", 0)
regions = 0
for line in open("/proc/self/maps").read().splitlines():
    addr, perms = line.split()[:2]
    lo, hi = (int(x, 16) for x in addr.split("-"))
    if perms[0] != "r" or "[vvar" in line:
        continue
    try:
        mem.seek(lo)
        d = mem.read(hi - lo)
    except OSError:
        continue
    regions += 1
    if has(d):
        found.append("mem " + line)
for root in sys.argv[7:]:
    for dp, dns, fns in os.walk(root):
        for fn in fns:
            p = os.path.join(dp, fn)
            try:
                st = os.lstat(p)
                if not os.path.isfile(p) or os.path.islink(p) or st.st_ctime < since:
                    continue
                with open(p, "rb") as f:
                    files += 1
                    if has(f.read()):
                        found.append(p)
            except OSError:
                pass
print("SCANNED", regions, files)
print("FOUND", found)
`

// Credentials: the proxy adds the header after the rule check, over intercepted
// HTTPS to the verified upstream; the secret is not in the run's environment
// (its variable removed), its /proc/self, its memory or any file it can read; the
// sandbox's own Authorization is replaced; plain HTTP gets no credential without
// http_auth_plain; a credential file the sandbox could read is refused.
func TestHTTPSCredentials(t *testing.T) {
	ca := upstreamCA(t)
	up := newTLSUpstream(t, ca, "api.test")
	plainUp := &upstream{}
	var plainAuth []string
	var pmu sync.Mutex
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pmu.Lock()
		plainAuth = append(plainAuth, r.Header.Get("X-Api-Key")+"|"+r.Header.Get("Authorization"))
		pmu.Unlock()
		plainUp.ServeHTTP(w, r)
	}))
	defer plain.Close()
	mapHosts(t, "api.test", "plain.test")
	since := float64(time.Now().Unix() - 1)
	secret := fmt.Sprintf("sk-test-%x", sha256.Sum256([]byte(time.Now().String())))[:40]
	fileSecret := secret[:20] + "-file-" + secret[20:]
	t.Setenv("SANDTRAP_TEST_SECRET", secret)
	quiet := quietTempDir(t, "sandtrap-cred-")
	dir := filepath.Join(quiet, "cred")
	os.Mkdir(dir, 0o700)
	credFile := filepath.Join(dir, "key")
	os.WriteFile(credFile, []byte(fileSecret+"\n"), 0o600)
	gp, pp := up.port(t), portOfURL(t, plain.URL)
	pol := map[string]any{
		"fs_readable":    []any{"/usr", "/lib", "/bin", "/etc", "/proc", quiet},
		"http_allow":     []any{"POST api.test/v1/*", "GET api.test/ok/*", "GET plain.test/*"},
		"http_ports":     []any{int64(gp), int64(pp)},
		"http_intercept": true,
		"http_inject_ca": []any{hostBundle},
		"credentials":    map[string]any{"api": "env:SANDTRAP_TEST_SECRET", "f": "file:" + credFile},
		"http_auth":      []any{"POST api.test/v1/* bearer api", "GET api.test/ok/* header:x-api-key f", "GET plain.test/* header:X-Api-Key f"},
	}
	// the file lies in a tree the sandbox may read: refused
	if _, err := NewFromMap(withBase(pol)); err == nil || !strings.Contains(err.Error(), credFile+" is readable in the sandbox ("+quiet+")") {
		t.Fatalf("a readable credential file: %v", err)
	}
	pol["fs_denied"] = []any{dir}
	sb := newSB(t, pol)
	h := sb.isolation().Net.HTTP
	if strings.Contains(fmt.Sprintf("%+v", h), secret[8:20]) || len(h.Auth) != 3 {
		t.Fatalf("report: %+v", h)
	}
	ps, pls := strconv.Itoa(gp), strconv.Itoa(pp)
	half := len(secret) / 2
	r := run(sb, "/usr/bin/python3", "-c", scanProg, secret[:half], secret[half:], strconv.FormatFloat(since, 'f', 0, 64),
		"https://api.test:"+ps+"/v1/chat", "https://api.test:"+ps+"/ok/k", "http://plain.test:"+pls+"/p",
		"/usr", "/lib", "/bin", "/etc", quiet)
	out := string(r.Stdout)
	t.Logf("%s", out[strings.Index(out, "SCANNED"):])
	if !strings.Contains(out, "RESP hit POST /v1/chat") || !strings.Contains(out, "RESP hit GET /ok/k") || !strings.Contains(out, "RESP hit GET /p") {
		t.Errorf("requests: %q %s", out, r.Stderr)
	}
	if !strings.Contains(out, "FOUND []") || !strings.Contains(out, "SCANNED") || strings.Contains(out, "SCANNED 0 ") {
		t.Errorf("the secret in the sandbox: %q %s", out, r.Stderr)
	}
	// the file secret, by the same scan
	half = len(fileSecret) / 2
	r = run(sb, "/usr/bin/python3", "-c", scanProg, fileSecret[:half], fileSecret[half:], strconv.FormatFloat(since, 'f', 0, 64),
		"https://api.test:"+ps+"/v1/chat", "https://api.test:"+ps+"/ok/k", "http://plain.test:"+pls+"/p", quiet)
	if out := string(r.Stdout); !strings.Contains(out, "FOUND []") {
		t.Errorf("the file secret in the sandbox: %q %s", out, r.Stderr)
	}
	got := map[string]string{}
	for _, req := range up.requests() {
		got[req.Method+" "+req.URL.Path] = req.Header.Get("Authorization") + "|" + req.Header.Get("X-Api-Key")
	}
	if got["POST /v1/chat"] != "Bearer "+secret+"|" || got["GET /ok/k"] != "|"+fileSecret {
		t.Errorf("the upstream's headers: %q", got)
	}
	pmu.Lock()
	defer pmu.Unlock()
	for _, a := range plainAuth {
		if a != "|" {
			t.Errorf("plain HTTP got a credential: %q", a)
		}
	}
}

func withBase(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range basePolicy {
		out[k] = v
	}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// wsEcho upgrades "Upgrade: websocket" requests and echoes bytes upper-cased (a
// stand-in for a websocket server: the proxy does not read frames).
func wsEcho(seen *[]string, mu *sync.Mutex) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*seen = append(*seen, r.URL.Path+" "+r.Header.Get("Upgrade")+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want a websocket", http.StatusBadRequest)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 256)
		for {
			n, err := brw.Read(buf)
			if n > 0 {
				c.Write(bytes.ToUpper(buf[:n]))
			}
			if err != nil {
				return
			}
		}
	})
}

// wsClient opens a websocket-style upgrade to 127.0.0.1:port (TLS with the
// default trust when argv[3] is "1"), sends "hello" and prints the status line
// and what came back.
const wsClient = `import socket, ssl, sys
port, path, tls = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
s = socket.create_connection(("127.0.0.1", port), timeout=20)
if tls:
    s = ssl.create_default_context().wrap_socket(s, server_hostname="api.test")
s.sendall(("GET " + path + " HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
head = b""
while b"\r\n\r\n" not in head:
    b = s.recv(4096)
    if not b:
        break
    head += b
status, _, rest = head.partition(b"\r\n\r\n")
print(status.split(b"\r\n")[0].decode())
if b" 101 " in status:
    s.sendall(b"hello")
    got = rest
    while len(got) < 5:
        b = s.recv(4096)
        if not b:
            break
        got += b
    print(got.decode())
else:
    print(rest.decode(errors="replace"))
`

// Websockets: the opening request is checked by the rules (a refused path is a
// 403, nothing reaches the upstream); an allowed one is upgraded and spliced, over
// plain HTTP and intercepted TLS alike, with the credential added to it.
func TestHTTPWebsocket(t *testing.T) {
	ca := upstreamCA(t)
	var seen []string
	var mu sync.Mutex
	plain := httptest.NewServer(wsEcho(&seen, &mu))
	defer plain.Close()
	leaf, _ := ca.Leaf("api.test")
	tlsSrv := httptest.NewUnstartedServer(wsEcho(&seen, &mu))
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	mapHosts(t, "api.test")
	t.Setenv("SANDTRAP_TEST_WS_KEY", "ws-secret")
	pp, tp := portOfURL(t, plain.URL), portOfURL(t, tlsSrv.URL)
	sb := newSB(t, map[string]any{
		"fs_readable":    []any{"/usr", "/lib", "/bin", "/etc"},
		"http_allow":     []any{"GET api.test/ws/*"},
		"http_ports":     []any{int64(pp), int64(tp)},
		"http_intercept": true,
		"http_inject_ca": []any{hostBundle},
		"credentials":    map[string]any{"k": "env:SANDTRAP_TEST_WS_KEY"},
		"http_auth":      []any{"GET api.test/ws/* bearer k"},
	})
	for _, c := range []struct {
		port int
		tls  string
	}{{pp, "0"}, {tp, "1"}} {
		r := run(sb, "/usr/bin/python3", "-c", wsClient, strconv.Itoa(c.port), "/ws/chat", c.tls)
		if out := strings.TrimSpace(string(r.Stdout)); out != "HTTP/1.1 101 Switching Protocols\nHELLO" {
			t.Errorf("tls=%s allowed: %q %s", c.tls, out, r.Stderr)
		}
		r = run(sb, "/usr/bin/python3", "-c", wsClient, strconv.Itoa(c.port), "/other", c.tls)
		if out := string(r.Stdout); !strings.HasPrefix(out, "HTTP/1.1 403") || !strings.Contains(out, "no http_allow rule matches") || !denied(r, "GET api.test/other") {
			t.Errorf("tls=%s refused: %q %s", c.tls, out, r.Stderr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "/ws/chat websocket " || seen[1] != "/ws/chat websocket Bearer ws-secret" {
		t.Errorf("the upstreams saw %q (plain HTTP without the credential, TLS with it)", seen)
	}
}

// http_inject_ca inside a chroot names a bundle inside it (here under the
// host's /etc/ssl mounted read-only at /etc/ssl): the run sees it with the CA
// appended, Python's default trust (through /usr/lib/ssl, resolved inside the
// chroot) accepts the interception, a refused path is still refused, the
// bundle cannot be written and the host's is unchanged.
func TestHTTPSInterceptionInAChroot(t *testing.T) {
	if _, err := os.Stat(hostBundle); err != nil {
		t.Skip("no " + hostBundle + " on this host")
	}
	before := sha(t, hostBundle)
	ca := upstreamCA(t)
	good := newTLSUpstream(t, ca, "api.test")
	mapHosts(t, "api.test")
	gp := good.port(t)
	root, _ := chrootFS(t)
	os.Mkdir(filepath.Join(root, "etc", "ssl"), 0o755)
	caOut := filepath.Join(t.TempDir(), "ca.pem")
	sb := mustSandbox(t, chrootPolicy(root, map[string]any{
		"fs_mount_ro":    map[string]any{"/usr": "/usr", "/etc/ssl": "/etc/ssl"},
		"http_allow":     []any{"GET api.test/ok/*"},
		"http_ports":     []any{int64(gp)},
		"http_intercept": true,
		"http_inject_ca": []any{hostBundle},
		"http_ca_out":    caOut,
	}))
	pem, err := os.ReadFile(caOut)
	if err != nil {
		t.Fatal(err)
	}
	var view []string
	for _, m := range sb.isolation().View {
		view = append(view, m.Path+":"+m.Mode)
	}
	if !strings.Contains(strings.Join(view, " "), hostBundle+":overlay") {
		t.Errorf("the view %v lacks the bundle's overlay", view)
	}
	prog := `import urllib.request, sys
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=20).read().decode())
    except Exception as e:
        print("ERR", e)
`
	ps := strconv.Itoa(gp)
	r := run(sb, "/usr/bin/python3", "-c", prog, "https://api.test:"+ps+"/ok/py", "https://api.test:"+ps+"/nope")
	if o := string(r.Stdout); !strings.Contains(o, "hit GET /ok/py host=api.test:"+ps) || !strings.Contains(o, "ERR HTTP Error 403") {
		t.Errorf("urllib through https_proxy in the chroot: %q %s", o, r.Stderr)
	}
	r = run(sb, "/bin/cat", hostBundle)
	host, _ := os.ReadFile(hostBundle)
	if !bytes.HasPrefix(r.Stdout, host) || !bytes.HasSuffix(r.Stdout, pem) {
		t.Errorf("the run's bundle: %d bytes, host %d, not the host's plus the CA (%s)", len(r.Stdout), len(host), r.Stderr)
	}
	r = run(sb, "/usr/bin/python3", "-c", "open('"+hostBundle+"', 'a').write('x')")
	if r.Success || !strings.Contains(string(r.Stderr), "Read-only file system") && !strings.Contains(string(r.Stderr), "Permission denied") {
		t.Errorf("the run wrote its bundle: %s", r.Stderr)
	}
	sb.Close()
	if sha(t, hostBundle) != before {
		t.Fatal("the host's bundle changed")
	}
}
