package engine

import (
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	"github.com/sandtrap/sandtrap/core/supervise"
)

// Port virtualization (port_remap): the policy's bind ports are virtual, the
// supervisor binds real ones (core/supervise/ports.go), shared by every zygote,
// run, session and fork of the sandbox; the "ports" op answers {virtual: real}.

// planPorts is the sandbox's port map (nil without port_remap).
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

// PortSocket is one remapped socket in the ports op's answer.
type PortSocket struct {
	Virtual uint16 `msgpack:"virtual"`
	Real    uint16 `msgpack:"real"`
	Proto   string `msgpack:"proto"`   // "tcp" | "udp"
	Address string `msgpack:"address"` // as bound (real), e.g. "0.0.0.0", "::1"
}

// Ports returns {virtual: real} for the sockets of the sandbox bound now (the
// first bound when a virtual port has several real ones) and every such socket.
func (s *Sandbox) Ports() (map[uint16]uint16, []PortSocket, error) {
	out := map[uint16]uint16{}
	socks := []PortSocket{}
	if s.net.ports == nil {
		return out, socks, nil
	}
	m, live, err := s.net.ports.Ports()
	if err != nil {
		return nil, nil, errorf(KindInternal, "ports: %v", err)
	}
	for _, e := range live {
		socks = append(socks, PortSocket{Virtual: e.Virtual, Real: e.Real, Proto: e.Proto, Address: e.Addr.String()})
	}
	return m, socks, nil
}

func init() {
	RegisterOp("ports", func(s *Sandbox, req []byte) ([]byte, string) {
		if m, ok := rawmsg.Value(req).Fields(); ok {
			for k := range m {
				if k != "op" && k != "tag" { // bindings tag every request (nothing to cancel here)
					return ErrorResponse(errorf(KindInvalidRequest, "invalid request: ports takes no %q", k)), KindInvalidRequest
				}
			}
		}
		m, socks, err := s.Ports()
		if err != nil {
			return ErrorResponse(err), KindInternal
		}
		return Encode(map[string]any{"success": true, "ports": m, "sockets": socks}), ""
	})
}
