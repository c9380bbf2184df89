package plan

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/supervise"
)

// NetPlan is what the policy's network rules need from the kernel and the
// supervisor. Landlock enforces TCP ports (the floor, always); the supervisor
// enforces everything about a destination's address, UDP and ICMP, and a deny
// list. A policy the floor alone enforces (ports, any host) traps nothing.
type NetPlan struct {
	wanted       bool     // inet sockets at all
	connectPorts []uint16 // Landlock TCP connect rules
	anyConnect   bool     // Landlock allows every TCP connect (the supervisor, if any, decides)
	udp, icmp    bool     // the filter allows such sockets
	sup          *supervise.NetPolicy
	ports        *supervise.PortMap  // port_remap (ports.go)
	resolved     map[string][]string // host name -> addresses found at build
	report       *NetReport
	http         *httpPlan // HTTP rules: the sandbox's proxy (http.go)
	byAddress    bool      // the rules themselves need the supervisor (not only the HTTP proxy)
}

// NetReport is the network part of the isolation report.
type NetReport struct {
	Mode       string              `msgpack:"mode"` // "none", "allow" or "deny"
	Rules      []string            `msgpack:"rules"`
	Supervised bool                `msgpack:"supervised"` // destinations checked by the supervisor
	Floor      string              `msgpack:"floor"`      // what the kernel enforces underneath
	Resolved   map[string][]string `msgpack:"resolved,omitempty"`
	Notes      []string            `msgpack:"notes,omitempty"`      // what the rules allow that this host will not do
	PortRemap  bool                `msgpack:"port_remap,omitempty"` // binds of the bind ports remapped (ports.go)
	HTTP       *HTTPReport         `msgpack:"http,omitempty"`       // HTTP rules: connects to the HTTP ports go to the proxy (http.go)
}

// maxFloorPorts: more TCP ports than this in the rules make the Landlock floor
// "every port" (one rule per port; the supervisor checks the ranges).
const maxFloorPorts = 256

// resolveTimeout bounds the look-up of each host name at build.
const resolveTimeout = 5 * time.Second

func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, ok := testHost(host); ok {
		return a, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// planNet resolves the rules' host names (every failure is a problem) and decides
// who enforces what.
func planNet(p *policy.Policy, probs *policy.Problems) NetPlan {
	np := NetPlan{resolved: map[string][]string{}}
	deny := len(p.NetDeny) > 0
	rules := p.NetAllow
	if deny {
		rules = p.NetDeny
	}
	if p.NetAllowUDP && !deny {
		rules = append(slices.Clone(rules), policy.NetRule{Proto: "udp", Any: true, Text: "net_allow_udp"})
	}
	rep := &NetReport{Mode: "none", Rules: []string{}}
	np.report = rep
	if deny {
		rep.Mode = "deny"
	} else if len(rules) > 0 {
		rep.Mode = "allow"
	}
	np.wanted = deny || len(rules) > 0 || len(p.NetAllowBind) > 0

	var dests []supervise.NetDest
	supervised := deny
	floor := map[uint16]bool{}
	for _, r := range rules {
		rep.Rules = append(rep.Rules, r.Text)
		d := supervise.NetDest{Proto: r.Proto, Host: r.Host, Nets: r.Nets, Any: r.Any, Text: r.Text}
		for _, pr := range r.Ports {
			d.Ports = append(d.Ports, [2]uint16{pr.Lo, pr.Hi})
		}
		if r.Host != "" {
			ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
			addrs, err := lookupHost(ctx, r.Host)
			cancel()
			if err != nil || len(addrs) == 0 {
				probs.Add(field(deny), "%q: the host name does not resolve here: %v", r.Text, err)
				continue
			}
			for _, a := range addrs {
				a = a.Unmap()
				d.Nets = append(d.Nets, netip.PrefixFrom(a, a.BitLen()))
				np.resolved[r.Host] = append(np.resolved[r.Host], a.String())
			}
		}
		dests = append(dests, d)
		if deny {
			continue
		}
		switch r.Proto {
		case "tcp":
			if !r.Any {
				supervised = true // by address: the floor is its ports
			}
			if r.AnyPort() {
				np.anyConnect = true
			}
			for _, pr := range r.Ports {
				for port := uint32(pr.Lo); port <= uint32(pr.Hi) && len(floor) <= maxFloorPorts; port++ {
					floor[uint16(port)] = true
				}
			}
		case "udp":
			np.udp = true
			if !r.Any || !r.AnyPort() {
				supervised = true
			}
		case "icmp":
			np.icmp = true
			if !r.Any {
				supervised = true
			}
		}
	}
	if len(floor) > maxFloorPorts {
		np.anyConnect, supervised = true, true
	}
	if deny {
		np.anyConnect, np.udp, np.icmp = true, true, true
	}
	if !np.anyConnect {
		for port := range floor {
			np.connectPorts = append(np.connectPorts, port)
		}
		sort.Slice(np.connectPorts, func(i, j int) bool { return np.connectPorts[i] < np.connectPorts[j] })
	}
	np.byAddress = supervised
	if planHTTP(p, &np, probs) {
		supervised = true // every connect: those to the HTTP ports go to the proxy
	}
	if supervised {
		np.sup = &supervise.NetPolicy{Deny: deny, Rules: dests, Resolve: lookupHost}
	}
	rep.Supervised = supervised
	switch {
	case !np.wanted:
		rep.Floor = "no inet sockets (seccomp)"
	case np.anyConnect:
		rep.Floor = "landlock: every TCP port"
	default:
		rep.Floor = fmt.Sprintf("landlock: TCP connect to ports %v", np.connectPorts)
	}
	if len(np.resolved) > 0 {
		rep.Resolved = np.resolved
	}
	if np.icmp && !deny {
		gid := int64(os.Getegid())
		if p.GID != nil {
			gid = int64(*p.GID)
		}
		if note := pingNote(gid); note != "" {
			rep.Notes = append(rep.Notes, note)
		}
	}
	np.ports = planPorts(p, probs)
	rep.PortRemap = np.ports != nil
	return np
}

// pingNote says why icmp:// rules reach nothing here, if they do not: ping sockets
// need the sandbox's group (gid, as the host sees it: the sandbox's user namespace
// maps this process's group to itself) inside net.ipv4.ping_group_range, which only
// the host's administrator can widen.
func pingNote(gid int64) string {
	const sysctl = "/proc/sys/net/ipv4/ping_group_range"
	b, err := os.ReadFile(sysctl)
	if err != nil {
		return ""
	}
	var lo, hi int64
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return ""
	}
	if gid >= lo && gid <= hi {
		return ""
	}
	return fmt.Sprintf("icmp rules reach nothing on this host: ping sockets need group %d inside net.ipv4.ping_group_range (%q)", gid, strings.TrimSpace(string(b)))
}

func field(deny bool) string {
	if deny {
		return "net_deny"
	}
	return "net_allow"
}

// planPorts is the sandbox's port map (nil without port_remap): the policy's bind
// ports are virtual, the supervisor binds real ones (core/supervise/ports.go).
func planPorts(p *policy.Policy, probs *policy.Problems) *supervise.PortMap {
	if !p.PortRemap {
		return nil
	}
	if len(p.NetAllowBind) == 0 {
		probs.Add("port_remap", "needs the virtual ports: give them as net_allow_bind")
		return nil
	}
	return supervise.NewPortMap(p.NetAllowBind)
}

// Ports is the sandbox's port map (nil without port_remap), shared by every zygote,
// run, session and fork of the sandbox.
func (np NetPlan) Ports() *supervise.PortMap { return np.ports }

// Wanted: the sandbox may have inet sockets at all.
func (np NetPlan) Wanted() bool { return np.wanted }

// Floor is what the kernel enforces for a sandbox without rules by destination, as
// supervisor rules: TCP to the Landlock connect ports (every port when it allows
// any), UDP and ICMP anywhere when the filter allows such sockets (core/engine's
// handlers.go: connect and sendto the supervisor performs for the caller, which
// Landlock does not see).
func (np NetPlan) Floor() *supervise.NetPolicy {
	tcp := supervise.NetDest{Proto: "tcp", Any: true, Text: "the Landlock floor"}
	if !np.anyConnect {
		if len(np.connectPorts) == 0 {
			tcp.Any = false // no TCP connect at all
		}
		for _, p := range np.connectPorts {
			tcp.Ports = append(tcp.Ports, [2]uint16{p, p})
		}
	}
	pol := &supervise.NetPolicy{}
	if tcp.Any {
		pol.Rules = append(pol.Rules, tcp)
	}
	if np.udp {
		pol.Rules = append(pol.Rules, supervise.NetDest{Proto: "udp", Any: true, Text: "udp"})
	}
	if np.icmp {
		pol.Rules = append(pol.Rules, supervise.NetDest{Proto: "icmp", Any: true, Text: "icmp"})
	}
	return pol
}
