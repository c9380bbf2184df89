// Command client is bench_http.py's Go client, run in the sandbox: n GETs one at
// a time on one kept-alive connection to localhost:port (dialed at 127.0.0.1,
// proxy variables ignored), over HTTP/1.1, HTTP/2 with prior knowledge (h2c), or
// TLS (certificates not verified: the bench measures, the tests check) with ALPN
// http/1.1 or h2; it prints the rate it saw.
//
//	client h1|h2c|tls-h1|tls-h2 PORT N
package main

//lint:file-ignore SA1019 the bench client speaks h2c and h2 through x/net/http2's Transport, as the proxy serves with x/net/http2

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/net/http2"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: client h1|h2c|tls-h1|tls-h2 PORT N")
		os.Exit(2)
	}
	mode, port := os.Args[1], os.Args[2]
	n, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	addr := "127.0.0.1:" + port
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	tlsConf := &tls.Config{ServerName: "localhost", InsecureSkipVerify: true}
	scheme := "http"
	var rt http.RoundTripper
	switch mode {
	case "h1":
		rt = &http.Transport{Proxy: nil, DialContext: dial, MaxConnsPerHost: 1, DisableCompression: true}
	case "tls-h1":
		scheme = "https"
		rt = &http.Transport{Proxy: nil, DialContext: dial, MaxConnsPerHost: 1, DisableCompression: true,
			TLSClientConfig: tlsConf, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	case "h2c":
		rt = &http2.Transport{AllowHTTP: true, DisableCompression: true,
			DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
				return dial(ctx, network, a)
			}}
	case "tls-h2":
		scheme = "https"
		rt = &http2.Transport{DisableCompression: true, TLSClientConfig: tlsConf,
			DialTLSContext: func(ctx context.Context, network, a string, cfg *tls.Config) (net.Conn, error) {
				c, err := dial(ctx, network, a)
				if err != nil {
					return nil, err
				}
				tc := tls.Client(c, cfg)
				if err := tc.HandshakeContext(ctx); err != nil {
					c.Close()
					return nil, err
				}
				if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
					c.Close()
					return nil, fmt.Errorf("ALPN chose %q, not h2", p)
				}
				return tc, nil
			}}
	default:
		fmt.Fprintln(os.Stderr, "mode: h1|h2c|tls-h1|tls-h2")
		os.Exit(2)
	}
	c := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	url := scheme + "://localhost:" + port + "/ok/x"
	want := 1
	if mode == "h2c" || mode == "tls-h2" {
		want = 2
	}
	one := func() {
		resp, err := c.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != want {
			fmt.Fprintln(os.Stderr, resp.Status, resp.Proto)
			os.Exit(1)
		}
	}
	one()
	t := time.Now()
	for i := 0; i < n; i++ {
		one()
	}
	fmt.Println(float64(n) / time.Since(t).Seconds())
}
