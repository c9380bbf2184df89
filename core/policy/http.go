package policy

import (
	"slices"
	"strings"
)

// HTTP rules (http_allow, http_deny): "METHOD host/path", each part a pattern in
// which * matches any run of characters (also none, also '.' and '/'):
//
//	"POST api.openai.com/v1/chat/completions"
//	"GET *.example.com/docs/*"
//	"* */admin/*"
//	"GET example.com"            (no path: every path)
//
// The method is matched case-insensitively (written upper case), the host
// case-insensitively without its port or a trailing dot, the path exactly, as the
// proxy cleans it (core/httpproxy: percent-decoded, dot segments removed) and
// without its query. A host pattern without * is concrete: such a rule extends
// the network allow-list to that host's HTTP ports (through the proxy).
type HTTPRule struct {
	Method string // "*" or an upper-case token
	Host   string // lower case, no port
	Path   string // starts with '/' or is "*"
	Text   string // as written
}

// DefaultHTTPPorts are the ports whose connects go to the proxy when the policy
// gives HTTP rules and no http_ports: plain HTTP and TLS (the proxy tells them
// apart by the first byte).
var DefaultHTTPPorts = []uint16{80, 443}

// ConcreteHost reports whether the rule names one host (no wildcard).
func (r HTTPRule) ConcreteHost() bool { return !strings.Contains(r.Host, "*") }

// ParseHTTPRule reads one rule; the problem is "" when it is valid.
func ParseHTTPRule(s string) (HTTPRule, string) {
	r := HTTPRule{Text: s}
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return r, "is not \"METHOD host/path\" (two parts separated by a space, e.g. \"POST api.example.com/v1/*\", \"* */admin/*\")"
	}
	m := strings.ToUpper(fields[0])
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c == '*' || c == '-' || c == '_') {
			return r, "has a method that is not a token (GET, POST, *)"
		}
	}
	target := fields[1]
	if strings.Contains(target, "://") {
		return r, "names a scheme: write the host and path only (\"api.example.com/v1/*\"); plain HTTP and HTTPS are both governed"
	}
	host, path, hasPath := strings.Cut(target, "/")
	if !hasPath {
		path = "*"
	} else {
		path = "/" + path
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return r, "has no host (write * for any host)"
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '*' || c == ':' || c == '[' || c == ']') {
			return r, "has a host with a character other than letters, digits, '-', '.', ':' and '*'"
		}
	}
	if strings.ContainsAny(path, "?#") {
		return r, "has a query or fragment: rules match the path only"
	}
	r.Method, r.Host, r.Path = m, host, path
	return r, ""
}

// httpRules reads http_allow and http_deny.
func (r reader) httpRules(k string) []HTTPRule {
	var out []HTTPRule
	for _, it := range r.list(k) {
		s, ok := r.str(k, it)
		if !ok {
			continue
		}
		rule, prob := ParseHTTPRule(s)
		if prob != "" {
			r.probs.Add(k, "%q %s", s, prob)
			continue
		}
		out = append(out, rule)
	}
	return out
}

// HTTPRules reports whether the policy gives HTTP rules (the proxy is started).
func (p *Policy) HTTPRules() bool { return len(p.HTTPAllow) > 0 || len(p.HTTPDeny) > 0 }

// HTTPPortsOrDefault are the ports whose TCP connects go to the proxy.
func (p *Policy) HTTPPortsOrDefault() []uint16 {
	ports := DefaultHTTPPorts
	if len(p.HTTPPorts) > 0 {
		ports = p.HTTPPorts
	}
	if p.Intercepts() && !slices.Contains(ports, 443) {
		ports = append(append([]uint16(nil), ports...), 443) // interception covers HTTPS's port
	}
	return ports
}

// Intercepts reports whether the proxy terminates TLS (HTTPS interception): with
// http_intercept, or a CA given (http_ca, http_key).
func (p *Policy) Intercepts() bool { return p.HTTPRules() && (p.HTTPIntercept || p.HTTPCA != "") }

// HTTPAuth is one http_auth rule: "METHOD host/path SCHEME CREDENTIAL", the
// request part as an HTTP rule's, SCHEME "bearer" (Authorization: Bearer
// VALUE), "basic" (the value "user:password", base64-encoded into Authorization:
// Basic) or "header:NAME" (NAME: VALUE), CREDENTIAL a key of credentials.
type HTTPAuth struct {
	Rule       HTTPRule
	Scheme     string // "bearer", "basic" or "header"
	Header     string // the header set (canonical form)
	Credential string
	Text       string
}

// ParseHTTPAuth reads one http_auth rule; the problem is "" when it is valid.
func ParseHTTPAuth(s string) (HTTPAuth, string) {
	a := HTTPAuth{Text: s}
	f := strings.Fields(s)
	if len(f) != 4 {
		return a, "is not \"METHOD host/path SCHEME CREDENTIAL\" (e.g. \"POST api.openai.com/* bearer openai\"; SCHEME bearer, basic or header:NAME)"
	}
	rule, prob := ParseHTTPRule(f[0] + " " + f[1])
	if prob != "" {
		return a, prob
	}
	rule.Text = f[0] + " " + f[1]
	a.Rule, a.Credential = rule, f[3]
	switch scheme := strings.ToLower(f[2]); {
	case scheme == "bearer":
		a.Scheme, a.Header = "bearer", "Authorization"
	case scheme == "basic":
		a.Scheme, a.Header = "basic", "Authorization"
	case strings.HasPrefix(scheme, "header:") && validToken(f[2][len("header:"):]):
		a.Scheme, a.Header = "header", canonicalHeader(f[2][len("header:"):])
	default:
		return a, "has a scheme other than bearer, basic and header:NAME (NAME a header field name)"
	}
	return a, ""
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func canonicalHeader(s string) string {
	b := []byte(strings.ToLower(s))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

// httpAuth reads http_auth.
func (r reader) httpAuth(k string) []HTTPAuth {
	var out []HTTPAuth
	for _, it := range r.list(k) {
		s, ok := r.str(k, it)
		if !ok {
			continue
		}
		a, prob := ParseHTTPAuth(s)
		if prob != "" {
			r.probs.Add(k, "%q %s", s, prob)
			continue
		}
		out = append(out, a)
	}
	return out
}

// checkHTTPS checks the interception and credential fields together.
func (p *Policy) checkHTTPS(probs *Problems) {
	// (messages name no other field: each binding has its own names)
	const needs = "needs HTTPS interception: turn it on, or give the CA's certificate and key"
	switch {
	case p.HTTPCA != "" && p.HTTPKey == "":
		probs.Add("http_key", "is missing: the CA's certificate needs its private key (PEM)")
	case p.HTTPCA == "" && p.HTTPKey != "":
		probs.Add("http_ca", "is missing: the CA's private key needs its certificate (PEM)")
	}
	if (p.HTTPIntercept || p.HTTPCA != "") && !p.HTTPRules() {
		probs.Add("http_intercept", "means nothing without HTTP rules: the proxy is not started")
	}
	if len(p.HTTPInjectCA) > 0 && !p.Intercepts() {
		probs.Add("http_inject_ca", "%s", needs)
	}
	if p.HTTPCAOut != "" && !p.Intercepts() {
		probs.Add("http_ca_out", "%s", needs)
	}
	if len(p.HTTPAuth) > 0 && !p.Intercepts() && !p.HTTPAuthPlain {
		probs.Add("http_auth", "%s (credentials go over HTTPS to a verified upstream only, unless plain HTTP is allowed explicitly)", needs)
	}
	if p.HTTPAuthPlain && len(p.HTTPAuth) == 0 {
		probs.Add("http_auth_plain", "means nothing without rules that add credentials")
	}
	used := map[string]bool{}
	for _, a := range p.HTTPAuth {
		used[a.Credential] = true
		if _, ok := p.Credentials[a.Credential]; !ok {
			probs.Add("http_auth", "%q names the credential %q, which is not among the credentials", a.Text, a.Credential)
		}
	}
	for name, src := range p.Credentials {
		kind, rest, _ := strings.Cut(src, ":")
		switch {
		case kind == "env" && rest != "" && !strings.ContainsAny(rest, "=\x00"):
		case kind == "file" && strings.HasPrefix(rest, "/"):
		default:
			probs.Add("credentials", "%q: %q is not \"env:VARIABLE\" or \"file:/absolute/path\"", name, src)
		}
		if !used[name] {
			probs.Add("credentials", "%q is used by no rule that adds credentials to requests", name)
		}
	}
}
