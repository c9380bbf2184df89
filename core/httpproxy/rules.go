// Package httpproxy is a sandbox's HTTP rule proxy: the supervisor sends the
// sandbox's TCP connects to the HTTP ports here (core/supervise/httpredirect.go),
// and each request is checked against the policy's http_deny and http_allow rules
// before it is sent on; TLS is allowed, or not, by its server name (SNI).
package httpproxy

import (
	"fmt"
	"path"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
)

// Rules decide requests. The first deny rule that matches refuses; else, with
// allow rules, the first allow rule that matches lets through and no match
// refuses; without allow rules everything not denied passes.
type Rules struct {
	Allow, Deny []policy.HTTPRule
}

// Match reports whether pattern (with * for any run of characters) matches s.
func Match(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func (r *Rules) matches(rule policy.HTTPRule, method, host, p string) bool {
	return (rule.Method == "*" || Match(rule.Method, method)) && Match(rule.Host, host) &&
		(rule.Path == "*" || Match(rule.Path, p))
}

// Decide judges a request (method upper case, host lower case without port, path
// cleaned by CleanPath): allowed, and the deciding rule or why none did.
func (r *Rules) Decide(method, host, p string) (bool, string) {
	for _, d := range r.Deny {
		if r.matches(d, method, host, p) {
			return false, fmt.Sprintf("http_deny %q", d.Text)
		}
	}
	if len(r.Allow) == 0 {
		return true, "no http_allow list"
	}
	for _, a := range r.Allow {
		if r.matches(a, method, host, p) {
			return true, fmt.Sprintf("http_allow %q", a.Text)
		}
	}
	return false, "no http_allow rule matches"
}

// everyRequest reports whether a rule covers every method and path.
func everyRequest(rule policy.HTTPRule) bool {
	return rule.Method == "*" && (rule.Path == "*" || rule.Path == "/*")
}

// DecideTLS judges TLS to host, whose method and path cannot be seen: a deny rule
// that covers every request to the host refuses; else, with allow rules, one that
// names the host (whatever its method and path) lets through.
func (r *Rules) DecideTLS(host string) (bool, string) {
	for _, d := range r.Deny {
		if everyRequest(d) && Match(d.Host, host) {
			return false, fmt.Sprintf("http_deny %q", d.Text)
		}
	}
	if len(r.Allow) == 0 {
		return true, "no http_allow list"
	}
	for _, a := range r.Allow {
		if Match(a.Host, host) {
			return true, fmt.Sprintf("http_allow %q (host only: TLS is not intercepted)", a.Text)
		}
	}
	return false, "no http_allow rule names the host"
}

// CleanPath is the path rules see: percent-decoded (by the caller: url.URL.Path),
// dot segments and repeated slashes removed, a trailing slash kept.
func CleanPath(p string) string {
	if p == "" || p == "*" {
		return "/"
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// CleanHost is the host rules see: lower case, without a port or a trailing dot.
func CleanHost(h string) string {
	h = strings.ToLower(h)
	if strings.HasPrefix(h, "[") {
		if i := strings.Index(h, "]"); i > 0 {
			return h[1:i]
		}
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}
