//go:build linux

package supervise

// Determinism (the policy's random_seed, time_start and deterministic_dirs): the
// supervisor answers the calls that bring entropy, the wall clock and directory
// order into a run. None of it is a protection: a racing thread that rewrites an
// argument after it was read changes only what its own process sees, so these
// handlers may continue calls and write into the caller's memory without the care
// the access-control handlers take (docs/security.md, "Determinism").
//
//   - getrandom(buf, n, flags): n bytes (at most 1 MiB a call) of the calling
//     process's stream are written to buf and n answered.
//   - open/openat of "/dev/urandom" or "/dev/random" (the path as given, cleaned,
//     made absolute against the caller's cwd or directory fd): answered with the
//     read end of a pipe fed from a stream of its own (per process, per such open),
//     installed with SECCOMP_IOCTL_NOTIF_ADDFD; every other open continues.
//   - clock_gettime(CLOCK_REALTIME|_COARSE|_ALARM|TAI), gettimeofday, time: the
//     host's clock plus the run's offset (time_start minus the host's time when the
//     run's first process made its first trapped call). Other clocks are not
//     trapped.
//   - getdents64(fd, buf, n): the directory is read whole on a fresh open of it
//     (the first call after a rewind), sorted by name (bytes), and served in that
//     order; the fd's file position is the index of the next entry (d_off = index
//     + 1, so telldir/seekdir work).
//   - The vDSO: programs read the clock (and, with glibc 2.41+, random bytes)
//     without a system call through the vDSO. At the first trapped call of each
//     new program image (exec replaces the vDSO; the open of the dynamic loader's
//     cache is the first for a dynamically linked program), the supervisor
//     overwrites clock_gettime, gettimeofday and time in the process's copy of
//     the vDSO (a private, copy-on-write page, through /proc/<tid>/mem) with
//     "mov eax, NR; syscall; ret", and getrandom with "return -ENOSYS" (glibc then
//     makes the system call), and writes the image's 16 AT_RANDOM bytes from the
//     process's stream.
//
// Streams: AES-256 in counter mode (zero IV) keyed by SHA-256 of "sandtrap
// random_seed v1", the seed, the process's index, the kind of stream and its
// number (little-endian uint64 each). A process's index is 2^32 + its pid in the
// run's own pid namespace (the order of forks decides it); for a run in the
// supervisor's pid namespace, the order in which the run's processes made their
// first trapped call (0: the first program). getrandom
// and AT_RANDOM share the process's stream (kind 0); each open of /dev/urandom
// gets stream (1, n) for the process's n-th such open.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Determinism is what Config.Det asks for; the zero value asks nothing.
type Determinism struct {
	Seed      *uint64  // random_seed
	TimeStart *float64 // time_start, Unix seconds
	SortDirs  bool     // deterministic_dirs
}

func (d *Determinism) on() bool {
	return d != nil && (d.Seed != nil || d.TimeStart != nil || d.SortDirs)
}

// hooks: the vDSO and AT_RANDOM are rewritten at each new program image.
func (d *Determinism) hooks() bool { return d != nil && (d.Seed != nil || d.TimeStart != nil) }

// realtimeClocks are the clocks time_start moves (CLOCK_REALTIME, _COARSE, _ALARM, TAI).
var realtimeClocks = []uint64{unix.CLOCK_REALTIME, unix.CLOCK_REALTIME_COARSE, unix.CLOCK_REALTIME_ALARM, unix.CLOCK_TAI}

func detTraps(cfg Config) []Trap {
	d := cfg.Det
	if !d.on() {
		return nil
	}
	var ts []Trap
	if d.hooks() {
		// the hook of each new image, and /dev/urandom
		ts = append(ts, Trap{Syscall: "open", Arg: -1}, Trap{Syscall: "openat", Arg: -1})
	}
	if d.Seed != nil {
		ts = append(ts, Trap{Syscall: "getrandom", Arg: -1})
	}
	if d.TimeStart != nil {
		ts = append(ts, Trap{Syscall: "clock_gettime", Arg: 0, Mask: 0xffffffff, Values: realtimeClocks},
			Trap{Syscall: "gettimeofday", Arg: -1}, Trap{Syscall: "time", Arg: -1})
	}
	if d.SortDirs {
		ts = append(ts, Trap{Syscall: "getdents64", Arg: -1})
	}
	return ts
}

// detState is the supervisor's bookkeeping for determinism.
type detState struct {
	mu      sync.Mutex
	threads map[uint32]*detThread // by thread id
	procs   map[uint32]*detProc   // by thread-group id
	runs    map[uint64]*detRun    // by pid namespace inode
	dirs    map[dirKey]*dirSnap
	feeders sync.WaitGroup
	pipes   map[*os.File]bool // write ends of /dev/urandom pipes (closed at Close)
}

type detThread struct {
	pidfd int
	proc  *detProc
}

type detProc struct {
	pidfd int
	run   *detRun
	index uint64
	rng   cipher.Stream
	devs  uint64 // /dev/urandom opens so far
	vdso  uint64 // the address checked for the stub (0: unknown)
}

type detRun struct {
	offset time.Duration // time_start - host time at the run's first call
	procs  uint64
}

func (s *Supervisor) addDetHandlers() {
	d := s.cfg.Det
	if !d.on() {
		return
	}
	s.det = &detState{threads: map[uint32]*detThread{}, procs: map[uint32]*detProc{}, runs: map[uint64]*detRun{},
		dirs: map[dirKey]*dirSnap{}, pipes: map[*os.File]bool{}}
	wrap := func(name string, nr int32, fn func(c *call, next handlerFunc) reply) {
		next := handlerFunc(func(*call) reply { return cont() })
		if h := s.table[nr]; h != nil {
			next = h.fn
		}
		s.table[nr] = &handler{name: name, nr: nr, fn: func(c *call) reply { return fn(c, next) }}
	}
	if d.hooks() {
		wrap("open", unix.SYS_OPEN, func(c *call, next handlerFunc) reply { return c.detOpen(-1, 0, next) })
		wrap("openat", unix.SYS_OPENAT, func(c *call, next handlerFunc) reply { return c.detOpen(c.argInt(0), 1, next) })
		// every other trapped call is a hook too
		for nr, h := range s.table {
			if nr == unix.SYS_OPEN || nr == unix.SYS_OPENAT {
				continue
			}
			inner := h.fn
			s.table[nr] = &handler{name: h.name, nr: h.nr, traps: h.traps, fn: func(c *call) reply {
				c.detProc()
				return inner(c)
			}}
		}
	}
	if d.Seed != nil {
		s.table[unix.SYS_GETRANDOM] = &handler{name: "getrandom", nr: unix.SYS_GETRANDOM, fn: (*call).detGetrandom}
	}
	if d.TimeStart != nil {
		s.table[unix.SYS_CLOCK_GETTIME] = &handler{name: "clock_gettime", nr: unix.SYS_CLOCK_GETTIME, fn: (*call).detClockGettime}
		s.table[unix.SYS_GETTIMEOFDAY] = &handler{name: "gettimeofday", nr: unix.SYS_GETTIMEOFDAY, fn: (*call).detGettimeofday}
		s.table[unix.SYS_TIME] = &handler{name: "time", nr: unix.SYS_TIME, fn: (*call).detTime}
	}
	if d.SortDirs {
		s.table[unix.SYS_GETDENTS64] = &handler{name: "getdents64", nr: unix.SYS_GETDENTS64, fn: (*call).detGetdents64}
	}
}

// closeDet stops the /dev/urandom feeders and drops the bookkeeping.
func (s *Supervisor) closeDet() {
	if s.det == nil {
		return
	}
	st := s.det
	st.mu.Lock()
	for f := range st.pipes {
		f.Close() // the feeder's write returns
	}
	clear(st.pipes)
	for _, t := range st.threads {
		unix.Close(t.pidfd)
	}
	clear(st.threads)
	for _, p := range st.procs {
		unix.Close(p.pidfd)
	}
	clear(st.procs)
	st.mu.Unlock()
	st.feeders.Wait()
}

// alive: the task a pidfd names has not exited (a pidfd polls readable once it has).
func alive(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// maxDetTasks bounds the threads and processes remembered; past it, exited ones are dropped.
const maxDetTasks = 4096

// detProc is the calling process's state, made at its first trapped call (which
// numbers it); each call also runs the new-image hook when the image is new.
func (c *call) detProc() *detProc {
	st := c.s.det
	if st == nil || c.n.Pid == 0 {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	tid := c.n.Pid
	t := st.threads[tid]
	if t != nil && !alive(t.pidfd) {
		unix.Close(t.pidfd)
		delete(st.threads, tid)
		t = nil
	}
	if t == nil {
		t = st.newThread(c, tid)
		if t == nil {
			return nil
		}
	}
	p := t.proc
	if c.s.cfg.Det.hooks() {
		c.detHook(p)
	}
	return p
}

func (st *detState) newThread(c *call, tid uint32) *detThread {
	if len(st.threads) >= maxDetTasks {
		for k, t := range st.threads {
			if !alive(t.pidfd) {
				unix.Close(t.pidfd)
				delete(st.threads, k)
			}
		}
	}
	tgid, nsTgid, ok := tgidsOf(c.proc("status"))
	if !ok {
		return nil
	}
	tfd, err := unix.PidfdOpen(int(tid), unix.PIDFD_THREAD)
	if err == unix.EINVAL {
		tfd, err = unix.PidfdOpen(int(tid), 0)
	}
	if err != nil {
		return nil
	}
	p := st.procs[tgid]
	if p != nil && !alive(p.pidfd) {
		unix.Close(p.pidfd)
		delete(st.procs, tgid)
		p = nil
	}
	if p == nil {
		if len(st.procs) >= maxDetTasks {
			for k, q := range st.procs {
				if !alive(q.pidfd) {
					unix.Close(q.pidfd)
					delete(st.procs, k)
				}
			}
		}
		pfd, err := unix.PidfdOpen(int(tgid), 0)
		if err != nil {
			unix.Close(tfd)
			return nil
		}
		var ns unix.Stat_t
		unix.Stat(c.proc("ns/pid"), &ns)
		run := st.runs[ns.Ino]
		if run == nil {
			run = &detRun{}
			if ts := c.s.cfg.Det.TimeStart; ts != nil {
				start := time.Unix(0, int64(*ts*1e9))
				run.offset = time.Until(start)
			}
			st.runs[ns.Ino] = run
		}
		// the process's number: its pid in the run's own pid namespace, which the
		// order of forks decides (not the order of their first calls, which
		// scheduling does); in the supervisor's namespace, the order of first calls
		p = &detProc{pidfd: pfd, run: run, index: run.procs}
		if nsTgid != 0 {
			p.index = 1<<32 | uint64(nsTgid)
		}
		run.procs++
		if seed := c.s.cfg.Det.Seed; seed != nil {
			p.rng = detStream(*seed, p.index, 0, 0)
		}
		st.procs[tgid] = p
	}
	t := &detThread{pidfd: tfd, proc: p}
	st.threads[tid] = t
	if !c.valid() { // the tid was reused between the notification and here
		return nil
	}
	return t
}

// tgidsOf reads a task's thread-group id (in our pid namespace) and, when the
// task is in a pid namespace below ours, its thread-group id there (else 0).
func tgidsOf(status string) (tgid, nsTgid uint32, ok bool) {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(l, "NStgid:"); found {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, 0, false
			}
			a, err1 := strconv.ParseUint(f[0], 10, 32)
			z, err2 := strconv.ParseUint(f[len(f)-1], 10, 32)
			if err1 != nil || err2 != nil {
				return 0, 0, false
			}
			if len(f) == 1 {
				z = 0
			}
			return uint32(a), uint32(z), true
		}
	}
	return 0, 0, false
}

// detStream is the stream (kind, n) of process index of seed.
func detStream(seed, index, kind, n uint64) cipher.Stream {
	h := sha256.New()
	h.Write([]byte("sandtrap random_seed v1"))
	var b [8]byte
	for _, v := range []uint64{seed, index, kind, n} {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	block, err := aes.NewCipher(h.Sum(nil))
	if err != nil {
		panic("BUG(supervise): aes: " + err.Error())
	}
	return cipher.NewCTR(block, make([]byte, aes.BlockSize))
}

// fill is n bytes of a stream.
func fill(s cipher.Stream, n int) []byte {
	b := make([]byte, n)
	s.XORKeyStream(b, b)
	return b
}

// maxGetrandom is the most one getrandom call answers (a short read, as the kernel's for large n).
const maxGetrandom = 1 << 20

func (c *call) detGetrandom() reply {
	p := c.detProc()
	if p == nil || p.rng == nil {
		return c.failure("getrandom: the caller", unix.ESRCH)
	}
	n := c.arg(1)
	if n > maxGetrandom {
		n = maxGetrandom
	}
	if n == 0 {
		return ret(0)
	}
	c.s.det.mu.Lock()
	b := fill(p.rng, int(n))
	c.s.det.mu.Unlock()
	if err := c.write(c.arg(0), b); err != nil {
		return c.failure("getrandom", err, unix.EFAULT)
	}
	return ret(int64(n))
}

// detOpen answers an open of /dev/urandom or /dev/random with a pipe fed from a
// stream; any other open goes on to next (the built-in or host handler, or continue).
func (c *call) detOpen(dirfd int32, pathArg int, next handlerFunc) reply {
	p := c.detProc()
	seed := c.s.cfg.Det.Seed
	if p == nil || seed == nil {
		return next(c)
	}
	raw, err := c.readString(c.arg(pathArg), unix.PathMax)
	if err != nil || !strings.Contains(raw, "random") {
		return next(c)
	}
	path := raw
	if !filepath.IsAbs(path) {
		base := "cwd"
		if dirfd != unix.AT_FDCWD {
			base = "fd/" + strconv.Itoa(int(dirfd))
		}
		dir, err := os.Readlink(c.proc(base))
		if err != nil {
			return next(c)
		}
		path = filepath.Join(dir, path)
	}
	path = filepath.Clean(path)
	if path != "/dev/urandom" && path != "/dev/random" {
		return next(c)
	}
	flags := uint32(c.arg(pathArg + 1))
	if flags&unix.O_ACCMODE != unix.O_RDONLY {
		return next(c) // written to: the kernel's (writes add entropy; nothing to answer)
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return next(c)
	}
	st := c.s.det
	st.mu.Lock()
	stream := detStream(*seed, p.index, 1, p.devs)
	p.devs++
	// an *os.File owns the fd from here: closed by its Close only (never by number:
	// the file's finalizer would close the number again, by then another's)
	w := os.NewFile(uintptr(fds[1]), "urandom") // non-blocking: the runtime's poller waits
	st.pipes[w] = true
	st.mu.Unlock()
	// the reader's end blocks as a device read would (unless O_NONBLOCK was asked)
	if flags&unix.O_NONBLOCK == 0 {
		if fl, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFL, 0); err == nil {
			unix.FcntlInt(uintptr(fds[0]), unix.F_SETFL, fl&^unix.O_NONBLOCK)
		}
	}
	st.feeders.Add(1)
	go st.feed(w, stream)
	r := c.injectFD(fds[0], flags&unix.O_CLOEXEC)
	unix.Close(fds[0])
	return r
}

// feed writes the stream into a pipe until its reader is gone or the supervisor closes.
func (st *detState) feed(f *os.File, s cipher.Stream) {
	defer st.feeders.Done()
	defer func() {
		st.mu.Lock()
		if st.pipes[f] {
			delete(st.pipes, f)
			f.Close()
		}
		st.mu.Unlock()
	}()
	buf := make([]byte, 16<<10)
	for {
		clear(buf)
		s.XORKeyStream(buf, buf)
		for done := 0; done < len(buf); {
			n, err := f.Write(buf[done:])
			done += n
			if err != nil {
				return // EPIPE: the reader closed it; or the supervisor closed it
			}
		}
	}
}

// now is the run's time on a realtime clock.
func (c *call) detNow(clock int) (unix.Timespec, bool) {
	p := c.detProc()
	if p == nil {
		return unix.Timespec{}, false
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(clock), &ts); err != nil {
		return ts, false
	}
	return unix.NsecToTimespec(ts.Nano() + int64(p.run.offset)), true
}

func (c *call) detClockGettime() reply {
	ts, ok := c.detNow(int(c.argInt(0)))
	if !ok {
		return c.failure("clock_gettime: the caller", unix.ESRCH)
	}
	b := (*[16]byte)(unsafe.Pointer(&ts))[:]
	if err := c.write(c.arg(1), b); err != nil {
		return c.failure("clock_gettime", err, unix.EFAULT)
	}
	return ret(0)
}

func (c *call) detGettimeofday() reply {
	ts, ok := c.detNow(unix.CLOCK_REALTIME)
	if !ok {
		return c.failure("gettimeofday: the caller", unix.ESRCH)
	}
	if tv := c.arg(0); tv != 0 {
		v := unix.NsecToTimeval(ts.Nano())
		if err := c.write(tv, (*[16]byte)(unsafe.Pointer(&v))[:]); err != nil {
			return c.failure("gettimeofday", err, unix.EFAULT)
		}
	}
	if tz := c.arg(1); tz != 0 {
		var zero [8]byte // struct timezone: UTC, no DST
		if err := c.write(tz, zero[:]); err != nil {
			return c.failure("gettimeofday", err, unix.EFAULT)
		}
	}
	return ret(0)
}

func (c *call) detTime() reply {
	ts, ok := c.detNow(unix.CLOCK_REALTIME)
	if !ok {
		return c.failure("time: the caller", unix.ESRCH)
	}
	if at := c.arg(0); at != 0 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(ts.Sec))
		if err := c.write(at, b[:]); err != nil {
			return c.failure("time", err, unix.EFAULT)
		}
	}
	return ret(ts.Sec)
}

// ---- the new-image hook ----------------------------------------------------

// vdsoSyscalls: the vDSO functions replaced by a system call, and by what.
var vdsoSyscalls = map[string]uint32{
	"__vdso_clock_gettime": unix.SYS_CLOCK_GETTIME, "clock_gettime": unix.SYS_CLOCK_GETTIME,
	"__vdso_gettimeofday": unix.SYS_GETTIMEOFDAY, "gettimeofday": unix.SYS_GETTIMEOFDAY,
	"__vdso_time": unix.SYS_TIME, "time": unix.SYS_TIME,
}

// vdsoENOSYS: the vDSO functions made to fail with ENOSYS (the caller then makes the system call).
var vdsoENOSYS = map[string]bool{"__vdso_getrandom": true, "getrandom": true}

// syscallStub is x86-64 "mov eax, nr; syscall; ret".
func syscallStub(nr uint32) []byte {
	b := []byte{0xb8, 0, 0, 0, 0, 0x0f, 0x05, 0xc3}
	binary.LittleEndian.PutUint32(b[1:], nr)
	return b
}

// enosysStub is x86-64 "mov eax, -ENOSYS; ret".
var enosysStub = []byte{0xb8, 0xda, 0xff, 0xff, 0xff, 0xc3}

// detHook: when the caller's image is new (its vDSO is not patched), patch the
// vDSO and write AT_RANDOM. Held: st.mu. Failures leave the image as it is
// (determinism, not protection: reported in Denials once).
func (c *call) detHook(p *detProc) {
	if runtime.GOARCH != "amd64" {
		return // only x86-64's stubs are written (docs/security.md)
	}
	if p.vdso != 0 {
		var cur [8]byte
		if c.read(p.vdso, cur[:]) == nil && bytes.Equal(cur[:], syscallStub(unix.SYS_CLOCK_GETTIME)) {
			return // this image is patched
		}
	}
	start, end, ok := c.vdsoRange()
	if !ok {
		return
	}
	img := make([]byte, end-start)
	if err := c.read(start, img); err != nil {
		return
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		c.s.denials.add("determinism", "vDSO: "+err.Error(), 0)
		return
	}
	syms, _ := f.DynamicSymbols()
	mem, err := os.OpenFile(c.proc("mem"), os.O_RDWR, 0)
	if err != nil {
		c.s.denials.add("determinism", "vDSO: "+err.Error(), 0)
		return
	}
	defer mem.Close()
	if !c.valid() {
		return
	}
	var marker uint64
	for _, s := range syms {
		if s.Value == 0 || s.Value >= uint64(len(img)) {
			continue
		}
		var stub []byte
		if nr, ok := vdsoSyscalls[s.Name]; ok && s.Size >= 8 {
			stub = syscallStub(nr)
			if nr == unix.SYS_CLOCK_GETTIME {
				marker = start + s.Value
			}
		} else if vdsoENOSYS[s.Name] && s.Size >= uint64(len(enosysStub)) {
			stub = enosysStub
		} else {
			continue
		}
		if _, err := mem.WriteAt(stub, int64(start+s.Value)); err != nil {
			c.s.denials.add("determinism", "vDSO: "+err.Error(), 0)
			return
		}
	}
	p.vdso = marker
	if p.rng != nil {
		if at := auxval(c.proc("auxv"), atRandom); at != 0 {
			c.write(at, fill(p.rng, 16))
		}
	}
}

// vdsoRange is the caller's [vdso] mapping.
func (c *call) vdsoRange() (uint64, uint64, bool) {
	b, err := os.ReadFile(c.proc("maps"))
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasSuffix(l, "[vdso]") {
			continue
		}
		r, _, _ := strings.Cut(l, " ")
		lo, hi, _ := strings.Cut(r, "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		return a, z, err1 == nil && err2 == nil && z > a && z-a <= 1<<20
	}
	return 0, 0, false
}

// atRandom is AT_RANDOM of <linux/auxvec.h>.
const atRandom = 25

func auxval(path string, key uint64) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.LittleEndian.Uint64(b[i:]) == key {
			return binary.LittleEndian.Uint64(b[i+8:])
		}
	}
	return 0
}

// ---- directories -----------------------------------------------------------

type dirKey struct {
	tgid   uint32
	fd     int32
	dev    uint64
	ino    uint64
	offset int64 // the position this snapshot left the fd at
}

type dirEnt struct {
	ino  uint64
	typ  uint8
	name string
}

type dirSnap struct{ ents []dirEnt }

// maxDirSnaps bounds the listings held between calls.
const maxDirSnaps = 64

func (c *call) detGetdents64() reply {
	fd, r := c.childFD(c.argInt(0))
	if r != nil {
		return *r
	}
	// the kernel lists only a directory open for reading: an O_PATH descriptor
	// (which neither Landlock nor the directory's mode checked for reading) is EBADF
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return c.failure("getdents64: fcntl", err)
	}
	if fl&unix.O_PATH != 0 {
		return fail(unix.EBADF)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return c.failure("getdents64: fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fail(unix.ENOTDIR)
	}
	pos, err := unix.Seek(fd, 0, 1)
	if err != nil {
		return c.failure("getdents64: lseek", err)
	}
	p := c.detProc()
	var tgid uint32
	if p != nil {
		tgid = uint32(p.pidfd) // a stable name of the process while it lives
	}
	ds := c.s.det
	key := dirKey{tgid, c.argInt(0), st.Dev, st.Ino, pos}
	ds.mu.Lock()
	snap := ds.dirs[key]
	delete(ds.dirs, key)
	ds.mu.Unlock()
	if snap == nil || pos == 0 {
		ents, err := readDirSorted(fd)
		if err != nil {
			return c.failure("getdents64: read", err)
		}
		snap = &dirSnap{ents: ents}
	}
	if pos < 0 || pos > int64(len(snap.ents)) {
		return ret(0)
	}
	size := int(uint32(c.arg(2)))
	var out []byte
	i := int(pos)
	for ; i < len(snap.ents); i++ {
		e := snap.ents[i]
		reclen := (19 + len(e.name) + 1 + 7) &^ 7
		if len(out)+reclen > size {
			break
		}
		rec := make([]byte, reclen)
		binary.LittleEndian.PutUint64(rec[0:], e.ino)
		binary.LittleEndian.PutUint64(rec[8:], uint64(i+1))
		binary.LittleEndian.PutUint16(rec[16:], uint16(reclen))
		rec[18] = e.typ
		copy(rec[19:], e.name)
		out = append(out, rec...)
	}
	if len(out) == 0 {
		if i < len(snap.ents) {
			return fail(unix.EINVAL) // the buffer holds not even one entry
		}
		return ret(0) // the end
	}
	if _, err := unix.Seek(fd, int64(i), 0); err != nil {
		return c.failure("getdents64: lseek", err)
	}
	if err := c.write(c.arg(1), out); err != nil {
		unix.Seek(fd, pos, 0)
		return c.failure("getdents64", err, unix.EFAULT)
	}
	key.offset = int64(i)
	ds.mu.Lock()
	if len(ds.dirs) >= maxDirSnaps {
		clear(ds.dirs)
	}
	ds.dirs[key] = snap
	ds.mu.Unlock()
	return ret(int64(len(out)))
}

// readDirSorted reads the directory fd names, sorted by name. It reads through fd
// itself, the caller's open file (rewound first; the caller's position is then set
// by getdents64's answer): never an open of the supervisor's, which would be
// checked against the supervisor's credentials and domain, not the caller's.
func readDirSorted(d int) ([]dirEnt, error) {
	if _, err := unix.Seek(d, 0, 0); err != nil {
		return nil, err
	}
	var ents []dirEnt
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(d, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.LittleEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				break
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			ents = append(ents, dirEnt{ino: binary.LittleEndian.Uint64(buf[off:]), typ: buf[off+18], name: string(name)})
			off += reclen
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	return ents, nil
}
