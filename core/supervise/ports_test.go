//go:build linux

package supervise

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ---- the child side ----

func executePorts(r req) (resp, bool) {
	switch r.Op {
	case "bind_addr": // bind(FD, Path:Arg)
		b, n := rawAddr(r.Path, int(r.Arg))
		_, e := raw(unix.SYS_BIND, uintptr(r.FD), uintptr(unsafe.Pointer(&b[0])), uintptr(n))
		return resp{Errno: e}, true
	case "sockname": // getsockname(FD, buf, &Arg): Vals [port, len written back, bytes of buf written]
		var buf [128]byte
		for i := range buf {
			buf[i] = 0xee
		}
		l := uint32(r.Arg)
		_, e := raw(unix.SYS_GETSOCKNAME, uintptr(r.FD), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)))
		if e != 0 {
			return resp{Errno: e}, true
		}
		written := 0
		for written < len(buf) && buf[written] != 0xee {
			written++
		}
		return resp{Vals: []int64{int64(binary.BigEndian.Uint16(buf[2:4])), int64(l), int64(written)}}, true
	case "race_bind": // N rounds: a TCP socket bound to a buffer another thread flips between ports Arg and Arg2; Vals: [ok, EACCES, other, ok answered by getsockname with a port other than Arg]; the bound sockets stay open (Text: their fds)
		return raceBind(r), true
	}
	return resp{}, false
}

func raceBind(r req) resp {
	a, n := rawAddr(r.Path, int(r.Arg))
	b, _ := rawAddr(r.Path, int(r.Arg2))
	buf := make([]byte, len(a))
	copy(buf, a)
	stop := flipper(func(i int) {
		if i%2 == 0 {
			copy(buf, b)
		} else {
			copy(buf, a)
		}
	})
	var ok, acces, other, wrong int64
	var fds []string
	for i := 0; i < r.N; i++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			other++
			continue
		}
		_, e := raw(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(n))
		switch e {
		case 0:
			ok++
			if sa, err := unix.Getsockname(fd); err != nil || sa.(*unix.SockaddrInet4).Port != int(r.Arg) {
				wrong++
			}
			fds = append(fds, strconv.Itoa(fd))
			continue
		case unix.EACCES:
			acces++
		default:
			other++
		}
		unix.Close(fd)
	}
	stop()
	runtime.KeepAlive(buf)
	return resp{Vals: []int64{ok, acces, other, wrong}, Text: fds}
}

// ---- the parent side ----

// freePort is a TCP port nothing holds on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

// quietPort is a free port below the ephemeral range (ip_local_port_range starts
// at 32768 by default): no connect or bind to port 0 — of this machine's other
// programs, or a remap of the supervisor's own — is given it meanwhile, so finding
// it held later means one of ours holds it.
func quietPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		p := 20000 + rand.IntN(12000)
		if l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

func portsSandbox(t *testing.T, pm *PortMap, override map[string]handlerFunc) *sandbox {
	return newSandbox(t, sandboxOpts{cfgFor: func(sb *sandbox) Config {
		return Config{Allowed: []string{sb.ro, sb.rw}, ListenNeedsBind: true, Ports: pm}
	}, override: override})
}

func livePorts(t *testing.T, pm *PortMap) map[uint16]uint16 {
	t.Helper()
	m, _, err := pm.Ports()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// connects reports whether a TCP connect from the host to 127.0.0.1:port succeeds.
func connects(port int) bool {
	c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Two sandboxes bind the same virtual port at once: each gets a real port of its
// own (the first the virtual port itself, which is free), getsockname answers the
// virtual port, the host reaches each on its real port, a connect from inside to
// the virtual port on loopback reaches the sandbox's own socket, and the mapping
// goes away when the socket is closed. A port that is not virtual stays EACCES.
func TestPortsTwoSandboxes(t *testing.T) {
	v := freePort(t)
	pmA, pmB := NewPortMap([]uint16{uint16(v)}), NewPortMap([]uint16{uint16(v)})
	a, b := portsSandbox(t, pmA, nil), portsSandbox(t, pmB, nil)
	var fds [2]int
	for i, sb := range []*sandbox{a, b} {
		fds[i] = sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
		wantErrno(t, "bind the virtual port", sb.do(t, req{Op: "bind_addr", FD: fds[i], Path: "0.0.0.0", Arg: int64(v)}).Errno, 0)
		wantErrno(t, "listen", sb.do(t, req{Op: "listen", FD: fds[i], Arg: 8}).Errno, 0)
		got := sb.do(t, req{Op: "sockname", FD: fds[i], Arg: 128})
		if got.Errno != 0 || got.Vals[0] != int64(v) || got.Vals[1] != unix.SizeofSockaddrInet4 || got.Vals[2] != unix.SizeofSockaddrInet4 {
			t.Errorf("getsockname: %s %v, want port %d, length %d written and answered", errnoName(got.Errno), got.Vals, v, unix.SizeofSockaddrInet4)
		}
		// a short buffer gets what fits, the length answered is the address's
		got = sb.do(t, req{Op: "sockname", FD: fds[i], Arg: 4})
		if got.Errno != 0 || got.Vals[0] != int64(v) || got.Vals[1] != unix.SizeofSockaddrInet4 || got.Vals[2] != 4 {
			t.Errorf("getsockname(len 4): %s %v, want port %d, 4 bytes written, length %d", errnoName(got.Errno), got.Vals, v, unix.SizeofSockaddrInet4)
		}
	}
	ma, mb := livePorts(t, pmA), livePorts(t, pmB)
	ra, rb := ma[uint16(v)], mb[uint16(v)]
	t.Logf("virtual %d: sandbox A real %d, sandbox B real %d", v, ra, rb)
	if ra != uint16(v) {
		t.Errorf("the first sandbox got real port %d for the free virtual port %d", ra, v)
	}
	if rb == 0 || rb == ra {
		t.Fatalf("the second sandbox's real port is %d (the first's %d)", rb, ra)
	}
	for _, r := range []uint16{ra, rb} {
		if !connects(int(r)) {
			t.Errorf("the host cannot connect to real port %d", r)
		}
	}
	// inside: a connect to the virtual port on loopback reaches its own socket
	for _, ip := range []string{"127.0.0.1", "0.0.0.0"} {
		c := b.socket(t, unix.AF_INET, unix.SOCK_STREAM)
		wantErrno(t, "connect "+ip+" on the virtual port", b.do(t, req{Op: "connect", FD: c, Path: ip, Arg: int64(v)}).Errno, 0)
		if got := b.do(t, req{Op: "sockname", FD: c, Arg: 128}); got.Vals[0] == int64(v) {
			t.Errorf("the client socket's own port is the virtual one")
		}
	}
	other := freePort(t)
	c := a.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "bind a port not in net_allow_bind", a.do(t, req{Op: "bind_addr", FD: c, Path: "127.0.0.1", Arg: int64(other)}).Errno, unix.EACCES)
	wantErrno(t, "bind port 0", a.do(t, req{Op: "bind_addr", FD: c, Path: "127.0.0.1", Arg: 0}).Errno, unix.EACCES)
	if !a.denied("tcp bind to port " + strconv.Itoa(other) + " (not in net_allow_bind)") {
		t.Errorf("no denial recorded: %+v", a.sup.Denials())
	}
	// closed: the mapping goes
	wantErrno(t, "close", b.do(t, req{Op: "close", FD: fds[1]}).Errno, 0)
	if m := livePorts(t, pmB); len(m) != 0 {
		t.Errorf("after close: %v", m)
	}
	if m := livePorts(t, pmA); m[uint16(v)] != ra {
		t.Errorf("the other sandbox's mapping changed: %v", m)
	}
}

// UDP binds are remapped too; IPv4 and IPv6 sockets on one virtual port share a
// real port when they can; a privileged virtual port is never bound as such by the
// supervisor (which may be root).
func TestPortsUDPAndPrivileged(t *testing.T) {
	v := freePort(t)
	hold, err := net.ListenPacket("udp4", "127.0.0.1:"+strconv.Itoa(v)) // the real port is taken for UDP
	if err != nil {
		t.Skip(err)
	}
	defer hold.Close()
	pm := NewPortMap([]uint16{uint16(v), 80})
	sb := portsSandbox(t, pm, nil)
	u := sb.socket(t, unix.AF_INET, unix.SOCK_DGRAM)
	wantErrno(t, "bind udp", sb.do(t, req{Op: "bind_addr", FD: u, Path: "127.0.0.1", Arg: int64(v)}).Errno, 0)
	if got := sb.do(t, req{Op: "sockname", FD: u, Arg: 128}); got.Vals[0] != int64(v) {
		t.Errorf("udp getsockname: port %d, want %d", got.Vals[0], v)
	}
	_, live, _ := pm.Ports()
	if len(live) != 1 || live[0].Proto != "udp" || live[0].Real == uint16(v) {
		t.Fatalf("udp mapping %+v", live)
	}
	// TCP on the same virtual port: the UDP socket's real port first
	c := sb.socket(t, unix.AF_INET6, unix.SOCK_STREAM)
	wantErrno(t, "bind tcp6", sb.do(t, req{Op: "bind_addr", FD: c, Path: "::", Arg: int64(v)}).Errno, 0)
	_, live, _ = pm.Ports()
	if len(live) != 2 {
		t.Fatalf("tcp6 on the same virtual port: %+v", live)
	}
	if live[1].Real != live[0].Real {
		// allowed only if the UDP socket's real port was taken for TCP (by another
		// process of this machine: tests of other packages bind ports too)
		// (bound as the supervisor binds: without SO_REUSEADDR, which Go's net.Listen
		// sets, so that a TIME_WAIT connection on that port counts as taking it)
		if err := bindTCP6NoReuse(int(live[0].Real)); err == nil {
			t.Errorf("tcp6 on the same virtual port: %+v, want the same real port (it is free for TCP)", live)
		} else {
			t.Logf("tcp6 got real port %d: the UDP socket's %d is taken for TCP (%v)", live[1].Real, live[0].Real, err)
		}
	}
	p := sb.socket(t, unix.AF_INET, unix.SOCK_STREAM)
	wantErrno(t, "bind virtual port 80", sb.do(t, req{Op: "bind_addr", FD: p, Path: "127.0.0.1", Arg: 80}).Errno, 0)
	m := livePorts(t, pm)
	if r := m[80]; r == 0 || r < unprivilegedPortStart() {
		t.Errorf("virtual port 80 is real port %d (want an unprivileged one)", r)
	}
}

// Another thread flips the bind address between the virtual port and a port that
// is not virtual: the supervisor binds from its copy, so no socket ever holds the
// other port and every bind that succeeds is remapped. A handler that checks and
// continues (the kernel reads the address again) is caught.
func TestPortsBindRace(t *testing.T) {
	naive := map[string]handlerFunc{"bind": func(c *call) reply {
		a, err := c.readAddr(c.arg(1), uint64(uint32(c.arg(2))))
		if err != nil {
			return fail(unix.EFAULT)
		}
		if p, _ := a.port(); !c.s.cfg.Ports.Virtual(p) {
			return fail(unix.EACCES)
		}
		return cont()
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			v, other := freePort(t), quietPort(t)
			var o map[string]handlerFunc
			if mode == "naive" {
				o = naive
			}
			pm := NewPortMap([]uint16{uint16(v)})
			sb := portsSandbox(t, pm, o)
			var sum [4]int64
			taken := false
			for round := 0; round < 10 && !taken; round++ {
				r := sb.do(t, req{Op: "race_bind", Path: "127.0.0.1", Arg: int64(v), Arg2: int64(other), N: 200})
				for i := range sum {
					sum[i] += r.Vals[i]
				}
				// is the other port held (by a socket of the sandbox)?
				if l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(other)); err != nil {
					taken = true
				} else {
					l.Close()
				}
				for _, s := range r.Text {
					fd, _ := strconv.Atoi(s)
					sb.do(t, req{Op: "close", FD: fd})
				}
			}
			t.Logf("%s: ok %d, EACCES %d, other %d, answered another port %d; other port taken: %v", mode, sum[0], sum[1], sum[2], sum[3], taken)
			if mode == "supervised" {
				if taken {
					t.Fatal("a socket of the sandbox holds the port that is not virtual")
				}
				if sum[0] == 0 || sum[1] == 0 {
					t.Fatal("the race never flipped: both outcomes should occur")
				}
				if sum[3] != 0 {
					t.Errorf("%d binds answered another port than the virtual one", sum[3])
				}
			}
			if mode == "naive" && !taken {
				t.Fatal("the naive handler was not caught: the test cannot tell")
			}
		})
	}
}

// bindTCP6NoReuse binds (and closes) a TCP socket on [::]:port without SO_REUSEADDR.
func bindTCP6NoReuse(port int) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Bind(fd, &unix.SockaddrInet6{Port: port})
}
