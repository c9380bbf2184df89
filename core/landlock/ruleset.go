// Package landlock turns a policy's paths and ports into a Landlock ruleset fd that a
// child enforces on itself right before execve (and that confine() enforces on every
// thread of the host). fs_denied is carved out of allowed trees by expansion.
package landlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Access classes of a path rule.
const (
	ReadOnly  = "ro"
	ReadWrite = "rw"
	Device    = "dev" // read/write on a device node, no ioctl
	GPUNode   = "gpu" // read/write and device ioctls on a GPU node (gpu_devices)
)

// PathRule is one path and the access class granted beneath it.
type PathRule struct {
	Path   string `msgpack:"path"`
	Access string `msgpack:"access"`
}

// Spec is what to enforce.
type Spec struct {
	Readable, Writable, Denied []string
	Devices                    []string // implicit device nodes (/dev/null, …)
	GPU                        []string // GPU nodes (gpu_devices): read, write and ioctl
	ConnectPorts, BindPorts    []uint16
	AnyConnect                 bool // do not handle TCP connect
	Scope                      bool // scope abstract unix sockets and signals
	Off                        uint // protections left out although the ABI has them (Off*)
}

// Protections a ruleset leaves out although the ABI has them (Spec.Off): the
// policy's disable (core/policy/protection.go names them).
const (
	OffRefer         uint = 1 << iota // LANDLOCK_ACCESS_FS_REFER not handled: every reparenting rename or link is refused (EXDEV)
	OffTruncate                       // LANDLOCK_ACCESS_FS_TRUNCATE not handled
	OffNetTCP                         // no network rules
	OffIoctlDev                       // LANDLOCK_ACCESS_FS_IOCTL_DEV not handled
	OffAbstractScope                  // abstract unix sockets not scoped
	OffSignalScope                    // signals not scoped
)

// Report says what a ruleset enforces.
type Report struct {
	ABI          int        `msgpack:"abi"`
	Rules        []PathRule `msgpack:"fs_rules"`
	Skipped      []string   `msgpack:"skipped,omitempty"` // symlinks or vanished entries inside expanded trees
	Net          bool       `msgpack:"net"`               // TCP bind/connect handled by Landlock
	ConnectPorts []uint16   `msgpack:"connect_ports"`
	BindPorts    []uint16   `msgpack:"bind_ports"`
	Scoped       []string   `msgpack:"scoped"`
}

// Ruleset is a built ruleset; Close releases the fd.
type Ruleset struct {
	FD     int
	Report Report
	Table  *Table
}

func (r *Ruleset) Close() {
	if r != nil && r.FD >= 0 {
		unix.Close(r.FD)
		r.FD = -1
	}
}

// fsRights returns every filesystem right of an ABI.
func fsRights(abi int) uint64 {
	switch {
	case abi >= 5:
		return (1 << 16) - 1
	case abi >= 3:
		return (1 << 15) - 1
	case abi == 2:
		return (1 << 14) - 1
	default:
		return (1 << 13) - 1
	}
}

const (
	fileRead  = ll.AccessFSExecute | ll.AccessFSReadFile
	fileWrite = ll.AccessFSWriteFile | ll.AccessFSTruncate
	dirOnly   = ll.AccessFSReadDir | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSRefer
)

func rightsFor(access string, isDir bool, handled uint64) uint64 {
	var r uint64
	switch access {
	case ReadOnly:
		r = fileRead
		if isDir {
			r |= ll.AccessFSReadDir
		}
	case ReadWrite:
		r = fileRead | fileWrite | ll.AccessFSIoctlDev
		if isDir {
			r |= dirOnly
		}
	case Device:
		r = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
	case GPUNode:
		r = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	}
	return r & handled
}

// Table is a ruleset as data: what it handles and every rule, with final rights.
// The engine hands it to pid 1 of runs that must build their own ruleset (a run
// with a /proc of its own: a rule for that proc can only be made in the run).
type Table struct {
	HandledFS, HandledNet, Scoped uint64
	AttrSize                      int // bytes of struct landlock_ruleset_attr this ABI reads
	Paths                         []PathRights
	Ports                         []PortRights
}

// PathRights is one path rule.
type PathRights struct {
	Path   string
	Access string // ReadOnly, ReadWrite or Device
	Rights uint64
}

// PortRights is one network rule.
type PortRights struct {
	Port   uint64
	Rights uint64
}

// DirRights are the rights a directory of access class access gets.
func (t *Table) DirRights(access string) uint64 { return rightsFor(access, true, t.HandledFS) }

// Build creates the ruleset for abi (> 0).
func Build(abi int, s Spec) (*Ruleset, error) {
	t, rep := plan(abi, s)
	rs, err := t.Create()
	if err != nil {
		return nil, err
	}
	rs.Report = rep
	for _, pr := range t.Paths {
		rs.Report.Rules = append(rs.Report.Rules, PathRule{pr.Path, pr.Access})
	}
	rs.Table = t
	return rs, nil
}

// plan turns s into a table.
func plan(abi int, s Spec) (*Table, Report) {
	t := &Table{HandledFS: fsRights(abi), AttrSize: 8}
	for off, right := range map[uint]uint64{OffRefer: ll.AccessFSRefer, OffTruncate: ll.AccessFSTruncate, OffIoctlDev: ll.AccessFSIoctlDev} {
		if s.Off&off != 0 {
			t.HandledFS &^= right
		}
	}
	rep := Report{ABI: abi}
	if abi >= 4 {
		t.AttrSize = 16
	}
	if abi >= 4 && s.Off&OffNetTCP == 0 {
		t.HandledNet = ll.AccessNetBindTCP
		if !s.AnyConnect {
			t.HandledNet |= ll.AccessNetConnectTCP
		}
		rep.Net = true
	}
	if abi >= 6 {
		t.AttrSize = 24
		rep.Scoped = []string{}
		if s.Scope && s.Off&OffAbstractScope == 0 {
			t.Scoped |= ll.ScopeAbstractUnixSocket
			rep.Scoped = append(rep.Scoped, "abstract_unix_socket")
		}
		if s.Scope && s.Off&OffSignalScope == 0 {
			t.Scoped |= ll.ScopeSignal
			rep.Scoped = append(rep.Scoped, "signal")
		}
	}
	add := func(path, access string) bool {
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			return false
		}
		t.Paths = append(t.Paths, PathRights{Path: path, Access: access,
			Rights: rightsFor(access, st.Mode&unix.S_IFMT == unix.S_IFDIR, t.HandledFS)})
		return true
	}
	type grant struct {
		path, access string
	}
	var grants []grant
	for _, p := range s.Readable {
		grants = append(grants, grant{p, ReadOnly})
	}
	for _, p := range s.Writable {
		grants = append(grants, grant{p, ReadWrite})
	}
	for _, g := range grants {
		rules, skipped := expand(g.path, s.Denied)
		rep.Skipped = append(rep.Skipped, skipped...)
		for _, p := range rules {
			if !add(p, g.access) {
				rep.Skipped = append(rep.Skipped, p)
			}
		}
	}
	for _, p := range s.Devices {
		add(p, Device)
	}
	for _, p := range s.GPU {
		add(p, GPUNode)
	}
	if rep.Net {
		for _, port := range s.BindPorts {
			t.Ports = append(t.Ports, PortRights{uint64(port), ll.AccessNetBindTCP})
		}
		if !s.AnyConnect {
			for _, port := range s.ConnectPorts {
				t.Ports = append(t.Ports, PortRights{uint64(port), ll.AccessNetConnectTCP})
			}
		}
		rep.BindPorts, rep.ConnectPorts = s.BindPorts, s.ConnectPorts
	}
	return t, rep
}

// Create makes a ruleset fd from the table.
func (t *Table) Create() (*Ruleset, error) {
	attr := ll.RulesetAttr{HandledAccessFS: t.HandledFS, HandledAccessNet: t.HandledNet, Scoped: t.Scoped}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	rs := &Ruleset{FD: fd}
	for _, pr := range t.Paths {
		if err := addPath(fd, pr.Path, pr.Rights); err != nil {
			rs.Close()
			return nil, err
		}
	}
	for _, pr := range t.Ports {
		if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: pr.Rights, Port: pr.Port}, 0); err != nil {
			rs.Close()
			return nil, fmt.Errorf("landlock port rule %d: %w", pr.Port, err)
		}
	}
	return rs, nil
}

func addPath(rulesetFD int, path string, rights uint64) error {
	fd, err := OpenRulePath(path)
	if err == ErrGone {
		return nil // nothing to allow there
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: rights}, 0); err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	return nil
}

// expand returns the paths to grant so that root is allowed except every denied path
// beneath it. Landlock can only allow, so a tree holding a denied path is replaced by
// its other children (recursively down to the denied path); the directories on the
// way get no rule of their own. Symlinks inside an expanded directory are skipped
// (their targets keep whatever rules cover them).
func expand(root string, denied []string) (rules, skipped []string) {
	var inside []string
	for _, d := range denied {
		if d == root || within(root, d) {
			return nil, nil // the whole tree is denied
		}
		if within(d, root) {
			inside = append(inside, d)
		}
	}
	if len(inside) == 0 {
		return []string{root}, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, []string{root}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		child := filepath.Join(root, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			skipped = append(skipped, child)
			continue
		}
		r, s := expand(child, inside)
		rules = append(rules, r...)
		skipped = append(skipped, s...)
	}
	return rules, skipped
}

func within(p, dir string) bool {
	return dir == "/" && p != "/" || len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/'
}

// ErrGone: a rule's path no longer leads to what was listed (OpenRulePath).
var ErrGone = errors.New("gone since it was listed")

// OpenRulePath opens a rule's path (O_PATH) without following a symlink anywhere on
// it: every rule path is a real path (the policy's are resolved when the sandbox is
// built; expanded entries are listed without symlinks). A path that has gone, or
// that someone turned into a symlink since it was listed — a run of another sandbox
// writing in a granted tree while this one is built could aim one at a denied path —
// is ErrGone: no rule is made there.
func OpenRulePath(path string) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if err == unix.ENOSYS {
		fd, err = unix.Open(path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err == nil {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(fd)
				return -1, ErrGone
			}
		}
	}
	switch err {
	case nil:
		return fd, nil
	case unix.ENOENT, unix.ENOTDIR, unix.ELOOP:
		return -1, ErrGone
	}
	return -1, err
}
