//go:build linux

package supervise

import (
	stdnet "net"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The round trip of one notified call (trap, RECV, handler, SEND, return) against the
// same call unnotified: both in a child of the same kind, under a filter (the
// unnotified one's filter traps the other calls only), measured in the same run:
//
//	go test -run '^$' -bench . -benchtime 20000x ./core/supervise
//
// child-ns/op is the child's own time per call; ns/op, the parent's wall time per
// call, adds one request round trip per b.N. "notified-continue" is the same trap
// answered CONTINUE with no handler: the round trip alone.

func benchCall(b *testing.B, op string, notified bool, override map[string]handlerFunc) {
	var port int
	var net *NetPolicy
	switch op {
	case "sendto":
		u, err := stdnet.ListenPacket("udp4", "127.0.0.1:0")
		must(b, err)
		b.Cleanup(func() { u.Close() })
		go func() { // drain
			buf := make([]byte, 64)
			for {
				if _, _, err := u.ReadFrom(buf); err != nil {
					return
				}
			}
		}()
		port = u.LocalAddr().(*stdnet.UDPAddr).Port
		net = &NetPolicy{Rules: []NetDest{loopback4("udp", port)}}
	case "connect":
		l, err := stdnet.Listen("tcp4", "127.0.0.1:0")
		must(b, err)
		b.Cleanup(func() { l.Close() })
		go func() { // accept and close
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		port = l.Addr().(*stdnet.TCPAddr).Port
		net = &NetPolicy{Rules: []NetDest{loopback4("tcp", port)}}
	}
	cfg := func(sb *sandbox) Config {
		return Config{Allowed: []string{sb.ro, sb.rw}, ListenNeedsBind: true, Net: net}
	}
	var traps []Trap
	if !notified {
		for _, tr := range Traps(Config{ListenNeedsBind: true, Net: net}) {
			if tr.Syscall != op {
				traps = append(traps, tr)
			}
		}
	}
	sb := newSandbox(b, sandboxOpts{cfgFor: cfg, traps: traps, override: override})
	var fd int
	switch op {
	case "flock":
		fd = sb.open(b, filepath.Join(sb.rw, "f"), unix.O_RDONLY)
	case "sendto":
		fd = int(sb.do(b, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_DGRAM}).Val)
	case "listen":
		fd = int(sb.do(b, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM}).Val)
		if e := sb.do(b, req{Op: "bind_loopback", FD: fd, Arg: unix.AF_INET}).Errno; e != 0 {
			b.Fatalf("bind: %s", errnoName(e))
		}
	}
	if a := sb.do(b, req{Op: "bench", Path: op, FD: fd, N: 10, Arg: int64(port)}); a.Errno != 0 { // warm up, and check it works
		b.Fatalf("%s: %s", op, errnoName(a.Errno))
	}
	b.ResetTimer()
	a := sb.do(b, req{Op: "bench", Path: op, FD: fd, N: b.N, Arg: int64(port)})
	b.StopTimer()
	if a.Errno != 0 {
		b.Fatalf("%s: %s", op, errnoName(a.Errno))
	}
	b.ReportMetric(float64(a.Val)/float64(b.N), "child-ns/op")
}

func BenchmarkFlock(b *testing.B) {
	b.Run("notified", func(b *testing.B) { benchCall(b, "flock", true, nil) })
	b.Run("notified-continue", func(b *testing.B) { benchCall(b, "flock", true, continueAll()) })
	b.Run("unnotified", func(b *testing.B) { benchCall(b, "flock", false, nil) })
}

func BenchmarkListen(b *testing.B) {
	b.Run("notified", func(b *testing.B) { benchCall(b, "listen", true, nil) })
	b.Run("notified-continue", func(b *testing.B) { benchCall(b, "listen", true, continueAll()) })
	b.Run("unnotified", func(b *testing.B) { benchCall(b, "listen", false, nil) })
}

// BenchmarkSendto and BenchmarkConnect: a UDP datagram to, and a TCP connect (and
// close) to, an allowed 127.0.0.1 port: checked and performed by the supervisor
// (notified), the trap alone answered CONTINUE, and the kernel alone (the rules'
// traps left out of the filter).
func BenchmarkSendto(b *testing.B) {
	b.Run("notified", func(b *testing.B) { benchCall(b, "sendto", true, nil) })
	b.Run("notified-continue", func(b *testing.B) { benchCall(b, "sendto", true, continueAll()) })
	b.Run("unnotified", func(b *testing.B) { benchCall(b, "sendto", false, nil) })
}

func BenchmarkConnect(b *testing.B) {
	b.Run("notified", func(b *testing.B) { benchCall(b, "connect", true, nil) })
	b.Run("notified-continue", func(b *testing.B) { benchCall(b, "connect", true, continueAll()) })
	b.Run("unnotified", func(b *testing.B) { benchCall(b, "connect", false, nil) })
}
