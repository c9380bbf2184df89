//go:build linux

package supervise

import (
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// executeHostPerform: the child's side of the path calls the host judges.
func executeHostPerform(r req) (resp, bool) {
	switch r.Op {
	case "unlinkat": // unlinkat(AT_FDCWD or FD when Path is relative and FD > 0, Path, Arg)
		dirfd := uintptr(0xffffff9c)
		if r.FD > 0 {
			dirfd = uintptr(r.FD)
		}
		p := cstr(r.Path)
		_, _, e := unix.Syscall(unix.SYS_UNLINKAT, dirfd, uintptr(unsafe.Pointer(p)), uintptr(r.Arg))
		runtime.KeepAlive(p)
		return resp{Errno: e}, true
	case "mkdirat": // mkdirat(AT_FDCWD, Path, Arg)
		p := cstr(r.Path)
		_, _, e := unix.Syscall(unix.SYS_MKDIRAT, uintptr(0xffffff9c), uintptr(unsafe.Pointer(p)), uintptr(r.Arg))
		runtime.KeepAlive(p)
		return resp{Errno: e}, true
	case "race_path": // N calls on a path another thread flips between Path and B (Arg: 0 unlink, 1 mkdir); Vals: [ok, B made or removed, refused]
		return racePath(r), true
	}
	return resp{}, false
}

func racePath(r req) resp {
	a, b := append([]byte(r.Path), 0), append([]byte(r.B), 0)
	if len(a) != len(b) {
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
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	var ok, reached, refused int64
	for i := 0; i < r.N; i++ {
		var e unix.Errno
		switch r.Arg {
		case 0:
			for _, p := range []string{r.Path, r.B} {
				if !exists(p) {
					os.WriteFile(p, nil, 0o644)
				}
			}
			_, _, e = unix.Syscall(unix.SYS_UNLINKAT, uintptr(0xffffff9c), uintptr(unsafe.Pointer(&buf[0])), 0)
		case 1:
			_, _, e = unix.Syscall(unix.SYS_MKDIRAT, uintptr(0xffffff9c), uintptr(unsafe.Pointer(&buf[0])), 0o755)
		}
		switch e {
		case 0:
			ok++
		case unix.EACCES:
			refused++
		}
		switch r.Arg {
		case 0:
			if !exists(r.B) {
				reached++
			}
		case 1:
			if exists(r.B) {
				reached++
				os.Remove(r.B)
			}
			os.Remove(r.Path)
		}
	}
	stop()
	runtime.KeepAlive(buf)
	return resp{Vals: []int64{ok, reached, refused}}
}

// The path calls the host judges that are performed for it: each is
// attacked by a thread flipping the path between an allowed and a refused one.
func TestHostPathRaces(t *testing.T) {
	for _, tc := range []struct {
		name    string
		syscall string
		op      int64
		leaf    string
	}{{"unlink", "unlinkat", 0, "t"}, {"mkdir", "mkdirat", 1, "m"}} {
		for _, naive := range []bool{false, true} {
			mode := "performed"
			if naive {
				mode = "continued"
			}
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				run := &fakeRun{deny: "/no/", done: make(chan struct{})}
				sb := hostSandbox(t, run, tc.syscall)
				naiveContinue = naive
				defer func() { naiveContinue = false }()
				var ok, reached, refused int64
				for round := 0; round < 5 && (naive && reached == 0 || !naive && round < 2); round++ {
					r := sb.do(t, req{Op: "race_path", Path: sb.rw + "/" + tc.leaf, B: sb.no + "/" + tc.leaf, Arg: tc.op, N: 1500})
					if r.Errno != 0 || len(r.Vals) != 3 {
						t.Fatalf("race_path: %v", r)
					}
					ok, reached, refused = ok+r.Vals[0], reached+r.Vals[1], refused+r.Vals[2]
				}
				t.Logf("%s %s: ok %d, reached the refused path %d, refused %d", tc.name, mode, ok, reached, refused)
				if ok == 0 || refused == 0 {
					t.Fatalf("the race did not happen (ok %d, refused %d)", ok, refused)
				}
				if !naive && reached != 0 {
					t.Fatalf("a racing thread reached the refused path %d times", reached)
				}
				if naive && reached == 0 {
					t.Fatalf("a continued call never lost the race: the test does not attack")
				}
			})
		}
	}
}

// The calls performed for the caller answer what the kernel would: its errors,
// the read-only mount, its umask, paths relative to its cwd and to a directory fd.
func TestHostPathPerformed(t *testing.T) {
	run := &fakeRun{deny: "/no/", done: make(chan struct{})}
	sb := hostSandbox(t, run, "unlinkat", "mkdirat", "bind")
	check := func(what string, r resp, want unix.Errno) {
		t.Helper()
		if r.Errno != want {
			t.Errorf("%s: %v, want %v", what, errnoName(r.Errno), errnoName(want))
		}
	}
	check("unlink a file", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/f"}), 0)
	if _, err := os.Stat(sb.rw + "/f"); !os.IsNotExist(err) {
		t.Errorf("rw/f still there: %v", err)
	}
	check("unlink it again", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/f"}), unix.ENOENT)
	check("unlink a directory", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/d"}), unix.EISDIR)
	check("unlink on the read-only mount", sb.do(t, req{Op: "unlinkat", Path: sb.ro + "/f"}), unix.EROFS)
	check("unlink refused by the judge", sb.do(t, req{Op: "unlinkat", Path: sb.no + "/f"}), unix.EACCES)
	check("unlink a symlink (not its target)", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/flink"}), 0)
	if _, err := os.Stat(sb.no + "/f"); err != nil {
		t.Errorf("the symlink's target went: %v", err)
	}
	check("mkdir", sb.do(t, req{Op: "mkdirat", Path: sb.rw + "/new/", Arg: 0o777}), 0)
	if st, err := os.Stat(sb.rw + "/new"); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("mkdir with the caller's umask (022): %v %v", st, err)
	}
	check("mkdir again", sb.do(t, req{Op: "mkdirat", Path: sb.rw + "/new", Arg: 0o777}), unix.EEXIST)
	check("mkdir on the read-only mount", sb.do(t, req{Op: "mkdirat", Path: sb.ro + "/new", Arg: 0o777}), unix.EROFS)
	check("rmdir with a trailing slash", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/new/", Arg: unix.AT_REMOVEDIR}), 0)
	check("unlink of a file with a trailing slash", sb.do(t, req{Op: "unlinkat", Path: sb.rw + "/dlink/", Arg: 0}), unix.ENOTDIR)
	check("chdir", sb.do(t, req{Op: "chdir", Path: sb.rw + "/d"}), 0)
	check("mkdir relative to the cwd", sb.do(t, req{Op: "mkdirat", Path: "rel", Arg: 0o700}), 0)
	if _, err := os.Stat(sb.rw + "/d/rel"); err != nil {
		t.Errorf("relative mkdir: %v", err)
	}
	dfd := sb.open(t, sb.rw, unix.O_DIRECTORY|unix.O_RDONLY)
	check("unlinkat relative to a directory fd", sb.do(t, req{Op: "unlinkat", FD: dfd, Path: "d/rel", Arg: unix.AT_REMOVEDIR}), 0)
	check("unlinkat leaving its directory fd", sb.do(t, req{Op: "unlinkat", FD: dfd, Path: "../no/f"}), unix.EACCES)
	// a unix socket bound by its path, with the caller's umask
	s := sb.do(t, req{Op: "socket", Arg: unix.AF_UNIX, Arg2: unix.SOCK_STREAM})
	check("bind a unix socket", sb.do(t, req{Op: "bind_unix", FD: int(s.Val), Path: sb.rw + "/sock"}), 0)
	if st, err := os.Lstat(sb.rw + "/sock"); err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("the socket file: %v %v", st, err)
	}
	if c, err := net.Dial("unix", sb.rw+"/sock"); err == nil {
		c.Close()
		t.Errorf("a socket not listening accepted")
	}
	check("listen", sb.do(t, req{Op: "listen", FD: int(s.Val), Arg: 1}), 0)
	if c, err := net.Dial("unix", sb.rw+"/sock"); err != nil {
		t.Errorf("connect to the socket the caller bound: %v", err)
	} else {
		c.Close()
	}
	s2 := sb.do(t, req{Op: "socket", Arg: unix.AF_UNIX, Arg2: unix.SOCK_STREAM})
	check("bind on the read-only mount", sb.do(t, req{Op: "bind_unix", FD: int(s2.Val), Path: sb.ro + "/sock"}), unix.EROFS)
	// inet: bound on the caller's socket
	p := freePort(t)
	s3 := sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM})
	check("bind tcp", sb.do(t, req{Op: "bind_addr", FD: int(s3.Val), Path: "127.0.0.1", Arg: int64(p)}), 0)
	if r := sb.do(t, req{Op: "port", FD: int(s3.Val)}); r.Val != int64(p) {
		t.Errorf("bound to %d, want %d", r.Val, p)
	}
	s4 := sb.do(t, req{Op: "socket", Arg: unix.AF_INET, Arg2: unix.SOCK_STREAM})
	check("bind tcp to a port in use", sb.do(t, req{Op: "bind_addr", FD: int(s4.Val), Path: "127.0.0.1", Arg: int64(p)}), unix.EADDRINUSE)
	check("bind of no socket", sb.do(t, req{Op: "bind_addr", FD: dfd, Path: "127.0.0.1", Arg: int64(p)}), unix.ENOTSOCK)
}

// The host judged one port; a thread flipping the address to another after the
// check never gets that one bound.
func TestHostBindRace(t *testing.T) {
	for _, naive := range []bool{false, true} {
		mode := "performed"
		if naive {
			mode = "continued"
		}
		t.Run(mode, func(t *testing.T) {
			v, other := freePort(t), quietPort(t)
			run := &fakeRun{denyPort: other, done: make(chan struct{})}
			sb := hostSandbox(t, run, "bind")
			naiveContinue = naive
			defer func() { naiveContinue = false }()
			var sum [4]int64
			for round := 0; round < 10 && (sum[3] == 0 || !naive); round++ {
				r := sb.do(t, req{Op: "race_bind", Path: "127.0.0.1", Arg: int64(v), Arg2: int64(other), N: 200})
				for i := range sum {
					sum[i] += r.Vals[i]
				}
				for _, s := range r.Text {
					fd, _ := strconv.Atoi(s)
					sb.do(t, req{Op: "close", FD: fd})
				}
				if !naive && round >= 2 {
					break
				}
			}
			t.Logf("%s: ok %d, EACCES %d, other %d, bound to the refused port %d", mode, sum[0], sum[1], sum[2], sum[3])
			if sum[0] == 0 || sum[1] == 0 {
				t.Fatal("the race never flipped: both outcomes should occur")
			}
			if !naive && sum[3] != 0 {
				t.Fatalf("%d binds got the port the host refused", sum[3])
			}
			if naive && sum[3] == 0 {
				t.Fatal("a continued bind never lost the race: the test does not attack")
			}
		})
	}
}
