package plan

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/httpproxy"
	"github.com/sandtrap/sandtrap/core/policy"
)

// HTTPS interception (http_intercept, http_ca/http_key, http_inject_ca,
// http_ca_out) and credentials (credentials, http_auth): the CA is made or read
// when the sandbox is built; its key stays in this process (an ephemeral one is
// never written anywhere). Each bundle of http_inject_ca is copied, with the
// CA's certificate appended, into a directory of the sandbox's own (0700, under
// the engine's temporary directory, removed when the sandbox closes), and the
// view lays that copy over the bundle's path, read-only (fsview.Overlay): the
// host's file is never changed, and the run's processes see the copy there.

func planIntercept(p *policy.Policy, h *httpPlan, rep *HTTPReport, probs *policy.Problems) {
	var ca *httpproxy.CA
	var err error
	if p.HTTPCA != "" {
		cert, cerr := os.ReadFile(p.HTTPCA)
		key, kerr := os.ReadFile(p.HTTPKey)
		switch {
		case cerr != nil:
			probs.Add("http_ca", "%v", unwrapPathErr(cerr))
			return
		case kerr != nil:
			probs.Add("http_key", "%v", unwrapPathErr(kerr))
			return
		}
		if ca, err = httpproxy.LoadCA(cert, key); err != nil {
			probs.Add("http_ca", "%s: %v", p.HTTPCA, err)
			return
		}
		rep.CA = p.HTTPCA
	} else {
		if ca, err = httpproxy.NewCA("sandtrap sandbox CA"); err != nil {
			probs.Add("http_intercept", "the ephemeral CA: %v", err)
			return
		}
		rep.CA = "ephemeral"
	}
	rep.CA += " (" + ca.Cert.Subject.String() + ")"
	rep.CAExpiry = ca.Cert.NotAfter.UTC().Format(time.RFC3339)
	h.cfg.CA = ca
	h.cfg.UpstreamRoots = upstreamRoots()
	h.caOut = p.HTTPCAOut
	rep.HTTPS = "intercepted"
	rep.Notes = append(rep.Notes,
		"https is intercepted: the proxy answers TLS with a certificate of the sandbox's CA for the server name asked, checks every request inside (method, host, path; a Host header naming another host than the server name is refused), and sends it on over TLS verified against the host's trust store; programs that pin certificates or carry their own trust list fail the handshake unless given the CA ("+
			"http_inject_ca, http_ca_out)")
	if p.HTTPCA == "" {
		rep.Notes = append(rep.Notes, "the CA is ephemeral (ECDSA P-256, valid until "+rep.CAExpiry+"): its key exists only in the engine's memory")
	}
	if len(p.HTTPInjectCA) == 0 {
		return
	}
	dir, err := os.MkdirTemp("", "sandtrap-ca-")
	if err != nil {
		probs.Add("http_inject_ca", "a directory for the bundles: %v", err)
		return
	}
	h.dir = dir
	for i, path := range p.HTTPInjectCA {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			probs.Add("http_inject_ca", "%v", unwrapPathErr(err))
			continue
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() {
			probs.Add("http_inject_ca", "%s is not a regular file", path)
			continue
		}
		host, err := os.ReadFile(real)
		if err != nil {
			probs.Add("http_inject_ca", "%v", unwrapPathErr(err))
			continue
		}
		var b bytes.Buffer
		b.Write(host)
		if len(host) > 0 && host[len(host)-1] != '\n' {
			b.WriteByte('\n')
		}
		b.WriteString("# sandtrap: this sandbox's HTTPS interception CA (the host's file is unchanged)\n")
		b.Write(ca.PEM())
		own := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(real, "/"), "/", "_")+"."+strconv.Itoa(i))
		if err := os.WriteFile(own, b.Bytes(), 0o444); err != nil {
			probs.Add("http_inject_ca", "%v", err)
			continue
		}
		h.overlays = append(h.overlays, fsview.Overlay{Path: real, Source: own})
		rep.InjectCA = append(rep.InjectCA, real)
	}
}

// upstreamRoots is the trust store upstreams are verified against: the host's
// (nil), or in a test build the host's and the test hook's CA.
func upstreamRoots() *x509.CertPool {
	extra := testUpstreamCA()
	if extra == nil {
		return nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(extra)
	return pool
}

// planAuth reads the credentials that http_auth uses (from the engine's
// environment or a file, now) into the proxy's rules. A credential file the
// sandbox could read is refused.
func planAuth(p *policy.Policy, h *httpPlan, rep *HTTPReport, probs *policy.Problems) {
	if len(p.HTTPAuth) == 0 {
		return
	}
	secrets := map[string]string{}
	for name, src := range p.Credentials {
		kind, rest, _ := strings.Cut(src, ":")
		switch kind {
		case "env":
			// the environment the run would have been given: the policy's env
			// (the bindings send their process's current environment there),
			// else this process's; the variable is then kept from the run
			v, ok := p.Env[rest]
			if !ok {
				v, ok = os.LookupEnv(rest)
			}
			if !ok || v == "" {
				probs.Add("credentials", "%q: the variable %s is not set (in env or the host's environment)", name, rest)
				continue
			}
			secrets[name] = v
		case "file":
			if why := readableBySandbox(p, rest); why != "" {
				probs.Add("credentials", "%q: %s is readable in the sandbox (%s): keep it outside the granted trees, or deny it", name, rest, why)
				continue
			}
			b, err := os.ReadFile(rest)
			if err != nil {
				probs.Add("credentials", "%q: %v", name, unwrapPathErr(err))
				continue
			}
			v := strings.TrimRight(string(b), "\r\n")
			if v == "" || strings.ContainsAny(v, "\r\n\x00") {
				probs.Add("credentials", "%q: %s must hold one line, the secret", name, rest)
				continue
			}
			secrets[name] = v
		}
	}
	for _, a := range p.HTTPAuth {
		if v, ok := secrets[a.Credential]; ok {
			h.cfg.Auth = append(h.cfg.Auth, httpproxy.NewAuth(a, v))
			rep.Auth = append(rep.Auth, a.Text)
		}
	}
	h.cfg.AuthPlain = p.HTTPAuthPlain
	if p.HTTPAuthPlain {
		rep.Notes = append(rep.Notes, "WARNING: http_auth_plain: credentials are added to plain-HTTP requests too, where anyone on the path can read them")
	} else {
		rep.Notes = append(rep.Notes, "credentials (http_auth) are added by the proxy after the rule check, over intercepted HTTPS to a verified upstream only; the run never holds them")
	}
}

// readableBySandbox says which grant lets the sandbox read path ("" none).
func readableBySandbox(p *policy.Policy, path string) string {
	for _, d := range p.FSDenied {
		if policy.Within(path, d) {
			return ""
		}
	}
	for _, g := range append(append([]string{}, p.FSReadable...), p.FSWritable...) {
		if policy.Within(path, g) {
			return g
		}
	}
	if p.Workdir != "" && policy.Within(path, p.Workdir) {
		return p.Workdir
	}
	return ""
}

// withoutCredentials drops the variables that credentials read ("env:VAR") from
// the run's environment, whether inherited or given by the policy's env.
func withoutCredentials(env []string, p *policy.Policy) []string {
	drop := map[string]bool{}
	for _, src := range p.Credentials {
		if v, ok := strings.CutPrefix(src, "env:"); ok {
			drop[v] = true
		}
	}
	if len(drop) == 0 {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return out
}
