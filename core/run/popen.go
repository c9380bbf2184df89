package run

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// Popen: a run whose stdio are the caller's (pipes whose other ends go straight to
// the caller, its own fds, /dev/null or the engine's capture), started and then
// waited for, killed, paused and resumed through a Process. Nothing of a piped
// stream passes through the engine: the caller reads and writes the kernel's pipe.

// Why a run ended: Result.Reason, one definition serialized to every binding.
const (
	ReasonExited   = "exited"   // the program exited (exit_code)
	ReasonSignaled = "signaled" // a signal ended it (signal), not sent by sandtrap
	ReasonKilled   = "killed"   // its owner killed it (Process.Kill)
	// the others are the error kinds that end a run: timeout, cancelled,
	// memory_limit, cpu_time_limit, and those that kept it from starting
	// (not_found, spawn_failed, isolation_unavailable, closed)
)

func reasonOf(res *Result, kind string) string {
	switch {
	case kind != "":
		return kind
	case res.ExitCode != nil:
		return ReasonExited
	case res.Signal != nil:
		return ReasonSignaled
	}
	return protocol.KindInternal
}

// Stdio modes of one stream of a popen'd run.
const (
	StdioPiped   = "piped"   // a pipe whose other end the caller gets
	StdioInherit = "inherit" // the host process's own fd 0, 1 or 2
	StdioNull    = "null"    // /dev/null
	StdioCapture = "capture" // stdout, stderr: captured by the engine (max_output) into the result
	stdioData    = "data"    // stdin: bytes the engine feeds (then closes)
)

// Stdio is one stream's mode, or (FD >= 0) a host fd the caller keeps (the run gets a
// duplicate).
type Stdio struct {
	Mode string
	FD   int
	Data []byte // stdin only: fed by the engine (then closed)
}

// Stream is what a popen'd run adds to its Request.
type Stream struct {
	GateFD  int // > 0: the target parks before its execve until a byte arrives here (create)
	started chan *control
	execd   chan spawn.Status // the target exec'd, or could not (after started)
}

// control acts on a started run from any goroutine.
type control struct {
	proc   *spawn.Process
	cancel *canceller
	pidNS  bool
	target int // the target's pid in the host's pid namespace (0: unknown)
}

func (st *Stream) onStart(proc *spawn.Process, c *canceller, pidNS bool) func(spawn.Status, bool) {
	told := false
	return func(s spawn.Status, final bool) {
		if !told && (s.Started || s.Parked) {
			told = true
			st.started <- &control{proc: proc, cancel: c, pidNS: pidNS, target: firstChild(proc.Pid)}
		}
		if final {
			st.execd <- s
		}
	}
}

// firstChild is the pid of pid 1's child (the target), 0 if it cannot be read.
func firstChild(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// readStatus reads what pid 1 wrote to the status pipe so far; once the target
// started (or the pipe ended), it tells s.started and stops watching.
func (s *supervisor) readStatus(buf []byte) {
	eof := false
	for {
		n, err := unix.Read(s.statusR, buf)
		if n > 0 {
			s.status = append(s.status, buf[:n]...)
			continue
		}
		if err == unix.EINTR {
			continue
		}
		eof = err != unix.EAGAIN
		break
	}
	st := spawn.ReadStatus(s.status)
	if st.Started || eof || st.ExecErrno != 0 || st.InitFailed != spawn.StepNone {
		s.started(st, true)
		s.started = nil
		unix.SetNonblock(s.statusR, false)
	} else if st.Parked && !s.parked {
		s.parked = true
		s.started(st, false)
	}
}

// Process is a popen'd run.
type Process struct {
	ID      uint64
	Pid     int // the program's pid in the host's pid namespace (pid 1's when unknown)
	InitPid int // the run's pid 1 (sandtrap-init) in the host's pid namespace
	done    chan struct{}
	res     *Result
	ctl     *control
	mu      sync.Mutex
	paused  bool
	gate    int // create: the write end of the target's gate until Start (-1: started)
	frz     *cgroup.Freezer
	// PauseVia is how Pause stops the run: PauseFreezer, PauseSIGSTOP (no freezer
	// on this host: PauseNote says why) or PauseUnavailable (no pid namespace).
	PauseVia  string
	PauseNote string
	// what it was started with (checkpoints)
	Argv []string
	Cwd  string
	Env  map[string]string
}

// How a run pauses (Process.PauseVia).
const (
	PauseFreezer     = "freezer"     // its own cgroup v2's cgroup.freeze: nothing inside can undo it
	PauseSIGSTOP     = "sigstop"     // SIGSTOP of every member: a member still running can SIGCONT the others
	PauseUnavailable = "unavailable" // no pid namespace: the tree cannot be told apart
)

var processSeq atomic.Uint64

// Processes are the popen'd runs of a sandbox not yet waited for.
type Processes struct {
	mu sync.Mutex
	m  map[uint64]*Process
}

// Get is the process id (nil: none).
func (t *Processes) Get(id uint64) *Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Remove forgets the process id.
func (t *Processes) Remove(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

func (t *Processes) add(p *Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*Process{}
	}
	t.m[p.ID] = p
}

// KillAll kills every process (the sandbox closes) and forgets them.
func (t *Processes) KillAll() {
	t.mu.Lock()
	all := t.m
	t.m = nil
	t.mu.Unlock()
	for _, p := range all {
		p.Kill()
	}
}

// Popen starts req with the given stdio and returns it running, with the caller's
// ends of its piped streams (-1 for the others); the caller owns them. A program
// that could not start is an error (its kind: not_found, spawn_failed,
// isolation_unavailable, closed).
//
// With park (create), the program is made — its pid known, its confinement in
// place — but waits before its execve until Start.
func Popen(h Host, t *Processes, req *Request, stdio [3]Stdio, park bool) (*Process, [3]int, error) {
	ours := [3]int{-1, -1, -1}
	var theirs [3]int
	gateR, gateW := -1, -1
	fail := func(err error) (*Process, [3]int, error) {
		if gateW >= 0 {
			unix.Close(gateW)
			unix.Close(gateR)
		}
		for i := range ours {
			if ours[i] >= 0 {
				unix.Close(ours[i])
			}
			if theirs[i] >= 0 {
				unix.Close(theirs[i])
			}
		}
		return nil, [3]int{-1, -1, -1}, err
	}
	for i, s := range stdio {
		theirs[i] = -1
		switch {
		case s.FD >= 0:
			fd, err := unix.FcntlInt(uintptr(s.FD), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return fail(protocol.InvalidRequest(streamNames[i], "fd %d: %v", s.FD, err))
			}
			theirs[i] = fd
		case s.Mode == StdioPiped:
			r, w, err := Pipe()
			if err != nil {
				return fail(protocol.Errorf(protocol.KindSpawn, "pipe: %v", err))
			}
			if i == 0 {
				theirs[i], ours[i] = r, w
			} else {
				theirs[i], ours[i] = w, r
			}
		case s.Mode == StdioInherit:
			fd, err := unix.FcntlInt(uintptr(i), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return fail(protocol.InvalidRequest(streamNames[i], "inherit: the host's fd %d: %v", i, err))
			}
			theirs[i] = fd
		case s.Mode == StdioNull || (i == 0 && s.Mode == ""):
			if i > 0 {
				fd, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					return fail(protocol.Errorf(protocol.KindSpawn, "/dev/null: %v", err))
				}
				theirs[i] = fd
			}
		case s.Mode == StdioCapture && i > 0:
		case s.Mode == stdioData && i == 0:
		default:
			return fail(protocol.Internal("stdio mode %q of %s", s.Mode, streamNames[i]))
		}
	}
	// the run's freezer (pause): its pid 1 and target join it while parked, so every
	// process the program makes is born inside
	frz, frzErr := cgroup.NewFreezer(h.Group())
	if park || frz != nil {
		var err error
		if gateR, gateW, err = Pipe(); err != nil {
			frz.Close()
			return fail(protocol.Errorf(protocol.KindSpawn, "pipe: %v", err))
		}
	}
	req.StdinFD, req.StdoutFD = theirs[0], theirs[1]
	if stdio[0].Data != nil {
		req.Stdin = stdio[0].Data
	}
	if theirs[2] >= 0 {
		// Request.StderrFD 0 means captured: a descriptor that happens to be 0 (the
		// host closed its stdin) moves up first
		if theirs[2] == 0 {
			fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
			if err != nil {
				return fail(protocol.Errorf(protocol.KindSpawn, "stderr: %v", err))
			}
			unix.Close(0)
			theirs[2] = fd
		}
		req.StderrFD = theirs[2]
	}
	st := &Stream{GateFD: gateR, started: make(chan *control, 1), execd: make(chan spawn.Status, 1)}
	req.Stream = st
	p := &Process{ID: processSeq.Add(1), done: make(chan struct{}), gate: gateW, frz: frz, Argv: req.Argv, Cwd: req.Cwd, Env: req.Env}
	go func() {
		p.res = Run(h, req) // closes theirs once started
		p.mu.Lock()
		if p.gate >= 0 {
			unix.Close(p.gate)
			p.gate = -1
		}
		f := p.frz
		p.frz = nil
		p.mu.Unlock()
		close(p.done)
		f.Close() // its members are gone (or going: a frozen task takes SIGKILL)
	}()
	select {
	case c := <-st.started:
		p.ctl = c
		p.InitPid, p.Pid = c.proc.Pid, c.target
		if p.Pid == 0 {
			p.Pid = c.proc.Pid
		}
		if err := p.setupPause(frzErr); err != nil {
			p.Kill()
			<-p.done
			for i := range ours {
				if ours[i] >= 0 {
					unix.Close(ours[i])
				}
			}
			return nil, [3]int{-1, -1, -1}, err
		}
		if !park && p.gate >= 0 {
			// parked for the freezer only: let it exec, and answer once it did (or
			// could not, which is popen's error as without a gate)
			p.Start()
			if s := <-st.execd; !s.Started {
				<-p.done
				if err := startError(p); err != nil {
					return nil, [3]int{-1, -1, -1}, closeAll(ours, err)
				}
			}
		}
	case <-p.done:
		for i := range ours {
			if ours[i] >= 0 {
				unix.Close(ours[i])
			}
		}
		if gateW >= 0 {
			unix.Close(gateW)
			p.gate = -1
		}
		if err := startError(p); err != nil {
			return nil, [3]int{-1, -1, -1}, err
		}
	}
	t.add(p)
	return p, ours, nil
}

var streamNames = [3]string{"stdin", "stdout", "stderr"}

// startError is the error of a run that ended before popen returned, if it never
// started (nil: it ran, or was killed already — a timeout of 0, a cancel — and the
// result says so).
func startError(p *Process) error {
	e := p.res.Error
	if e == nil || protocol.CallKind(e) == "" {
		return nil
	}
	return &protocol.Error{Kind: e.Kind, Message: e.Message}
}

func closeAll(fds [3]int, err error) error {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return err
}

// Wait waits up to timeout (< 0: no limit) for the run to end; nil when it has not.
func (p *Process) Wait(timeout time.Duration) *Result {
	if timeout < 0 {
		<-p.done
		return p.res
	}
	select {
	case <-p.done:
		return p.res
	default:
	}
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case <-p.done:
		return p.res
	case <-tm.C:
		return nil
	}
}

// Done reports whether the run ended.
func (p *Process) Done() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Parked reports whether the program waits for Start.
func (p *Process) Parked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gate >= 0 && !p.Done()
}

// Start lets a parked program (create) exec; false when it was not parked.
func (p *Process) Start() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate < 0 {
		return false
	}
	unix.Write(p.gate, []byte{1})
	unix.Close(p.gate)
	p.gate = -1
	return true
}

// Kill kills the run's whole tree (its pid namespace); idempotent, and a no-op once
// it ended.
func (p *Process) Kill() {
	if p.ctl != nil {
		p.ctl.cancel.fireFor(protocol.KindKilled)
	}
}

// setupPause moves the parked run (pid 1 and its target, neither of which runs the
// program yet) into its freezer; without a pid namespace, or a freezer, it says how
// the run pauses instead. An error (the run is killed) is a freezer that could not
// take the run: nothing of the program has run.
func (p *Process) setupPause(frzErr error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.ctl.pidNS:
		p.PauseVia, p.PauseNote = PauseUnavailable, "the run has no pid namespace of its own"
	case p.frz == nil:
		p.PauseVia, p.PauseNote = PauseSIGSTOP, "no cgroup v2 freezer: "+frzErr.Error()
	default:
		p.PauseVia = PauseFreezer
		tree := treePids(p.ctl.proc.Pid)
		for _, pid := range tree {
			if err := p.frz.Join(pid); err != nil {
				return protocol.Errorf(protocol.KindSpawn, "the run's freezer (%s) could not take pid %d: %v", p.frz.Dir(), pid, err)
			}
		}
		in := map[int]bool{}
		for _, pid := range p.frz.Members() {
			in[pid] = true
		}
		for _, pid := range treePids(p.ctl.proc.Pid) {
			if !in[pid] {
				return protocol.Errorf(protocol.KindSpawn, "the run's freezer: pid %d of the parked run is not in it", pid)
			}
		}
		return nil
	}
	if p.frz != nil {
		p.frz.Close()
		p.frz = nil
	}
	return nil
}

// Pause stops every process of the run: with its freezer, at once, in a way no
// process can undo (cgroup.freeze); else by SIGSTOP of each member of its pid
// namespace until none is left running — see docs/security.md, "pause".
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil || p.Done() {
		return nil
	}
	if !p.ctl.pidNS {
		return protocol.Errorf(protocol.KindIsolation, "pause needs the run's own pid namespace, which this sandbox does not have")
	}
	if p.frz != nil {
		if err := p.frz.Freeze(); err != nil {
			if p.Done() {
				return nil
			}
			return protocol.Errorf(protocol.KindInternal, "pause: %v", err)
		}
		p.paused = true
		return nil
	}
	// A member that was running can wake a stopped one (SIGCONT) or fork: repeat
	// until one pass finds every member stopped.
	for pass := 0; ; pass++ {
		all := true
		for _, pid := range treePids(p.ctl.proc.Pid) {
			if procState(pid) != 'T' {
				all = false
				unix.Kill(pid, unix.SIGSTOP)
			}
		}
		if all {
			break
		}
		if p.Done() {
			return nil
		}
		if pass > 2000 {
			return protocol.Errorf(protocol.KindInternal, "pause: the run's processes did not stop")
		}
		time.Sleep(100 * time.Microsecond)
	}
	p.paused = true
	return nil
}

// Resume continues every process of a paused run.
func (p *Process) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil || p.Done() || !p.paused {
		return nil
	}
	if p.frz != nil {
		if err := p.frz.Thaw(); err != nil {
			return protocol.Errorf(protocol.KindInternal, "resume: %v", err)
		}
		p.paused = false
		return nil
	}
	// pid 1 first (it reaps), then its tree
	for _, pid := range treePids(p.ctl.proc.Pid) {
		unix.Kill(pid, unix.SIGCONT)
	}
	p.paused = false
	return nil
}

// Paused reports whether the run is paused.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && !p.Done()
}

// treePids is the process tree rooted at root (pid 1 of a run): root first.
func treePids(root int) []int {
	var out []int
	seen := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 && len(seen) < 1<<16 {
		pid := stack[0]
		stack = stack[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
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
	return out
}

// procState is the state letter of /proc/pid/stat (0: gone).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// ParseStdio reads one stream's mode from a popen request: "piped", "inherit",
// "null", "capture" (stdout, stderr), a host fd (an int), or (stdin) bytes to feed.
func ParseStdio(v any, i int, probs *policy.Problems) Stdio {
	name := streamNames[i]
	switch t := v.(type) {
	case nil:
		if i == 0 {
			return Stdio{Mode: StdioNull, FD: -1}
		}
		return Stdio{Mode: StdioInherit, FD: -1}
	case string:
		switch t {
		case StdioPiped, StdioInherit, StdioNull:
			return Stdio{Mode: t, FD: -1}
		case StdioCapture:
			if i > 0 {
				return Stdio{Mode: t, FD: -1}
			}
		}
		modes := "piped, inherit, null, capture or a file descriptor"
		if i == 0 {
			modes = "piped, inherit, null, bytes to feed or a file descriptor"
		}
		probs.Add(name, "%q is not a mode (%s)", t, modes)
	case []byte:
		if i == 0 {
			return Stdio{Mode: stdioData, FD: -1, Data: t}
		}
		probs.Add(name, "bytes are stdin's only")
	case int64, int, int8, int16, int32, uint8, uint16, uint32, uint64:
		n64, _ := policy.AsInt(t)
		n := int(n64)
		if n64 < 0 || n64 > 1<<30 {
			probs.Add(name, "fd %d is not a file descriptor", n)
			break
		}
		if _, err := unix.FcntlInt(uintptr(n), unix.F_GETFD, 0); err != nil {
			probs.Add(name, "fd %d: %v", n, err)
			break
		}
		return Stdio{FD: n}
	default:
		probs.Add(name, "want a mode (a string) or a file descriptor (an int), got %T", v)
	}
	return Stdio{Mode: StdioNull, FD: -1}
}

// String names the process for messages.
func (p *Process) String() string { return fmt.Sprintf("process %d (pid %d)", p.ID, p.Pid) }

// Signal sends sig to the program (tree false: the process popen started) or to
// every process of the run (tree: each member of its pid namespace but its pid 1,
// sandtrap-init). It answers how many processes it reached (0: the run ended).
// Refused: 0 and numbers that are no signal; SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU
// and SIGCONT, which would stop or continue the run behind Pause's back (use Pause
// and Resume); tree without a pid namespace (the tree cannot be told apart).
// No signal reaches a process outside the run: each target is pinned by a pidfd,
// then checked to be in the run's pid namespace, then signalled through the pidfd.
func (p *Process) Signal(sig int, tree bool) (int, error) {
	switch unix.Signal(sig) {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGCONT:
		return 0, protocol.InvalidRequest("signal", "%d (%s) would stop or continue the run behind pause(): use pause() and resume()", sig, unix.SignalName(unix.Signal(sig)))
	}
	if sig <= 0 || sig > 64 {
		return 0, protocol.InvalidRequest("signal", "%d is not a signal (1-64)", sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil || p.Done() {
		return 0, nil
	}
	init := p.ctl.proc.Pid
	if !p.ctl.pidNS {
		if tree {
			return 0, protocol.Errorf(protocol.KindIsolation, "signalling the tree needs the run's own pid namespace, which this sandbox does not have (signal the leader)")
		}
		if p.Pid == init {
			return 0, protocol.Errorf(protocol.KindIsolation, "the program's pid is unknown")
		}
		return p.signalPid(p.Pid, sig, func(pid int) bool { return ppid(pid) == init }), nil
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(init) + "/ns/pid")
	if err != nil {
		return 0, nil // gone
	}
	inRun := func(pid int) bool {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
		return err == nil && l == ns
	}
	if !tree {
		if p.Pid == init {
			return 0, protocol.Errorf(protocol.KindIsolation, "the program's pid is unknown")
		}
		return p.signalPid(p.Pid, sig, inRun), nil
	}
	sent := 0
	for _, pid := range treePids(init) {
		if pid != init {
			sent += p.signalPid(pid, sig, inRun)
		}
	}
	return sent, nil
}

// signalPid signals pid if, once pinned by a pidfd, ok says it is the run's: 1 if sent.
func (p *Process) signalPid(pid, sig int, ok func(int) bool) int {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if !ok(pid) {
		return 0
	}
	if unix.PidfdSendSignal(fd, unix.Signal(sig), nil, 0) != nil {
		return 0
	}
	return 1
}

// ppid is pid's parent (0: gone).
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
