package engine

import (
	"github.com/sandtrap/sandtrap/core/rawmsg"
)

// Port virtualization (port_remap): the policy's bind ports are virtual, the
// supervisor binds real ones (core/supervise/ports.go; core/plan plans it), shared
// by every zygote, run, session and fork of the sandbox; the "ports" op answers
// {virtual: real}.

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
	pm := s.in.Net.Ports()
	if pm == nil {
		return out, socks, nil
	}
	m, live, err := pm.Ports()
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
