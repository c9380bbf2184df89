package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// NetRule is one entry of net_allow or net_deny: a protocol, a destination (a host
// name, resolved when the sandbox is built, or addresses) and ports.
//
// The grammar, one string per rule (or a bare port number):
//
//	[scheme://]destination[:ports]
//	scheme       tcp (default), udp or icmp
//	destination  a host name, an IPv4 or IPv6 address, a CIDR prefix ("10.0.0.0/8"),
//	             "*" (any), or empty (":443" is any host); IPv6 in brackets when
//	             ports follow ("[2606:4700::/32]:443")
//	ports        "*" (any, the default when omitted), or a comma-separated list of
//	             ports and ranges ("22,443", "8000-8005"); icmp takes none
//
// So: "api.openai.com:443", "10.0.0.0/8:443", "[::1]:8080", "udp://1.1.1.1:53",
// "icmp://8.8.8.8", ":443", "443", "*".
type NetRule struct {
	Proto string         `msgpack:"proto"` // "tcp", "udp" or "icmp"
	Host  string         `msgpack:"host,omitempty"`
	Nets  []netip.Prefix `msgpack:"-"`     // addresses given literally (a single address is a /32 or /128)
	Any   bool           `msgpack:"any"`   // every destination
	Ports []PortRange    `msgpack:"ports"` // empty: every port
	Text  string         `msgpack:"rule"`  // as written
}

// PortRange is an inclusive range of ports.
type PortRange struct {
	Lo uint16 `msgpack:"lo"`
	Hi uint16 `msgpack:"hi"`
}

// AnyPort reports whether r covers every port.
func (r NetRule) AnyPort() bool { return len(r.Ports) == 0 }

// HasPort reports whether r covers port.
func (r NetRule) HasPort(port uint16) bool {
	if r.AnyPort() {
		return true
	}
	for _, p := range r.Ports {
		if port >= p.Lo && port <= p.Hi {
			return true
		}
	}
	return false
}

// ParseNetRules parses the rules of field; every problem goes to probs.
func ParseNetRules(field string, items []any, probs *Problems) []NetRule {
	var out []NetRule
	for _, it := range items {
		if n, ok := asInt(it); ok {
			if n < 1 || n > 65535 {
				probs.Add(field, "port %d out of range 1-65535", n)
				continue
			}
			out = append(out, NetRule{Proto: "tcp", Any: true, Ports: []PortRange{{uint16(n), uint16(n)}}, Text: strconv.FormatInt(n, 10)})
			continue
		}
		s, ok := it.(string)
		if !ok {
			probs.Add(field, "%v: want a string or a port number", it)
			continue
		}
		r, err := parseNetRule(s)
		if err != nil {
			probs.Add(field, "%q: %v", s, err)
			continue
		}
		out = append(out, r)
	}
	return out
}

func parseNetRule(s string) (NetRule, error) {
	r := NetRule{Proto: "tcp", Text: s}
	rest := strings.TrimSpace(s)
	if i := strings.Index(rest, "://"); i >= 0 {
		r.Proto = strings.ToLower(rest[:i])
		rest = rest[i+3:]
		switch r.Proto {
		case "tcp", "udp", "icmp":
		default:
			return r, fmt.Errorf("unknown scheme %q (tcp, udp or icmp)", r.Proto)
		}
	}
	if rest == "" {
		return r, fmt.Errorf("no destination")
	}
	dest, ports := rest, ""
	switch {
	case strings.HasPrefix(rest, "["):
		end := strings.Index(rest, "]")
		if end < 0 {
			return r, fmt.Errorf("an unclosed [")
		}
		dest = rest[1:end]
		after := rest[end+1:]
		if after != "" {
			if !strings.HasPrefix(after, ":") {
				return r, fmt.Errorf("want [address]:ports")
			}
			ports = after[1:]
		}
	case strings.Count(rest, ":") == 1:
		dest, ports = rest[:strings.Index(rest, ":")], rest[strings.Index(rest, ":")+1:]
	case strings.Count(rest, ":") > 1:
		// a bare IPv6 address or prefix, no ports
	default:
		if isPortList(rest) && r.Proto != "icmp" {
			dest, ports = "", rest // "443", "22,443"
		}
	}
	if err := r.setDest(strings.TrimSpace(dest)); err != nil {
		return r, err
	}
	ports = strings.TrimSpace(ports)
	if r.Proto == "icmp" {
		if ports != "" {
			return r, fmt.Errorf("icmp has no ports")
		}
		return r, nil
	}
	if ports == "" || ports == "*" {
		return r, nil
	}
	prs, err := parsePortList(ports)
	if err != nil {
		return r, err
	}
	r.Ports = prs
	return r, nil
}

func (r *NetRule) setDest(d string) error {
	switch {
	case d == "" || d == "*":
		r.Any = true
	case strings.Contains(d, "/"):
		p, err := netip.ParsePrefix(d)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR prefix", d)
		}
		r.Nets = []netip.Prefix{p.Masked()}
	default:
		if a, err := netip.ParseAddr(d); err == nil {
			a = a.Unmap()
			r.Nets = []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
			return nil
		}
		if !validHostname(d) {
			return fmt.Errorf("%q is not a host name, an address or a CIDR prefix", d)
		}
		r.Host = strings.ToLower(strings.TrimSuffix(d, "."))
	}
	return nil
}

func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return false
			}
		}
	}
	return true
}

func isPortList(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c == ',' || c == '-' || c == ' ') {
			return false
		}
	}
	return s != ""
}

// parsePortList parses "22,443,8000-8005" into sorted, merged ranges.
func parsePortList(s string) ([]PortRange, error) {
	var out []PortRange
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		}
		if err1 != nil || err2 != nil || a < 1 || b < a {
			return nil, fmt.Errorf("%q is not a port or a range of ports (1-65535)", part)
		}
		out = append(out, PortRange{uint16(a), uint16(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Lo < out[j].Lo })
	merged := out[:1]
	for _, p := range out[1:] {
		last := &merged[len(merged)-1]
		if uint32(p.Lo) <= uint32(last.Hi)+1 {
			if p.Hi > last.Hi {
				last.Hi = p.Hi
			}
			continue
		}
		merged = append(merged, p)
	}
	return merged, nil
}
