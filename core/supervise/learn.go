//go:build linux

package supervise

// Learn mode: the path calls Landlock governs are trapped, recorded (Config.Learn)
// and continued. Recording decides nothing: the kernel then runs the call under the
// sandbox's Landlock ruleset and filter as it would untrapped, so a racing thread
// that rewrites a path after it was read changes only the record (a program can
// always lie to its own learning), never what it may do. The one check made here is
// the filter's own for these calls (no set-id mode on a file created), so that which
// of the filter's overlapping rules wins does not matter.

import (
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Access kinds recorded in learn mode.
const (
	LearnRead   = "read"   // a file or directory opened for reading
	LearnWrite  = "write"  // a file opened for writing (or created: its directory)
	LearnExec   = "exec"   // a program executed
	LearnCreate = "create" // an entry made, removed or renamed in a directory: the path of the entry
)

// learnPath is one path argument: the index of its dirfd (-1: the cwd) and of the path.
type learnPath struct{ dirfd, path int }

type learnCall struct {
	name  string
	nr    int32
	paths []learnPath
	kind  func(c *call) (string, bool) // the kind; false: refuse (set-id mode)
}

func constKind(k string) func(*call) (string, bool) {
	return func(*call) (string, bool) { return k, true }
}

const setID = unix.S_ISUID | unix.S_ISGID

// openKind is an open's kind by its flags (and its mode when it creates).
func openKind(flagsArg, modeArg int) func(*call) (string, bool) {
	return func(c *call) (string, bool) {
		fl := uint64(uint32(c.arg(flagsArg)))
		creates := fl&unix.O_CREAT != 0 || fl&0o20000000 == 0o20000000
		if creates && c.arg(modeArg)&setID != 0 {
			return "", false
		}
		if fl&unix.O_ACCMODE != unix.O_RDONLY || creates || fl&unix.O_TRUNC != 0 {
			return LearnWrite, true
		}
		return LearnRead, true
	}
}

func modeKind(modeArg int, k string) func(*call) (string, bool) {
	return func(c *call) (string, bool) { return k, c.arg(modeArg)&setID == 0 }
}

var learnCalls = []learnCall{
	{"open", unix.SYS_OPEN, []learnPath{{-1, 0}}, openKind(1, 2)},
	{"openat", unix.SYS_OPENAT, []learnPath{{0, 1}}, openKind(2, 3)},
	{"creat", unix.SYS_CREAT, []learnPath{{-1, 0}}, modeKind(1, LearnWrite)},
	{"execve", unix.SYS_EXECVE, []learnPath{{-1, 0}}, constKind(LearnExec)},
	{"mkdir", unix.SYS_MKDIR, []learnPath{{-1, 0}}, modeKind(1, LearnCreate)},
	{"mkdirat", unix.SYS_MKDIRAT, []learnPath{{0, 1}}, modeKind(2, LearnCreate)},
	{"mknod", unix.SYS_MKNOD, []learnPath{{-1, 0}}, modeKind(1, LearnCreate)},
	{"mknodat", unix.SYS_MKNODAT, []learnPath{{0, 1}}, modeKind(2, LearnCreate)},
	{"unlink", unix.SYS_UNLINK, []learnPath{{-1, 0}}, constKind(LearnCreate)},
	{"unlinkat", unix.SYS_UNLINKAT, []learnPath{{0, 1}}, constKind(LearnCreate)},
	{"rmdir", unix.SYS_RMDIR, []learnPath{{-1, 0}}, constKind(LearnCreate)},
	{"rename", unix.SYS_RENAME, []learnPath{{-1, 0}, {-1, 1}}, constKind(LearnCreate)},
	{"renameat", unix.SYS_RENAMEAT, []learnPath{{0, 1}, {2, 3}}, constKind(LearnCreate)},
	{"renameat2", unix.SYS_RENAMEAT2, []learnPath{{0, 1}, {2, 3}}, constKind(LearnCreate)},
	{"link", unix.SYS_LINK, []learnPath{{-1, 1}}, constKind(LearnCreate)},
	{"linkat", unix.SYS_LINKAT, []learnPath{{2, 3}}, constKind(LearnCreate)},
	{"symlink", unix.SYS_SYMLINK, []learnPath{{-1, 1}}, constKind(LearnCreate)},
	{"symlinkat", unix.SYS_SYMLINKAT, []learnPath{{1, 2}}, constKind(LearnCreate)},
	{"truncate", unix.SYS_TRUNCATE, []learnPath{{-1, 0}}, constKind(LearnWrite)},
}

// learnTraps: every learn call with a non-NULL path (a NULL one fails with EFAULT
// in the kernel, recording nothing).
func learnTraps(cfg Config) []Trap {
	if cfg.Learn == nil {
		return nil
	}
	var ts []Trap
	for _, lc := range learnCalls {
		ts = append(ts, Trap{Syscall: lc.name, Arg: lc.paths[0].path, NonZero: true})
	}
	return ts
}

// addLearnHandlers puts the learn handlers into s.table where no other handler
// serves the call (built-in handlers decide; learning only watches).
func (s *Supervisor) addLearnHandlers() {
	if s.cfg.Learn == nil {
		return
	}
	for i := range learnCalls {
		lc := learnCalls[i]
		if s.table[lc.nr] != nil {
			continue
		}
		s.table[lc.nr] = &handler{name: lc.name, nr: lc.nr, fn: func(c *call) reply { return c.learn(lc) }}
	}
}

func (c *call) learn(lc learnCall) reply {
	kind, ok := lc.kind(c)
	if !ok {
		return deny(unix.EPERM, "a set-id mode")
	}
	for _, p := range lc.paths {
		path, err := c.readString(c.arg(p.path), unix.PathMax)
		if err != nil || path == "" {
			continue
		}
		if !strings.HasPrefix(path, "/") {
			base, ok := c.learnBase(p.dirfd)
			if !ok {
				continue
			}
			path = base + "/" + path
		}
		c.s.cfg.Learn(kind, filepath.Clean(path))
	}
	return cont()
}

// learnBase is the directory a relative path starts from, as a path in the caller's
// root: its cwd, or the file its dirfd argument names (AT_FDCWD: the cwd).
func (c *call) learnBase(dirfdArg int) (string, bool) {
	link := c.proc("cwd")
	if dirfdArg >= 0 {
		if fd := c.argInt(dirfdArg); fd != unix.AT_FDCWD {
			link = c.proc("fd/" + strconv.Itoa(int(fd)))
		}
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlink(link, buf)
	if err != nil || n == 0 || buf[0] != '/' {
		return "", false
	}
	return strings.TrimSuffix(string(buf[:n]), " (deleted)"), true
}
