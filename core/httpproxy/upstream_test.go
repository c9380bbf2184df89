package httpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// h1 sends one request on c (read through br) and returns the status and body.
func h1(t *testing.T, c net.Conn, br *bufio.Reader, req string) (int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// A session keeps its upstream connection: requests one after another on the
// sandbox's connection reach the upstream on one connection of the proxy's; a
// request naming another host gets a connection of its own (and its own Host).
func TestHTTPUpstreamKeptAlive(t *testing.T) {
	var mu sync.Mutex
	var from []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		from = append(from, r.Host+" "+r.RemoteAddr)
		mu.Unlock()
		io.WriteString(w, "ok "+r.URL.Path)
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET *.test/ok/*"}, nil), Ports: []uint16{port}})
	c := dialAs(t, p, port, &denials{})
	br := bufio.NewReader(c)
	for i, host := range []string{"api.test", "api.test", "api.test", "other.test"} {
		if code, body := h1(t, c, br, fmt.Sprintf("GET /ok/%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, host)); code != 200 || body != fmt.Sprintf("ok /ok/%d", i) {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	a := func(i int) string { return from[i][strings.IndexByte(from[i], ' ')+1:] }
	if a(0) != a(1) || a(1) != a(2) || a(3) == a(0) || !strings.HasPrefix(from[3], "other.test ") {
		t.Errorf("upstream connections: %q", from)
	}
}

// silentCloser answers every request and then closes its connection without
// saying so (no "Connection: close"), as an upstream whose keep-alive timed out.
func silentCloser(t *testing.T, seen *[]string, mu *sync.Mutex) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		*seen = append(*seen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		bw.Flush()
		c.Close()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An upstream that closed its kept-alive connection while idle: the next request
// (a POST, which is never sent twice) goes on a new connection, and the upstream
// sees each request once.
func TestHTTPUpstreamClosedWhileIdle(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	srv := silentCloser(t, &seen, &mu)
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"* api.test/ok/*"}, nil), Ports: []uint16{port}})
	c := dialAs(t, p, port, &denials{})
	br := bufio.NewReader(c)
	if code, _ := h1(t, c, br, "GET /ok/1 HTTP/1.1\r\nHost: api.test\r\n\r\n"); code != 200 {
		t.Fatalf("first: %d", code)
	}
	time.Sleep(50 * time.Millisecond) // the upstream's close arrives
	if code, body := h1(t, c, br, "POST /ok/2 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\n\r\nbody"); code != 200 || body != "ok" {
		t.Errorf("POST after the upstream's close: %d %q", code, body)
	}
	if code, _ := h1(t, c, br, "GET /ok/3 HTTP/1.1\r\nHost: api.test\r\n\r\n"); code != 200 {
		t.Errorf("third: %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ","); got != "GET /ok/1 ,POST /ok/2 body,GET /ok/3 " {
		t.Errorf("the upstream saw %q", got)
	}
}

// Closing the proxy ends a session waiting for its upstream's answer (the
// upstream connection is the proxy's to close).
func TestHTTPUpstreamCloseEndsWait(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
	}))
	defer srv.Close()
	defer close(release)
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/*"}, nil), Ports: []uint16{port}})
	c := dialAs(t, p, port, &denials{})
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: api.test\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the upstream's answer")
	}
}

// An upstream that switches protocols unasked (the proxy drops Upgrade: h2c and
// any other but websocket's) is a 502: its bytes are not passed on as HTTP.
func TestHTTPUpstreamUnaskedUpgrade(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(bw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged")
		bw.Flush()
		c.Close()
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	p := testProxy(t, Config{Rules: rules(t, []string{"GET api.test/*"}, nil), Ports: []uint16{port}})
	c := dialAs(t, p, port, &denials{})
	code, body := h1(t, c, bufio.NewReader(c), "GET /x HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	if code != 502 || !strings.Contains(body, "101 Switching Protocols to a request that asked for no upgrade") {
		t.Errorf("%d %q", code, body)
	}
}
