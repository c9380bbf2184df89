//go:build linux

package supervise

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ---- the child side: socket calls with raw addresses ----

// rawAddr is a struct sockaddr for "ip" and port, or for a unix path ("/…", or
// "@name" abstract) with port ignored.
func rawAddr(ip string, port int) ([]byte, int) {
	var sa unix.RawSockaddrAny
	b := unsafe.Slice((*byte)(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
	if strings.HasPrefix(ip, "/") || strings.HasPrefix(ip, "@") || (ip != "" && !strings.ContainsAny(ip, ".:")) {
		u := (*unix.RawSockaddrUnix)(unsafe.Pointer(&sa))
		u.Family = unix.AF_UNIX
		name := ip
		if strings.HasPrefix(ip, "@") {
			name = "\x00" + ip[1:]
		}
		for i := 0; i < len(name); i++ {
			u.Path[i] = int8(name[i])
		}
		n := 2 + len(name)
		if !strings.HasPrefix(ip, "@") {
			n++
		}
		return b, n
	}
	a := netip.MustParseAddr(ip)
	if a.Is4() {
		in := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sa))
		in.Family = unix.AF_INET
		in.Port = uint16(port>>8 | (port&0xff)<<8)
		in.Addr = a.As4()
		return b, unix.SizeofSockaddrInet4
	}
	in := (*unix.RawSockaddrInet6)(unsafe.Pointer(&sa))
	in.Family = unix.AF_INET6
	in.Port = uint16(port>>8 | (port&0xff)<<8)
	in.Addr = a.As16()
	return b, unix.SizeofSockaddrInet6
}

func sendmsgRaw(nr uintptr, fd int, names [][]byte, lens []int, data []byte, control []byte, flags int) (int64, syscall.Errno) {
	type mmsg struct {
		h   unix.Msghdr
		len uint32
		_   uint32
	}
	msgs := make([]mmsg, len(names))
	iov := unix.Iovec{Base: &data[0]}
	iov.SetLen(len(data))
	for i := range names {
		if names[i] != nil {
			msgs[i].h.Name = &names[i][0]
			msgs[i].h.Namelen = uint32(lens[i])
		}
		msgs[i].h.Iov = &iov
		msgs[i].h.SetIovlen(1)
		if len(control) > 0 {
			msgs[i].h.Control = &control[0]
			msgs[i].h.SetControllen(len(control))
		}
	}
	var v uintptr
	var e syscall.Errno
	if nr == unix.SYS_SENDMSG {
		v, _, e = unix.Syscall(nr, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0].h)), uintptr(flags))
	} else {
		v, _, e = unix.Syscall6(nr, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	}
	runtime.KeepAlive(names)
	runtime.KeepAlive(data)
	runtime.KeepAlive(control)
	runtime.KeepAlive(msgs)
	return int64(v), e
}

func executeNet(r req) (resp, []int, bool) {
	switch r.Op {
	case "socket_proto": // socket(Arg, Arg2, N)
		fd, err := unix.Socket(int(r.Arg), int(r.Arg2)|unix.SOCK_CLOEXEC, r.N)
		return resp{Val: int64(fd), Errno: errnoOf(err)}, nil, true
	case "connect": // connect(FD, Path:Arg)
		b, n := rawAddr(r.Path, int(r.Arg))
		_, e := raw(unix.SYS_CONNECT, uintptr(r.FD), uintptr(unsafe.Pointer(&b[0])), uintptr(n))
		return resp{Errno: e}, nil, true
	case "sendto": // sendto(FD, "x", Path:Arg)
		b, n := rawAddr(r.Path, int(r.Arg))
		data := []byte("x")
		v, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.FD), uintptr(unsafe.Pointer(&data[0])), 1, uintptr(r.Arg2), uintptr(unsafe.Pointer(&b[0])), uintptr(n))
		return resp{Val: int64(v), Errno: e}, nil, true
	case "ping": // sendto(FD, an ICMP echo request, Path), then the reply within 2 s; Val: bytes received
		b, n := rawAddr(r.Path, 0)
		echo := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'p', 'i', 'n', 'g'} // type 8 (echo), the kernel sets id and checksum
		if r.Arg == unix.AF_INET6 {
			echo[0] = 128
		}
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.FD), uintptr(unsafe.Pointer(&echo[0])), uintptr(len(echo)), 0, uintptr(unsafe.Pointer(&b[0])), uintptr(n))
		if e != 0 {
			return resp{Errno: e}, nil, true
		}
		pfd := []unix.PollFd{{Fd: int32(r.FD), Events: unix.POLLIN}}
		if nr, err := unix.Poll(pfd, 2000); err != nil || nr == 0 {
			return resp{Errno: unix.ETIMEDOUT}, nil, true
		}
		buf := make([]byte, 256)
		got, _, err := unix.Recvfrom(r.FD, buf, 0)
		return resp{Val: int64(got), Errno: errnoOf(err)}, nil, true
	case "sendmsg": // sendmsg(FD, {Path:Arg, "x"}, Arg2); Path "" is no name
		var names [][]byte
		var lens []int
		if r.Path != "" {
			b, n := rawAddr(r.Path, int(r.Arg))
			names, lens = [][]byte{b}, []int{n}
		} else {
			names, lens = [][]byte{nil}, []int{0}
		}
		v, e := sendmsgRaw(unix.SYS_SENDMSG, r.FD, names, lens, []byte("x"), nil, int(r.Arg2))
		return resp{Val: v, Errno: e}, nil, true
	case "sendmsg_cmsg": // sendmsg(FD, {Path:Arg, "x", one control message level N type Arg2 of 4 bytes})
		b, n := rawAddr(r.Path, int(r.Arg))
		ctl := make([]byte, unix.CmsgSpace(4))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		h.Level, h.Type = int32(r.N), int32(r.Arg2)
		h.SetLen(unix.CmsgLen(4))
		ctl[unix.CmsgLen(0)] = 64
		v, e := sendmsgRaw(unix.SYS_SENDMSG, r.FD, [][]byte{b}, []int{n}, []byte("x"), ctl, 0)
		return resp{Val: v, Errno: e}, nil, true
	case "sendmmsg": // sendmmsg(FD, [Path:Arg, B:Arg2])
		a, an := rawAddr(r.Path, int(r.Arg))
		b, bn := rawAddr(r.B, int(r.Arg2))
		v, e := sendmsgRaw(unix.SYS_SENDMMSG, r.FD, [][]byte{a, b}, []int{an, bn}, []byte("x"), nil, 0)
		return resp{Val: v, Errno: e}, nil, true
	case "pass_fd": // over the socketpair (FD, FD2): send fd N with SCM_RIGHTS from FD, receive it on FD2; Vals: inode sent, inode received
		var st unix.Stat_t
		if err := unix.Fstat(r.N, &st); err != nil {
			return resp{Errno: errnoOf(err)}, nil, true
		}
		v, e := sendmsgRaw(unix.SYS_SENDMSG, r.FD, [][]byte{nil}, []int{0}, []byte("x"), unix.UnixRights(r.N), 0)
		if e != 0 {
			return resp{Val: v, Errno: e}, nil, true
		}
		buf, oob := make([]byte, 8), make([]byte, unix.CmsgSpace(4))
		_, oobn, _, _, err := unix.Recvmsg(r.FD2, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			return resp{Errno: errnoOf(err)}, nil, true
		}
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		if len(msgs) != 1 {
			return resp{Errno: unix.EBADMSG}, nil, true
		}
		fds, _ := unix.ParseUnixRights(&msgs[0])
		var got unix.Stat_t
		if len(fds) != 1 || unix.Fstat(fds[0], &got) != nil {
			return resp{Errno: unix.EBADMSG}, nil, true
		}
		unix.Close(fds[0])
		return resp{Vals: []int64{int64(st.Ino), int64(got.Ino)}}, nil, true
	case "socketpair": // Vals: the two fds
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return resp{Errno: errnoOf(err)}, nil, true
		}
		return resp{Vals: []int64{int64(fds[0]), int64(fds[1])}}, nil, true
	case "race_connect": // connect(fresh socket, buf) N times while another thread flips buf between Path:Arg and B:Arg2 (B "" is Path); Vals: [ok, EACCES, other]
		return raceConnect(r), nil, true
	case "race_sendto_fd": // sendto(FD, "x", Path:Arg) N times while another thread points FD at a unix dgram socket (FD2) and back at a UDP one (N2 = saved copy); Vals: [ok, EACCES, other]
		return raceSendtoFD(r), nil, true
	}
	return resp{}, nil, false
}

func raceConnect(r req) resp {
	other := r.B
	if other == "" {
		other = r.Path
	}
	a, an := rawAddr(r.Path, int(r.Arg))
	b, bn := rawAddr(other, int(r.Arg2))
	if an != bn {
		return resp{Errno: unix.EINVAL}
	}
	buf := make([]byte, len(a))
	copy(buf, a)
	stop := flipper(func(i int) {
		if i%2 == 0 {
			copy(buf, b)
		} else {
			copy(buf, a)
		}
	})
	family := unix.AF_INET
	if netip.MustParseAddr(r.Path).Is6() {
		family = unix.AF_INET6
	}
	var ok, acces, others int64
	for i := 0; i < r.N; i++ {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			others++
			continue
		}
		_, e := raw(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(an))
		switch e {
		case 0:
			ok++
		case unix.EACCES:
			acces++
		default:
			others++
		}
		unix.Close(fd)
	}
	stop()
	runtime.KeepAlive(buf)
	return resp{Vals: []int64{ok, acces, others}}
}

// raceSendtoFD: FD is a UDP socket; another thread dup2s the unix socket FD2 over
// FD's number and the saved UDP one back, while sendto(FD, Path:Arg) runs N times.
func raceSendtoFD(r req) resp {
	udp, err := unix.Dup(r.FD)
	if err != nil {
		return resp{Errno: errnoOf(err)}
	}
	stop := flipper(func(i int) {
		if i%2 == 0 {
			unix.Dup3(r.FD2, r.FD, unix.O_CLOEXEC)
		} else {
			unix.Dup3(udp, r.FD, unix.O_CLOEXEC)
		}
	})
	b, n := rawAddr(r.Path, int(r.Arg))
	data := []byte("x")
	var ok, acces, other int64
	var errs []string
	for i := 0; i < r.N; i++ {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.FD), uintptr(unsafe.Pointer(&data[0])), 1, 0, uintptr(unsafe.Pointer(&b[0])), uintptr(n))
		switch e {
		case 0:
			ok++
		case unix.EACCES:
			acces++
		default:
			other++
			if len(errs) < 3 {
				errs = append(errs, unix.ErrnoName(e))
			}
		}
	}
	stop()
	unix.Dup3(udp, r.FD, unix.O_CLOEXEC) // FD is the UDP socket again for the next round
	unix.Close(udp)
	return resp{Vals: []int64{ok, acces, other}, Text: errs}
}

// ---- the parent side ----

// tcpListener accepts and counts connections on addr ("127.0.0.1:0", "[::1]:0").
func tcpListener(t *testing.T, network, addr string) (int, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	n := &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, n
}

// udpListener counts datagrams on 127.0.0.1.
func udpListener(t *testing.T) (int, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	n := &atomic.Int64{}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).Port, n
}

func loopback4(proto string, port int) NetDest {
	return NetDest{Proto: proto, Nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Ports: [][2]uint16{{uint16(port), uint16(port)}},
		Text: proto + "://127.0.0.1:" + itoa(port)}
}

func itoa(n int) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(n)).String()[len("0.0.0.0:"):]
}

func netSandbox(t *testing.T, pol *NetPolicy, override map[string]handlerFunc) *sandbox {
	return newSandbox(t, sandboxOpts{cfgFor: func(sb *sandbox) Config {
		return Config{Allowed: []string{sb.ro, sb.rw}, Net: pol}
	}, override: override})
}

func (sb *sandbox) socket(t *testing.T, family, typ int) int {
	t.Helper()
	a := sb.do(t, req{Op: "socket", Arg: int64(family), Arg2: int64(typ)})
	if a.Errno != 0 {
		t.Fatalf("socket(%d, %d): %s", family, typ, errnoName(a.Errno))
	}
	return int(a.Val)
}

func wantErrno(t *testing.T, what string, got, want syscall.Errno) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %s, want %s", what, errnoName(got), errnoName(want))
	}
}

func (sb *sandbox) denied(detail string) bool {
	for _, d := range sb.sup.Denials() {
		if strings.Contains(d.Detail, detail) {
			return true
		}
	}
	return false
}

// TCP by destination: the allowed address and port connect; another port, the same
// port over IPv6, and a denied address spelled as an IPv4-mapped IPv6 address or
// as the unspecified address (which the kernel routes to loopback) are refused.
func TestNetConnectAllowList(t *testing.T) {
	okPort, okConns := tcpListener(t, "tcp4", "127.0.0.1:0")
	noPort, noConns := tcpListener(t, "tcp4", "127.0.0.1:0")
	sb := netSandbox(t, &NetPolicy{Rules: []NetDest{loopback4("tcp", okPort)}}, nil)

	fd := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "connect to the allowed port", sb.do(t, req{Op: "connect", FD: fd, Path: "127.0.0.1", Arg: int64(okPort)}).Errno, 0)
	for _, c := range []struct {
		family int
		ip     string
		port   int
	}{
		{unix.AF_INET, "127.0.0.1", noPort},
		{unix.AF_INET, "0.0.0.0", noPort},
		{unix.AF_INET6, "::ffff:127.0.0.1", noPort},
		{unix.AF_INET6, "::", noPort},
		{unix.AF_INET6, "::1", okPort},
	} {
		fd := sb.socket(t, c.family, unix.SOCK_STREAM)
		wantErrno(t, "connect "+c.ip+":"+itoa(c.port), sb.do(t, req{Op: "connect", FD: fd, Path: c.ip, Arg: int64(c.port)}).Errno, unix.EACCES)
	}
	// mapped and unspecified spellings of the allowed destination are that destination
	for _, ip := range []string{"::ffff:127.0.0.1"} {
		fd := sb.socket(t, unix.AF_INET6, unix.SOCK_STREAM)
		wantErrno(t, "connect "+ip, sb.do(t, req{Op: "connect", FD: fd, Path: ip, Arg: int64(okPort)}).Errno, 0)
	}
	fd = sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "connect 0.0.0.0 (this host) on the allowed port", sb.do(t, req{Op: "connect", FD: fd, Path: "0.0.0.0", Arg: int64(okPort)}).Errno, 0)

	time.Sleep(50 * time.Millisecond)
	if n := noConns.Load(); n != 0 {
		t.Errorf("the refused port got %d connections", n)
	}
	if n := okConns.Load(); n != 3 {
		t.Errorf("the allowed port got %d connections, want 3", n)
	}
	if !sb.denied("tcp 127.0.0.1:" + itoa(noPort) + " (no net_allow rule)") {
		t.Errorf("no denial recorded: %+v", sb.sup.Denials())
	}
}

// A deny list refuses what it names, whatever the spelling, and nothing else.
func TestNetConnectDenyList(t *testing.T) {
	okPort, _ := tcpListener(t, "tcp4", "127.0.0.1:0")
	noPort, noConns := tcpListener(t, "tcp4", "127.0.0.1:0")
	sb := netSandbox(t, &NetPolicy{Deny: true, Rules: []NetDest{loopback4("tcp", noPort)}}, nil)
	for _, c := range []struct {
		family int
		ip     string
	}{{unix.AF_INET, "127.0.0.1"}, {unix.AF_INET, "0.0.0.0"}, {unix.AF_INET6, "::ffff:127.0.0.1"}} {
		fd := sb.socket(t, c.family, unix.SOCK_STREAM)
		wantErrno(t, "connect "+c.ip+" (denied)", sb.do(t, req{Op: "connect", FD: fd, Path: c.ip, Arg: int64(noPort)}).Errno, unix.EACCES)
		fd = sb.socket(t, c.family, unix.SOCK_STREAM)
		wantErrno(t, "connect "+c.ip+" (another port)", sb.do(t, req{Op: "connect", FD: fd, Path: c.ip, Arg: int64(okPort)}).Errno, 0)
	}
	if n := noConns.Load(); n != 0 {
		t.Errorf("the denied port got %d connections", n)
	}
	if !sb.denied("net_deny tcp://127.0.0.1:" + itoa(noPort)) {
		t.Errorf("the denial does not name its rule: %+v", sb.sup.Denials())
	}
}

// UDP by destination, on each call that carries an address.
func TestNetUDP(t *testing.T) {
	okPort, okGot := udpListener(t)
	noPort, noGot := udpListener(t)
	sb := netSandbox(t, &NetPolicy{Rules: []NetDest{loopback4("udp", okPort)}}, nil)
	fd := sb.socket(t, unix.AF_INET, unix.SOCK_DGRAM)
	wantErrno(t, "sendto allowed", sb.do(t, req{Op: "sendto", FD: fd, Path: "127.0.0.1", Arg: int64(okPort)}).Errno, 0)
	wantErrno(t, "sendto refused", sb.do(t, req{Op: "sendto", FD: fd, Path: "127.0.0.1", Arg: int64(noPort)}).Errno, unix.EACCES)
	wantErrno(t, "sendmsg allowed", sb.do(t, req{Op: "sendmsg", FD: fd, Path: "127.0.0.1", Arg: int64(okPort)}).Errno, 0)
	wantErrno(t, "sendmsg refused", sb.do(t, req{Op: "sendmsg", FD: fd, Path: "127.0.0.1", Arg: int64(noPort)}).Errno, unix.EACCES)
	a := sb.do(t, req{Op: "sendmmsg", FD: fd, Path: "127.0.0.1", Arg: int64(okPort), B: "127.0.0.1", Arg2: int64(noPort)})
	if a.Errno != 0 || a.Val != 1 {
		t.Errorf("sendmmsg [allowed, refused]: %d sent, %s; want 1 sent", a.Val, errnoName(a.Errno))
	}
	a = sb.do(t, req{Op: "sendmmsg", FD: fd, Path: "127.0.0.1", Arg: int64(noPort), B: "127.0.0.1", Arg2: int64(okPort)})
	wantErrno(t, "sendmmsg [refused, allowed]", a.Errno, unix.EACCES)
	wantErrno(t, "connect refused", sb.do(t, req{Op: "connect", FD: fd, Path: "127.0.0.1", Arg: int64(noPort)}).Errno, unix.EACCES)
	wantErrno(t, "connect allowed", sb.do(t, req{Op: "connect", FD: fd, Path: "127.0.0.1", Arg: int64(okPort)}).Errno, 0)
	wantErrno(t, "send on the connected socket", sb.do(t, req{Op: "sendmsg", FD: fd}).Errno, 0)
	// a control message that could route around the check, or borrow a privilege
	wantErrno(t, "sendmsg with IP_RETOPTS", sb.do(t, req{Op: "sendmsg_cmsg", FD: fd, Path: "127.0.0.1", Arg: int64(okPort), N: unix.IPPROTO_IP, Arg2: unix.IP_RETOPTS}).Errno, unix.EPERM)
	wantErrno(t, "sendmsg with SO_MARK", sb.do(t, req{Op: "sendmsg_cmsg", FD: fd, Path: "127.0.0.1", Arg: int64(okPort), N: unix.SOL_SOCKET, Arg2: unix.SO_MARK}).Errno, unix.EPERM)
	wantErrno(t, "sendmsg with IP_TTL", sb.do(t, req{Op: "sendmsg_cmsg", FD: fd, Path: "127.0.0.1", Arg: int64(okPort), N: unix.IPPROTO_IP, Arg2: unix.IP_TTL}).Errno, 0)
	time.Sleep(100 * time.Millisecond)
	if n := noGot.Load(); n != 0 {
		t.Errorf("the refused port got %d datagrams", n)
	}
	if n := okGot.Load(); n != 5 {
		t.Errorf("the allowed port got %d datagrams, want 5", n)
	}
}

// Another thread rewrites the address between the allowed and the refused one while
// connect runs: the supervisor connects to the address it copied and checked, so the
// refused port never gets a connection. A handler that checks and continues (the
// kernel then reads the address again) is caught.
func TestNetConnectAddressRace(t *testing.T) {
	naive := map[string]handlerFunc{"connect": func(c *call) reply {
		k, r := c.socket(0)
		if r != nil {
			return *r
		}
		a, err := c.readAddr(c.arg(1), uint64(uint32(c.arg(2))))
		if err != nil {
			return fail(unix.EFAULT)
		}
		if r := c.destination(k, a); r != nil {
			return *r
		}
		return cont()
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			okPort, _ := tcpListener(t, "tcp4", "127.0.0.1:0")
			var noPort int
			var noConns *atomic.Int64
			// the two addresses differ in their port only
			noPort, noConns = tcpListener(t, "tcp4", "127.0.0.1:0")
			o := map[string]handlerFunc(nil)
			if mode == "naive" {
				o = naive
			}
			sb := netSandbox(t, &NetPolicy{Rules: []NetDest{loopback4("tcp", okPort)}}, o)
			_ = noPort
			last := resp{Vals: make([]int64, 3)} // summed over the rounds
			for round := 0; round < 10 && noConns.Load() == 0; round++ {
				r := sb.do(t, req{Op: "race_connect", Path: "127.0.0.1", Arg: int64(okPort), Arg2: int64(noPort), N: 300})
				for i := range last.Vals {
					last.Vals[i] += r.Vals[i]
				}
			}
			time.Sleep(50 * time.Millisecond)
			t.Logf("%s: %v (ok, EACCES, other); refused port got %d", mode, last.Vals, noConns.Load())
			if mode == "supervised" {
				if noConns.Load() != 0 {
					t.Fatalf("the refused port got %d connections", noConns.Load())
				}
				if last.Vals[0] == 0 || last.Vals[1] == 0 {
					t.Fatal("the race never flipped: both outcomes should occur")
				}
			}
			if mode == "naive" && noConns.Load() == 0 {
				t.Fatal("the naive handler was not caught: the test cannot tell")
			}
		})
	}
}

// Another thread swaps the fd number between a unix socket and a UDP one while
// sendto with a refused inet address runs: the supervisor sends on the socket it
// checked (a unix socket refuses an inet address), so the refused port gets
// nothing. A handler that lets unix sockets through to the kernel is caught.
func TestNetSendtoFDSwap(t *testing.T) {
	naive := map[string]handlerFunc{"sendto": func(c *call) reply {
		k, r := c.socket(0)
		if r != nil {
			return *r
		}
		if k.family == unix.AF_UNIX {
			return cont()
		}
		return handleSendto(c)
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			okPort, _ := udpListener(t)
			noPort, noGot := udpListener(t)
			o := map[string]handlerFunc(nil)
			if mode == "naive" {
				o = naive
			}
			sb := netSandbox(t, &NetPolicy{Rules: []NetDest{loopback4("udp", okPort)}}, o)
			udp := sb.socket(t, unix.AF_INET, unix.SOCK_DGRAM)
			ux := sb.socket(t, unix.AF_UNIX, unix.SOCK_DGRAM)
			last := resp{Vals: make([]int64, 3)} // summed over the rounds
			for round := 0; round < 10 && noGot.Load() == 0; round++ {
				r := sb.do(t, req{Op: "race_sendto_fd", FD: udp, FD2: ux, Path: "127.0.0.1", Arg: int64(noPort), N: 500})
				for i := range last.Vals {
					last.Vals[i] += r.Vals[i]
				}
				last.Text = r.Text
			}
			time.Sleep(50 * time.Millisecond)
			t.Logf("%s: %v (ok, EACCES, other: %v); refused port got %d", mode, last.Vals, last.Text, noGot.Load())
			if mode == "supervised" && noGot.Load() != 0 {
				t.Fatalf("the refused port got %d datagrams", noGot.Load())
			}
			if mode == "supervised" && (last.Vals[1] == 0 || last.Vals[2] == 0) {
				t.Fatal("the race never flipped: both sockets should be seen")
			}
			if mode == "naive" && noGot.Load() == 0 {
				t.Fatal("the naive handler was not caught: the test cannot tell")
			}
		})
	}
}

// Unix sockets keep working under net rules: connect and datagrams to a path
// (resolved for the caller, relative paths from its cwd), descriptors passed with
// SCM_RIGHTS arrive as the very file sent; abstract addresses are refused where
// Landlock scopes them.
func TestNetUnixSockets(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{cfgFor: func(sb *sandbox) Config {
		return Config{Allowed: []string{sb.ro, sb.rw}, Net: &NetPolicy{Rules: []NetDest{loopback4("udp", 9)}}, AbstractScoped: true}
	}})
	path := filepath.Join(sb.rw, "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dg, err := net.ListenPacket("unixgram", filepath.Join(sb.rw, "g"))
	if err != nil {
		t.Fatal(err)
	}
	defer dg.Close()
	fd := sb.socket(t, unix.AF_UNIX, unix.SOCK_STREAM)
	wantErrno(t, "connect a unix path", sb.do(t, req{Op: "connect", FD: fd, Path: path}).Errno, 0)
	wantErrno(t, "chdir", sb.do(t, req{Op: "chdir", Path: sb.rw}).Errno, 0)
	fd = sb.socket(t, unix.AF_UNIX, unix.SOCK_STREAM)
	wantErrno(t, "connect a relative unix path", sb.do(t, req{Op: "connect", FD: fd, Path: "s"}).Errno, 0)
	fd = sb.socket(t, unix.AF_UNIX, unix.SOCK_STREAM)
	wantErrno(t, "connect a missing path", sb.do(t, req{Op: "connect", FD: fd, Path: filepath.Join(sb.rw, "nothing")}).Errno, unix.ENOENT)
	fd = sb.socket(t, unix.AF_UNIX, unix.SOCK_STREAM)
	wantErrno(t, "connect an abstract name", sb.do(t, req{Op: "connect", FD: fd, Path: "@sandtrap-test"}).Errno, unix.EPERM)
	g := sb.socket(t, unix.AF_UNIX, unix.SOCK_DGRAM)
	wantErrno(t, "sendto a unix datagram path", sb.do(t, req{Op: "sendto", FD: g, Path: filepath.Join(sb.rw, "g")}).Errno, 0)
	wantErrno(t, "sendmsg a unix datagram path", sb.do(t, req{Op: "sendmsg", FD: g, Path: filepath.Join(sb.rw, "g")}).Errno, 0)
	dg.SetReadDeadline(time.Now().Add(2 * time.Second))
	for i := 0; i < 2; i++ {
		if _, _, err := dg.ReadFrom(make([]byte, 8)); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
	}

	pair := sb.do(t, req{Op: "socketpair"})
	if pair.Errno != 0 {
		t.Fatalf("socketpair: %s", errnoName(pair.Errno))
	}
	file := sb.open(t, filepath.Join(sb.ro, "f"), os.O_RDONLY)
	a := sb.do(t, req{Op: "pass_fd", FD: int(pair.Vals[0]), FD2: int(pair.Vals[1]), N: file})
	if a.Errno != 0 || len(a.Vals) != 2 || a.Vals[0] != a.Vals[1] {
		t.Fatalf("SCM_RIGHTS: %s %v: the received descriptor is not the file sent", errnoName(a.Errno), a.Vals)
	}
}

// A root host's supervisor could reach sockets the caller may not: a unix path is
// resolved and connected with the caller's credentials. The caller here is root of
// its own user namespace, which the host's root does not trust with files of
// another user: a socket in a directory only uid 65534 may search stays out of its
// reach — and is reached when the supervisor acts with its own privileges.
func TestNetUnixAsCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the supervisor is not privileged: it has nothing to lend")
	}
	for _, mode := range []string{"as caller", "as supervisor"} {
		t.Run(mode, func(t *testing.T) {
			sb := newSandbox(t, sandboxOpts{cfgFor: func(sb *sandbox) Config {
				return Config{Allowed: []string{sb.ro, sb.rw}, Net: &NetPolicy{Rules: []NetDest{loopback4("udp", 9)}}}
			}})
			if mode == "as supervisor" {
				sb.sup.privileged = false // acts with the host's root privileges
			}
			dir := filepath.Join(sb.rw, "private")
			must(t, os.Mkdir(dir, 0o700))
			path := filepath.Join(dir, "s")
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			must(t, os.Chown(dir, 65534, 65534))
			fd := sb.socket(t, unix.AF_UNIX, unix.SOCK_STREAM)
			got := sb.do(t, req{Op: "connect", FD: fd, Path: path}).Errno
			if mode == "as caller" {
				wantErrno(t, "connect through a directory the caller may not search", got, unix.EACCES)
			} else if got != 0 {
				t.Fatalf("with the supervisor's privileges: %s, want success (the test cannot tell)", errnoName(got))
			}
		})
	}
}

// A connect the supervisor performs keeps the caller's blocking semantics: the
// socket is left as blocking as it was, a refused port is ECONNREFUSED, and a connect
// that cannot complete at once (the listener's queue is full: the SYN is dropped and
// sent again) waits, off the loop, until it does.
func TestNetConnectBlocking(t *testing.T) {
	// a listener with a queue of one that accepts nothing until told
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(lfd)
	port := sa.(*unix.SockaddrInet4).Port
	closed, _ := tcpListener(t, "tcp4", "127.0.0.1:0")
	sb := netSandbox(t, &NetPolicy{Rules: []NetDest{loopback4("tcp", port), loopback4("tcp", closed+1)}}, nil)

	// fill the queue (a backlog of 0 holds one connection), then one more waits
	var fds []int
	for i := 0; i < 1; i++ {
		fd := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
		wantErrno(t, "connect to fill the queue", sb.do(t, req{Op: "connect", FD: fd, Path: "127.0.0.1", Arg: int64(port)}).Errno, 0)
		fds = append(fds, fd)
	}
	if fl := sb.do(t, req{Op: "fcntl", FD: fds[0], Arg: unix.F_GETFL}).Val; fl&unix.O_NONBLOCK != 0 {
		t.Errorf("the socket was left non-blocking: flags %#x", fl)
	}
	fd := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	go func() {
		time.Sleep(300 * time.Millisecond)
		for i := 0; i < 3; i++ { // make room: the retransmitted SYN then gets in
			if c, _, err := unix.Accept(lfd); err == nil {
				defer unix.Close(c)
			}
		}
	}()
	start := time.Now()
	wantErrno(t, "connect that waits for room in the queue", sb.do(t, req{Op: "connect", FD: fd, Path: "127.0.0.1", Arg: int64(port)}).Errno, 0)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("the connect returned after %v, before the queue had room: it did not wait", d)
	}
	// the loop served other calls meanwhile: (measured by the test finishing at all)
	rfd := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "connect to an allowed port nobody listens on", sb.do(t, req{Op: "connect", FD: rfd, Path: "127.0.0.1", Arg: int64(closed + 1)}).Errno, unix.ECONNREFUSED)
}

// ICMP by destination: an icmp:// rule lets a ping socket reach the hosts it names
// and no other (echo requests are sends with an address: the supervisor performs
// them), and gives no TCP or UDP. Ping sockets need the caller's group inside
// net.ipv4.ping_group_range: as root the test widens it for its duration.
func TestNetICMP(t *testing.T) {
	const sysctl = "/proc/sys/net/ipv4/ping_group_range"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		t.Skipf("%s: %v", sysctl, err)
	}
	if os.Geteuid() == 0 {
		if err := os.WriteFile(sysctl, []byte("0 2147483647"), 0); err != nil {
			t.Skipf("widen %s: %v", sysctl, err)
		}
		t.Cleanup(func() { os.WriteFile(sysctl, old, 0) })
	}
	probe, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP)
	if err != nil {
		t.Skipf("no ping sockets for this user (%s is %q): %v", sysctl, strings.TrimSpace(string(old)), err)
	}
	unix.Close(probe)
	ok := NetDest{Proto: "icmp", Nets: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Text: "icmp://127.0.0.1"}
	sb := netSandbox(t, &NetPolicy{Rules: []NetDest{ok}}, nil)
	fd := int(sb.do(t, req{Op: "socket_proto", Arg: unix.AF_INET, Arg2: unix.SOCK_DGRAM, N: unix.IPPROTO_ICMP}).Val)
	if a := sb.do(t, req{Op: "ping", FD: fd, Path: "127.0.0.1", Arg: unix.AF_INET}); a.Errno != 0 || a.Val < 8 {
		t.Errorf("ping the allowed host: %s, %d bytes", errnoName(a.Errno), a.Val)
	}
	for _, ip := range []string{"127.0.0.2", "192.0.2.1"} {
		wantErrno(t, "ping "+ip, sb.do(t, req{Op: "ping", FD: fd, Path: ip, Arg: unix.AF_INET}).Errno, unix.EACCES)
	}
	// the icmp rule is no udp or tcp rule to that host
	u := sb.socket(t, unix.AF_INET, unix.SOCK_DGRAM)
	wantErrno(t, "udp to the icmp host", sb.do(t, req{Op: "sendto", FD: u, Path: "127.0.0.1", Arg: 9}).Errno, unix.EACCES)
	c := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "tcp to the icmp host", sb.do(t, req{Op: "connect", FD: c, Path: "127.0.0.1", Arg: 9}).Errno, unix.EACCES)
}
