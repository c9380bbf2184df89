package policy

import (
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
	if len(p.HTTPPorts) > 0 {
		return p.HTTPPorts
	}
	return DefaultHTTPPorts
}
