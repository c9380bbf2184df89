// Package run runs one command to completion under a sandbox's plan (the spawn
// through its zygote, stdio, deadline, cancellation, CPU time, the result), and
// pipelines of such runs joined by kernel pipes.
package run

import (
	"bytes"
	"errors"
	"fmt"

	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"golang.org/x/sys/unix"
)

// Request is one command to run.
type Request struct {
	Argv      []string
	Stdin     []byte
	NoTimeout bool // not even the policy's (templates: their forks get their own)
	StdinFD   int  // >= 0: use this fd as stdin instead (pipelines)
	StdoutFD  int  // >= 0: send stdout here instead of capturing it (pipelines)
	StderrFD  int  // > 0: send stderr here instead of capturing it (the CLI's terminal, a popen'd stream; closed once started); 0 captures
	Timeout   float64
	Env       map[string]string
	Cwd       string
	Tag       string
	MaxOutput int64
	DryRun    bool          // with a workdir: list the changes, then always abort them
	Stream    *Stream       // a popen'd run (popen.go): told when it started, parked at its gate
	ExtraFDs  []int         // placed on 3, 4, … of the program (a gather's inputs); closed once started
	Started   func(pid int) // called with the host pid of the run's pid 1 once it started (the CLI's run registry)
	Hooks     Hooks         // a run with a zygote of its own (engine: calls judged by the host); nil: none
	Clones    *CloneDenials // the denials of its sessions (a fork template's clones), filled once it started
}

// Hooks run a request on a zygote of its own choosing (core/handlers:
// a run whose calls the host judges has a zygote trapping them, whose supervisor
// finds the run by its process).
type Hooks interface {
	// Zygote picks the run's zygote and its plan in place of the host's (fresh: as
	// Host.Zygote).
	Zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error)
	// Host judges the run's trapped calls: the run is attached to its zygote's
	// supervisor with it (supervise.AttachHost), which routes each call to it.
	Host() supervise.HostRun
	// Started hands over what kills the run (before the spawn).
	Started(cancel func())
	// Ended: the run is over (its result is being made).
	Ended()
}

// Usage is what a run consumed.
type Usage struct {
	WallS       float64 `msgpack:"wall_s"`
	CPUUserS    float64 `msgpack:"cpu_user_s"`
	CPUSysS     float64 `msgpack:"cpu_sys_s"`
	CPUTreeS    float64 `msgpack:"cpu_tree_s,omitempty"` // every process of the run (cgroup)
	PeakMemory  int64   `msgpack:"peak_memory"`          // largest resident set of any process of the run
	PeakFrom    string  `msgpack:"peak_memory_source"`   // rusage_maxrss
	SpawnMicros float64 `msgpack:"spawn_us"`
}

// ErrorInfo is a result's error.
type ErrorInfo = protocol.ErrorInfo

// Isolation is a run's isolation report.
type Isolation = plan.Isolation

// Result is the outcome of a run.
type Result struct {
	Success         bool       `msgpack:"success"`
	Reason          string     `msgpack:"reason"` // why it ended (popen.go: the Reason* values)
	ExitCode        *int       `msgpack:"exit_code"`
	Signal          *int       `msgpack:"signal"`
	Stdout          []byte     `msgpack:"stdout"`
	Stderr          []byte     `msgpack:"stderr"`
	StdoutTruncated bool       `msgpack:"stdout_truncated"`
	StderrTruncated bool       `msgpack:"stderr_truncated"`
	TimedOut        bool       `msgpack:"timed_out"`
	Cancelled       bool       `msgpack:"cancelled"`
	Error           *ErrorInfo `msgpack:"error"`
	Isolation       *Isolation `msgpack:"isolation"`
	Usage           Usage      `msgpack:"usage"`
	// What the run was refused (denials.go): at most supervise.MaxDenials entries,
	// DenialsDropped counting the denials beyond; DenialsSources says, by source,
	// "reported" or why that source's denials are not in Denials.
	Denials        []Denial          `msgpack:"denials"`
	DenialsDropped int               `msgpack:"denials_dropped"`
	DenialsSources map[string]string `msgpack:"denials_sources"`
	// With a workdir (cow.go): every path the run changed, what became of the
	// changes ("committed", "aborted", "kept": BranchID names them for the
	// commit and abort ops), what a commit applied and what it refused.
	Changes       []Change `msgpack:"changes,omitempty"`
	Branch        string   `msgpack:"branch,omitempty"`
	BranchID      uint64   `msgpack:"branch_id,omitempty"`
	Committed     []Change `msgpack:"committed,omitempty"`
	CommitRefused []Change `msgpack:"commit_refused,omitempty"`
}

// Host is the sandbox a run belongs to (core/engine's Sandbox).
type Host interface {
	Enter() bool // registers a run in flight; false once the sandbox is closed
	Leave()      // ends what Enter registered
	RunPolicy() *policy.Policy
	BaseEnv() []string          // the environment of its runs (policy applied)
	Isolation() *plan.Isolation // its current report
	Group() *cgroup.Group       // its cgroup (nil: none)
	// Zygote is its zygote for the current plan (started, again when it is
	// fresh — a zygote that died —, if needed) and that plan.
	Zygote(fresh *spawn.Zygote) (*spawn.Zygote, *plan.Plan, error)
	// Track registers cancel under tag (cancellation by tag, or of every run)
	// until untrack is called.
	Track(tag string, cancel func()) (untrack func())
}

func failed(kind, msg string, iso *Isolation) *Result {
	return &Result{Reason: kind, Error: &ErrorInfo{Kind: kind, Message: protocol.Text(msg)}, Isolation: iso, Stdout: []byte{}, Stderr: []byte{}, Denials: []Denial{}}
}

var (
	devNullOnce sync.Once
	devNull     int = -1
)

// NullFD is an fd of /dev/null kept open for every run's stdin (-1: none); call
// it before the host confines itself.
func NullFD() int {
	devNullOnce.Do(func() {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			devNull = fd
		}
	})
	return devNull
}

// Pipe makes a close-on-exec pipe.
func Pipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	return p[0], p[1], nil // fd numbers do not matter: they reach the zygote as SCM_RIGHTS
}

// Env is a run's environment: the sandbox's, with the request's on top.
func Env(h Host, req *Request) []string {
	base := h.BaseEnv()
	if len(req.Env) == 0 {
		return base
	}
	m := map[string]string{}
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	for k, v := range req.Env {
		m[k] = v
	}
	return flatten(m)
}

// lookPath finds argv0 as execvp would, in the PATH the program will see.
// With a chroot, the PATH is searched inside it (the path returned is inside).
func lookPath(argv0 string, env []string, root *fsview.Chroot) (string, error) {
	if strings.Contains(argv0, "/") {
		return argv0, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, argv0)
		host := p
		if root != nil {
			var err error
			if _, host, err = root.Resolve(p); err != nil {
				continue
			}
		}
		if st, err := os.Stat(host); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", argv0, path)
}

// fdList closes the fds it holds, once.
type fdList []int

func (l *fdList) add(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			*l = append(*l, fd)
		}
	}
}

func (l *fdList) closeAll() {
	for _, fd := range *l {
		unix.Close(fd)
	}
	*l = nil
}

// Run runs one command to completion under the sandbox h.
func Run(h Host, req *Request) *Result {
	iso := h.Isolation()
	// the child's ends (and fds handed to us by a pipeline) close once it started
	var childEnds fdList
	childEnds.add(req.StdinFD, req.StdoutFD)
	childEnds.add(req.ExtraFDs...)
	if req.Stream != nil {
		childEnds.add(req.Stream.GateFD)
	}
	if req.StderrFD > 0 {
		childEnds.add(req.StderrFD)
	}
	defer childEnds.closeAll()
	if !h.Enter() {
		return failed(protocol.KindClosed, "the sandbox is closed", iso)
	}
	defer h.Leave()
	p := h.RunPolicy()
	env := Env(h, req)
	path, err := lookPath(req.Argv[0], env, plan.ChrootOf(p))
	if err != nil {
		return failed(protocol.KindNotFound, err.Error(), iso)
	}
	cwd := p.Cwd
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	timeout := p.Timeout
	if req.Timeout > 0 || req.NoTimeout {
		timeout = req.Timeout
	}
	maxOut := p.MaxOutput
	if req.MaxOutput > 0 {
		maxOut = req.MaxOutput
	}

	rs := &spawn.RunSpec{Path: path, Argv: req.Argv, Env: env, Dir: cwd, NoFile: uint32(p.MaxOpenFiles)}
	if p.MaxCPUTime > 0 {
		rs.CPUSecs = uint32(math.Ceil(p.MaxCPUTime))
	}

	cg := h.Group()
	var cpuBase time.Duration
	if p.MaxCPUTime > 0 && cg != nil && cg.HasCPUTime() {
		cpuBase = cg.CPUTime()
	}

	// Plumbing: the parent's ends are read (or written) by the supervisor below.
	var ours fdList
	defer ours.closeAll()
	mkpipe := func() (r, w int, ok bool) {
		r, w, err := Pipe()
		if err != nil {
			return -1, -1, false
		}
		return r, w, true
	}
	sup := &supervisor{stdinW: -1, outR: -1, maxOut: maxOut}
	stdinR := NullFD()
	switch {
	case req.StdinFD >= 0:
		stdinR = req.StdinFD
	case req.Stdin != nil:
		r, w, ok := mkpipe()
		if !ok {
			return failed(protocol.KindSpawn, "pipe failed", iso)
		}
		stdinR, sup.stdinW, sup.stdin = r, w, req.Stdin
		childEnds.add(r)
		ours.add(w)
	}
	outW := req.StdoutFD
	if outW < 0 {
		r, w, ok := mkpipe()
		if !ok {
			return failed(protocol.KindSpawn, "pipe failed", iso)
		}
		sup.outR, outW = r, w
		ours.add(r)
		childEnds.add(w)
	}
	// stderr: a descriptor of the caller's (the CLI's terminal, a popen'd stream), or
	// captured
	errW := req.StderrFD
	sup.errR = -1
	if errW <= 0 {
		errR, w, ok := mkpipe()
		if !ok {
			return failed(protocol.KindSpawn, "pipe failed", iso)
		}
		sup.errR, errW = errR, w
		ours.add(errR)
		childEnds.add(w)
	}
	statusR, statusW, ok := mkpipe()
	if !ok {
		return failed(protocol.KindSpawn, "pipe failed", iso)
	}
	ours.add(statusR)
	childEnds.add(statusW)
	if stdinR < 0 {
		return failed(protocol.KindSpawn, "cannot open /dev/null", iso)
	}
	rs.Stdio = [3]int{stdinR, outW, errW}
	rs.StatusFD = statusW
	rs.ExtraFDs = req.ExtraFDs
	if req.Stream != nil && req.Stream.GateFD > 0 {
		rs.GateFD = req.Stream.GateFD
	}

	cancel, err := newCanceller()
	if err != nil {
		return failed(protocol.KindSpawn, "eventfd: "+err.Error(), iso)
	}
	defer cancel.close()
	untrack := h.Track(req.Tag, cancel.fire)
	defer untrack()

	start := time.Now()
	pick := h.Zygote
	var judge supervise.HostRun
	if hk := req.Hooks; hk != nil {
		pick, judge = hk.Zygote, hk.Host()
		hk.Started(cancel.fire)
		defer hk.Ended()
	}
	zyg, pl, err := pick(nil)
	var proc *spawn.Process
	var cow *cowRun
	defer func() { cow.close() }()
	var denied *runDenials
	if err == nil {
		iso = pl.Isolation()
		if cow, err = newCOW(pl); err == nil && cow != nil {
			rs.COWSock = cow.theirs
		}
	}
	if err == nil {
		proc, denied, err = spawnRun(zyg, pl, rs, judge)
		if err == spawn.ErrZygoteGone { // it died (killed, out of memory): once more with a new one
			if zyg, pl, err = pick(zyg); err == nil {
				proc, denied, err = spawnRun(zyg, pl, rs, judge)
			}
		}
	}
	if req.Clones != nil {
		req.Clones.attached(denied)
	}
	spawnDur := time.Since(start)
	childEnds.closeAll() // EOF reaches us once every process of the run is gone
	cow.started()
	if err != nil {
		msg := spawnErrMessage(path, err)
		var se *spawn.Error
		if errors.As(err, &se) && se.Errno == unix.EAGAIN {
			msg += pidsHint(p.MaxProcesses)
		}
		return failed(spawnErrKind(err), msg, iso)
	}
	defer unix.Close(proc.PidFD)
	defer denied.detach()
	if req.Started != nil {
		req.Started(proc.Pid)
	}

	sup.proc, sup.cancelFD, sup.cancelWhy, sup.cg = proc, cancel.fd, cancel.why, cg
	if req.Stream != nil {
		sup.statusR = statusR
		sup.started = req.Stream.onStart(proc, cancel, pl.PidNS)
	}
	sup.pidNS = pl.PidNS
	sup.treeDead = pl.PidNS
	sup.cpuBase = cpuBase
	if timeout > 0 {
		sup.deadline = start.Add(time.Duration(timeout * float64(time.Second)))
	}
	if p.MaxCPUTime > 0 {
		sup.cpuLimit = time.Duration(p.MaxCPUTime * float64(time.Second))
		if cg != nil && cg.HasCPUTime() {
			sup.cpuTime = func() time.Duration { return cg.CPUTime() - cpuBase }
		} else {
			// no cgroup accounting: the run's processes, from its pid 1 down (pid 1
			// reaps every orphan of its namespace, so the dead are in its children's time)
			sup.cpuTime = func() time.Duration { return treeCPU(proc.Pid) }
		}
	}
	sup.loop()
	wall := time.Since(start)

	res := &Result{Isolation: iso}
	st := spawn.ReadStatus(append(sup.status, readAll(statusR)...))
	if st.InitFailed != spawn.StepNone {
		msg := fmt.Sprintf("isolation unavailable: the run failed at %s: %v", st.InitFailed, st.InitErrno)
		if st.InitErrno == unix.EAGAIN {
			msg += pidsHint(p.MaxProcesses)
		}
		return failed(protocol.KindIsolation, msg, iso)
	}
	if st.ExecErrno != 0 {
		kind := protocol.KindSpawn
		if st.ExecErrno == unix.ENOENT || st.ExecErrno == unix.ENOTDIR {
			kind = protocol.KindNotFound
		}
		return failed(kind, spawnErrMessage(path, &spawn.Error{Stage: spawn.StageExec, Errno: st.ExecErrno}), iso)
	}
	ws := unix.WaitStatus(unix.SIGKILL) // pid 1 was killed before it could report
	if st.Ended {
		ws = st.Wait
	}
	res.Stdout, res.StdoutTruncated = sup.out.bytes(), sup.out.truncated
	res.Stderr, res.StderrTruncated = sup.err.bytes(), sup.err.truncated
	switch {
	case ws.Exited():
		c := ws.ExitStatus()
		res.ExitCode = &c
	case ws.Signaled():
		sig := int(ws.Signal())
		res.Signal = &sig
	}
	tree := sup.treeCPU // the last measure (with a cgroup, the sandbox's other concurrent runs count too)
	res.Usage = Usage{
		WallS:       wall.Seconds(),
		CPUUserS:    float64(st.UserMicros) / 1e6,
		CPUSysS:     float64(st.SysMicros) / 1e6,
		CPUTreeS:    tree.Seconds(),
		PeakMemory:  int64(st.MaxRSSKiB) * 1024,
		PeakFrom:    "rusage_maxrss",
		SpawnMicros: float64(spawnDur.Microseconds()),
	}
	if !st.HasUsage {
		res.Usage.PeakFrom = "unknown (killed)"
	}
	kind := sup.reason
	limit := time.Duration(p.MaxCPUTime * float64(time.Second))
	// RLIMIT_CPU's SIGXCPU (then SIGKILL): the kernel's own CPU clock trips it, while
	// rusage's utime+stime is a scaled sample that can read low under load, so
	// SIGXCPU needs only half the limit as evidence
	used := time.Duration(st.UserMicros+st.SysMicros) * time.Microsecond
	if kind == "" && p.MaxCPUTime > 0 && res.Signal != nil &&
		((*res.Signal == int(unix.SIGXCPU) && used >= limit/2) ||
			(*res.Signal == int(unix.SIGKILL) && used >= limit-50*time.Millisecond)) {
		kind = protocol.KindCPUTime
	}
	if kind == "" && cg != nil && p.MaxMemory > 0 && res.Signal != nil && *res.Signal == int(unix.SIGKILL) && cg.NewOOMKill() {
		kind = protocol.KindMemory
	}
	switch kind {
	case protocol.KindTimeout:
		res.TimedOut = true
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("timed out after %gs; the process tree was killed", timeout)}
	case protocol.KindCancelled:
		res.Cancelled = true
		res.Error = &ErrorInfo{Kind: kind, Message: "cancelled; the process tree was killed"}
	case protocol.KindKilled:
		res.Error = &ErrorInfo{Kind: kind, Message: "killed by its owner; the process tree was killed"}
	case protocol.KindCPUTime:
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("CPU time limit of %gs exceeded; the process tree was killed", p.MaxCPUTime)}
	case protocol.KindMemory:
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("memory limit of %d bytes exceeded; killed by the kernel", p.MaxMemory)}
	}
	res.Success = res.Error == nil && res.ExitCode != nil && *res.ExitCode == 0
	cow.finish(h, p, res, req.DryRun)
	if kind == "" && res.Error != nil {
		kind = res.Error.Kind // the workdir's (disk_limit, commit_failed)
	}
	res.Reason = reasonOf(res, kind)
	denied.fill(res)
	return res
}

func readAll(fd int) []byte {
	var out []byte
	buf := make([]byte, 256)
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			out = append(out, buf[:n]...)
		}
		if n <= 0 || err != nil {
			return out
		}
	}
}

// canceller wakes a run's supervisor from any thread; fire after close is a no-op.
type canceller struct {
	mu     sync.Mutex
	fd     int
	closed bool
	reason string // what the first fire asked for ("": cancelled)
}

func newCanceller() (*canceller, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	return &canceller{fd: fd}, nil
}

func (c *canceller) fire() { c.fireFor(protocol.KindCancelled) }

// fireFor wakes the supervisor to kill the run for reason (the first one wins).
func (c *canceller) fireFor(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == "" {
		c.reason = reason
	}
	if !c.closed {
		unix.Write(c.fd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
}

func (c *canceller) why() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reason == "" {
		return protocol.KindCancelled
	}
	return c.reason
}

func (c *canceller) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	unix.Close(c.fd)
}

// sink keeps at most max bytes of a stream and counts the rest as dropped.
type sink struct {
	buf       []byte
	max       int64
	truncated bool
}

func (k *sink) write(b []byte) {
	room := k.max - int64(len(k.buf))
	if int64(len(b)) > room {
		k.truncated = true
		if room <= 0 {
			return
		}
		b = b[:room]
	}
	k.buf = append(k.buf, b...)
}

func (k *sink) bytes() []byte {
	if k.buf == nil {
		return []byte{}
	}
	return k.buf
}

// supervisor runs one poll loop per run: output, stdin, the exit of pid 1 (its pidfd),
// cancellation (an eventfd), the deadline and CPU-time checks. No goroutines.
type supervisor struct {
	proc      *spawn.Process
	cg        *cgroup.Group
	pidNS     bool
	treeDead  bool // killing init (or the cgroup) kills the whole tree
	outR      int
	errR      int
	stdinW    int
	stdin     []byte
	cancelFD  int
	cancelWhy func() string
	statusR   int                      // with started: pid 1's status pipe, read as it comes
	status    []byte                   // what was read of it so far
	started   func(spawn.Status, bool) // popen: called once parked (false) and once the target exec'd or failed (true)
	parked    bool                     // started was told it parked
	maxOut    int64
	deadline  time.Time
	cpuLimit  time.Duration
	cpuBase   time.Duration
	cpuTime   func() time.Duration // the run's CPU time so far (with cpuLimit)
	treeCPU   time.Duration        // its last value
	out, err  sink
	reason    string
	exited    bool
	outClosed bool
	errClosed bool
}

func (s *supervisor) kill(reason string) {
	if s.reason == "" && reason != "" {
		s.reason = reason
	}
	unix.PidfdSendSignal(s.proc.PidFD, unix.SIGKILL, nil, 0)
	if !s.pidNS {
		unix.Kill(-s.proc.Pid, unix.SIGKILL) // degraded: daemons that left the group escape
	}
}

func (s *supervisor) drain(fd int, k *sink, buf []byte) (eof bool) {
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			k.write(buf[:n])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		return err != unix.EAGAIN // n == 0: EOF; other errors end the stream too
	}
}

func (s *supervisor) loop() {
	s.out.max, s.err.max = s.maxOut, s.maxOut
	s.outClosed = s.outR < 0
	s.errClosed = s.errR < 0
	if s.started != nil {
		unix.SetNonblock(s.statusR, true)
	}
	for _, fd := range []int{s.outR, s.errR, s.stdinW} {
		if fd >= 0 {
			unix.SetNonblock(fd, true)
		}
	}
	buf := make([]byte, 64<<10)
	var grace time.Time // after exit without a dead tree: stop waiting for EOF
	for {
		if s.exited && s.outClosed && s.errClosed {
			return
		}
		pfds := make([]unix.PollFd, 0, 5)
		idx := map[string]int{}
		add := func(name string, fd int, ev int16) {
			idx[name] = len(pfds)
			pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: ev})
		}
		if !s.outClosed {
			add("out", s.outR, unix.POLLIN)
		}
		if !s.errClosed {
			add("err", s.errR, unix.POLLIN)
		}
		if s.stdinW >= 0 {
			add("in", s.stdinW, unix.POLLOUT)
		}
		if s.started != nil {
			add("status", s.statusR, unix.POLLIN)
		}
		if !s.exited {
			add("pid", s.proc.PidFD, unix.POLLIN)
			add("cancel", s.cancelFD, unix.POLLIN)
		}
		wait := -1
		now := time.Now()
		if !s.exited && !s.deadline.IsZero() {
			wait = MsUntil(now, s.deadline)
		}
		if !s.exited && s.cpuLimit > 0 && (wait < 0 || wait > 20) {
			wait = 20
		}
		if s.exited && !grace.IsZero() {
			wait = MsUntil(now, grace)
		}
		n, err := unix.Poll(pfds, wait)
		if err == unix.EINTR {
			continue
		}
		if n == 0 || err != nil {
			now = time.Now()
			switch {
			case s.exited:
				return // grace period over: an escaped process holds the pipe
			case !s.deadline.IsZero() && !now.Before(s.deadline):
				s.kill(protocol.KindTimeout)
			}
		}
		ready := func(name string) bool {
			i, ok := idx[name]
			return ok && pfds[i].Revents != 0
		}
		if ready("out") && s.drain(s.outR, &s.out, buf) {
			s.outClosed = true
		}
		if ready("err") && s.drain(s.errR, &s.err, buf) {
			s.errClosed = true
		}
		if ready("in") {
			for len(s.stdin) > 0 {
				w, err := unix.Write(s.stdinW, s.stdin)
				if w > 0 {
					s.stdin = s.stdin[w:]
				}
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					if err != unix.EAGAIN {
						s.stdin = nil // EPIPE: the program stopped reading
					}
					break
				}
			}
			if len(s.stdin) == 0 {
				unix.Close(s.stdinW)
				s.stdinW = -1
			}
		}
		if ready("cancel") {
			s.kill(s.cancelWhy())
		}
		if ready("status") {
			s.readStatus(buf)
		}
		if s.cpuLimit > 0 && !s.exited {
			if s.treeCPU = s.cpuTime(); s.treeCPU > s.cpuLimit {
				s.kill(protocol.KindCPUTime)
			}
		}
		if ready("pid") {
			s.exited = true // pid 1 is gone (the zygote reaps it); its report is on the status pipe
			if s.stdinW >= 0 {
				unix.Close(s.stdinW)
				s.stdinW = -1
			}
			// the main process is gone: nothing of the run may outlive it
			if !s.pidNS {
				s.kill("")
			}
			if !s.treeDead {
				grace = time.Now().Add(200 * time.Millisecond)
			}
		}
	}
}

// MsUntil is the poll timeout in ms from now until t (0: passed).
func MsUntil(now, t time.Time) int {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return int((d + time.Millisecond - 1) / time.Millisecond)
}

func spawnErrKind(err error) string {
	var ee *protocol.Error
	if errors.As(err, &ee) {
		return ee.Kind
	}
	var se *spawn.Error
	if errors.As(err, &se) {
		switch {
		case se.Stage == spawn.StageExec && (se.Errno == unix.ENOENT || se.Errno == unix.ENOTDIR):
			return protocol.KindNotFound
		case se.Protection():
			return protocol.KindIsolation // a protection that could not be applied
		}
	}
	return protocol.KindSpawn
}

// pidsHint explains an EAGAIN from a fork under max_processes: the pids limit is
// the sandbox's, shared by its concurrent runs.
func pidsHint(max int64) string {
	if max <= 0 {
		return ""
	}
	return fmt.Sprintf(" (max_processes %d: the tasks of this sandbox's runs together; give a larger max_processes, or 0 for none, to run more at once)", max)
}

func spawnErrMessage(path string, err error) string {
	var ee *protocol.Error
	if errors.As(err, &ee) {
		return ee.Message
	}
	var se *spawn.Error
	if errors.As(err, &se) && se.Stage == spawn.StageExec {
		hint := ""
		if se.Errno == unix.EACCES {
			hint = " (is it, and every library it loads, under fs_readable?)"
		}
		return fmt.Sprintf("exec %s: %v%s", path, se.Errno, hint)
	}
	return fmt.Sprintf("starting %s failed at %v", path, err)
}

// treeCPU is the CPU time of a process tree rooted at pid 1 of a run: the live
// processes' own, plus what pid 1 counts for its reaped children (every orphan of
// the run's pid namespace is reaped by it). A process that exits between two
// reads may be missed once; it is counted at the next read, through pid 1.
func treeCPU(root int) time.Duration {
	var ticks uint64
	seen := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 && len(seen) < 1<<16 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// fields after the command (which may hold spaces and parentheses)
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			// f[11], f[12]: utime, stime; f[13], f[14]: cutime, cstime (state is f[0])
			if len(f) > 14 {
				for _, k := range []int{11, 12, 13, 14} {
					n, _ := strconv.ParseUint(f[k], 10, 64)
					ticks += n
				}
			}
		}
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, t := range tasks {
			kids, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, k := range strings.Fields(string(kids)) {
				if n, err := strconv.Atoi(k); err == nil {
					stack = append(stack, n)
				}
			}
		}
	}
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// DefaultPath is the PATH a program sees under clean_env.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BaseEnv is the environment of p's runs: the host's (or, under clean_env, only
// PATH) with p's env on top.
func BaseEnv(p *policy.Policy) []string {
	env := map[string]string{}
	if p.CleanEnv {
		env["PATH"] = DefaultPath
	} else {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	for k, v := range p.Env {
		env[k] = v
	}
	return flatten(env)
}

func flatten(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
