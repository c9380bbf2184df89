package run

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	StderrFD int // >= 0: the run's stderr (closed once started); -1: captured
	GateFD   int // > 0: the target parks before its execve until a byte arrives here (create)
	started  chan *control
}

// control acts on a started run from any goroutine.
type control struct {
	proc   *spawn.Process
	cancel *canceller
	pidNS  bool
	target int // the target's pid in the host's pid namespace (0: unknown)
}

func (st *Stream) onStart(proc *spawn.Process, c *canceller, pidNS bool) func(spawn.Status) {
	return func(s spawn.Status) {
		if !s.Started && !s.Parked {
			return
		}
		st.started <- &control{proc: proc, cancel: c, pidNS: pidNS, target: firstChild(proc.Pid)}
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
	if st := spawn.ReadStatus(s.status); st.Started || st.Parked || eof || st.ExecErrno != 0 || st.InitFailed != spawn.StepNone {
		s.started(st)
		s.started = nil
		unix.SetNonblock(s.statusR, false)
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
}

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
	if park {
		var err error
		if gateR, gateW, err = Pipe(); err != nil {
			return fail(protocol.Errorf(protocol.KindSpawn, "pipe: %v", err))
		}
	}
	req.StdinFD, req.StdoutFD = theirs[0], theirs[1]
	if stdio[0].Data != nil {
		req.Stdin = stdio[0].Data
	}
	st := &Stream{StderrFD: theirs[2], GateFD: gateR, started: make(chan *control, 1)}
	req.Stream = st
	p := &Process{ID: processSeq.Add(1), done: make(chan struct{}), gate: gateW}
	go func() {
		p.res = Run(h, req) // closes theirs once started
		p.mu.Lock()
		if p.gate >= 0 {
			unix.Close(p.gate)
			p.gate = -1
		}
		p.mu.Unlock()
		close(p.done)
	}()
	select {
	case c := <-st.started:
		p.ctl = c
		p.InitPid, p.Pid = c.proc.Pid, c.target
		if p.Pid == 0 {
			p.Pid = c.proc.Pid
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
		e := p.res.Error
		if e == nil {
			// it started and ended before we saw it start: still a process
			break
		}
		if protocol.CallKind(e) == "" {
			break // killed already (a timeout of 0, a cancel): the result says so
		}
		return nil, [3]int{-1, -1, -1}, &protocol.Error{Kind: e.Kind, Message: e.Message}
	}
	t.add(p)
	return p, ours, nil
}

var streamNames = [3]string{"stdin", "stdout", "stderr"}

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

// Pause stops every process of the run (SIGSTOP of each member of its pid
// namespace, until none is left running) — see docs/security.md, "pause".
func (p *Process) Pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil || p.Done() {
		return nil
	}
	if !p.ctl.pidNS {
		return protocol.Errorf(protocol.KindIsolation, "pause needs the run's own pid namespace, which this sandbox does not have")
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
