//go:build linux

package supervise

// The test harness. Each test starts a sandbox child: this test binary re-executed in
// a new user and mount namespace (so it works as root and unprivileged), which
// bind-mounts <base>/ro read-only over itself, installs a seccomp filter built with
// libseccomp from Traps(cfg) (ActNotify, exported as BPF, loaded with
// SECCOMP_FILTER_FLAG_NEW_LISTENER|TSYNC as the zygote does), hands the listener fd to
// the parent over a unix socket (SCM_RIGHTS) and closes its own copy. The parent runs
// the supervisor on it; the child then executes the commands the parent sends (one
// goroutine each, so calls can block concurrently) and answers their results.
//
// The tree, for every sandbox (ro, rw and no have names of equal length, for the
// races that flip one path into the other):
//
//	<base>/ro/   in Allowed, read-only in the child
//	<base>/rw/   in Allowed, read-write
//	<base>/no/   outside Allowed
//	each with f (a file) and d/ (a directory);
//	<base>/rw/dlink -> ../no/d   <base>/rw/flink -> ../no/f   <base>/rw/inlink -> d

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	sc "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

const childEnv = "SUPERVISE_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	if spec := os.Getenv(supervisorEnv); spec != "" {
		os.Exit(runSupervisor(spec))
	}
	os.Exit(m.Run())
}

// childSpec is what the child is told on its command line's environment.
type childSpec struct {
	ReadOnly string // bind-mounted read-only over itself
	Traps    []Trap
}

// testCookie exempts the child's own sendmsg of the listener from a sendmsg trap,
// as the engine's cookie exempts the zygote's.
const testCookie = 0x5eed_c00c1e

// req is one command for the child.
type req struct {
	ID   int64
	Op   string
	Path string
	B    string // a second path (races)
	FD   int
	FD2  int
	Arg  int64
	Arg2 int64
	N    int
}

// resp is the child's answer: Errno 0 means success.
type resp struct {
	ID    int64
	Errno syscall.Errno
	Val   int64
	Vals  []int64
	Text  []string
	fd    int // an fd the child sent along (sendfd), received by the parent
}

// ---- the parent side ----

type sandbox struct {
	base, ro, rw, no string
	cmd              *exec.Cmd
	sock             *os.File
	sup              *Supervisor
	out              *bytes.Buffer
	nextID           atomic.Int64
	mu               sync.Mutex
	waiting          map[int64]chan resp
	dead             chan struct{}
	lastFD           int // an fd an attack's run leaves for its check
	listener         int // with handOff
}

type sandboxOpts struct {
	cfgFor   func(*sandbox) Config  // default: Allowed = ro, rw; ListenNeedsBind
	traps    []Trap                 // default: Traps(cfg)
	override map[string]handlerFunc // handlers replaced (tests showing an attack escapes without the real one)
	handOff  bool                   // no supervisor: the listener is left in sandbox.listener
	pidns    bool                   // the child is in a pid namespace of its own, attached as a run
}

// continueAll is a supervisor without checks: every trapped call runs as if unwatched.
func continueAll() map[string]handlerFunc {
	m := map[string]handlerFunc{}
	for _, h := range handlers {
		m[h.name] = func(*call) reply { return cont() }
	}
	return m
}

var probeOnce sync.Once
var probeSkip string

// probe skips the test where the kernel lacks what the harness needs, naming it.
func probe(t testing.TB) {
	probeOnce.Do(func() {
		if _, err := notifSizes(); err != nil {
			probeSkip = "seccomp user notification unavailable: " + err.Error()
			return
		}
		fd, err := unix.PidfdOpen(os.Getpid(), unix.PIDFD_THREAD)
		if err != nil {
			probeSkip = "pidfd_open(PIDFD_THREAD) unavailable (Linux < 6.9): " + err.Error()
			return
		}
		unix.Close(fd)
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = nsAttr()
		if err := cmd.Run(); err != nil {
			probeSkip = "cannot create a user+mount namespace: " + err.Error()
		}
	})
	if probeSkip != "" {
		t.Skip(probeSkip)
	}
}

func nsAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

func newSandbox(t testing.TB, o sandboxOpts) *sandbox {
	probe(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sb := &sandbox{base: base, ro: filepath.Join(base, "ro"), rw: filepath.Join(base, "rw"), no: filepath.Join(base, "no"),
		waiting: map[int64]chan resp{}, dead: make(chan struct{}), out: &bytes.Buffer{}}
	for _, d := range []string{sb.ro, sb.rw, sb.no} {
		must(t, os.MkdirAll(filepath.Join(d, "d"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f"), []byte("data\n"), 0o644))
	}
	must(t, os.Symlink("../no/d", filepath.Join(sb.rw, "dlink")))
	must(t, os.Symlink("../no/f", filepath.Join(sb.rw, "flink")))
	must(t, os.Symlink("d", filepath.Join(sb.rw, "inlink")))
	cfg := Config{Allowed: []string{sb.ro, sb.rw}, ListenNeedsBind: true}
	if o.cfgFor != nil {
		cfg = o.cfgFor(sb)
	}
	traps := o.traps
	if traps == nil {
		traps = Traps(cfg)
	}
	spec, _ := json.Marshal(childSpec{ReadOnly: sb.ro, Traps: traps})

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	must(t, err)
	sb.sock = os.NewFile(uintptr(pair[0]), "control")
	theirs := os.NewFile(uintptr(pair[1]), "control-child")
	sb.cmd = exec.Command(os.Args[0], "-test.run=^$")
	if o.pidns {
		// pid 1 is a shell that outlives the child (killing the child alone does not
		// end the namespace): the run's init, as sandtrap-init is an engine run's
		sb.cmd = exec.Command("/bin/sh", "-c", `"$0" "$1" & wait; exec sleep 3600`, os.Args[0], "-test.run=^$")
	}
	sb.cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	sb.cmd.ExtraFiles = []*os.File{theirs}
	sb.cmd.Stdout, sb.cmd.Stderr = sb.out, sb.out
	sb.cmd.SysProcAttr = nsAttr()
	if o.pidns {
		sb.cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID
	}
	if err := startFromSpawner(sb.cmd); err != nil {
		t.Fatalf("start the child: %v", err)
	}
	theirs.Close()
	t.Cleanup(func() {
		sb.cmd.Process.Kill()
		<-sb.dead
		if sb.sup != nil {
			sb.sup.Close()
		}
		sb.sock.Close()
		if t.Failed() {
			t.Logf("child output:\n%s", sb.out.String())
		}
	})
	go func() {
		sb.cmd.Wait()
		close(sb.dead)
	}()
	first, fds, err := sb.recv()
	if err != nil || len(fds) != 1 || first.Text == nil || first.Text[0] != "listener" {
		sb.cmd.Process.Kill()
		<-sb.dead
		t.Fatalf("no listener from the child (%v, %v): %s", err, first, sb.out.String())
	}
	if o.handOff {
		sb.listener = fds[0]
	} else {
		sup, err := start(fds[0], cfg, o.override)
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		sb.sup = sup
		if o.pidns {
			pidfd, err := unix.PidfdOpen(sb.cmd.Process.Pid, 0)
			must(t, err)
			sup.AttributeRuns()
			if _, err := sup.Attach(pidfd, sb.cmd.Process.Pid); err != nil {
				t.Fatalf("attach: %v", err)
			}
			t.Cleanup(func() { unix.Close(pidfd) }) // after sup.Close (cleanups run last first)
		}
	}
	go sb.readLoop()
	return sb
}

// The children die with the thread that started them (Pdeathsig), and a thread
// ends when a goroutine locked to it does (the supervisor's calls made with a
// caller's credentials): they are all started from one thread that lives on.
var spawner = func() chan func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
}()

func startFromSpawner(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	spawner <- func() { errc <- cmd.Start() }
	return <-errc
}

func newSandboxWith(t testing.TB, cfgFor func(*sandbox) Config) *sandbox {
	return newSandbox(t, sandboxOpts{cfgFor: cfgFor})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (sb *sandbox) recv() (resp, []int, error) {
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(int(sb.sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return resp{}, nil, err
	}
	if n == 0 {
		return resp{}, nil, io.EOF
	}
	var r resp
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return resp{}, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, m := range msgs {
				if f, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, f...)
				}
			}
		}
	}
	return r, fds, nil
}

func (sb *sandbox) readLoop() {
	for {
		r, fds, err := sb.recv()
		if err != nil {
			sb.mu.Lock()
			for id, ch := range sb.waiting {
				close(ch)
				delete(sb.waiting, id)
			}
			sb.mu.Unlock()
			return
		}
		r.fd = -1
		if len(fds) > 0 {
			r.fd = fds[0]
		}
		sb.mu.Lock()
		ch := sb.waiting[r.ID]
		delete(sb.waiting, r.ID)
		sb.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// async sends a command; its answer arrives on the channel (closed if the child died).
func (sb *sandbox) async(r req) <-chan resp {
	r.ID = sb.nextID.Add(1)
	ch := make(chan resp, 1)
	sb.mu.Lock()
	sb.waiting[r.ID] = ch
	sb.mu.Unlock()
	b, _ := json.Marshal(r)
	if _, err := sb.sock.Write(b); err != nil {
		panic(fmt.Sprintf("send to the child: %v", err))
	}
	return ch
}

// do runs a command and waits for its answer (10 s at most).
func (sb *sandbox) do(t testing.TB, r req) resp {
	t.Helper()
	select {
	case a, ok := <-sb.async(r):
		if !ok {
			t.Fatalf("%s: the child died: %s", r.Op, sb.out.String())
		}
		return a
	// a loop of N calls gets 10 ms more per call (3,000 judged calls take ~1 s here,
	// many times that beside the engine's tests on a 2-core machine)
	case <-time.After(10*time.Second + time.Duration(r.N)*10*time.Millisecond):
		t.Fatalf("%s %s: no answer in %v", r.Op, r.Path, 10*time.Second+time.Duration(r.N)*10*time.Millisecond)
	}
	panic("unreachable")
}

// open opens a file in the child, failing the test if it cannot.
func (sb *sandbox) open(t testing.TB, path string, flags int) int {
	t.Helper()
	a := sb.do(t, req{Op: "open", Path: path, Arg: int64(flags)})
	if a.Errno != 0 {
		t.Fatalf("open %s in the child: %v", path, a.Errno)
	}
	return int(a.Val)
}

// idle waits until the supervisor has no call in hand.
func (sb *sandbox) idle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for sb.sup.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the supervisor still handles %d calls", sb.sup.inflight.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// errnoName prints errno 0 as "success".
func errnoName(e syscall.Errno) string {
	if e == 0 {
		return "success"
	}
	return fmt.Sprintf("%s (%d)", unix.ErrnoName(e), int(e))
}

// ---- the child side ----

var ctl int // the control socket (fd 3)

func runChild(specJSON string) int {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "child: spec:", err)
		return 2
	}
	ctl = 3
	if err := childSetup(spec); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var wmu sync.Mutex
	reply := func(r resp, fds ...int) {
		b, _ := json.Marshal(r)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		wmu.Lock()
		defer wmu.Unlock()
		if err := unix.Sendmsg(ctl, b, oob, nil, 0); err != nil {
			fmt.Fprintln(os.Stderr, "child: send:", err)
			os.Exit(3)
		}
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := unix.Read(ctl, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0
		}
		var r req
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			fmt.Fprintln(os.Stderr, "child: request:", err)
			return 2
		}
		go func(r req) {
			a, fds := execute(r)
			a.ID = r.ID
			reply(a, fds...)
		}(r)
	}
}

func childSetup(spec childSpec) error {
	// a read-only view of <base>/ro: keep the flags the mount has (a user namespace
	// may not clear them), add MS_RDONLY
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount(spec.ReadOnly, spec.ReadOnly, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", spec.ReadOnly, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(spec.ReadOnly, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, f := range [][2]uintptr{{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME}} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	if err := unix.Mount("", spec.ReadOnly, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", spec.ReadOnly, err)
	}
	listener, err := loadFilter(spec.Traps)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(resp{Text: []string{"listener"}})
	oob := unix.UnixRights(listener)
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	h := unix.Msghdr{Iov: &iov, Control: &oob[0]}
	h.SetIovlen(1)
	h.SetControllen(len(oob))
	if _, _, e := unix.Syscall6(unix.SYS_SENDMSG, uintptr(ctl), uintptr(unsafe.Pointer(&h)), 0, 0, 0, testCookie); e != 0 {
		return fmt.Errorf("send the listener: %w", e)
	}
	runtime.KeepAlive(b)
	runtime.KeepAlive(oob)
	return unix.Close(listener) // the supervisor's copy must be the last one
}

// loadFilter compiles an allow-by-default filter that notifies on traps (libseccomp,
// as core/seccomp) and loads it on every thread with a new listener.
func loadFilter(traps []Trap) (int, error) {
	f, err := sc.NewFilter(sc.ActAllow)
	if err != nil {
		return -1, err
	}
	defer f.Release()
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return -1, err
	}
	for _, tr := range traps {
		nr, err := sc.GetSyscallFromName(tr.Syscall)
		if err != nil {
			return -1, fmt.Errorf("trap %s: %w", tr.Syscall, err)
		}
		if tr.NonZero {
			cond, cerr := sc.MakeCondition(uint(tr.Arg), sc.CompareNotEqual, 0)
			if cerr != nil {
				return -1, cerr
			}
			err = f.AddRuleConditionalExact(nr, sc.ActNotify, []sc.ScmpCondition{cond})
		} else if tr.Arg < 0 && tr.Syscall == "sendmsg" {
			cond, _ := sc.MakeCondition(5, sc.CompareNotEqual, testCookie)
			err = f.AddRuleConditionalExact(nr, sc.ActNotify, []sc.ScmpCondition{cond})
		} else if tr.Arg < 0 {
			err = f.AddRuleExact(nr, sc.ActNotify)
		} else {
			for _, v := range tr.Values {
				cond, cerr := sc.MakeCondition(uint(tr.Arg), sc.CompareMaskedEqual, tr.Mask, v)
				if cerr != nil {
					return -1, cerr
				}
				if err = f.AddRuleConditionalExact(nr, sc.ActNotify, []sc.ScmpCondition{cond}); err != nil {
					break
				}
			}
		}
		if err != nil {
			return -1, fmt.Errorf("trap %s: %w", tr.Syscall, err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	errc := make(chan error, 1)
	go func() { errc <- f.ExportBPF(w); w.Close() }()
	prog, _ := io.ReadAll(r)
	r.Close()
	if err := <-errc; err != nil {
		return -1, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER|unix.SECCOMP_FILTER_FLAG_TSYNC|unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH,
		uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, fmt.Errorf("seccomp(SET_MODE_FILTER, NEW_LISTENER|TSYNC): %w", e)
	}
	return int(fd), nil
}

func raw(nr uintptr, a ...uintptr) (int64, syscall.Errno) {
	for len(a) < 3 {
		a = append(a, 0)
	}
	v, _, e := unix.Syscall(nr, a[0], a[1], a[2])
	return int64(v), e
}

func cstr(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}

// execute runs one command in the child.
func execute(r req) (resp, []int) {
	switch r.Op {
	case "open":
		fd, err := unix.Open(r.Path, int(r.Arg)|unix.O_CLOEXEC, 0o644)
		return resp{Val: int64(fd), Errno: errnoOf(err)}, nil
	case "close":
		return resp{Errno: errnoOf(unix.Close(r.FD))}, nil
	case "open_check": // open(path) N times: how many gave no descriptor of the file with inode Arg
		bad := int64(0)
		for i := 0; i < r.N; i++ {
			fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			var st unix.Stat_t
			if err != nil || unix.Fstat(fd, &st) != nil || st.Ino != uint64(r.Arg) {
				bad++
			}
			if err == nil && fd > 2 {
				unix.Close(fd)
			}
		}
		return resp{Val: bad}, nil
	case "open_mode": // open(path, Arg, Arg2) with the mode as given
		fd, err := unix.Open(r.Path, int(r.Arg)|unix.O_CLOEXEC, uint32(r.Arg2))
		if err == nil {
			unix.Close(fd)
		}
		return resp{Errno: errnoOf(err)}, nil
	case "getppid":
		v, _, _ := unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
		return resp{Val: int64(v)}, nil
	case "flock": // flock(fd, op) with op as given (all 64 bits)
		_, e := raw(unix.SYS_FLOCK, uintptr(r.FD), uintptr(r.Arg))
		return resp{Errno: e}, nil
	case "fcntl_lock": // fcntl(fd, cmd, &{type, SEEK_SET, 0, 0})
		lk := unix.Flock_t{Type: int16(r.Arg2), Whence: io.SeekStart}
		_, e := raw(unix.SYS_FCNTL, uintptr(r.FD), uintptr(r.Arg), uintptr(unsafe.Pointer(&lk)))
		return resp{Errno: e}, nil
	case "fcntl": // fcntl(fd, cmd, arg)
		v, e := raw(unix.SYS_FCNTL, uintptr(r.FD), uintptr(r.Arg), uintptr(r.Arg2))
		return resp{Val: v, Errno: e}, nil
	case "socket":
		fd, err := unix.Socket(int(r.Arg), int(r.Arg2)|unix.SOCK_CLOEXEC, 0)
		return resp{Val: int64(fd), Errno: errnoOf(err)}, nil
	case "bind_loopback":
		var sa unix.Sockaddr = &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
		if r.Arg == unix.AF_INET6 {
			sa = &unix.SockaddrInet6{Addr: [16]byte{15: 1}}
		}
		return resp{Errno: errnoOf(unix.Bind(r.FD, sa))}, nil
	case "bind_unix":
		return resp{Errno: errnoOf(unix.Bind(r.FD, &unix.SockaddrUnix{Name: r.Path}))}, nil
	case "listen":
		_, e := raw(unix.SYS_LISTEN, uintptr(r.FD), uintptr(r.Arg))
		return resp{Errno: e}, nil
	case "port":
		sa, err := unix.Getsockname(r.FD)
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			return resp{Val: int64(a.Port)}, nil
		case *unix.SockaddrInet6:
			return resp{Val: int64(a.Port)}, nil
		}
		return resp{Errno: errnoOf(err)}, nil
	case "accepting": // SO_ACCEPTCONN
		v, err := unix.GetsockoptInt(r.FD, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		return resp{Val: int64(v), Errno: errnoOf(err)}, nil
	case "inotify_init":
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		return resp{Val: int64(fd), Errno: errnoOf(err)}, nil
	case "watch":
		p := cstr(r.Path)
		v, e := raw(unix.SYS_INOTIFY_ADD_WATCH, uintptr(r.FD), uintptr(unsafe.Pointer(p)), uintptr(r.Arg))
		runtime.KeepAlive(p)
		return resp{Val: v, Errno: e}, nil
	case "watch_ptr": // a raw pointer value for the path
		v, e := raw(unix.SYS_INOTIFY_ADD_WATCH, uintptr(r.FD), uintptr(r.Arg2), uintptr(r.Arg))
		return resp{Val: v, Errno: e}, nil
	case "watches": // the inodes the instance watches, "ino:<hex> sdev:<hex>", from fdinfo
		b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(r.FD))
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "inotify wd:") {
				continue
			}
			var ino, sdev string
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "ino:"); ok {
					ino = v
				}
				if v, ok := strings.CutPrefix(f, "sdev:"); ok {
					sdev = v
				}
			}
			out = append(out, "ino:"+ino+" sdev:"+sdev)
		}
		return resp{Text: out, Errno: errnoOf(err)}, nil
	case "events": // the names of the events read within Arg ms
		var names []string
		deadline := time.Now().Add(time.Duration(r.Arg) * time.Millisecond)
		buf := make([]byte, 4096)
		for time.Now().Before(deadline) {
			n, err := unix.Read(r.FD, buf)
			if err == unix.EAGAIN {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil {
				return resp{Errno: errnoOf(err)}, nil
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				names = append(names, strings.TrimRight(string(name), "\x00"))
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
			if len(names) > 0 {
				break
			}
		}
		return resp{Text: names}, nil
	case "chdir":
		return resp{Errno: errnoOf(unix.Chdir(r.Path))}, nil
	case "sendfd":
		return resp{}, []int{r.FD}
	case "race_watch":
		return raceWatch(r), nil
	case "race_open":
		return raceOpen(r), nil
	case "race_fcntl":
		return raceFcntl(r), nil
	case "sibling": // a process sharing this one's descriptor table (clone(CLONE_FILES)) that pauses
		return resp{Vals: []int64{int64(cloneFilesSibling())}}, nil
	case "race_posix_fd":
		return racePosixFD(r), nil
	case "race_listen":
		return raceListen(r), nil
	case "bench":
		return bench(r), nil
	case "threads":
		return threads(r), nil
	case "concurrent_flock": // N threads at once, each flock(FD, Arg); counts by errno
		return concurrentFlock(r), nil
	case "flock_signalled":
		return flockSignalled(r), nil
	default:
		if a, fds, ok := executeNet(r); ok {
			return a, fds
		}
		if a, ok := executePorts(r); ok {
			return a, nil
		}
		if a, ok := executeHostPerform(r); ok {
			return a, nil
		}
	}
	return resp{Errno: unix.ENOSYS, Text: []string{"unknown op " + r.Op}}, nil
}

// cloneFilesSibling forks a process that shares the descriptor table (and so the
// POSIX locks) of this one and pauses forever; its pid, or -errno. The child runs
// raw system calls only: it has one thread of a copied Go runtime.
//
//go:nosplit
//go:norace
func cloneFilesSibling() int {
	pid, _, e := syscall.RawSyscall6(unix.SYS_CLONE, unix.CLONE_FILES|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return -int(e)
	}
	if pid == 0 {
		for {
			syscall.RawSyscall(unix.SYS_PAUSE, 0, 0, 0)
		}
	}
	return int(pid)
}

// flipper runs f in a loop on a thread of its own until stop is called.
func flipper(f func(i int)) (stop func()) {
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		for i := 0; !quit.Load(); i++ {
			f(i)
		}
	}()
	return func() { quit.Store(true); <-done }
}

// raceWatch: inotify_add_watch(FD, buf) N times while another thread rewrites buf
// between Path and B (same length). Vals: [successes, EACCES, other errors].
// raceOpen opens r.Path N times while a thread flips it into r.B: how many opens
// succeeded, reached r.B's inode, failed.
func raceOpen(r req) resp {
	a, b := append([]byte(r.Path), 0), append([]byte(r.B), 0)
	if len(a) != len(b) {
		return resp{Errno: unix.EINVAL}
	}
	var bst unix.Stat_t
	if err := unix.Stat(r.B, &bst); err != nil {
		return resp{Errno: errnoOf(err)}
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
	var ok, reached, failed int64
	for i := 0; i < r.N; i++ {
		fd, _, e := unix.Syscall6(unix.SYS_OPENAT, uintptr(0xffffff9c), uintptr(unsafe.Pointer(&buf[0])), unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
		if e != 0 {
			failed++
			continue
		}
		ok++
		var st unix.Stat_t
		if unix.Fstat(int(fd), &st) == nil && st.Ino == bst.Ino && st.Dev == bst.Dev {
			reached++
		}
		unix.Close(int(fd))
	}
	stop()
	runtime.KeepAlive(buf)
	return resp{Vals: []int64{ok, reached, failed}}
}

func raceWatch(r req) resp {
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
	var ok, acces, other int64
	for i := 0; i < r.N; i++ {
		_, e := raw(unix.SYS_INOTIFY_ADD_WATCH, uintptr(r.FD), uintptr(unsafe.Pointer(&buf[0])), uintptr(r.Arg))
		switch e {
		case 0:
			ok++
		case unix.EACCES:
			acces++
		default:
			other++
		}
	}
	stop()
	runtime.KeepAlive(buf)
	return resp{Vals: []int64{ok, acces, other}}
}

// raceFcntl: fcntl(FD, F_SETLK, &lk) N times while another thread flips l_type
// between F_UNLCK and F_RDLCK. After each success the child looks for a lock of its
// own on the file in /proc/locks (a later unlock would remove it: the state at the
// end says too little). Vals: [successes, EACCES, other errors, locks seen].
func raceFcntl(r req) resp {
	var st unix.Stat_t
	if err := unix.Fstat(r.FD, &st); err != nil {
		return resp{Errno: errnoOf(err)}
	}
	mine := fmt.Sprintf(" %d ", os.Getpid())
	inode := fmt.Sprintf(":%d ", st.Ino)
	lk := &unix.Flock_t{Type: unix.F_UNLCK, Whence: io.SeekStart}
	typ := (*int32)(unsafe.Pointer(&lk.Type)) // l_type and l_whence: one 32-bit word
	stop := flipper(func(i int) {
		if i%2 == 0 {
			atomic.StoreInt32(typ, unix.F_RDLCK)
		} else {
			atomic.StoreInt32(typ, unix.F_UNLCK)
		}
	})
	var ok, acces, other, seen int64
	for i := 0; i < r.N; i++ {
		_, e := raw(unix.SYS_FCNTL, uintptr(r.FD), unix.F_SETLK, uintptr(unsafe.Pointer(lk)))
		switch e {
		case 0:
			ok++
			locks, _ := os.ReadFile("/proc/locks")
			for _, line := range strings.Split(string(locks), "\n") {
				if strings.Contains(line, "POSIX") && strings.Contains(line, mine) && strings.Contains(line, inode) {
					seen++
				}
			}
		case unix.EACCES:
			acces++
		default:
			other++
		}
	}
	stop()
	runtime.KeepAlive(lk)
	return resp{Vals: []int64{ok, acces, other, seen}}
}

// raceListen: listen(X) N times while another thread points fd number X at FD (a
// bound socket) and FD2 (an unbound one) in turn. Vals: [successes, EACCES, other].
func raceListen(r req) resp {
	x, err := unix.Dup(r.FD)
	if err != nil {
		return resp{Errno: errnoOf(err)}
	}
	stop := flipper(func(i int) {
		if i%2 == 0 {
			unix.Dup3(r.FD2, x, unix.O_CLOEXEC)
		} else {
			unix.Dup3(r.FD, x, unix.O_CLOEXEC)
		}
	})
	var ok, acces, other int64
	for i := 0; i < r.N; i++ {
		_, e := raw(unix.SYS_LISTEN, uintptr(x), 8)
		switch e {
		case 0:
			ok++
		case unix.EACCES:
			acces++
		default:
			other++
		}
	}
	stop()
	unix.Close(x)
	return resp{Vals: []int64{ok, acces, other}}
}

// threads: N threads, one after another, each making one call and exiting (a new
// thread id each): flock(FD, Arg), or with Path inotify_add_watch(FD, Path, Arg).
// Vals: the count of each errno, by errno.
func threads(r req) resp {
	counts := make([]int64, 256)
	for i := 0; i < r.N; i++ {
		done := make(chan syscall.Errno)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			var e syscall.Errno
			if r.Path != "" {
				p := cstr(r.Path)
				_, e = raw(unix.SYS_INOTIFY_ADD_WATCH, uintptr(r.FD), uintptr(unsafe.Pointer(p)), uintptr(r.Arg))
				runtime.KeepAlive(p)
			} else {
				_, e = raw(unix.SYS_FLOCK, uintptr(r.FD), uintptr(r.Arg))
			}
			done <- e
		}()
		counts[<-done]++
	}
	return resp{Vals: counts}
}

func concurrentFlock(r req) resp {
	counts := make([]int64, 256)
	done := make(chan syscall.Errno, r.N)
	for i := 0; i < r.N; i++ {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			_, e := raw(unix.SYS_FLOCK, uintptr(r.FD), uintptr(r.Arg))
			done <- e
		}()
	}
	for i := 0; i < r.N; i++ {
		counts[<-done]++
	}
	return resp{Vals: counts}
}

// flock_signalled: a blocking flock(FD, Arg) while another thread sends the calling
// thread N SIGURGs (the runtime's handler has SA_RESTART: each interrupts the wait and
// the call restarts with a new notification).
func flockSignalled(r req) resp {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	go func() {
		for i := 0; i < r.N; i++ {
			time.Sleep(20 * time.Millisecond)
			unix.Tgkill(os.Getpid(), tid, unix.SIGURG)
		}
	}()
	_, e := raw(unix.SYS_FLOCK, uintptr(r.FD), uintptr(r.Arg))
	return resp{Errno: e}
}

// bench: N calls of Path ("flock": flock(FD, LOCK_EX|LOCK_NB); "listen": listen(FD,
// 16)); Val: the elapsed nanoseconds measured in the child.
func bench(r req) resp {
	nr, a1 := uintptr(unix.SYS_FLOCK), uintptr(unix.LOCK_EX|unix.LOCK_NB)
	if r.Path == "listen" {
		nr, a1 = unix.SYS_LISTEN, 16
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r.Path == "sendto" || r.Path == "connect" { // to 127.0.0.1:Arg
		sa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: [4]byte{127, 0, 0, 1}}
		sa.Port = uint16(r.Arg>>8&0xff) | uint16(r.Arg&0xff)<<8
		x := []byte("x")
		var total time.Duration
		for i := 0; i < r.N; i++ {
			fd := r.FD
			if r.Path == "connect" {
				var err error
				if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
					return resp{Errno: errnoOf(err)}
				}
			}
			start := time.Now()
			var e unix.Errno
			if r.Path == "sendto" {
				_, _, e = unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&x[0])), 1, 0, uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrInet4)
			} else {
				_, _, e = unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unix.SizeofSockaddrInet4)
			}
			total += time.Since(start)
			if r.Path == "connect" {
				unix.Close(fd)
			}
			if e != 0 {
				return resp{Errno: e}
			}
		}
		return resp{Val: int64(total)}
	}
	start := time.Now()
	for i := 0; i < r.N; i++ {
		if _, e := raw(nr, uintptr(r.FD), a1); e != 0 {
			return resp{Errno: e}
		}
	}
	return resp{Val: int64(time.Since(start))}
}

// ---- helpers for the parent's own view of files ----

// kernelID is how fdinfo names an inode: "ino:<hex> sdev:<hex>" with the kernel's
// internal dev_t (major<<20 | minor).
func kernelID(t testing.TB, path string, follow bool) string {
	t.Helper()
	var st unix.Stat_t
	var err error
	if follow {
		err = unix.Stat(path, &st)
	} else {
		err = unix.Lstat(path, &st)
	}
	must(t, err)
	return fmt.Sprintf("ino:%x sdev:%x", st.Ino, uint64(unix.Major(st.Dev))<<20|uint64(unix.Minor(st.Dev)))
}

// racePosixFD: fcntl(X, F_SETLK, read lock) up to N times while another thread
// points fd number X at FD (a writable file) and FD2 (a read-only one) in turn, never
// unlocking; as an attacker would, it stops at the first lock that lands on FD2's
// file and keeps X open there (closing any fd of that file would drop the lock).
// Vals: [successes, EACCES, other, 1 if a lock on FD2's file was seen].
func racePosixFD(r req) resp {
	x, err := unix.Dup(r.FD)
	if err != nil {
		return resp{Errno: errnoOf(err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.FD2, &st); err != nil {
		return resp{Errno: errnoOf(err)}
	}
	// the file's "maj:min:ino" as /proc/locks writes it (its pids are not those of a
	// pid namespace of the sandbox's own, so the lock is found by the file)
	inode := fmt.Sprintf(" %02x:%02x:%d ", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var got atomic.Bool
	var mu sync.Mutex // the flipper's dup3 and the check of /proc/locks do not interleave
	stop := flipper(func(i int) {
		mu.Lock()
		defer mu.Unlock()
		if got.Load() {
			return
		}
		if i%2 == 0 {
			unix.Dup3(r.FD2, x, unix.O_CLOEXEC)
		} else {
			unix.Dup3(r.FD, x, unix.O_CLOEXEC)
		}
	})
	lk := &unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	var ok, acces, other, ro int64
	for i := 0; i < r.N && ro == 0; i++ {
		_, e := raw(unix.SYS_FCNTL, uintptr(x), unix.F_SETLK, uintptr(unsafe.Pointer(lk)))
		switch e {
		case 0:
			ok++
			mu.Lock()
			locks, _ := os.ReadFile("/proc/locks")
			for _, line := range strings.Split(string(locks), "\n") {
				if strings.Contains(line, "POSIX") && strings.Contains(line, inode) {
					ro = 1
					got.Store(true)
					break
				}
			}
			mu.Unlock()
		case unix.EACCES:
			acces++
		default:
			other++
		}
	}
	stop()
	runtime.KeepAlive(lk)
	return resp{Vals: []int64{ok, acces, other, ro}}
}
