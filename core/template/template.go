package template

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/cgroup"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"
)

// Templates. A session_open request that carries a "template" frame does not start
// its program: it gets a fork of a template — the same program, started once and
// sent that frame (which prepares it: imports, set-up) and kept. One template serves
// every sandbox whose policy differs only in its paths and working directory (a
// fresh directory per task does not cost a fresh interpreter):
//
//   - the template runs in a sandbox of its own with this policy except for the
//     paths: Landlock lets it read and write everywhere (it runs only the program's
//     own preparation, never sandboxed code); the seccomp filter, rlimits, network
//     rules and pid namespace are this policy's;
//   - each fork, before it answers, restricts itself with the asking sandbox's own
//     Landlock ruleset (passed as an fd): the intersection with the template's
//     domain is exactly that ruleset — files, network and the scoping of signals
//     and abstract unix sockets, so forks reach neither each other nor the
//     template; it takes the asking sandbox's working directory and environment;
//   - before the session is returned the fork is in the asking sandbox's cgroup
//     (its limits are that sandbox's): the template's waiting fork joined a cgroup
//     the engine staged for it, which the sandbox takes over as its own (joining a
//     cgroup can wait ~10 ms for the kernel), or the engine moves it.
//
// The protocol a template program speaks: docs/protocol.md, "templates".
type template struct {
	staged  *cgroup.Group // the cgroup the template's waiting fork joined
	stageMu sync.Mutex
	next    *cgroup.Group // made ahead, for the next waiting fork
	closed  bool
	key     string
	mu      sync.Mutex // one start or fork at a time
	sb      Host
	ss      *Session
	used    time.Time
	forks   atomic.Int64 // live forks: they live in its pid namespace and die with it
}

var (
	tplMu sync.Mutex
	tpls  = map[string]*template{}
)

// MaxTemplates bounds the idle templates a host process keeps (least recently used
// go; a template with live forks stays).
const MaxTemplates = 8

// forkTimeout bounds a template start's or a fork's handshake.
const forkTimeout = 60 * time.Second

// templatePolicy is p for a template: every path readable and writable (each fork
// restricts itself with its own sandbox's ruleset), no working directory of its own.
// The environment stays: the template program starts with it (forks get their own).
func templatePolicy(p *policy.Policy) *policy.Policy {
	t := *p
	t.FSReadable, t.FSWritable, t.FSDenied = []string{"/"}, []string{"/"}, nil
	t.Cwd = ""
	return &t
}

func templateKey(s Host, req *runs.Request, start []byte) string {
	b, _ := json.Marshal(struct {
		Policy  any
		Argv    []string
		Env     map[string]string // the template program starts with it (json sorts keys)
		Start   []byte
		Confine uint64 // a template from before confine() is not this one
	}{templatePolicy(s.RunPolicy()), req.Argv, req.Env, start, ConfineGen()})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// getTemplate returns the template for key, locked; the caller unlocks it.
func getTemplate(key string) *template {
	tplMu.Lock()
	t := tpls[key]
	if t == nil {
		t = &template{key: key}
		tpls[key] = t
		if len(tpls) > MaxTemplates {
			// the least recently used one without live forks (ending a template
			// ends its forks); none such: keep them all for now
			var old *template
			for _, o := range tpls {
				if o != t && o.forks.Load() == 0 && (old == nil || o.used.Before(old.used)) {
					old = o
				}
			}
			if old != nil {
				delete(tpls, old.key)
				go old.close()
			}
		}
	}
	t.used = time.Now()
	tplMu.Unlock()
	t.mu.Lock()
	return t
}

// CloseTemplates ends every template (after confine(): their forks would hold
// none of the new confinement; the next open starts a new one, which does).
func CloseTemplates() {
	tplMu.Lock()
	all := tpls
	tpls = map[string]*template{}
	tplMu.Unlock()
	for _, t := range all {
		t.close()
	}
}

func (t *template) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sb != nil {
		t.sb.Close()
		t.sb, t.ss = nil, nil
	}
	if t.staged != nil {
		t.staged.Close()
		t.staged = nil
	}
	t.stageMu.Lock()
	t.closed = true
	if t.next != nil {
		t.next.Close()
		t.next = nil
	}
	t.stageMu.Unlock()
}

// start runs the template program and prepares it with the start frame.
func (t *template) start(s Host, req *runs.Request, startFrame []byte) error {
	sb, err := NewHost(templatePolicy(s.RunPolicy()))
	if err != nil {
		return err
	}
	treq := *req
	treq.Timeout, treq.NoTimeout = 0, true // a template lives while it is useful
	treq.Tag = ""
	treq.Cwd = "/" // forks take their own sandbox's
	ss, err := Start(sb, &treq, true)
	if err != nil {
		sb.Close()
		return err
	}
	reply, fds, err := exchange(ss, startFrame, nil, time.Now().Add(forkTimeout))
	closeAll(fds...)
	if err == nil {
		err = expectOp(reply, "ready")
	}
	if err != nil {
		res := Finish(sb, ss)
		sb.Close()
		return protocol.Errorf(protocol.KindSpawn, "the template did not start: %v%s", err, stderrTail(res))
	}
	t.sb, t.ss = sb, ss
	return nil
}

// sessionFork opens a session that is a fork of the template for this sandbox, req
// and start frame (started first if there is none yet).
func Fork(s Host, req *runs.Request, startFrame []byte, spawn bool) (map[string]any, error) {
	if !s.Enter() {
		return nil, protocol.Errorf(protocol.KindClosed, "the sandbox is closed")
	}
	defer s.Leave()
	t := getTemplate(templateKey(s, req, startFrame))
	defer t.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if t.ss == nil || t.ss.closed {
			if t.sb != nil {
				t.sb.Close()
				t.sb, t.ss = nil, nil
			}
			if err := t.start(s, req, startFrame); err != nil {
				return nil, err
			}
			if s.Group() != nil { // for its first waiting fork
				t.prepareStage(s.Features().Cgroup, plan.CgroupLimits(s.RunPolicy()))
			}
		}
		ss, err, templateDied := forkFrom(s, t, req, spawn)
		if err == nil {
			return map[string]any{"session": ss.id}, nil
		}
		if !templateDied || attempt > 0 {
			return nil, err
		}
		// the template died (killed, or out of memory): start a fresh one, once
		Finish(t.sb, t.ss)
	}
}

// forkFrom asks t for a fork and makes it a session of s. The fork restricts itself
// with s's Landlock ruleset and adds a seccomp layer of its own (seccomp.Layer:
// what the template's view, IPC namespace and supervisor cannot judge for it; and,
// unless spawn, no new processes or programs).
func forkFrom(s Host, t *template, req *runs.Request, spawn bool) (*Session, error, bool) {
	pl, err := s.Plan()
	if err != nil {
		return nil, err, false
	}
	var layer *seccomp.Program
	if pl.BPF != nil { // (without seccomp at all — allow_degraded — there is no layer either)
		if layer, err = seccomp.Layer(seccomp.LayerConfig{DenySpawn: !spawn}); err != nil {
			return nil, protocol.Errorf(protocol.KindIsolation, "seccomp: %v", err), false
		}
	}
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, protocol.Errorf(protocol.KindSpawn, "socketpair: %v", err), false
	}
	send := []int{p[1]}
	if pl.Ruleset != nil {
		send = append(send, pl.Ruleset.FD)
	}
	// A cgroup for the template's next spare fork to join while it waits: a fork
	// joining a cgroup can wait ~10 ms for the kernel (an RCU grace period), so the
	// next sandbox takes over the cgroup its fork is already in instead.
	var stage *cgroup.Group
	if s.Group() != nil {
		if stage = t.takeStage(); stage != nil {
			send = append(send, stage.ProcFDs()...)
		}
		// made off this path, for the request after this one
		defer func() { go t.prepareStage(s.Features().Cgroup, plan.CgroupLimits(s.RunPolicy())) }()
	}
	nstage := len(send) - 1
	if pl.Ruleset != nil {
		nstage--
	}
	cwd := s.RunPolicy().Cwd
	if req.Cwd != "" {
		cwd = req.Cwd
	}
	frame := map[string]any{"op": "fork", "landlock": pl.Ruleset != nil, "stage": nstage, "cwd": cwd, "env": runs.Env(s, req)}
	if layer != nil {
		frame["seccomp"] = layer.BPF
	}
	forkReq, _ := msgpack.Marshal(frame)
	deadline := time.Now().Add(forkTimeout)
	reply, fds, err := exchange(t.ss, forkReq, send, deadline)
	unix.Close(p[1])
	staged := t.staged // the cgroup the fork handed over now joined, if it was staged
	t.staged = stage
	defer func() {
		if staged != nil {
			staged.Close() // not adopted: remove it
		}
	}()
	if err == nil {
		err = expectOp(reply, "forked")
	}
	if err == nil && len(fds) != 1 {
		err = fmt.Errorf("the template sent %d fds with its answer, want its child's pidfd", len(fds))
	}
	if err != nil {
		closeAll(fds...)
		unix.Close(p[0])
		return nil, protocol.Errorf(protocol.KindSpawn, "fork from the template: %v", err), true
	}
	proc := &pidfdProc{fd: fds[0]}
	out, err := unix.FcntlInt(uintptr(p[0]), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		proc.kill()
		proc.release()
		unix.Close(p[0])
		return nil, protocol.Errorf(protocol.KindSpawn, "dup: %v", err), false
	}
	ss := &Session{id: sessionSeq.Add(1), in: p[0], out: out, done: make(chan *runs.Result, 1), gen: t.ss.gen}
	ss.tag = fmt.Sprintf("\x00session-%d", ss.id)
	// the fork says ready once it is in this sandbox's cgroup and scoped
	hello, rfds, err := exchange(ss, nil, nil, deadline)
	closeAll(rfds...)
	if err == nil {
		err = expectOp(hello, "ready")
	}
	if err == nil {
		err = joinGroup(s, proc.fd, &staged)
	}
	if err != nil {
		proc.kill()
		proc.release()
		closeAll(ss.in, ss.out)
		return nil, protocol.Errorf(protocol.KindSpawn, "the template's fork did not start: %v", err), false
	}
	untrack := s.Track(ss.tag, proc.kill)
	t.forks.Add(1)
	iso := pl.Isolation()
	switch {
	case spawn:
		iso.Spawn = "allowed"
	case layer == nil:
		iso.Spawn = "not refused (no seccomp)"
	default:
		iso.Spawn = "refused"
	}
	if iso.Seccomp != nil && layer != nil {
		sc := *iso.Seccomp
		sc.Layer = layer.Denied
		iso.Seccomp = &sc
	}
	timeout := s.RunPolicy().Timeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	var timedOut atomic.Bool
	var timer *time.Timer
	if timeout > 0 {
		timer = time.AfterFunc(time.Duration(timeout*float64(time.Second)), func() {
			timedOut.Store(true)
			proc.kill()
		})
	}
	go func() {
		start := time.Now()
		pfd := []unix.PollFd{{Fd: int32(proc.fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(pfd, -1); err != unix.EINTR {
				break
			}
		}
		if timer != nil {
			timer.Stop()
		}
		untrack()
		proc.release()
		t.forks.Add(-1)
		// not our child: its status went to the template, which reaps it
		res := &runs.Result{Stdout: []byte{}, Stderr: []byte{}, Isolation: iso,
			Usage: runs.Usage{WallS: time.Since(start).Seconds()}}
		if timedOut.Load() {
			res.TimedOut = true
			res.Error = &runs.ErrorInfo{Kind: protocol.KindTimeout, Message: fmt.Sprintf("timed out after %gs", timeout)}
		}
		ss.done <- res
	}()
	s.Sessions().add(ss)
	return ss, nil, false
}

// joinGroup puts the fork (known by its pidfd) into this sandbox's cgroup before it
// serves anything: by taking over *staged when the fork is already in it (and this
// sandbox's own cgroup is unused), else by moving it.
func joinGroup(s Host, pidfd int, staged **cgroup.Group) error {
	own := s.Group()
	if own == nil {
		return nil
	}
	pid, err := pidfdPid(pidfd)
	if err != nil {
		return err
	}
	if g := *staged; g != nil && slices.Contains(g.Pids(), pid) && s.AdoptGroup(g) {
		*staged = nil
		return nil
	}
	for _, fd := range own.ProcFDs() {
		if _, err := unix.Write(fd, []byte(strconv.Itoa(pid))); err != nil {
			return fmt.Errorf("joining the sandbox's cgroup: %v", err)
		}
	}
	return nil
}

// pidfdPid is the pid (in this process's pid namespace) a pidfd refers to.
func pidfdPid(fd int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("the fork is gone (pidfd pid %q)", strings.TrimSpace(v))
			}
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no Pid in the pidfd's fdinfo")
}

// takeStage returns the cgroup made ahead for the next waiting fork (nil if none).
func (t *template) takeStage() *cgroup.Group {
	t.stageMu.Lock()
	defer t.stageMu.Unlock()
	g := t.next
	t.next = nil
	return g
}

// prepareStage makes a cgroup with limits l for takeStage.
func (t *template) prepareStage(info *kernel.CgroupInfo, l cgroup.Limits) {
	t.stageMu.Lock()
	defer t.stageMu.Unlock()
	if t.next != nil || t.closed {
		return
	}
	if g, err := cgroup.New(info, l); err == nil {
		t.next = g
	}
}

// pidfdProc is a process known by a pidfd; kill is safe after release.
type pidfdProc struct {
	mu sync.Mutex
	fd int
}

func (p *pidfdProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
	}
}

func (p *pidfdProc) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

func expectOp(frame []byte, op string) error {
	var m map[string]any
	if err := msgpack.Unmarshal(frame, &m); err != nil {
		return fmt.Errorf("the answer is not a msgpack map: %v", err)
	}
	if m["op"] == op {
		return nil
	}
	if msg, ok := m["message"].(string); ok {
		return fmt.Errorf("%s", msg)
	}
	return fmt.Errorf("want %q, got %v", op, m["op"])
}

func stderrTail(r *runs.Result) string {
	if r == nil || len(r.Stderr) == 0 {
		return ""
	}
	e := r.Stderr
	if len(e) > 2000 {
		e = e[len(e)-2000:]
	}
	return "; stderr: " + string(e)
}

// exchange writes one frame (none when frame is nil) with fds attached and reads one
// frame back with any fds that came with it, by deadline.
func exchange(ss *Session, frame []byte, fds []int, deadline time.Time) ([]byte, []int, error) {
	if frame != nil {
		buf := make([]byte, 4+len(frame))
		binary.BigEndian.PutUint32(buf, uint32(len(frame)))
		copy(buf[4:], frame)
		if len(fds) > 0 {
			n, err := unix.SendmsgN(ss.in, buf, unix.UnixRights(fds...), nil, 0)
			if err != nil {
				return nil, nil, fmt.Errorf("sendmsg: %v", err)
			}
			buf = buf[n:]
		}
		if err := writeAll(ss.in, buf, deadline); err != nil {
			return nil, nil, err
		}
	}
	hdr := make([]byte, 4)
	got := 0
	var rfds []int
	oob := make([]byte, unix.CmsgSpace(4*4))
	for got < 4 {
		if err := waitReadable(ss.out, deadline); err != nil {
			return nil, rfds, err
		}
		n, oobn, _, _, err := unix.Recvmsg(ss.out, hdr[got:], oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return nil, rfds, err
		}
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, cm := range msgs {
				if r, err := unix.ParseUnixRights(&cm); err == nil {
					rfds = append(rfds, r...)
				}
			}
		}
		if n == 0 {
			return nil, rfds, fmt.Errorf("the session's program exited")
		}
		got += n
	}
	n := binary.BigEndian.Uint32(hdr)
	if n > MaxFrame {
		return nil, rfds, fmt.Errorf("the program sent a %d-byte frame (limit %d)", n, MaxFrame)
	}
	reply := make([]byte, n)
	if err := readFull(ss.out, reply, deadline); err != nil {
		return nil, rfds, err
	}
	return reply, rfds, nil
}

func waitReadable(fd int, deadline time.Time) error {
	for {
		wait := -1
		if !deadline.IsZero() {
			if wait = runs.MsUntil(time.Now(), deadline); wait == 0 {
				return fmt.Errorf("timed out waiting for the program")
			}
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, wait); err != nil && err != unix.EINTR {
			return err
		}
		if pfd[0].Revents != 0 {
			return nil
		}
	}
}

// Templates are the sandboxes of the templates kept now (their count, and their
// processes through each one's cgroup).
func Templates() []Host {
	tplMu.Lock()
	all := make([]*template, 0, len(tpls))
	for _, t := range tpls {
		all = append(all, t)
	}
	tplMu.Unlock()
	var out []Host
	for _, t := range all {
		t.mu.Lock()
		if t.sb != nil {
			out = append(out, t.sb)
		}
		t.mu.Unlock()
	}
	return out
}

// Kept is how many templates are kept now (started or starting).
func Kept() int {
	tplMu.Lock()
	defer tplMu.Unlock()
	return len(tpls)
}
