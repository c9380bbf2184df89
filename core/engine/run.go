package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// RunRequest is one command to run.
type RunRequest struct {
	Argv      []string
	Stdin     []byte
	StdinFD   int // >= 0: use this fd as stdin instead (pipelines)
	StdoutFD  int // >= 0: send stdout here instead of capturing it (pipelines)
	Timeout   float64
	Env       map[string]string
	Cwd       string
	Tag       string
	MaxOutput int64
}

// Usage is what a run consumed.
type Usage struct {
	WallS       float64 `msgpack:"wall_s"`
	CPUUserS    float64 `msgpack:"cpu_user_s"`
	CPUSysS     float64 `msgpack:"cpu_sys_s"`
	CPUTreeS    float64 `msgpack:"cpu_tree_s,omitempty"` // every process of the run (cgroup)
	PeakMemory  int64   `msgpack:"peak_memory"`
	PeakFrom    string  `msgpack:"peak_memory_source"` // cgroup | rusage_maxrss
	SpawnMicros float64 `msgpack:"spawn_us"`
}

// ErrorInfo is a result's error.
type ErrorInfo struct {
	Kind    string `msgpack:"kind"`
	Message string `msgpack:"message"`
}

// Result is the outcome of a run.
type Result struct {
	Success         bool       `msgpack:"success"`
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
}

func failed(kind, msg string, iso *Isolation) *Result {
	return &Result{Error: &ErrorInfo{Kind: kind, Message: msg}, Isolation: iso, Stdout: []byte{}, Stderr: []byte{}}
}

var (
	devNullOnce sync.Once
	devNull     int = -1
)

func nullFD() int {
	devNullOnce.Do(func() {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			devNull = highFD(fd)
		}
	})
	return devNull
}

func highFD(fd int) int {
	n, err := spawn.HighFD(fd)
	if err != nil {
		return -1
	}
	return n
}

func pipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, err
	}
	return highFD(p[0]), highFD(p[1]), nil
}

// lookPath finds argv0 as execvp would, in the PATH the program will see.
func lookPath(argv0 string, env []string) (string, error) {
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
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH %s", argv0, path)
}

// capture reads a stream into a buffer capped at max, draining (and discarding) the
// rest so the writer never blocks.
type capture struct {
	buf       bytes.Buffer
	max       int64
	truncated bool
	done      chan struct{}
	f         *os.File
}

func newCapture(fd int, max int64) *capture {
	unix.SetNonblock(fd, true) // before NewFile, so Go's poller waits for it
	c := &capture{max: max, done: make(chan struct{}), f: os.NewFile(uintptr(fd), "sandbox-output")}
	go func() {
		defer close(c.done)
		chunk := make([]byte, 64<<10)
		for {
			n, err := c.f.Read(chunk)
			if n > 0 {
				room := c.max - int64(c.buf.Len())
				if room > 0 {
					if int64(n) > room {
						c.buf.Write(chunk[:room])
						c.truncated = true
					} else {
						c.buf.Write(chunk[:n])
					}
				} else {
					c.truncated = true
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *capture) bytes() []byte {
	b := c.buf.Bytes()
	if b == nil {
		return []byte{}
	}
	return b
}

// Run runs one command to completion under the sandbox.
func (s *Sandbox) Run(req *RunRequest) *Result {
	iso := s.isolation()
	// fds handed to us (pipeline ends) are ours to close, whatever happens
	var closeAfter []int
	for _, fd := range []int{req.StdinFD, req.StdoutFD} {
		if fd >= 0 {
			closeAfter = append(closeAfter, fd)
		}
	}
	defer func() {
		for _, fd := range closeAfter {
			unix.Close(fd)
		}
	}()
	if !s.enter() {
		return failed(KindInvalidRequest, "sandbox is closed", iso)
	}
	defer s.inflight.Done()
	p := s.Policy
	env := s.env
	if len(req.Env) > 0 {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		for k, v := range req.Env {
			m[k] = v
		}
		env = flatten(m)
	}
	path, err := lookPath(req.Argv[0], env)
	if err != nil {
		return failed(KindNotFound, err.Error(), iso)
	}
	cwd := p.Cwd
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	timeout := p.Timeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	maxOut := p.MaxOutput
	if req.MaxOutput > 0 {
		maxOut = req.MaxOutput
	}

	spec := &spawn.Spec{
		Path: path, Argv: req.Argv, Env: env, Dir: cwd,
		NewPidNS: s.pidNS, NewUserNS: s.userNS,
		DropCaps: s.features.Root || s.userNS, NoNewPrivs: true, LandlockFD: -1,
	}
	if s.ruleset != nil {
		spec.LandlockFD = s.ruleset.FD
	}
	spec.Config = s.config
	if p.UID != nil {
		spec.SetIDs, spec.UID, spec.GID = true, *p.UID, *p.GID
	}
	rl := func(res int, cur, max uint64) {
		spec.Rlimits = append(spec.Rlimits, spawn.Rlimit{Resource: res, Cur: cur, Max: max})
	}
	if p.MaxOpenFiles > 0 {
		rl(unix.RLIMIT_NOFILE, uint64(p.MaxOpenFiles), uint64(p.MaxOpenFiles))
	}
	if p.MaxDisk > 0 {
		rl(unix.RLIMIT_FSIZE, uint64(p.MaxDisk), uint64(p.MaxDisk))
	}
	if p.MaxCPUTime > 0 {
		secs := uint64(math.Ceil(p.MaxCPUTime))
		rl(unix.RLIMIT_CPU, secs, secs+1)
	}
	if p.MaxProcesses > 0 && iso.Limits["max_processes"].Via == "rlimit_nproc" {
		rl(unix.RLIMIT_NPROC, uint64(p.MaxProcesses), uint64(p.MaxProcesses))
	}
	rl(unix.RLIMIT_CORE, 0, 0) // no core dumps of sandbox memory

	// cgroup for limits and accounting
	var cg *cgroup.Group
	if s.useCg {
		cg, err = cgroup.New(s.features.Cgroup, s.limits)
		if err != nil {
			if !p.AllowDegraded && (p.MaxMemory > 0 || p.MaxProcesses > 0 || p.MaxCPU > 0 || !s.pidNS) {
				return failed(KindIsolation, "isolation unavailable: "+err.Error(), iso)
			}
			iso.Degraded = append(iso.Degraded, "cgroup: "+err.Error())
			cg = nil
		} else {
			defer cg.Close()
			spec.CgroupFDs = cg.ProcFDs()
			iso.Cgroup = fmt.Sprintf("cgroup_v%d", s.features.Cgroup.Version)
		}
	}

	// stdio
	stdinR := nullFD()
	var stdinW int = -1
	if req.StdinFD >= 0 {
		stdinR = req.StdinFD
	} else if req.Stdin != nil {
		r, w, err := pipe()
		if err != nil {
			return failed(KindSpawn, "pipe: "+err.Error(), iso)
		}
		stdinR, stdinW = r, w
		closeAfter = append(closeAfter, r)
	}
	var outC, errC *capture
	outW := req.StdoutFD
	if outW < 0 {
		r, w, err := pipe()
		if err != nil {
			return failed(KindSpawn, "pipe: "+err.Error(), iso)
		}
		outC = newCapture(r, maxOut)
		outW = w
		closeAfter = append(closeAfter, w)
	}
	r, errW, err := pipe()
	if err != nil {
		return failed(KindSpawn, "pipe: "+err.Error(), iso)
	}
	errC = newCapture(r, maxOut)
	closeAfter = append(closeAfter, errW)
	spec.Stdio = [3]int{stdinR, outW, errW}
	if stdinR < 0 {
		return failed(KindSpawn, "cannot open /dev/null", iso)
	}
	statusR, statusW, err := pipe()
	if err != nil {
		return failed(KindSpawn, "pipe: "+err.Error(), iso)
	}
	statusFile := os.NewFile(uintptr(statusR), "sandtrap-status")
	defer statusFile.Close()
	closeAfter = append(closeAfter, statusW)
	spec.StatusFD = statusW

	start := time.Now()
	proc, err := spawn.Start(spec)
	spawnDur := time.Since(start)
	// the child has its copies; close ours so EOF arrives when the tree exits
	for _, fd := range closeAfter {
		unix.Close(fd)
	}
	closeAfter = nil
	if err != nil {
		if stdinW >= 0 {
			unix.Close(stdinW)
		}
		drain(outC, errC)
		return failed(spawnErrKind(err), spawnErrMessage(path, err), iso)
	}
	defer unix.Close(proc.PidFD)
	if stdinW >= 0 {
		go func(data []byte, fd int) {
			unix.SetNonblock(fd, true)
			f := os.NewFile(uintptr(fd), "sandbox-stdin")
			f.Write(data) // EPIPE when the target does not read: fine
			f.Close()
		}(req.Stdin, stdinW)
	}

	killTree := func() {
		unix.Kill(proc.Pid, unix.SIGKILL)
		if !s.pidNS {
			unix.Kill(-proc.Pid, unix.SIGKILL)
		}
		if cg != nil {
			cg.Kill()
		}
	}
	var reason struct {
		sync.Mutex
		kind string
	}
	stop := func(kind string) {
		reason.Lock()
		if reason.kind == "" {
			reason.kind = kind
		}
		reason.Unlock()
		killTree()
	}
	untrack := s.track(req.Tag, func() { stop(KindCancelled) })
	defer untrack()

	waited := make(chan struct{})
	var ws unix.WaitStatus
	var ru unix.Rusage
	go func() {
		for {
			_, err := unix.Wait4(proc.Pid, &ws, 0, &ru)
			if err != unix.EINTR {
				break
			}
		}
		close(waited)
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(time.Duration(timeout * float64(time.Second)))
		defer t.Stop()
		timer = t.C
	}
	var cpuTick <-chan time.Time
	if p.MaxCPUTime > 0 && cg != nil && cg.HasCPUTime() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		cpuTick = tk.C
	}
	limit := time.Duration(p.MaxCPUTime * float64(time.Second))
wait:
	for {
		select {
		case <-waited:
			break wait
		case <-timer:
			stop(KindTimeout)
		case <-cpuTick:
			if cg.CPUTime() > limit {
				stop(KindCPUTime)
			}
		}
	}
	wall := time.Since(start)
	// The main process is gone: nothing of the run may outlive it.
	killTree()
	res := &Result{Isolation: iso}
	statusBytes, _ := io.ReadAll(statusFile)
	st := spawn.ReadStatus(statusBytes)
	if st.InitFailed != "" {
		drain(outC, errC)
		return failed(KindIsolation, fmt.Sprintf("isolation unavailable: applying %s failed: %v", st.InitFailed, st.InitErrno), iso)
	}
	if st.ExecErrno != 0 {
		drain(outC, errC)
		kind := KindSpawn
		if st.ExecErrno == unix.ENOENT || st.ExecErrno == unix.ENOTDIR {
			kind = KindNotFound
		}
		return failed(kind, spawnErrMessage(path, &spawn.Error{Stage: "exec", Errno: st.ExecErrno}), iso)
	}
	if st.Ended {
		ws = st.Wait // the target's own status, not init's
	}
	var tree time.Duration
	if cg != nil {
		tree = cg.CPUTime()
	}
	waitOutput(outC, errC, s.pidNS || cg != nil)
	if outC != nil {
		res.Stdout, res.StdoutTruncated = outC.bytes(), outC.truncated
	} else {
		res.Stdout = []byte{}
	}
	res.Stderr, res.StderrTruncated = errC.bytes(), errC.truncated
	switch {
	case ws.Exited():
		c := ws.ExitStatus()
		res.ExitCode = &c
	case ws.Signaled():
		sig := int(ws.Signal())
		res.Signal = &sig
	}
	res.Usage = Usage{
		WallS:       wall.Seconds(),
		CPUUserS:    time.Duration(ru.Utime.Nano()).Seconds(),
		CPUSysS:     time.Duration(ru.Stime.Nano()).Seconds(),
		CPUTreeS:    tree.Seconds(),
		PeakMemory:  ru.Maxrss * 1024,
		PeakFrom:    "rusage_maxrss",
		SpawnMicros: float64(spawnDur.Microseconds()),
	}
	if cg != nil {
		if pk := cg.PeakMemory(); pk >= 0 {
			res.Usage.PeakMemory, res.Usage.PeakFrom = pk, "cgroup"
		}
	}
	reason.Lock()
	kind := reason.kind
	reason.Unlock()
	if kind == "" && p.MaxCPUTime > 0 && res.Signal != nil && (*res.Signal == int(unix.SIGXCPU) || *res.Signal == int(unix.SIGKILL)) &&
		ru.Utime.Nano()+ru.Stime.Nano() >= int64(limit)-int64(50*time.Millisecond) {
		kind = KindCPUTime
	}
	if kind == "" && cg != nil && p.MaxMemory > 0 && res.Signal != nil && cg.OOMKilled() {
		kind = KindMemory
	}
	switch kind {
	case KindTimeout:
		res.TimedOut = true
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("timed out after %gs; the process tree was killed", timeout)}
	case KindCancelled:
		res.Cancelled = true
		res.Error = &ErrorInfo{Kind: kind, Message: "cancelled; the process tree was killed"}
	case KindCPUTime:
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("CPU time limit of %gs exceeded; the process tree was killed", p.MaxCPUTime)}
	case KindMemory:
		res.Error = &ErrorInfo{Kind: kind, Message: fmt.Sprintf("memory limit of %d bytes exceeded; killed by the kernel", p.MaxMemory)}
	}
	res.Success = res.Error == nil && res.ExitCode != nil && *res.ExitCode == 0
	return res
}

// waitOutput waits for the streams to reach EOF. When the tree is known dead that
// is immediate; otherwise (no pid namespace and no cgroup) an escaped process may
// hold the pipe, so reading stops after a grace period.
func waitOutput(outC, errC *capture, treeDead bool) {
	grace := time.After(200 * time.Millisecond)
	for _, c := range []*capture{outC, errC} {
		if c == nil {
			continue
		}
		if treeDead {
			<-c.done
			continue
		}
		select {
		case <-c.done:
		case <-grace:
			c.f.SetReadDeadline(time.Now())
			<-c.done
		}
	}
	for _, c := range []*capture{outC, errC} {
		if c != nil {
			c.f.Close()
		}
	}
}

func drain(cs ...*capture) {
	for _, c := range cs {
		if c != nil {
			<-c.done
			c.f.Close()
		}
	}
}

func spawnErrKind(err error) string {
	var se *spawn.Error
	if errors.As(err, &se) {
		switch {
		case se.Stage == "exec" && (se.Errno == unix.ENOENT || se.Errno == unix.ENOTDIR):
			return KindNotFound
		case se.Stage == "landlock" || se.Stage == "seccomp" || se.Stage == "capabilities" || se.Stage == "no_new_privs" || se.Stage == "cgroup":
			return KindIsolation
		}
	}
	return KindSpawn
}

func spawnErrMessage(path string, err error) string {
	var se *spawn.Error
	if errors.As(err, &se) && se.Stage == "exec" {
		hint := ""
		if se.Errno == unix.EACCES {
			hint = " (is it, and every library it loads, under fs_readable?)"
		}
		return fmt.Sprintf("exec %s: %v%s", path, se.Errno, hint)
	}
	if errors.As(err, &se) && se.Stage == "chdir" {
		return fmt.Sprintf("cwd: %v", se.Errno)
	}
	return fmt.Sprintf("starting %s failed at %v", path, err)
}

// isolation returns a copy of the sandbox's report for one run.
func (s *Sandbox) isolation() *Isolation {
	c := s.report
	c.Degraded = append([]string{}, s.report.Degraded...)
	return &c
}
