package run

import (
	"fmt"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/plan"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"golang.org/x/sys/unix"
)

// Change is one path a run changed under its workdir (core/fsview).
type Change = fsview.Change

// Branch actions as a result reports them (Result.Branch).
const (
	BranchCommitted = "committed"
	BranchAborted   = "aborted"
	BranchKept      = "kept"
)

// Keeper holds a run's upper layer for a later commit or abort (the sandbox:
// on_exit/on_error "keep"); the id goes in the result.
type Keeper interface {
	KeepLayer(l *fsview.Layer) uint64
}

// cowRun is the copy-on-write side of one run: the socket its pid 1 hands the
// upper layer on, and the layer once received.
type cowRun struct {
	ours, theirs int
	userXattr    bool
	storage      string // fs_storage: the layers are on disk there
	layer        *fsview.Layer
}

// newCOW makes the socket of a run of a copy-on-write plan (nil: not one).
func newCOW(pl *plan.Plan) (*cowRun, error) {
	if pl == nil || pl.Zygote == nil || pl.Zygote.COW == nil {
		return nil, nil
	}
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	c := &cowRun{ours: sv[0], theirs: sv[1], userXattr: pl.Zygote.COW.UserXattr}
	c.storage = pl.Zygote.COW.Storage
	return c, nil
}

// started: the child's end is the zygote's now.
func (c *cowRun) started() {
	if c != nil && c.theirs >= 0 {
		unix.Close(c.theirs)
		c.theirs = -1
	}
}

// receive takes the upper layer pid 1 sent (before its target ran).
func (c *cowRun) receive(workdir string) {
	if c == nil || c.layer != nil {
		return
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(c.ours, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil || oobn == 0 {
		return
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return
	}
	c.layer = fsview.NewLayer(fds[0], workdir, c.userXattr)
	if c.storage != "" {
		c.layer.OnDisk(c.storage)
	}
}

// close drops what the run did not hand on.
func (c *cowRun) close() {
	if c == nil {
		return
	}
	c.started()
	unix.Close(c.ours)
	if c.layer != nil {
		c.layer.Abort()
	}
}

// finish lists the run's changes and applies its branch action (dry runs:
// always abort). The layer is committed, dropped or handed to the keeper.
func (c *cowRun) finish(h Host, p *policy.Policy, res *Result, dry bool) {
	if c == nil {
		return
	}
	c.receive(p.Workdir)
	l := c.layer
	if l == nil {
		if res.Error == nil {
			res.Error = &ErrorInfo{Kind: protocol.KindInternal, Message: "BUG(run): the run's copy-on-write layer never arrived"}
			res.Success = false
		}
		return
	}
	changes, err := l.Changes()
	if err != nil {
		res.Error = &ErrorInfo{Kind: protocol.KindInternal, Message: fmt.Sprintf("listing the workdir's changes: %v", err)}
		res.Success = false
		changes = []Change{}
	}
	res.Changes = changes
	if used, full := l.Usage(); full && p.MaxDisk > 0 && res.Error == nil {
		res.Error = &ErrorInfo{Kind: protocol.KindDisk, Message: fmt.Sprintf("max_disk of %d bytes reached: the workdir's copy-on-write layer is full (%d bytes)", p.MaxDisk, used)}
		res.Success = false
	}
	action := p.ExitAction(res.Success)
	if dry || err != nil {
		action = policy.BranchAbort
	}
	switch action {
	case policy.BranchKeep:
		if k, ok := h.(Keeper); ok {
			res.Branch, res.BranchID = BranchKept, k.KeepLayer(l)
			c.layer = nil
			return
		}
		fallthrough
	case policy.BranchAbort:
		res.Branch = BranchAborted
	case policy.BranchCommit:
		cr, err := l.Commit(Writable(p))
		res.Branch = BranchCommitted
		if cr != nil {
			res.Committed, res.CommitRefused = cr.Applied, cr.Refused
		}
		if err != nil {
			res.Branch = BranchAborted
			if len(res.Committed) > 0 {
				res.Branch = BranchCommitted + " (in part)"
			}
			res.Error = &ErrorInfo{Kind: protocol.KindCommit, Message: err.Error()}
			res.Success = false
		}
	}
	if l.Dir() != "" {
		l.Abort() // on disk: gone when the result says so
	} else {
		go l.Abort() // the tmpfs's teardown is no one's wait
	}
	c.layer = nil
}

// Writable is whether a path of p's workdir (relative) was the run's to write:
// inside a writable grant and not inside a narrower readable grant or a denied
// path. Only such changes are committed: elsewhere a run can change modes and
// times (which Landlock does not govern) of its copy, never the workdir's.
func Writable(p *policy.Policy) func(rel string) bool {
	return func(rel string) bool {
		abs := p.Workdir
		if rel != "" && rel != "." {
			abs = p.Workdir + "/" + rel
		}
		for _, d := range p.FSDenied {
			if policy.Within(abs, d) {
				return false
			}
		}
		best, rw := -1, false
		for _, w := range p.FSWritable {
			if policy.Within(abs, w) && len(w) > best {
				best, rw = len(w), true
			}
		}
		for _, r := range p.FSReadable {
			if policy.Within(abs, r) && len(r) > best {
				best, rw = len(r), false
			}
		}
		return rw
	}
}
