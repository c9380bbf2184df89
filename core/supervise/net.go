//go:build linux

package supervise

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Network by destination: where inet sockets may connect and send.
//
// Landlock sees TCP ports only; the supervisor sees the address, on every call that
// names a peer: connect, and sendto/sendmsg/sendmmsg (an address in a datagram, or
// TCP Fast Open, which is refused). Such a call is never continued: a thread of the
// child could swap the fd for another socket, or rewrite the address, between the
// check and the kernel's run of the call. Every trapped call is performed here, on
// the supervisor's duplicate of the socket (pinned: the same open file description
// whatever the fd number comes to name), with the address and data copied once,
// checked, and passed from the copy. That holds for unix sockets too (their fd could
// be swapped for an inet one): their path addresses are resolved in the caller's
// root and cwd (RESOLVE_IN_ROOT, as inotify_add_watch) and reached through the
// resolved inode, with the caller's credentials when the supervisor has more.

// NetPolicy is where inet sockets may go.
type NetPolicy struct {
	// Deny: Rules are what is refused (everything else is allowed); else what is
	// allowed (everything else is refused).
	Deny  bool
	Rules []NetDest
	// Resolve looks a host name up again (a destination no rule matches makes the
	// rules with host names be resolved again, at most once per refreshEvery); nil:
	// never.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error) `json:"-"`

	mu        sync.RWMutex
	refreshed time.Time
}

// NetDest is one destination rule.
type NetDest struct {
	Proto string         // "tcp", "udp" or "icmp"
	Host  string         // the host name Nets were resolved from ("": addresses given)
	Nets  []netip.Prefix // empty with Any
	Any   bool           // every address
	Ports [][2]uint16    // inclusive ranges; empty: any port (icmp: none)
	Text  string         // the rule as written (for Denials)
}

const refreshEvery = time.Second

func (d *NetDest) matches(proto string, a netip.Addr, port uint16) bool {
	if d.Proto != proto {
		return false
	}
	if !d.Any {
		in := false
		for _, n := range d.Nets {
			if n.Contains(a) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	if len(d.Ports) == 0 || proto == "icmp" {
		return true
	}
	for _, r := range d.Ports {
		if port >= r[0] && port <= r[1] {
			return true
		}
	}
	return false
}

// Allowed decides a destination: with an allow list, a matching rule allows; with a
// deny list, a matching rule refuses — for the address and for an IPv4 address an
// IPv6 one carries (mapped, compatible, NAT64, 6to4), which may be where it goes.
// It returns the deciding rule's text ("" when none matched).
func (p *NetPolicy) Allowed(proto string, a netip.Addr, port uint16) (bool, string) {
	a = dialed(a)
	p.mu.RLock()
	defer p.mu.RUnlock()
	cands := []netip.Addr{a}
	if p.Deny {
		if v4, ok := embeddedV4(a); ok {
			cands = append(cands, v4)
		}
	}
	for i := range p.Rules {
		for _, c := range cands {
			if p.Rules[i].matches(proto, c, port) {
				return !p.Deny, p.Rules[i].Text
			}
		}
	}
	return p.Deny, ""
}

// dialed is the address a connect or send to a reaches: the unspecified address is
// this host (the kernel routes it to loopback), an IPv4-mapped IPv6 one is IPv4.
func dialed(a netip.Addr) netip.Addr {
	a = a.Unmap()
	switch {
	case a == netip.IPv4Unspecified():
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	case a == netip.IPv6Unspecified():
		return netip.IPv6Loopback()
	}
	return a
}

var (
	v4Compatible = netip.MustParsePrefix("::/96")
	nat64        = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour    = netip.MustParsePrefix("2002::/16")
)

// embeddedV4 is the IPv4 address an IPv6 address hands its packets towards.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case v4Compatible.Contains(a) && a != netip.IPv6Loopback() && a != netip.IPv6Unspecified():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case nat64.Contains(a) || nat64Local.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// refresh resolves the rules' host names again when a destination matched none
// (a name's addresses change: CDNs rotate them), at most once per refreshEvery; it
// reports whether any rule changed.
func (p *NetPolicy) refresh(proto string, port uint16) bool {
	if p.Resolve == nil || p.Deny {
		return false
	}
	p.mu.Lock()
	if time.Since(p.refreshed) < refreshEvery {
		p.mu.Unlock()
		return false
	}
	p.refreshed = time.Now()
	var hosts []int
	for i, d := range p.Rules {
		if d.Host != "" && d.Proto == proto && (&NetDest{Proto: proto, Any: true, Ports: d.Ports}).matches(proto, netip.Addr{}, port) {
			hosts = append(hosts, i)
		}
	}
	p.mu.Unlock()
	if len(hosts) == 0 {
		return false
	}
	changed := false
	for _, i := range hosts {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		addrs, err := p.Resolve(ctx, p.Rules[i].Host)
		cancel()
		if err != nil || len(addrs) == 0 {
			continue
		}
		p.mu.Lock()
		// the addresses found at build stay allowed: a name only gains addresses
		have := map[netip.Prefix]bool{}
		for _, n := range p.Rules[i].Nets {
			have[n] = true
		}
		for _, a := range addrs {
			n := netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
			if !have[n] && len(p.Rules[i].Nets) < maxHostAddrs {
				p.Rules[i].Nets = append(p.Rules[i].Nets, n)
				have[n] = true
				changed = true
			}
		}
		p.mu.Unlock()
	}
	return changed
}

// maxHostAddrs bounds the addresses one host name collects over a sandbox's life.
const maxHostAddrs = 256

// WatchesSends reports whether sends must be watched: some UDP or ICMP
// destination is refused (not every one is allowed, or a deny rule names one).
// Otherwise the filter refuses datagram sockets, or every destination of theirs is
// allowed, and the address of a send on a TCP socket is ignored (Fast Open is
// refused by the filter).
func (p *NetPolicy) WatchesSends() bool {
	for _, proto := range []string{"udp", "icmp"} {
		some, open := false, false
		for _, d := range p.Rules {
			if d.Proto == proto {
				some = true
				open = open || (d.Any && len(d.Ports) == 0)
			}
		}
		if some && (p.Deny || !open) {
			return true
		}
	}
	return false
}

func connectTraps(cfg Config) []Trap {
	if cfg.Net == nil && cfg.Ports == nil && cfg.HTTP == nil {
		return nil
	}
	return []Trap{{Syscall: "connect", Arg: -1}}
}

func sendtoTraps(cfg Config) []Trap {
	if cfg.Net == nil || !cfg.Net.WatchesSends() {
		return nil
	}
	return []Trap{{Syscall: "sendto", Arg: 4, NonZero: true}} // an address (sendto(…, NULL, 0) is send)
}

func sendmsgTraps(cfg Config) []Trap {
	if cfg.Net == nil || !cfg.Net.WatchesSends() {
		return nil
	}
	return []Trap{{Syscall: "sendmsg", Arg: -1}} // msg_name lives in memory the filter cannot read
}

func sendmmsgTraps(cfg Config) []Trap {
	if cfg.Net == nil || !cfg.Net.WatchesSends() {
		return nil
	}
	return []Trap{{Syscall: "sendmmsg", Arg: -1}}
}

// sock is what a socket is.
type sock struct {
	fd     int // the supervisor's duplicate
	family int
	typ    int
	proto  string // inet: "tcp", "udp", "icmp" or "other"
}

func (k sock) stream() bool { return k.typ == unix.SOCK_STREAM }

func sockOf(fd int) (sock, error) {
	k := sock{fd: fd}
	var err error
	if k.family, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		return k, err
	}
	if k.typ, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil {
		return k, err
	}
	if k.family != unix.AF_INET && k.family != unix.AF_INET6 {
		return k, nil
	}
	p, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return k, err
	}
	switch {
	case k.typ == unix.SOCK_STREAM && p == unix.IPPROTO_TCP:
		k.proto = "tcp"
	case k.typ == unix.SOCK_DGRAM && p == unix.IPPROTO_UDP:
		k.proto = "udp"
	case k.typ == unix.SOCK_DGRAM && (p == unix.IPPROTO_ICMP || p == unix.IPPROTO_ICMPV6):
		k.proto = "icmp"
	default:
		k.proto = "other"
	}
	return k, nil
}

// socket duplicates the caller's fd argument i and says what it is. A descriptor
// that is not a socket is ENOTSOCK, as the kernel answers.
func (c *call) socket(i int) (sock, *reply) {
	fd, r := c.childFD(c.argInt(i))
	if r != nil {
		return sock{}, r
	}
	k, err := sockOf(fd)
	if err != nil {
		r := c.failure("getsockopt", err, unix.ENOTSOCK)
		return k, &r
	}
	return k, nil
}

// addr is a copied socket address.
type addr struct {
	sa unix.RawSockaddrAny
	n  int
}

func (a *addr) ptr() (unsafe.Pointer, int) {
	if a == nil || a.n == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&a.sa), a.n
}

// readAddr copies a struct sockaddr of n bytes (EINVAL past the largest, as the
// kernel; n == 0 is no address).
func (c *call) readAddr(p uint64, n uint64) (*addr, error) {
	a := &addr{}
	if n > uint64(unsafe.Sizeof(a.sa)) {
		return nil, unix.EINVAL
	}
	if n == 0 {
		return a, nil
	}
	if err := c.read(p, unsafe.Slice((*byte)(unsafe.Pointer(&a.sa)), n)); err != nil {
		return nil, err
	}
	a.n = int(n)
	return a, nil
}

// destination decides where an address on socket k leads: nil to go on, else the
// refusal (EACCES, named in Denials). A unix path address comes back rewritten to
// the inode the caller's path resolves to (unix.go).
func (c *call) destination(k sock, a *addr) *reply {
	if a == nil || a.n < 2 {
		return nil // no address: the connected peer (checked when it was connected)
	}
	switch k.family {
	case unix.AF_INET, unix.AF_INET6:
	case unix.AF_UNIX:
		return c.unixDestination(a)
	default:
		return nil // a netlink or other socket reaches no host
	}
	if k.proto == "other" {
		r := deny(unix.EACCES, "an inet socket of a protocol net rules do not cover")
		return &r
	}
	ip, port, inet := inetAddr(&a.sa)
	if !inet || (ip.Is4() && a.n < unix.SizeofSockaddrInet4) || (ip.Is6() && a.n < 24 /* SIN6_LEN_RFC2133 */) {
		return nil // AF_UNSPEC (a disconnect), or what the kernel refuses by itself (EINVAL, EAFNOSUPPORT)
	}
	ok, rule := c.s.cfg.Net.Allowed(k.proto, ip, port)
	if !ok && c.s.cfg.Net.refresh(k.proto, port) {
		ok, rule = c.s.cfg.Net.Allowed(k.proto, ip, port)
	}
	if ok {
		return nil
	}
	why := "no net_allow rule"
	if rule != "" {
		why = "net_deny " + rule
	}
	dest := netip.AddrPortFrom(ip.Unmap(), port).String()
	if k.proto == "icmp" {
		dest = ip.Unmap().String()
	}
	r := deny(unix.EACCES, fmt.Sprintf("%s %s (%s)", k.proto, dest, why))
	return &r
}

func blocking(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_NONBLOCK == 0
}

// maxBlocked bounds the calls of one sandbox performed on blocking sockets at once
// (each holds a thread of the host until it returns).
const maxBlocked = 64

// perform runs f for the caller: at once on a non-blocking socket (or with
// MSG_DONTWAIT), else on a goroutine of its own, so a blocking connect or send does
// not stall the loop. A blocked call is woken when the supervisor closes (the socket
// is shut down: the sandbox is over) and, for a connect, when the caller dies.
func (c *call) perform(k sock, wouldBlock bool, isConnect bool, f func() reply) reply {
	return c.performSend(k, wouldBlock, isConnect, func(uint32) reply { return f() })
}

// performSend is perform for a send whose flags f ORs with its argument: a datagram
// (sent whole or not at all) on a blocking socket is first tried with MSG_DONTWAIT
// here, and handed to a goroutine only when it would block — most datagrams never
// wait, and the hand-off costs more than the send.
func (c *call) performSend(k sock, wouldBlock bool, isConnect bool, f func(extra uint32) reply) reply {
	if !c.valid() {
		return gone()
	}
	if !wouldBlock || !blocking(k.fd) {
		return f(0)
	}
	if !isConnect && !k.stream() {
		if r := f(unix.MSG_DONTWAIT); r.kind != replyErrno || (r.errno != unix.EAGAIN && r.errno != unix.EWOULDBLOCK) {
			return r
		}
	}
	return c.detachBlocking(k.fd, func() reply {
		if isConnect {
			stop := make(chan struct{})
			defer close(stop)
			// the caller died (or the supervisor closes): its connect ends
			c.whileGone(250*time.Millisecond, stop, func() { unix.Shutdown(k.fd, unix.SHUT_RDWR) })
		}
		return f(0)
	})
}

// detachBlocking runs f, a call that may block on socket fd, on a goroutine of its
// own (detach): at most maxBlocked of them per sandbox (then ENOBUFS), each with fd
// registered so that Close shuts it down and f returns.
func (c *call) detachBlocking(fd int, f func() reply) reply {
	if c.s.blocked.Add(1) > maxBlocked {
		c.s.blocked.Add(-1)
		return deny(unix.ENOBUFS, fmt.Sprintf("more than %d calls of this sandbox already block in connect or send", maxBlocked))
	}
	return c.detach(func() reply {
		defer c.s.blocked.Add(-1)
		if !c.s.track(fd) {
			return gone() // closing
		}
		defer c.s.untrack(fd)
		return f()
	})
}

// handleConnect: connect(fd, addr, addrlen).
func handleConnect(c *call) reply { return connectCopy(c, nil) }

// connectCopy performs connect with the address a copied before (nil: copy it now),
// on the socket the argument names now (host.go: the host judged that copy).
func connectCopy(c *call, a *addr) reply {
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	if a == nil {
		var err error
		if a, err = c.readAddr(c.arg(1), uint64(uint32(c.arg(2)))); err != nil {
			return c.failure("read the address", err, unix.EFAULT, unix.EINVAL)
		}
	}
	toProxy, r := c.redirectHTTP(k, a) // an HTTP port: to the proxy (httpredirect.go)
	if r != nil {
		return *r
	}
	if !toProxy && !c.remapConnect(k, a) { // a virtual port of the sandbox's own (ports.go)
		if c.s.cfg.Net == nil {
			return cont() // trapped for port_remap alone: the kernel's floor decides (ports.go)
		}
		if r := c.destination(k, a); r != nil {
			return *r
		}
	}
	if k.family != unix.AF_UNIX && blocking(k.fd) {
		if !c.valid() {
			return gone()
		}
		return c.connectInet(k, a)
	}
	return c.perform(k, true, true, func() reply {
		return c.asCaller(k, []*addr{a}, func() reply {
			p, n := a.ptr()
			_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(k.fd), uintptr(p), uintptr(n))
			if e != 0 {
				return fail(e)
			}
			return ret(0)
		})
	})
}

// connectInet performs a blocking connect of an inet socket without blocking the
// loop: the connect is started non-blocking (O_NONBLOCK on the socket's open file
// description for the length of the call, then its flags as they were — the
// caller's other threads could see the flag in between, on a socket that is not
// connected yet), and answered at once when it completes at once (loopback, a
// refused port) — a hand-off to a goroutine costs more than the connect — or
// else by a goroutine that waits for it as the caller's blocking connect would.
func (c *call) connectInet(k sock, a *addr) reply {
	fl, err := unix.FcntlInt(uintptr(k.fd), unix.F_GETFL, 0)
	if err != nil {
		return c.failure("fcntl", err)
	}
	if _, err := unix.FcntlInt(uintptr(k.fd), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
		return c.failure("fcntl", err)
	}
	p, n := a.ptr()
	_, _, e := unix.Syscall(unix.SYS_CONNECT, uintptr(k.fd), uintptr(p), uintptr(n))
	if now, err := unix.FcntlInt(uintptr(k.fd), unix.F_GETFL, 0); err == nil && now == fl|unix.O_NONBLOCK {
		unix.FcntlInt(uintptr(k.fd), unix.F_SETFL, fl) // unless the caller changed them meanwhile
	}
	switch e {
	case 0:
		return ret(0)
	case unix.EINPROGRESS:
	default:
		return fail(e)
	}
	if r, done := connectDone(k.fd, 0); done {
		return r
	}
	return c.detachBlocking(k.fd, func() reply {
		for {
			if r, done := connectDone(k.fd, 250); done {
				return r
			}
			if !c.valid() {
				return gone() // the caller died or was interrupted: the connect goes on, as the kernel's would
			}
		}
	})
}

// errnoOf is err's errno (0 for nil, EIO for an error that carries none).
func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

// connectDone waits up to ms for a connect in progress on fd and gives its result.
func connectDone(fd int, ms int) (reply, bool) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		nr, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail(errnoOf(err)), true
		}
		if nr == 0 {
			return reply{}, false
		}
		soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return fail(errnoOf(err)), true
		}
		if soerr != 0 {
			return fail(unix.Errno(soerr)), true
		}
		return ret(0), true
	}
}

// Bounds on what is copied for one send: a datagram is copied whole (more is
// EMSGSIZE, as a socket buffer that small would answer), a stream up to
// maxStreamChunk (a stream send may send less than it was given: it says how much).
const (
	maxDatagram    = 4 << 20
	maxStreamChunk = 256 << 10
)

func (k sock) maxCopy() uint64 {
	if k.stream() {
		return maxStreamChunk
	}
	return maxDatagram
}

func fastOpen(k sock, flags uint32) *reply {
	if k.proto == "tcp" && flags&unix.MSG_FASTOPEN != 0 {
		r := deny(unix.EPERM, "tcp MSG_FASTOPEN (a connect inside a send)")
		return &r
	}
	return nil
}

// handleSendto: sendto(fd, buf, len, flags, addr, addrlen) with an address.
func handleSendto(c *call) reply { return sendtoCopy(c, nil) }

// sendtoCopy performs sendto with the address a copied before (nil: copy it now).
func sendtoCopy(c *call, a *addr) reply {
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	flags := uint32(c.arg(3))
	if r := fastOpen(k, flags); r != nil {
		return *r
	}
	if a == nil {
		var err error
		if a, err = c.readAddr(c.arg(4), uint64(uint32(c.arg(5)))); err != nil {
			return c.failure("read the address", err, unix.EFAULT, unix.EINVAL)
		}
	}
	if r := c.destination(k, a); r != nil {
		return *r
	}
	size := c.arg(2)
	if size > k.maxCopy() {
		if !k.stream() {
			return fail(unix.EMSGSIZE)
		}
		size = k.maxCopy()
	}
	buf := make([]byte, size)
	if err := c.read(c.arg(1), buf); err != nil && size > 0 {
		return c.failure("read the data", err, unix.EFAULT)
	}
	return c.performSend(k, flags&unix.MSG_DONTWAIT == 0, false, func(extra uint32) reply {
		return c.asCaller(k, []*addr{a}, func() reply {
			var p unsafe.Pointer
			if len(buf) > 0 {
				p = unsafe.Pointer(&buf[0])
			}
			ap, an := a.ptr()
			v, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(k.fd), uintptr(p), uintptr(len(buf)), uintptr(flags|extra), uintptr(ap), uintptr(an))
			if e != 0 {
				return fail(e)
			}
			return ret(int64(v))
		})
	})
}

// msg is a copied struct msghdr and what it points to.
type msg struct {
	name    *addr
	data    []byte
	control []byte
}

// readMsg copies a struct msghdr at p: its name, the bytes of its iovecs (at most
// k.maxCopy()) and its control data (checked and translated by c.control).
func (c *call) readMsg(k sock, p uint64) (*msg, *reply) {
	bad := func(err error) (*msg, *reply) {
		r := c.failure("read the message", err, unix.EFAULT, unix.EINVAL, unix.EMSGSIZE, unix.ENOBUFS)
		return nil, &r
	}
	var h unix.Msghdr
	if err := c.read(p, unsafe.Slice((*byte)(unsafe.Pointer(&h)), unsafe.Sizeof(h))); err != nil {
		return bad(err)
	}
	m := &msg{name: &addr{}}
	var err error
	if h.Name != nil {
		if m.name, err = c.readAddr(uint64(uintptr(unsafe.Pointer(h.Name))), uint64(h.Namelen)); err != nil {
			return bad(err)
		}
	}
	if h.Iovlen > 1024 { // UIO_MAXIOV
		return bad(unix.EMSGSIZE)
	}
	if h.Iovlen > 0 {
		iov := make([]unix.Iovec, h.Iovlen)
		if err := c.read(uint64(uintptr(unsafe.Pointer(h.Iov))), unsafe.Slice((*byte)(unsafe.Pointer(&iov[0])), uintptr(len(iov))*unsafe.Sizeof(iov[0]))); err != nil {
			return bad(err)
		}
		limit := k.maxCopy()
		for _, v := range iov {
			n := v.Len
			if uint64(len(m.data))+n > limit {
				if !k.stream() {
					return bad(unix.EMSGSIZE)
				}
				n = limit - uint64(len(m.data))
			}
			if n == 0 {
				continue
			}
			at := len(m.data)
			m.data = append(m.data, make([]byte, n)...)
			if err := c.read(uint64(uintptr(unsafe.Pointer(v.Base))), m.data[at:]); err != nil {
				return bad(err)
			}
			if uint64(len(m.data)) == limit {
				break
			}
		}
	}
	if h.Controllen > 0 {
		if h.Controllen > 1<<16 { // more than any socket option memory allows
			return bad(unix.ENOBUFS)
		}
		m.control = make([]byte, h.Controllen)
		if err := c.read(uint64(uintptr(unsafe.Pointer(h.Control))), m.control); err != nil {
			return bad(err)
		}
	}
	return m, nil
}

// sendMsg sends m on k (the supervisor's duplicate); control is already translated.
func sendMsg(k sock, m *msg, control []byte, flags uint32) (int, unix.Errno) {
	var h unix.Msghdr
	if p, n := m.name.ptr(); n > 0 {
		h.Name = (*byte)(p)
		h.Namelen = uint32(n)
	}
	var iov unix.Iovec
	if len(m.data) > 0 {
		iov.Base = &m.data[0]
		iov.SetLen(len(m.data))
		h.Iov = &iov
		h.SetIovlen(1)
	}
	if len(control) > 0 {
		h.Control = &control[0]
		h.SetControllen(len(control))
	}
	n, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(k.fd), uintptr(unsafe.Pointer(&h)), uintptr(flags))
	return int(n), e
}

// handleSendmsg: sendmsg(fd, msg, flags), whatever the socket (see the top).
func handleSendmsg(c *call) reply {
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	flags := uint32(c.arg(2))
	if r := fastOpen(k, flags); r != nil {
		return *r
	}
	m, r := c.readMsg(k, c.arg(1))
	if r != nil {
		return *r
	}
	if r := c.destination(k, m.name); r != nil {
		return *r
	}
	control, r := c.control(k, m.control)
	if r != nil {
		return *r
	}
	return c.performSend(k, flags&unix.MSG_DONTWAIT == 0, false, func(extra uint32) reply {
		return c.asCaller(k, []*addr{m.name}, func() reply {
			n, e := sendMsg(k, m, control, flags|extra)
			if e != 0 {
				return fail(e)
			}
			return ret(int64(n))
		})
	})
}

// mmsgStride is sizeof(struct mmsghdr): a msghdr, unsigned int msg_len, padding.
const mmsgStride = unsafe.Sizeof(unix.Msghdr{}) + 8

// handleSendmmsg: sendmmsg(fd, msgvec, vlen, flags) — each message as sendmsg, in
// order, msg_len written back; as the kernel, an error after the first message ends
// the batch with the count sent so far.
func handleSendmmsg(c *call) reply {
	k, r := c.socket(0)
	if r != nil {
		return *r
	}
	flags := uint32(c.arg(3))
	if r := fastOpen(k, flags); r != nil {
		return *r
	}
	vlen := uint32(c.arg(2))
	if vlen > 1024 { // UIO_MAXIOV: the kernel sends at most that many
		vlen = 1024
	}
	type one struct {
		m       *msg
		control []byte
	}
	var msgs []one
	var stop *reply // why the batch ends early
	for i := uint32(0); i < vlen; i++ {
		m, r := c.readMsg(k, c.arg(1)+uint64(i)*uint64(mmsgStride))
		if r == nil {
			r = c.destination(k, m.name)
		}
		var control []byte
		if r == nil {
			control, r = c.control(k, m.control)
		}
		if r != nil {
			stop = r
			break
		}
		msgs = append(msgs, one{m, control})
	}
	if len(msgs) == 0 {
		if stop != nil {
			return *stop
		}
		return ret(0)
	}
	if stop != nil && stop.denied != "" {
		c.s.record(c, c.name, stop.denied, stop.errno, true) // recorded, though the batch answers with its count
	}
	base := c.arg(1)
	var names []*addr
	for _, o := range msgs {
		names = append(names, o.m.name)
	}
	return c.performSend(k, flags&unix.MSG_DONTWAIT == 0, false, func(extra uint32) reply {
		return c.asCaller(k, names, func() reply {
			sent := 0
			for i, o := range msgs {
				n, e := sendMsg(k, o.m, o.control, flags|extra)
				if e != 0 {
					if sent == 0 {
						return fail(e)
					}
					break
				}
				var b [4]byte
				binary.NativeEndian.PutUint32(b[:], uint32(n))
				if err := c.write(base+uint64(i)*uint64(mmsgStride)+uint64(unsafe.Sizeof(unix.Msghdr{})), b[:]); err != nil {
					break
				}
				sent++
			}
			return ret(int64(sent))
		})
	})
}

// Control messages a send performed for the caller may carry. On inet sockets only
// those that need no privilege (the supervisor may have privileges the caller has
// not: SO_MARK, IP options such as source routes); on unix sockets SCM_RIGHTS, whose
// descriptors are the caller's and are translated to the supervisor's duplicates.
// Anything else is refused (EPERM, named in Denials).
var inetControl = map[[2]int32]bool{
	{unix.IPPROTO_IP, unix.IP_PKTINFO}: true, {unix.IPPROTO_IP, unix.IP_TTL}: true, {unix.IPPROTO_IP, unix.IP_TOS}: true,
	{unix.IPPROTO_IPV6, unix.IPV6_PKTINFO}: true, {unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT}: true,
	{unix.IPPROTO_IPV6, unix.IPV6_TCLASS}: true, {unix.IPPROTO_UDP, unix.UDP_SEGMENT}: true,
}

func (c *call) control(k sock, raw []byte) ([]byte, *reply) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]byte, 0, len(raw))
	refuse := func(level, typ int32) ([]byte, *reply) {
		r := deny(unix.EPERM, fmt.Sprintf("control message level %d type %d (not performed for the sandbox)", level, typ))
		return nil, &r
	}
	const hdr = unix.SizeofCmsghdr
	for off := 0; off+hdr <= len(raw); {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&raw[off]))
		l := int(h.Len)
		if l < hdr || off+l > len(raw) {
			r := fail(unix.EINVAL)
			return nil, &r
		}
		data := raw[off+hdr : off+l]
		next := off + cmsgAlign(l)
		switch {
		case k.family == unix.AF_UNIX && h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_RIGHTS:
			fds := make([]byte, len(data))
			for i := 0; i+4 <= len(data); i += 4 {
				n := int32(binary.NativeEndian.Uint32(data[i:]))
				fd, r := c.childFD(n)
				if r != nil {
					return nil, r
				}
				binary.NativeEndian.PutUint32(fds[i:], uint32(fd))
			}
			out = appendCmsg(out, h.Level, h.Type, fds)
		case k.family != unix.AF_UNIX && inetControl[[2]int32{h.Level, h.Type}]:
			out = appendCmsg(out, h.Level, h.Type, data)
		default:
			return refuse(h.Level, h.Type)
		}
		off = next
	}
	return out, nil
}

func cmsgAlign(n int) int { return (n + 7) &^ 7 }

func appendCmsg(out []byte, level, typ int32, data []byte) []byte {
	at := len(out)
	out = append(out, make([]byte, cmsgAlign(unix.SizeofCmsghdr+len(data)))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&out[at]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.SizeofCmsghdr + len(data))
	copy(out[at+unix.SizeofCmsghdr:], data)
	return out
}
