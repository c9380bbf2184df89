package httpproxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
)

// readerConn is a connection whose reads come from r (what was peeked, then the
// rest).
type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// intercept terminates the sandbox's TLS to host (its server name, checked by
// the caller, from its ClientHello, hello) with a certificate of the sandbox's CA, and serves the requests
// inside as plain HTTP's, each checked, each sent on over TLS to host:port as
// the proxy resolves it, verified against the host's trust store.
func (s *session) intercept(host string, port uint16, hello []byte) {
	ca := s.p.cfg.CA
	tc := tls.Server(&readerConn{Conn: s.c, r: io.MultiReader(bytes.NewReader(hello), s.br)}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"}, // h2: each stream checked (h2.go)
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return ca.Leaf(host)
		},
	})
	s.c.SetDeadline(time.Now().Add(headerTimeout))
	if err := tc.Handshake(); err != nil {
		// most often the program does not trust the CA (http_inject_ca, http_ca_out)
		s.deny(fmt.Sprintf("tls %s:%d", host, port), "the interception handshake failed (does the program trust the sandbox's CA?): "+err.Error())
		return
	}
	s.c.SetDeadline(time.Time{})
	in := &session{p: s.p, c: tc, lr: &io.LimitedReader{R: tc, N: math.MaxInt64}, e: s.e, https: true}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		in.serveH2(tc, host, port)
		tc.Close()
		return
	}
	in.br = bufio.NewReaderSize(in.lr, 16<<10)
	in.http(host, port)
	tc.Close()
}

// badCertificate reports whether err is the upstream's certificate failing
// verification, and says so.
func badCertificate(err error) (string, bool) {
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ve), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &ci):
		return "the upstream's certificate failed verification against the host's trust store: " + err.Error(), true
	}
	return "", false
}

// Auth is an http_auth rule with its credential's value: the header it sets.
type Auth struct {
	Rule   policy.HTTPRule
	Header string
	Value  string // the whole header value ("Bearer …", "Basic …", or the secret)
	Text   string // the rule as written (never the value)
}

// NewAuth makes the header of rule a with secret.
func NewAuth(a policy.HTTPAuth, secret string) Auth {
	v := secret
	switch a.Scheme {
	case "bearer":
		v = "Bearer " + secret
	case "basic":
		v = "Basic " + base64.StdEncoding.EncodeToString([]byte(secret))
	}
	return Auth{Rule: a.Rule, Header: a.Header, Value: v, Text: a.Text}
}

// authorize sets the header of the first Auth rule that matches t, over
// intercepted TLS (or plain HTTP with AuthPlain); the sandbox's own value of
// that header is replaced.
func (s *session) authorize(h http.Header, t target) {
	if !s.https && !s.p.cfg.AuthPlain {
		return
	}
	for _, a := range s.p.cfg.Auth {
		if s.p.cfg.Rules.matches(a.Rule, t.method, t.host, t.path) {
			h.Set(a.Header, a.Value)
			return
		}
	}
}
