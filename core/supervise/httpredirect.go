//go:build linux

package supervise

import (
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HTTP rules: the sandbox's TCP connects to the HTTP ports go to the engine's
// proxy (core/httpproxy), whatever address they name, and whether or not the
// program honours a proxy variable.
//
// connect(fd, addr) on a TCP inet socket to a port of Ports (or to the proxy's own
// address: a program using it as its proxy) is performed, as every supervised
// connect, on the supervisor's duplicate of the socket, with the copied address
// changed to the proxy's listener on loopback (127.0.0.1, ::1, or ::ffff:127.0.0.1
// for a v4-mapped address on an IPv6 socket). Before that, the socket is bound by
// the supervisor to an ephemeral port of that loopback address (unless the caller
// bound it already), and the proxy is told (Expect) that a connection from that
// address and port is the caller's, headed for the original destination: the
// proxy serves announced connections only, and learns the destination's port (and,
// for the isolation report, address) from the announcement, not from the sandbox.
// No net_allow rule is consulted for such a connect: the proxy's rules decide.
//
// A denial the proxy makes later (a request refused) is recorded here as a call
// "http" with the caller's run (Caller.Deny).

// HTTPRedirect sends connects to HTTP ports to the proxy.
type HTTPRedirect struct {
	Ports  map[uint16]bool
	Proxy4 netip.AddrPort // the proxy's IPv4 listener (127.0.0.1)
	Proxy6 netip.AddrPort // its IPv6 listener (::1); invalid: none
	// Expect is told each redirected connect before it is performed: the source
	// address the proxy will see, the destination the caller named, the caller.
	Expect func(src, dst netip.AddrPort, who Caller) `json:"-"`
}

// Caller is the sandbox process a redirected connect came from.
type Caller struct {
	s   *Supervisor
	ino uint64 // its pid namespace (0: not attributed)
}

// Deny records a refusal of the proxy for the caller: in the sandbox's log and in
// its run's, as a call "http" answered EACCES.
func (w Caller) Deny(detail string) {
	if w.s == nil {
		return
	}
	w.s.denials.add("http", detail, unix.EACCES)
	if w.ino == 0 {
		return
	}
	s := w.s
	s.runs.mu.Lock()
	r := s.runs.attached[w.ino]
	if r == nil && len(s.runs.unresolved) > 0 {
		s.resolveAllLocked()
		r = s.runs.attached[w.ino]
	}
	s.runs.mu.Unlock()
	if r != nil {
		r.log.add("http", detail, unix.EACCES)
	}
}

func (h *HTTPRedirect) redirected(a netip.Addr, port uint16) bool {
	ap := netip.AddrPortFrom(a.Unmap(), port)
	return h.Ports[port] || ap == h.Proxy4 || (h.Proxy6.IsValid() && ap == h.Proxy6)
}

// redirectHTTP rewrites a (a connect of k) to the proxy when it goes to an HTTP
// port; true when it did. A failure to prepare the socket is the reply.
func (c *call) redirectHTTP(k sock, a *addr) (bool, *reply) {
	h := c.s.cfg.HTTP
	if h == nil || a == nil || k.proto != "tcp" {
		return false, nil
	}
	ip, port, inet := inetAddr(&a.sa)
	if !inet || (ip.Is4() && a.n < unix.SizeofSockaddrInet4) || (ip.Is6() && a.n < 24) || !h.redirected(dialed(ip), port) {
		return false, nil
	}
	dst := netip.AddrPortFrom(dialed(ip), port)
	var to netip.AddrPort
	mapped := false
	switch {
	case k.family == unix.AF_INET:
		to = h.Proxy4
	case ip.Is4In6():
		to, mapped = h.Proxy4, true
	case h.Proxy6.IsValid():
		to = h.Proxy6
	default:
		r := deny(unix.ENETUNREACH, fmt.Sprintf("tcp %s (the HTTP proxy has no IPv6 listener on this host)", dst))
		return false, &r
	}
	loop := to.Addr()
	if mapped {
		loop = netip.AddrFrom16(loop.As16()) // ::ffff:127.0.0.1
	}
	src, r := c.bindLoopback(k, loop)
	if r != nil {
		return false, r
	}
	who := Caller{s: c.s}
	if c.s.attributes.Load() {
		if ino, ok := c.callerNS(); ok {
			who.ino = ino
		}
	}
	h.Expect(src, dst, who)
	target := netip.AddrPortFrom(loop, to.Port())
	*a = sockaddrOf(k.family, target)
	return true, nil
}

// bindLoopback binds k to an ephemeral port of loop unless it is bound already,
// and returns the address the proxy will see it connect from.
func (c *call) bindLoopback(k sock, loop netip.Addr) (netip.AddrPort, *reply) {
	cur, port, err := localAddr(k.fd)
	if err != nil {
		r := c.failure("getsockname", err)
		return netip.AddrPort{}, &r
	}
	if port != 0 {
		if cur.IsUnspecified() {
			cur = loop // the kernel picks the loopback address to reach the proxy
		}
		return netip.AddrPortFrom(cur.Unmap(), port), nil
	}
	sa := sockaddrOf(k.family, netip.AddrPortFrom(loop, 0))
	p, n := sa.ptr()
	if _, _, e := unix.Syscall(unix.SYS_BIND, uintptr(k.fd), uintptr(p), uintptr(n)); e != 0 {
		r := fail(e)
		return netip.AddrPort{}, &r
	}
	got, port, err := localAddr(k.fd)
	if err != nil {
		r := c.failure("getsockname", err)
		return netip.AddrPort{}, &r
	}
	return netip.AddrPortFrom(got.Unmap(), port), nil
}

// sockaddrOf is ap as a socket address of family.
func sockaddrOf(family int, ap netip.AddrPort) addr {
	var a addr
	var pb [2]byte
	pb[0], pb[1] = byte(ap.Port()>>8), byte(ap.Port())
	port := *(*uint16)(unsafe.Pointer(&pb[0]))
	if family == unix.AF_INET {
		in := (*unix.RawSockaddrInet4)(unsafe.Pointer(&a.sa))
		in.Family = unix.AF_INET
		in.Port = port
		in.Addr = ap.Addr().Unmap().As4()
		a.n = unix.SizeofSockaddrInet4
		return a
	}
	in := (*unix.RawSockaddrInet6)(unsafe.Pointer(&a.sa))
	in.Family = unix.AF_INET6
	in.Port = port
	in.Addr = ap.Addr().As16()
	a.n = unix.SizeofSockaddrInet6
	return a
}
