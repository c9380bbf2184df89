package policy

import (
	"strings"
	"testing"
)

// Interception and credential fields are checked together: each refusal names
// its field and why.
func TestHTTPSFieldsTogether(t *testing.T) {
	allow := []any{"GET a.test"}
	for _, c := range []struct {
		m     map[string]any
		field string
		want  string
	}{
		{map[string]any{"http_allow": allow, "http_ca": "/c"}, "http_key", "is missing"},
		{map[string]any{"http_allow": allow, "http_key": "/c"}, "http_ca", "is missing"},
		{map[string]any{"http_intercept": true}, "http_intercept", "without HTTP rules"},
		{map[string]any{"http_allow": allow, "http_inject_ca": []any{"/etc/ssl/x.pem"}}, "http_inject_ca", "needs HTTPS interception"},
		{map[string]any{"http_allow": allow, "http_ca_out": "/tmp/ca.pem"}, "http_ca_out", "needs HTTPS interception"},
		{map[string]any{"http_allow": allow, "credentials": map[string]any{"k": "env:K"}, "http_auth": []any{"GET a.test bearer k"}}, "http_auth", "needs HTTPS interception"},
		{map[string]any{"http_allow": allow, "http_intercept": true, "http_auth": []any{"GET a.test bearer k"}}, "http_auth", "which is not among the credentials"},
		{map[string]any{"http_allow": allow, "http_intercept": true, "credentials": map[string]any{"k": "K"}, "http_auth": []any{"GET a.test bearer k"}}, "credentials", "is not \"env:VARIABLE\""},
		{map[string]any{"http_allow": allow, "http_intercept": true, "credentials": map[string]any{"k": "file:rel"}, "http_auth": []any{"GET a.test bearer k"}}, "credentials", "is not \"env:VARIABLE\""},
		{map[string]any{"http_allow": allow, "http_intercept": true, "credentials": map[string]any{"k": "env:K"}}, "credentials", "used by no rule"},
		{map[string]any{"http_allow": allow, "http_auth_plain": true}, "http_auth_plain", "means nothing without rules"},
	} {
		_, probs := Decode(c.m)
		ok := false
		for _, p := range probs {
			if p.Field == c.field && strings.Contains(p.Message, c.want) {
				ok = true
			}
			for _, k := range []string{"http_", "fs_denied"} { // names differ by binding: never in a message
				if strings.Contains(p.Message, k) {
					t.Errorf("%s: the message names a field: %q", p.Field, p.Message)
				}
			}
		}
		if !ok {
			t.Errorf("%v: want %s: %q, got %v", c.m, c.field, c.want, probs)
		}
	}
	// plain-HTTP credentials with the explicit opt-in; 443 added by interception
	p, probs := Decode(map[string]any{"http_allow": allow, "http_auth_plain": true, "credentials": map[string]any{"k": "env:K"}, "http_auth": []any{"GET a.test bearer k"}})
	if len(probs) != 0 || !p.HTTPAuthPlain {
		t.Errorf("opt-in: %v", probs)
	}
	p, _ = Decode(map[string]any{"http_allow": allow, "http_intercept": true, "http_ports": []any{int64(8080)}})
	if got := p.HTTPPortsOrDefault(); len(got) != 2 || got[1] != 443 {
		t.Errorf("ports %v", got)
	}
}
