//go:build linux

package supervise

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Port virtualization (port_remap): the sandbox binds virtual ports (the policy's
// bind ports), the supervisor binds real ones.
//
//   - bind(fd, addr) on a TCP or UDP inet socket: the address is copied once; a
//     port that is not virtual is EACCES on TCP (what Landlock's bind rules answer;
//     recorded in Denials) and continued on UDP (Landlock governs no UDP port: the
//     kernel decides, as without port_remap). A virtual port v is bound by the
//     supervisor on its duplicate of the socket, with the copy: first on the real
//     port another live socket of this sandbox already has for v (so that one
//     virtual port is one real port for IPv4 and IPv6), else on v itself when v is
//     at least net.ipv4.ip_unprivileged_port_start (the supervisor may be root: it
//     never binds a privileged port for a caller without the capability), else on an
//     ephemeral port (port 0: the kernel's choice). SO_REUSEADDR and SO_REUSEPORT
//     are cleared for that bind (and restored after it), so that a real port is
//     never shared with a socket another sandbox (or anyone) holds: two sandboxes
//     binding the same virtual port get two real ports. Any other error is the
//     kernel's answer. A restarted bind of a socket already bound here for the same
//     virtual port answers 0.
//   - bind on any other socket (unix, netlink, ICMP) is continued: nothing is
//     remapped there, and a thread that swaps the fd or rewrites the address after
//     the check reaches only what the kernel allows without port_remap (Landlock's
//     bind rules, the floor).
//   - getsockname(fd, addr, len) of every socket is performed on the duplicate; a
//     remapped socket's real port is answered as its virtual port; the address
//     (truncated to the caller's length) and the full length are written back as
//     the kernel does.
//   - connect (net.go) to a loopback address (127.0.0.0/8, ::1, mapped, or the
//     unspecified address, which the kernel routes to loopback) on a virtual port
//     for which this sandbox holds a live socket of the same protocol bound to that
//     address or to the wildcard is performed on the real port (it reaches the
//     sandbox's own socket, so no net_allow rule is needed). Other connects go
//     to the net rules (when the sandbox has any) or continue to the kernel's
//     floor.
//
// The supervisor keeps no descriptor of a bound socket (it would keep it open, and
// listening, after the sandbox closed it). It remembers each remapped socket's
// SO_COOKIE (unique for the boot, never reused) and real port; a socket is live
// while the kernel's socket table (sock_diag, NETLINK_SOCK_DIAG) lists a socket
// with that cookie on that port. Live prunes the rest: a mapping goes away when
// its socket is closed by every process holding it, or the run ends.

// PortMap is the port virtualization of one sandbox, shared by all its supervisors.
type PortMap struct {
	virtual map[uint16]bool

	mu      sync.Mutex
	entries []PortMapping
	seq     uint64
}

// PortMapping is one remapped socket.
type PortMapping struct {
	Virtual uint16
	Real    uint16
	Proto   string // "tcp" or "udp"
	Family  int    // AF_INET or AF_INET6
	Addr    netip.Addr
	Cookie  uint64
	seq     uint64
	seen    bool // listed by the kernel once (see liveness)
}

// NewPortMap makes the port virtualization of the given virtual ports.
func NewPortMap(virtual []uint16) *PortMap {
	m := &PortMap{virtual: map[uint16]bool{}}
	for _, p := range virtual {
		if p != 0 {
			m.virtual[p] = true
		}
	}
	return m
}

// Virtual reports whether port is one of the virtual ports.
func (m *PortMap) Virtual(port uint16) bool { return m.virtual[port] }

func (m *PortMap) add(e PortMapping) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	e.seq = m.seq
	for i := range m.entries {
		if m.entries[i].Cookie == e.Cookie {
			m.entries[i] = e
			return
		}
	}
	if len(m.entries) >= maxPortMappings {
		m.entries = m.entries[1:]
	}
	m.entries = append(m.entries, e)
}

// maxPortMappings bounds the remembered sockets (Live prunes the dead ones).
const maxPortMappings = 4096

func (m *PortMap) byCookie(cookie uint64) (PortMapping, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.entries {
		if e.Cookie == cookie {
			return e, true
		}
	}
	return PortMapping{}, false
}

// Live returns the mappings whose sockets are still open, oldest first, and forgets
// the others.
func (m *PortMap) Live() ([]PortMapping, error) {
	m.mu.Lock()
	cands := append([]PortMapping(nil), m.entries...)
	m.mu.Unlock()
	if len(cands) == 0 {
		return nil, nil
	}
	live, err := liveCookies(cands)
	if err != nil {
		return nil, err
	}
	checked := map[uint64]bool{}
	for _, c := range cands {
		checked[c.seq] = true
	}
	var out []PortMapping
	m.mu.Lock()
	kept := m.entries[:0]
	for _, e := range m.entries {
		switch {
		case !checked[e.seq]: // added since: not judged yet
			kept = append(kept, e)
		case live[e.Cookie] == e.Real:
			e.seen = true
			kept = append(kept, e)
			out = append(out, e)
		case e.Proto == "tcp" && !e.seen && !boundListed():
			// a kernel before 6.8 lists no TCP socket that is bound and not yet
			// listening: kept (not reported) until it listens
			kept = append(kept, e)
		}
	}
	m.entries = kept
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out, nil
}

// Ports is {virtual: real} of the live sockets (the first bound, when a virtual
// port has several real ones).
func (m *PortMap) Ports() (map[uint16]uint16, []PortMapping, error) {
	live, err := m.Live()
	if err != nil {
		return nil, nil, err
	}
	out := map[uint16]uint16{}
	for _, e := range live {
		if _, ok := out[e.Virtual]; !ok {
			out[e.Virtual] = e.Real
		}
	}
	return out, live, nil
}

// realFor is the real port of a live socket of this sandbox bound on virtual port v
// (proto: "" any) whose address covers a ("" addr: any); 0 when none.
func (m *PortMap) realFor(v uint16, proto string, a netip.Addr, family int) uint16 {
	live, err := m.Live()
	if err != nil {
		return 0
	}
	for _, e := range live {
		if e.Virtual != v || (proto != "" && e.Proto != proto) {
			continue
		}
		if !a.IsValid() || covers(e, a, family) {
			return e.Real
		}
	}
	return 0
}

// covers: a connect to a (on a socket of family) reaches socket e's address.
func covers(e PortMapping, a netip.Addr, family int) bool {
	b := e.Addr
	switch {
	case b.Unmap() == a.Unmap():
		return true
	case b == netip.IPv4Unspecified():
		return a.Unmap().Is4()
	case b == netip.IPv6Unspecified():
		// a dual-stack listener takes IPv4 too (unless IPV6_V6ONLY: then the
		// connect finds nothing on that port, or a socket of this sandbox on it)
		return true
	}
	return false
}

func portTraps(cfg Config) []Trap {
	if cfg.Ports == nil {
		return nil
	}
	return []Trap{{Syscall: "bind", Arg: -1}}
}

func getsocknameTraps(cfg Config) []Trap {
	if cfg.Ports == nil {
		return nil
	}
	return []Trap{{Syscall: "getsockname", Arg: -1}}
}

// unprivilegedPortStart is the lowest port a process without CAP_NET_BIND_SERVICE
// may bind in the supervisor's network namespace (the sandbox's).
func unprivilegedPortStart() uint16 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 1024
	}
	if n > 65535 {
		return 65535
	}
	return uint16(n)
}

// addrPort reads the port of a copied inet address (at the same offset in
// sockaddr_in and sockaddr_in6) and the address itself when the family says.
func (a *addr) port() (uint16, bool) {
	if a.n < 4 {
		return 0, false
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&a.sa)), 4)
	return binary.BigEndian.Uint16(b[2:4]), true
}

func (a *addr) setPort(p uint16) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&a.sa)), 4)
	binary.BigEndian.PutUint16(b[2:4], p)
}

func cookieOf(fd int) (uint64, error) {
	var c uint64
	l := uint32(8)
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_COOKIE, uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return 0, e
	}
	return c, nil
}

func localAddr(fd int) (netip.Addr, uint16, error) {
	var sa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(sa))
	if _, _, e := unix.Syscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l))); e != 0 {
		return netip.Addr{}, 0, e
	}
	a, p, ok := inetAddr(&sa)
	if !ok {
		return netip.Addr{}, 0, unix.EAFNOSUPPORT
	}
	return a, p, nil
}

// handleBind: bind(fd, addr, addrlen) with port_remap (see the top).
func handleBind(c *call) reply {
	pm := c.s.cfg.Ports
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	if (k.family != unix.AF_INET && k.family != unix.AF_INET6) || (k.proto != "tcp" && k.proto != "udp") {
		return cont() // nothing is remapped: the kernel's own checks (see the top)
	}
	a, err := c.readAddr(c.arg(1), uint64(uint32(c.arg(2))))
	if err != nil {
		return c.failure("read the address", err, unix.EFAULT, unix.EINVAL)
	}
	v, ok := a.port()
	if !ok {
		return fail(unix.EINVAL) // shorter than any inet address: the kernel's answer
	}
	if !pm.Virtual(v) {
		if k.proto == "udp" {
			return cont() // as without port_remap: the kernel decides (Landlock has no UDP rules)
		}
		return deny(unix.EACCES, fmt.Sprintf("tcp bind to port %d (not in net_allow_bind)", v))
	}
	cookie, err := cookieOf(k.fd)
	if err != nil {
		return c.failure("SO_COOKIE", err)
	}
	if e, ok := pm.byCookie(cookie); ok && e.Virtual == v {
		if _, p, err := localAddr(k.fd); err == nil && p == e.Real {
			return ret(0) // a restarted bind this supervisor already performed
		}
	}
	if !c.valid() {
		return gone()
	}
	cands := []uint16{}
	if real := pm.realFor(v, "", netip.Addr{}, 0); real != 0 {
		cands = append(cands, real)
	}
	if v >= unprivilegedPortStart() {
		cands = append(cands, v)
	}
	cands = append(cands, 0)
	// exclusive: no sharing of a real port through SO_REUSEADDR or SO_REUSEPORT
	reuseAddr, _ := unix.GetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEADDR)
	reusePort, _ := unix.GetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT)
	unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 0)
	unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 0)
	var e unix.Errno
	for _, cand := range cands {
		a.setPort(cand)
		p, n := a.ptr()
		_, _, e = unix.Syscall(unix.SYS_BIND, uintptr(k.fd), uintptr(p), uintptr(n))
		if e != unix.EADDRINUSE && e != unix.EACCES {
			break
		}
	}
	if reuseAddr != 0 {
		unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, reuseAddr)
	}
	if reusePort != 0 {
		unix.SetsockoptInt(k.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, reusePort)
	}
	if e != 0 {
		return fail(e)
	}
	ip, real, err := localAddr(k.fd)
	if err != nil {
		return c.failure("getsockname", err)
	}
	pm.add(PortMapping{Virtual: v, Real: real, Proto: k.proto, Family: k.family, Addr: ip, Cookie: cookie})
	return ret(0)
}

// handleGetsockname: getsockname(fd, addr, addrlen), performed on the duplicate.
func handleGetsockname(c *call) reply {
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	var lb [4]byte
	if err := c.read(c.arg(2), lb[:]); err != nil {
		return c.failure("read the length", err, unix.EFAULT)
	}
	ulen := int32(binary.NativeEndian.Uint32(lb[:]))
	if ulen < 0 {
		return fail(unix.EINVAL)
	}
	var sa unix.RawSockaddrAny
	klen := uint32(unsafe.Sizeof(sa))
	if _, _, e := unix.Syscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&klen))); e != 0 {
		return fail(e)
	}
	if sa.Addr.Family == unix.AF_INET || sa.Addr.Family == unix.AF_INET6 {
		if cookie, err := cookieOf(fd); err == nil {
			if e, ok := c.s.cfg.Ports.byCookie(cookie); ok {
				a := &addr{sa: sa, n: int(klen)}
				if p, ok := a.port(); ok && p == e.Real {
					a.setPort(e.Virtual)
					sa = a.sa
				}
			}
		}
	}
	if !c.valid() {
		return gone()
	}
	n := min(uint32(ulen), klen)
	if n > 0 {
		if err := c.write(c.arg(1), unsafe.Slice((*byte)(unsafe.Pointer(&sa)), n)); err != nil {
			return c.failure("write the address", err, unix.EFAULT)
		}
	}
	binary.NativeEndian.PutUint32(lb[:], klen)
	if err := c.write(c.arg(2), lb[:]); err != nil {
		return c.failure("write the length", err, unix.EFAULT)
	}
	return ret(0)
}

// remapConnect rewrites a's port to the real port when a connect on k names a
// loopback address and a virtual port of a live socket of this sandbox (see the top).
func (c *call) remapConnect(k sock, a *addr) bool {
	pm := c.s.cfg.Ports
	if pm == nil || a == nil || (k.proto != "tcp" && k.proto != "udp") {
		return false
	}
	ip, port, inet := inetAddr(&a.sa)
	if !inet || !pm.Virtual(port) || (ip.Is4() && a.n < unix.SizeofSockaddrInet4) || (ip.Is6() && a.n < 24) {
		return false
	}
	d := dialed(ip)
	if !d.IsLoopback() {
		return false
	}
	real := pm.realFor(port, k.proto, ip, k.family)
	if ip.IsUnspecified() {
		real = pm.realFor(port, k.proto, d, k.family)
	}
	if real == 0 {
		return false
	}
	a.setPort(real)
	return true
}

// ---- sock_diag ----

// The uapi structures of <linux/inet_diag.h>.
type inetDiagSockID struct {
	Sport, Dport [2]byte
	Src, Dst     [16]byte
	If           uint32
	Cookie       [2]uint32
}

type inetDiagReqV2 struct {
	Family, Protocol, Ext, Pad uint8
	States                     uint32
	ID                         inetDiagSockID
}

type inetDiagMsg struct {
	Family, State, Timer, Retrans uint8
	ID                            inetDiagSockID
	Expires, Rqueue, Wqueue, UID  uint32
	Inode                         uint32
}

const (
	tcpListen        = 10
	tcpBoundInactive = 13 // Linux 6.8: sockets bound and not listening
)

// liveCookies returns, for the sockets of cands the kernel still lists, their
// cookie -> local port.
func liveCookies(cands []PortMapping) (map[uint64]uint16, error) {
	type key struct {
		family int
		proto  string
	}
	want := map[key]bool{}
	for _, e := range cands {
		want[key{e.Family, e.Proto}] = true
	}
	out := map[uint64]uint16{}
	for k := range want {
		proto, states := uint8(unix.IPPROTO_TCP), uint32(1<<tcpListen|1<<tcpBoundInactive)
		if k.proto == "udp" {
			proto, states = unix.IPPROTO_UDP, ^uint32(0)
		}
		if err := diagDump(uint8(k.family), proto, states, func(m *inetDiagMsg) {
			out[uint64(m.ID.Cookie[0])|uint64(m.ID.Cookie[1])<<32] = binary.BigEndian.Uint16(m.ID.Sport[:])
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var (
	boundOnce sync.Once
	boundOK   bool
)

// boundListed reports whether sock_diag lists TCP sockets that are bound and not
// listening (Linux 6.8), probed once with a socket of our own.
func boundListed() bool {
	boundOnce.Do(func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		if unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}) != nil {
			return
		}
		cookie, err := cookieOf(fd)
		if err != nil {
			return
		}
		diagDump(unix.AF_INET, unix.IPPROTO_TCP, 1<<tcpBoundInactive, func(m *inetDiagMsg) {
			if uint64(m.ID.Cookie[0])|uint64(m.ID.Cookie[1])<<32 == cookie {
				boundOK = true
			}
		})
	})
	return boundOK
}

func diagDump(family, proto uint8, states uint32, each func(*inetDiagMsg)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	type request struct {
		h unix.NlMsghdr
		r inetDiagReqV2
	}
	req := request{
		h: unix.NlMsghdr{Len: uint32(unsafe.Sizeof(request{})), Type: unix.SOCK_DIAG_BY_FAMILY, Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: 1},
		r: inetDiagReqV2{Family: family, Protocol: proto, States: states},
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&req)), unsafe.Sizeof(req))
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return nil
			}
			if len(m.Data) >= int(unsafe.Sizeof(inetDiagMsg{})) {
				each((*inetDiagMsg)(unsafe.Pointer(&m.Data[0])))
			}
		}
	}
}
