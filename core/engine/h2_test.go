//go:build sandtrap_testhook

package engine

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// curlHTTP2 skips unless this host's curl speaks HTTP/2.
func curlHTTP2(t *testing.T) {
	t.Helper()
	out, err := exec.Command("/usr/bin/curl", "-V").Output()
	if err != nil || !strings.Contains(string(out), " HTTP2") {
		t.Skip("this curl has no HTTP2 feature")
	}
}

// HTTP/2 from a real sandboxed curl, transparently redirected: with prior
// knowledge (cleartext) and by ALPN under interception (there two requests on one
// connection: the second reuses it, num_connects 0), the allowed request through
// (HTTP/1.1 upstream), the denied one a 403 naming the rule and a denial, never
// sent upstream.
func TestHTTP2Curl(t *testing.T) {
	curlHTTP2(t)
	if _, err := os.Stat(hostBundle); err != nil {
		t.Skip("no " + hostBundle + " on this host")
	}
	up := &upstream{}
	srv := httptest.NewServer(up)
	defer srv.Close()
	ca := upstreamCA(t)
	tup := newTLSUpstream(t, ca, "api.test")
	mapHosts(t, "api.test")
	port, tport := portOfURL(t, srv.URL), tup.port(t)
	ps, tps := strconv.Itoa(port), strconv.Itoa(tport)
	sb := newSB(t, map[string]any{
		"fs_readable":    []any{"/usr", "/lib", "/bin", "/etc"},
		"http_allow":     []any{"GET api.test/ok/*"},
		"http_deny":      []any{"* */admin/*"},
		"http_ports":     []any{int64(port), int64(tport)},
		"http_intercept": true,
		"http_inject_ca": []any{hostBundle},
	})
	if h := sb.isolation().Net.HTTP; h == nil || !strings.Contains(strings.Join(h.Notes, "\n"), "HTTP/2 (prior knowledge in cleartext; ALPN h2 when https is intercepted) is checked stream by stream") {
		t.Errorf("the report says nothing of HTTP/2: %+v", h)
	}
	w := "\n%{http_code} %{http_version} %{num_connects}\n"
	want2 := "sandtrap: GET api.test/admin/x refused: http_deny \"* */admin/*\"\n\n403 2 "
	curl2 := func(flag, base, port string, urls ...string) (string, *Result) {
		argv := []string{"/usr/bin/curl", "-sS", "--noproxy", "*", "--max-time", "20", "--path-as-is", flag,
			"--resolve", "api.test:" + port + ":127.0.0.1", "-w", w}
		for _, u := range urls {
			argv = append(argv, base+u)
		}
		r := run(sb, argv...)
		return string(r.Stdout), r
	}
	// prior knowledge: one curl a request (this curl, 7.88, breaks reusing an h2c
	// connection even to a server of its own: "Error in the HTTP2 framing layer";
	// one connection's streams are TestH2PriorKnowledge's)
	base := "http://api.test:" + ps
	out, r := curl2("--http2-prior-knowledge", base, ps, "/ok/1")
	if !strings.HasPrefix(out, "hit GET /ok/1 host=api.test:"+ps) || !strings.HasSuffix(out, "\n200 2 1\n") || len(r.Denials) != 0 {
		t.Errorf("prior knowledge, allowed: %q (stderr %s) %+v", out, r.Stderr, r.Denials)
	}
	out, r = curl2("--http2-prior-knowledge", base, ps, "/ok/../admin/x")
	if !strings.HasPrefix(out, want2) || !denied(r, "GET api.test/admin/x (http_deny") || len(r.Denials) != 1 {
		t.Errorf("prior knowledge, denied: %q (stderr %s) %+v", out, r.Stderr, r.Denials)
	}
	// ALPN h2 under interception: both on one connection (the second: 0 connects)
	base = "https://api.test:" + tps
	out, r = curl2("--http2", base, tps, "/ok/1", "/ok/../admin/x")
	if !strings.HasPrefix(out, "hit GET /ok/1 host=api.test:"+tps) || !strings.Contains(out, "\n200 2 1\n") || !strings.HasSuffix(out, want2+"0\n") {
		t.Errorf("intercepted h2: %q (stderr %s)", out, r.Stderr)
	}
	if !denied(r, "GET api.test/admin/x (http_deny") || len(r.Denials) != 1 {
		t.Errorf("intercepted h2: denials %+v", r.Denials)
	}
	if up.saw("admin") || !up.saw("GET /ok/1") {
		t.Errorf("the plain upstream saw %v", up.seen)
	}
	for _, req := range tup.requests() {
		if req.URL.Path != "/ok/1" || req.Proto != "HTTP/1.1" {
			t.Errorf("the TLS upstream saw %s %s", req.Proto, req.URL.Path)
		}
	}
	if n := len(tup.requests()); n != 1 {
		t.Errorf("the TLS upstream saw %d requests", n)
	}
}
