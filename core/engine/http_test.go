//go:build sandtrap_testhook

package engine

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// upstream is a local server standing in for named hosts: it answers
// "hit METHOD PATH host=HOST" and remembers every request it saw.
type upstream struct {
	mu   sync.Mutex
	seen []string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, r.Method+" "+r.URL.Path)
	u.mu.Unlock()
	fmt.Fprintf(w, "hit %s %s host=%s body=%q", r.Method, r.URL.Path, r.Host, body)
}

func (u *upstream) saw(sub string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.seen {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func portOfURL(t *testing.T, u string) int {
	_, ps, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(ps)
	return p
}

// mapHosts makes the policy's resolution answer 127.0.0.1 for names (the test
// hook SANDTRAP_TEST_HOSTS), for the length of the test.
func mapHosts(t *testing.T, names ...string) {
	var kv []string
	for _, n := range names {
		kv = append(kv, n+"=127.0.0.1")
	}
	t.Setenv("SANDTRAP_TEST_HOSTS", strings.Join(kv, ","))
}

// httpClient is a program that ignores proxy variables: http.client to
// 127.0.0.1:port with the Host header given, printing status and body.
const httpClient = `import http.client, sys
port, method, host, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request(method, path, body=b"x" if method == "POST" else None, headers={"Host": host})
r = c.getresponse()
print(r.status, r.read().decode())
`

// rawClient sends its argument's bytes to 127.0.0.1:port, half-closes, and
// prints everything that comes back.
const rawClient = `import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
s.shutdown(socket.SHUT_WR)
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode("latin-1"))
`

func httpSandbox(t *testing.T, port int, extra map[string]any) *Sandbox {
	m := map[string]any{
		"http_allow": []any{"GET api.test/ok/*", "POST api.test/v1/chat/completions", "GET *.wild.test/docs/*"},
		"http_deny":  []any{"* */admin/*"},
		"http_ports": []any{int64(port)},
	}
	for k, v := range extra {
		m[k] = v
	}
	return newSB(t, m)
}

func denied(r *Result, sub string) bool {
	for _, d := range r.Denials {
		if d.Syscall == "http" && strings.Contains(d.Address, sub) && d.Errno == "EACCES" {
			return true
		}
	}
	return false
}

// Plain HTTP through the proxy: methods, hosts and paths allowed and refused,
// wildcards, dot segments; refusals are 403 naming the rule and in result.denials;
// the upstream never sees a refused request.
func TestHTTPRules(t *testing.T) {
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test", "a.b.wild.test", "other.test")
	sb := httpSandbox(t, port, nil)
	iso := sb.isolation()
	if iso.Net.HTTP == nil || iso.Net.HTTP.HTTPS != "sni" || len(iso.Net.HTTP.Notes) == 0 || !iso.Net.Supervised {
		t.Fatalf("report: %+v", iso.Net)
	}
	ps := strconv.Itoa(port)
	for _, c := range []struct {
		method, host, path string
		want               string // status and a part of the body
		deny               string // the denial's address, "" when allowed
	}{
		{"GET", "api.test", "/ok/1", `200 hit GET /ok/1 host=api.test`, ""},
		{"GET", "API.test.", "/ok/2", `200 hit GET /ok/2`, ""},
		{"POST", "api.test", "/v1/chat/completions", `200 hit POST /v1/chat/completions host=api.test body="x"`, ""},
		{"GET", "api.test", "/v1/chat/completions", `403 sandtrap: GET api.test/v1/chat/completions refused: no http_allow rule matches`, "GET api.test/v1/chat/completions"},
		{"GET", "api.test", "/admin/x", `403 sandtrap: GET api.test/admin/x refused: http_deny "* */admin/*"`, "GET api.test/admin/x (http_deny"},
		{"GET", "api.test", "/ok/../admin/y", `403 sandtrap: GET api.test/admin/y refused: http_deny`, "GET api.test/admin/y"},
		{"GET", "api.test", "/ok/%2e%2e/admin/z", `403 sandtrap: GET api.test/admin/z refused`, "GET api.test/admin/z"},
		{"DELETE", "api.test", "/ok/1", `403 sandtrap: DELETE api.test/ok/1 refused: no http_allow rule`, "DELETE api.test/ok/1"},
		{"GET", "other.test", "/ok/1", `403 sandtrap: GET other.test/ok/1 refused`, "GET other.test/ok/1"},
		{"GET", "a.b.wild.test", "/docs/x", `200 hit GET /docs/x host=a.b.wild.test`, ""},
		{"GET", "wild.test", "/docs/x", `403`, "GET wild.test/docs/x"},
	} {
		r := run(sb, "/usr/bin/python3", "-c", httpClient, ps, c.method, c.host, c.path)
		out := strings.TrimSpace(string(r.Stdout))
		if !r.Success || !strings.HasPrefix(out, c.want) {
			t.Errorf("%s %s%s: %q (stderr %s), want %q", c.method, c.host, c.path, out, r.Stderr, c.want)
		}
		if c.deny != "" && !denied(r, c.deny) {
			t.Errorf("%s %s%s: no denial %q in %+v", c.method, c.host, c.path, c.deny, r.Denials)
		}
		if c.deny == "" && len(r.Denials) != 0 {
			t.Errorf("%s %s%s: denials %+v", c.method, c.host, c.path, r.Denials)
		}
	}
	if up.saw("/admin") || up.saw("DELETE") || up.saw("GET /v1") {
		t.Fatalf("the upstream saw a refused request: %v", up.seen)
	}
}

// Keep-alive cannot smuggle a request past the rules: pipelined requests on one
// connection are each checked, and a request hidden in a body (Content-Length
// against Transfer-Encoding) is never one to the upstream.
func TestHTTPKeepAliveSmuggling(t *testing.T) {
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test")
	sb := httpSandbox(t, port, nil)
	ps := strconv.Itoa(port)
	pipelined := `GET /ok/1 HTTP/1.1\r\nHost: api.test\r\n\r\nGET /admin/2 HTTP/1.1\r\nHost: api.test\r\n\r\nGET /ok/3 HTTP/1.1\r\nHost: api.test\r\n\r\n`
	r := run(sb, "/usr/bin/python3", "-c", rawClient, ps, pipelined)
	out := string(r.Stdout)
	if !strings.Contains(out, "hit GET /ok/1") || !strings.Contains(out, `refused: http_deny "* */admin/*"`) || strings.Contains(out, "/ok/3") {
		t.Errorf("pipelined: %q %s", out, r.Stderr)
	}
	if !denied(r, "GET api.test/admin/2") {
		t.Errorf("pipelined: denials %+v", r.Denials)
	}
	// a second request inside the first one's body, framed two ways
	for _, raw := range []string{
		`POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 45\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin/te HTTP/1.1\r\nHost: api.test\r\n\r\n`,
		`POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 44\r\n\r\nGET /admin/cl HTTP/1.1\r\nHost: api.test\r\n\r\n`,
		`POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET /admin/cl2 HTTP/1.1\r\nHost: api.test\r\n\r\n`,
	} {
		r := run(sb, "/usr/bin/python3", "-c", rawClient, ps, raw)
		if !r.Success {
			t.Errorf("%q: %s", raw, r.Stderr)
		}
		t.Logf("%q -> %q", raw, r.Stdout)
	}
	if up.saw("/admin") {
		t.Fatalf("the upstream saw a smuggled request: %v", up.seen)
	}
	// bytes that are not HTTP: 400, a denial, nothing upstream
	n := len(up.seen)
	r = run(sb, "/usr/bin/python3", "-c", rawClient, ps, `\x00\x01\x02 not http\r\n\r\n`)
	if out := string(r.Stdout); !strings.HasPrefix(out, "HTTP/1.1 400") || !denied(r, "not an HTTP request") {
		t.Errorf("not http: %q %+v", out, r.Denials)
	}
	if len(up.seen) != n {
		t.Errorf("the upstream saw: %v", up.seen[n:])
	}
}

// Another port than the HTTP ports stays refused (no net_allow), and a process
// of the host that is not the sandbox cannot use the proxy.
func TestHTTPProxyIsTheSandboxsOnly(t *testing.T) {
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	other := httptest.NewServer(up)
	defer other.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test")
	sb := httpSandbox(t, port, nil)
	r := run(sb, "/usr/bin/python3", "-c", httpClient, strconv.Itoa(portOfURL(t, other.URL)), "GET", "api.test", "/ok/1")
	if r.Success || !strings.Contains(string(r.Stderr), "PermissionError") {
		t.Errorf("a port outside http_ports: %q %s", r.Stdout, r.Stderr)
	}
	c, err := net.Dial("tcp", sb.isolation().Net.HTTP.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ok/1 HTTP/1.1\r\nHost: api.test\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.1 403") || up.saw("/ok/1") {
		t.Fatalf("a host process through the proxy: %q", b)
	}
}

// A client that honours the proxy variables (urllib) reaches the allowed and is
// refused the rest, CONNECT included.
func TestHTTPProxyVariables(t *testing.T) {
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test")
	sb := httpSandbox(t, port, nil)
	prog := `import urllib.request, sys, os
print(os.environ["http_proxy"] != "")
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=10).read().decode())
    except Exception as e:
        print("ERR", e)
`
	ps := strconv.Itoa(port)
	r := run(sb, "/usr/bin/python3", "-c", prog, "http://api.test:"+ps+"/ok/u", "http://api.test:"+ps+"/admin/u", "https://other.test:"+ps+"/x")
	out := string(r.Stdout)
	if !strings.Contains(out, "True\nhit GET /ok/u host=api.test:"+ps) || !strings.Contains(out, "ERR HTTP Error 403") || !strings.Contains(out, "Tunnel connection failed: 403") {
		t.Errorf("urllib: %q %s", out, r.Stderr)
	}
	if !denied(r, "CONNECT other.test:"+ps) || !denied(r, "GET api.test/admin/u") {
		t.Errorf("denials: %+v", r.Denials)
	}
}

// HTTPS without interception: allowed by server name to a host a rule names (the
// upstream reached as the proxy resolves that name), refused for another name or
// none; the report says method and path were not checked.
func TestHTTPSBySNI(t *testing.T) {
	srv := httptest.NewTLSServer(&upstream{})
	defer srv.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test", "other.test")
	sb := httpSandbox(t, port, nil)
	prog := `import socket, ssl, sys
ctx = ssl._create_unverified_context()
sni = sys.argv[2] or None
try:
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10), server_hostname=sni)
    s.sendall(b"GET /anything HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    print(s.recv(65536).decode().split("\r\n")[0])
except (OSError, ssl.SSLError) as e:
    print("ERR", type(e).__name__)
`
	ps := strconv.Itoa(port)
	r := run(sb, "/usr/bin/python3", "-c", prog, ps, "api.test")
	if out := strings.TrimSpace(string(r.Stdout)); out != "HTTP/1.1 200 OK" || len(r.Denials) != 0 {
		t.Errorf("sni api.test: %q %s %+v", out, r.Stderr, r.Denials)
	}
	r = run(sb, "/usr/bin/python3", "-c", prog, ps, "other.test")
	if out := string(r.Stdout); !strings.HasPrefix(out, "ERR") || !denied(r, "tls other.test:"+ps+" (no http_allow rule names the host)") {
		t.Errorf("sni other.test: %q %+v", out, r.Denials)
	}
	r = run(sb, "/usr/bin/python3", "-c", prog, ps, "")
	if out := string(r.Stdout); !strings.HasPrefix(out, "ERR") || !denied(r, "no server name") {
		t.Errorf("no sni: %q %+v", out, r.Denials)
	}
	// the proxy itself completes no handshake: a Go client sees the real server
	c, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		c.Close()
	}
	_ = os.Getpid
}

// The address the sandbox connects to is not where the request goes: another
// address on the HTTP port (v4, v4-mapped on an IPv6 socket, a socket the program
// bound itself) reaches the proxy, which sends the request to the Host as it
// resolves it.
func TestHTTPDestinationIsTheProxysResolution(t *testing.T) {
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	port := portOfURL(t, srv.URL)
	mapHosts(t, "api.test")
	free, err := net.Listen("tcp", "[::]:0") // a port free for v4 and v6 now (a fixed one may be another test's)
	if err != nil {
		t.Fatal(err)
	}
	bindPort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	sb := httpSandbox(t, port, map[string]any{"net_allow_bind": []any{int64(bindPort)}})
	prog := `import socket, sys
port, fam, addr, bind = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET6 if fam == "6" else socket.AF_INET)
if bind:
    s.bind(("::" if fam == "6" else "0.0.0.0", bind))
s.settimeout(10)
s.connect((addr, port))
s.sendall(b"GET /ok/d HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
print(out.decode().split("\r\n")[-1])
`
	ps := strconv.Itoa(port)
	bind := strconv.Itoa(bindPort)
	for _, c := range [][]string{{"4", "10.255.255.1", "0"}, {"6", "::ffff:127.0.0.9", "0"}, {"4", "127.0.0.1", bind}, {"6", "::ffff:10.1.2.3", bind}} {
		r := run(sb, "/usr/bin/python3", "-c", prog, ps, c[0], c[1], c[2])
		if out := strings.TrimSpace(string(r.Stdout)); out != `hit GET /ok/d host=api.test body=""` {
			t.Errorf("%v: %q %s", c, out, r.Stderr)
		}
	}
}
