//go:build linux

package supervise

import (
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestListenRefusals(t *testing.T) {
	unbound := func(family int64) func(t *testing.T, sb *sandbox) syscall.Errno {
		return func(t *testing.T, sb *sandbox) syscall.Errno {
			a := sb.do(t, req{Op: "socket", Arg: family, Arg2: unix.SOCK_STREAM})
			if a.Errno != 0 {
				if family == unix.AF_INET6 && a.Errno == unix.EAFNOSUPPORT {
					t.Skip("no IPv6 on this machine")
				}
				t.Fatalf("socket: %s", errnoName(a.Errno))
			}
			sb.lastFD = int(a.Val)
			return sb.do(t, req{Op: "listen", FD: sb.lastFD, Arg: 8}).Errno
		}
	}
	// nothing listens: the socket was not autobound (its port is still 0)
	autobound := func(t *testing.T, sb *sandbox) bool {
		a := sb.do(t, req{Op: "port", FD: sb.lastFD})
		if a.Errno != 0 {
			t.Fatalf("getsockname: %s", errnoName(a.Errno))
		}
		if a.Val != 0 {
			t.Logf("autobound to port %d", a.Val)
		}
		return a.Val != 0
	}
	runAttacks(t, []attack{
		{name: "unbound_inet", run: unbound(unix.AF_INET), want: unix.EACCES, check: autobound},
		{name: "unbound_inet6", run: unbound(unix.AF_INET6), want: unix.EACCES, check: autobound},
	})
}

func TestListen(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	socket := func(family, typ int64) int {
		a := sb.do(t, req{Op: "socket", Arg: family, Arg2: typ})
		if a.Errno != 0 {
			t.Fatalf("socket: %s", errnoName(a.Errno))
		}
		return int(a.Val)
	}

	t.Run("bound_inet_listens_for_real", func(t *testing.T) {
		fd := socket(unix.AF_INET, unix.SOCK_STREAM)
		if e := sb.do(t, req{Op: "bind_loopback", FD: fd, Arg: unix.AF_INET}).Errno; e != 0 {
			t.Fatalf("bind: %s", errnoName(e))
		}
		if e := sb.do(t, req{Op: "listen", FD: fd, Arg: 8}).Errno; e != 0 {
			t.Fatalf("listen: %s", errnoName(e))
		}
		port := sb.do(t, req{Op: "port", FD: fd}).Val
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
		if err != nil {
			t.Fatalf("connect to the child's listener: %v", err)
		}
		c.Close()
		// listen again (a new backlog) is served too
		if e := sb.do(t, req{Op: "listen", FD: fd, Arg: 16}).Errno; e != 0 {
			t.Fatalf("listen again: %s", errnoName(e))
		}
	})

	t.Run("unix_socket_listens", func(t *testing.T) {
		fd := socket(unix.AF_UNIX, unix.SOCK_STREAM)
		path := filepath.Join(sb.rw, "sock")
		if e := sb.do(t, req{Op: "bind_unix", FD: fd, Path: path}).Errno; e != 0 {
			t.Fatalf("bind: %s", errnoName(e))
		}
		if e := sb.do(t, req{Op: "listen", FD: fd, Arg: 8}).Errno; e != 0 {
			t.Fatalf("listen: %s", errnoName(e))
		}
		c, err := net.DialTimeout("unix", path, 2*time.Second)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		c.Close()
	})

	t.Run("errors_are_the_kernels", func(t *testing.T) {
		if e := sb.do(t, req{Op: "listen", FD: 999, Arg: 8}).Errno; e != unix.EBADF {
			t.Fatalf("bad fd: %s, want EBADF", errnoName(e))
		}
		ifd := sb.do(t, req{Op: "inotify_init"}).Val
		if e := sb.do(t, req{Op: "listen", FD: int(ifd), Arg: 8}).Errno; e != unix.ENOTSOCK {
			t.Fatalf("not a socket: %s, want ENOTSOCK", errnoName(e))
		}
		// a bound datagram socket: the kernel's EOPNOTSUPP
		fd := socket(unix.AF_UNIX, unix.SOCK_DGRAM)
		sb.do(t, req{Op: "bind_unix", FD: fd, Path: filepath.Join(sb.rw, "dgram")})
		if e := sb.do(t, req{Op: "listen", FD: fd, Arg: 8}).Errno; e != unix.EOPNOTSUPP {
			t.Fatalf("datagram: %s, want EOPNOTSUPP", errnoName(e))
		}
	})
}

// Without ListenNeedsBind, listen is not trapped at all (and autobinds, as the kernel does).
func TestListenNotTrappedWithoutListenNeedsBind(t *testing.T) {
	for _, tr := range Traps(Config{}) {
		if tr.Syscall == "listen" {
			t.Fatal("listen is trapped without ListenNeedsBind")
		}
	}
	found := false
	for _, tr := range Traps(Config{ListenNeedsBind: true}) {
		found = found || tr.Syscall == "listen"
	}
	if !found {
		t.Fatal("listen is not trapped with ListenNeedsBind")
	}
}

// Another thread points the fd number at an unbound socket and back at a bound one
// while listen runs on that number. Checking the number and continuing would listen
// on whatever it names when the kernel runs; the handler listens on the socket it
// checked, so the unbound one is never autobound. A naive handler (check, CONTINUE)
// is caught.
func TestListenFdSwapNeverAutobinds(t *testing.T) {
	naive := map[string]handlerFunc{"listen": func(c *call) reply {
		r := handleListen(c)
		if r.kind == replyValue {
			return cont() // checked the number, let the kernel run it on the number
		}
		return r
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			o := sandboxOpts{}
			if mode == "naive" {
				o.override = naive
			}
			sb := newSandbox(t, o)
			bound := int(sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM}).Val)
			if e := sb.do(t, req{Op: "bind_loopback", FD: bound, Arg: unix.AF_INET}).Errno; e != 0 {
				t.Fatalf("bind: %s", errnoName(e))
			}
			escaped := false
			last := resp{Vals: make([]int64, 3)} // summed over the rounds
			for round := 0; round < 20 && !escaped; round++ {
				unbound := int(sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM}).Val)
				r := sb.do(t, req{Op: "race_listen", FD: bound, FD2: unbound, N: 500})
				for i := range last.Vals {
					last.Vals[i] += r.Vals[i]
				}
				escaped = sb.do(t, req{Op: "port", FD: unbound}).Val != 0
				sb.do(t, req{Op: "close", FD: unbound})
				if mode == "supervised" && escaped {
					t.Fatalf("round %d: the unbound socket was autobound (%v)", round, last.Vals)
				}
			}
			t.Logf("%s: %d listened, %d EACCES, %d other; escaped: %v", mode, last.Vals[0], last.Vals[1], last.Vals[2], escaped)
			if mode == "supervised" && (last.Vals[0] == 0 || last.Vals[1] == 0) {
				t.Fatal("the race never flipped: both outcomes should occur")
			}
			if mode == "naive" && !escaped {
				t.Fatal("the naive handler was not caught: the test cannot tell")
			}
		})
	}
}
