//go:build linux

package supervise

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// listen (issue 10, class 4): listen() on an unbound inet socket autobinds an
// ephemeral port that no Landlock bind rule saw.

func listenTraps(cfg Config) []Trap {
	if !cfg.ListenNeedsBind {
		return nil
	}
	return []Trap{{Syscall: "listen", Arg: -1}}
}

// handleListen checks the socket's own address and then listens on the duplicate,
// the very socket that was checked (another thread re-pointing the fd number after
// the check changes nothing).
func handleListen(c *call) reply {
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	var sa unix.RawSockaddrAny
	l := uint32(unsafe.Sizeof(sa))
	if _, _, e := unix.Syscall(unix.SYS_GETSOCKNAME, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l))); e != 0 {
		if e == unix.ENOTSOCK {
			return fail(e) // what listen() answers
		}
		return c.failure("getsockname", e)
	}
	if addr, port, inet := inetAddr(&sa); inet && port == 0 && c.s.cfg.ListenNeedsBind {
		return deny(unix.EACCES, fmt.Sprintf("%s (not bound: listen would autobind a port)", netip.AddrPortFrom(addr, 0)))
	}
	if !c.valid() {
		return gone()
	}
	return result(0, unix.Listen(fd, int(c.argInt(1))))
}

// inetAddr decodes an AF_INET/AF_INET6 address (port in network byte order).
func inetAddr(sa *unix.RawSockaddrAny) (netip.Addr, uint16, bool) {
	switch sa.Addr.Family {
	case unix.AF_INET:
		in := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrFrom4(in.Addr), portOf(in.Port), true
	case unix.AF_INET6:
		in := (*unix.RawSockaddrInet6)(unsafe.Pointer(sa))
		return netip.AddrFrom16(in.Addr), portOf(in.Port), true
	}
	return netip.Addr{}, 0, false
}

func portOf(p uint16) uint16 {
	var b [2]byte
	*(*uint16)(unsafe.Pointer(&b[0])) = p
	return binary.BigEndian.Uint16(b[:])
}
