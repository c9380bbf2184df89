package policy

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseNetRules(t *testing.T) {
	for _, c := range []struct {
		in    any
		proto string
		host  string
		nets  string
		any   bool
		ports string
	}{
		{"api.openai.com:443", "tcp", "api.openai.com", "", false, "443-443"},
		{"api.openai.com", "tcp", "api.openai.com", "", false, ""},
		{"Example.COM.:22,443", "tcp", "example.com", "", false, "22-22 443-443"},
		{":443", "tcp", "", "", true, "443-443"},
		{"443", "tcp", "", "", true, "443-443"},
		{int64(8080), "tcp", "", "", true, "8080-8080"},
		{"*", "tcp", "", "", true, ""},
		{"*:*", "tcp", "", "", true, ""},
		{"10.0.0.0/8:443", "tcp", "", "10.0.0.0/8", false, "443-443"},
		{"10.1.2.3/8", "tcp", "", "10.0.0.0/8", false, ""},
		{"[2606:4700::/32]:443", "tcp", "", "2606:4700::/32", false, "443-443"},
		{"[::1]:8000-8005,8001,9000", "tcp", "", "::1/128", false, "8000-8005 9000-9000"},
		{"::1", "tcp", "", "::1/128", false, ""},
		{"::ffff:1.2.3.4", "tcp", "", "1.2.3.4/32", false, ""},
		{"udp://1.1.1.1:53", "udp", "", "1.1.1.1/32", false, "53-53"},
		{"icmp://8.8.8.8", "icmp", "", "8.8.8.8/32", false, ""},
		{"UDP://:53", "udp", "", "", true, "53-53"},
	} {
		var probs Problems
		rs := ParseNetRules("net_allow", []any{c.in}, &probs)
		if len(probs) > 0 || len(rs) != 1 {
			t.Errorf("%v: %v", c.in, probs)
			continue
		}
		r := rs[0]
		var nets, ports []string
		for _, n := range r.Nets {
			nets = append(nets, n.String())
		}
		for _, p := range r.Ports {
			ports = append(ports, itoa(p.Lo)+"-"+itoa(p.Hi))
		}
		if r.Proto != c.proto || r.Host != c.host || strings.Join(nets, " ") != c.nets || r.Any != c.any || strings.Join(ports, " ") != c.ports {
			t.Errorf("%v: got %+v (nets %v ports %v)", c.in, r, nets, ports)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func TestParseNetRulesListsEveryProblem(t *testing.T) {
	var probs Problems
	ParseNetRules("net_allow", []any{"ftp://x", "host:99999", "bad host!:1", "icmp://1.2.3.4:7", "[::1", int64(0), 3.5, "10.0.0.0/33"}, &probs)
	if len(probs) != 8 {
		t.Fatalf("want 8 problems, got %d: %v", len(probs), probs)
	}
}
