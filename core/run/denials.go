package run

// What was denied, per run: the supervisor's refusals attributed to the run that
// made the call (core/supervise/denials.go: by the caller's pid namespace), and a
// statement of every source of denials that cannot be reported here.

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/spawn"
	"github.com/sandtrap/sandtrap/core/supervise"
	"golang.org/x/sys/unix"
)

// Denial is one refused access of a run, counted.
type Denial struct {
	Syscall string `msgpack:"syscall"`
	Path    string `msgpack:"path,omitempty"`    // the file, for calls about files
	Address string `msgpack:"address,omitempty"` // the destination, for calls about sockets
	Reason  string `msgpack:"reason,omitempty"`  // why the supervisor could not decide (then refused)
	Errno   string `msgpack:"errno"`             // its name, EACCES
	ErrnoNr int    `msgpack:"errno_nr"`          // its number, 13
	Count   int    `msgpack:"count"`
	Source  string `msgpack:"source"` // supervisor | landlock | seccomp
}

// Denial sources, and what each reports (Result.DenialsSources).
const (
	SourceSupervisor = "supervisor"
	SourceLandlock   = "landlock"
	SourceSeccomp    = "seccomp"
	sourceReported   = "reported"
)

// socketCalls are the supervised calls whose detail is an address.
// ("http": a request or TLS connection the HTTP proxy refused, core/httpproxy)
var socketCalls = map[string]bool{"connect": true, "sendto": true, "sendmsg": true, "sendmmsg": true, "listen": true, "bind": true, "http": true}

func toDenials(l supervise.DenialList) []Denial {
	out := make([]Denial, 0, len(l.Entries))
	for _, d := range l.Entries {
		o := Denial{Syscall: d.Syscall, Errno: errnoName(d.Errno), ErrnoNr: int(d.Errno), Count: d.Count, Source: SourceSupervisor}
		switch {
		case strings.HasPrefix(d.Detail, "supervisor: "):
			o.Reason = strings.TrimPrefix(d.Detail, "supervisor: ")
		case socketCalls[d.Syscall]:
			o.Address = d.Detail
		default:
			o.Path = d.Detail
		}
		out = append(out, o)
	}
	return out
}

// errnoName is the C name of e (EACCES), or its number.
func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// NoAttribution (tests: the cost of the per-run log) keeps the sandbox's log only;
// it takes effect for supervisors registered after it is set.
var NoAttribution bool

// supervisors are the sandbox's zygotes' supervisors.
var (
	supMu sync.Mutex
	sups  = map[*spawn.Zygote]*supervise.Supervisor{}
)

// AddSupervisor registers z's supervisor (the engine, when it starts one), until z
// closes; pidNS says each run has a pid namespace of its own (denials are then
// attributed to runs).
func AddSupervisor(z *spawn.Zygote, sup *supervise.Supervisor, pidNS bool) {
	if pidNS && !NoAttribution {
		sup.AttributeRuns()
	}
	supMu.Lock()
	sups[z] = sup
	supMu.Unlock()
	z.OnClose(func() {
		supMu.Lock()
		delete(sups, z)
		supMu.Unlock()
	})
}

func supervisorOf(z *spawn.Zygote) *supervise.Supervisor {
	supMu.Lock()
	defer supMu.Unlock()
	return sups[z]
}

// runDenials follows one run's denials.
type runDenials struct {
	sup  *supervise.Supervisor
	log  *supervise.RunLog
	why  string // the supervisor's denials are not this run's: why
	none bool   // no supervisor: nothing is watched, nothing it could deny
}

// spawnRun starts rs on z and attaches the run to z's supervisor: for its denials,
// and, with judge, for its trapped calls, which the supervisor routes to judge by
// the run's pid namespace (the one attribution of both: core/supervise/denials.go).
// A host run's calls made before its attach wait for it (Starting); a host run that
// cannot be attached is killed (its calls would belong to no run).
func spawnRun(z *spawn.Zygote, pl *plan.Plan, rs *spawn.RunSpec, judge supervise.HostRun) (*spawn.Process, *runDenials, error) {
	if judge == nil {
		proc, err := z.Spawn(rs)
		if err != nil {
			return nil, nil, err
		}
		return proc, attachRun(z, pl, proc), nil
	}
	sup := supervisorOf(z)
	if sup == nil || !pl.PidNS {
		return nil, nil, protocol.Errorf(protocol.KindInternal, "BUG(run): a run judged by the host on a zygote without a supervisor or pid namespaces")
	}
	done := sup.Starting()
	defer done()
	proc, err := z.Spawn(rs)
	if err != nil {
		return nil, nil, err
	}
	log, err := sup.AttachHost(proc.PidFD, proc.Pid, judge)
	if err != nil {
		unix.PidfdSendSignal(proc.PidFD, unix.SIGKILL, nil, 0) // the run is dead: it reports how
		return proc, &runDenials{why: "not reported: " + err.Error()}, nil
	}
	d := &runDenials{sup: sup, log: log}
	if NoAttribution { // attached for its calls; its log stays empty
		d.why = "not reported (test hook: no attribution)"
	}
	return proc, d, nil
}

// attachRun starts collecting the denials of the run whose pid 1 is proc.
func attachRun(z *spawn.Zygote, pl *plan.Plan, proc *spawn.Process) *runDenials {
	sup := supervisorOf(z)
	if sup == nil {
		return &runDenials{none: true}
	}
	if NoAttribution {
		return &runDenials{why: "not reported (test hook: no attribution)"}
	}
	if !pl.PidNS {
		return &runDenials{why: "not reported: runs share a pid namespace here (no pid namespace per run), so the supervisor cannot tell them apart"}
	}
	log, err := sup.Attach(proc.PidFD, proc.Pid) // proc.PidFD stays open until fill or detach
	if err != nil {
		return &runDenials{why: "not reported: " + err.Error()}
	}
	return &runDenials{sup: sup, log: log}
}

// fill detaches the run (once) and sets res's denials and their sources.
func (d *runDenials) fill(res *Result) {
	res.Denials = []Denial{}
	res.DenialsSources = denialSources(d)
	if d == nil || d.log == nil {
		return
	}
	l := d.sup.Detach(d.log)
	d.log = nil
	res.Denials, res.DenialsDropped = toDenials(l), l.Dropped
}

// detach releases the run when fill was not reached (an early failure).
func (d *runDenials) detach() {
	if d != nil && d.log != nil {
		d.sup.Detach(d.log)
		d.log = nil
	}
}

func denialSources(d *runDenials) map[string]string {
	m := map[string]string{
		SourceLandlock: landlockAudit(),
		SourceSeccomp:  "not reported: the filter's deny list (isolation.seccomp.denied) answers in the kernel, with no notification to the supervisor",
	}
	switch {
	case d == nil:
		m[SourceSupervisor] = "not reported"
	case d.why != "":
		m[SourceSupervisor] = d.why
	case d.none:
		m[SourceSupervisor] = sourceReported + " (none: this policy watches no call)"
	default:
		m[SourceSupervisor] = sourceReported
	}
	return m
}

var (
	auditOnce sync.Once
	auditWhy  string
)

// landlockAudit says why Landlock's own denials (kernel audit records, Landlock
// ABI >= 7) are not in the result: probed once per process.
func landlockAudit() string {
	auditOnce.Do(func() { auditWhy = "not reported: " + probeAudit() })
	return auditWhy
}

// probeAudit asks the kernel's audit subsystem for its status (AUDIT_GET).
func probeAudit() string {
	const why = "; sandtrap does not read audit records"
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return fmt.Sprintf("no kernel audit socket (%v): the kernel has no audit, or this process may not use it", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Usec: 200000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Sprintf("kernel audit socket: %v", err)
	}
	req := make([]byte, unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint32(req[0:], unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint16(req[4:], unix.AUDIT_GET)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], 1)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Sprintf("kernel audit status: %v", err)
	}
	buf := make([]byte, 8192)
	for i := 0; i < 4; i++ {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Sprintf("kernel audit status: %v", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Sprintf("kernel audit status: %v", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return fmt.Sprintf("the kernel's audit status is not readable here (%v: it needs CAP_AUDIT_CONTROL, and audit records CAP_AUDIT_READ)", syscall.Errno(-e))
					}
				}
			case unix.AUDIT_GET:
				if len(m.Data) >= 8 {
					if enabled := binary.NativeEndian.Uint32(m.Data[4:]); enabled == 0 {
						return "the kernel's audit is disabled (audit_enabled=0), so Landlock logs no denial; enabling it is host-wide and left to the host's administrator" + why
					}
				}
				return "the kernel's audit is enabled" + why + " (a reader of Landlock's records, CAP_AUDIT_READ, is not built yet)"
			}
		}
	}
	return "no answer from the kernel's audit"
}

// CloneDenials follows the denials of a run's sessions (a COW-fork template's
// clones, each a session of its own: core/supervise/sessions.go). Set it on the
// Request; the run fills it in once attached to its supervisor.
type CloneDenials struct {
	once  sync.Once
	ready chan struct{}
	log   *supervise.RunLog
	why   string // not reported: why ("" with log set: reported)
}

// NewCloneDenials is an empty CloneDenials for one Request.
func NewCloneDenials() *CloneDenials { return &CloneDenials{ready: make(chan struct{})} }

// attached: the run's denials are d (called once, after the spawn; nil d: none).
func (cd *CloneDenials) attached(d *runDenials) {
	cd.once.Do(func() {
		switch ok, why := supervise.SessionsAttributable(); {
		case d == nil:
			cd.why = "not reported: the run did not start"
		case d.none:
			cd.why = sourceReported + " (none: this policy watches no call)"
		case d.why != "":
			cd.why = d.why
		case !ok:
			cd.why = "not reported by clone: " + why
		default:
			d.log.CountSessions()
			cd.log = d.log
		}
		close(cd.ready)
	})
}

// Wait waits for the run's attach (until done fires) and says what the clones'
// denials will be, as a run's denials_sources.
func (cd *CloneDenials) Wait(done <-chan time.Time) map[string]string {
	select {
	case <-cd.ready:
	case <-done:
		return denialSources(&runDenials{why: "not reported: the run did not start"})
	}
	switch {
	case cd.log != nil:
		return denialSources(&runDenials{})
	case strings.HasPrefix(cd.why, sourceReported):
		return denialSources(&runDenials{none: true})
	default:
		return denialSources(&runDenials{why: cd.why})
	}
}

// Take is what the session whose leader has pidfs inode ino was refused (once).
func (cd *CloneDenials) Take(ino uint64) ([]Denial, int) {
	if cd.log == nil {
		return []Denial{}, 0
	}
	l := cd.log.TakeSession(ino)
	return toDenials(l), l.Dropped
}
