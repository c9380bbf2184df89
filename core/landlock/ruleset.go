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
	"strings"

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
	// View is the tree the target sees when it is not the host's own (a
	// chroot); nil: the host's. The paths above stay host paths (rules are made
	// on the host's inodes); View says where each is seen.
	View *View
}

// View is a target's filesystem made of host trees: the mounts of its mount
// namespace, each a host tree (Source) seen at a path (At). Source "" is a
// filesystem of the sandbox's own (a tmpfs, a proc): it hides what lies beneath
// its mount point and holds nothing a host rule covers.
//
// It matters for fs_denied. Landlock allows an access when a rule is on a
// directory that the accessed file's path, walked up in the target's view,
// reaches — and the walk crosses mount points: from a mount's root it goes on
// from the directory it is mounted on. So a rule on the chroot's root covers
// every mount inside it, and a denied file under a mount must be carved out of
// the trees above the mount point too. The expansion therefore walks the view:
// a directory is granted whole only if no denied file is seen anywhere below
// any place the view shows that directory, and a directory that a denied path
// passes through is replaced by its entries in the view (a mount point by its
// mount's source), down to the denied path.
type View struct {
	Mounts []ViewMount // "/" first; every other At an existing path of the mount below it
}

// ViewMount is one mount of a View.
type ViewMount struct {
	At, Source string
}

// hostOf is the host path seen at the view path p (false: a filesystem of the
// sandbox's own is seen there).
func (v *View) hostOf(p string) (string, bool) {
	if v == nil {
		return p, true
	}
	best := -1
	for i, m := range v.Mounts {
		if under(p, m.At) && (best < 0 || depth(m.At) > depth(v.Mounts[best].At)) {
			best = i
		}
	}
	if best < 0 || v.Mounts[best].Source == "" {
		return "", false
	}
	m := v.Mounts[best]
	return filepath.Join(m.Source, strings.TrimPrefix(p, m.At)), true
}

// seenAt is every view path at which the host path h is seen: h under a
// mount's source, at the same place under its mount point, unless a deeper
// mount hides it there (a mount point itself included: Landlock's walk skips
// the directory a mount covers).
func (v *View) seenAt(h string) []string {
	if v == nil {
		return []string{h}
	}
	var out []string
	for _, m := range v.Mounts {
		if m.Source == "" || !under(h, m.Source) {
			continue
		}
		p := filepath.Join(m.At, strings.TrimPrefix(h, m.Source))
		if m.Source == "/" {
			p = filepath.Join(m.At, h)
		}
		hidden := false
		for _, m2 := range v.Mounts {
			if depth(m2.At) > depth(m.At) && under(p, m2.At) {
				hidden = true
				break
			}
		}
		if !hidden {
			out = append(out, p)
		}
	}
	return out
}

// under: p is dir or lies beneath it.
func under(p, dir string) bool { return p == dir || within(p, dir) }

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
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

// Rights are the rights a path of access class access gets.
func (t *Table) Rights(access string, isDir bool) uint64 {
	return rightsFor(access, isDir, t.HandledFS)
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
	// fs_denied as the view shows it: every place a denied file is seen
	var denied []string
	for _, d := range s.Denied {
		denied = append(denied, s.View.seenAt(d)...)
	}
	made := map[grant]bool{}
	for _, g := range grants {
		// a grant is expanded from every place the view shows it (a mount
		// inside one of them may hide what another shows)
		for _, at := range s.View.seenAt(g.path) {
			rules, skipped := s.View.expand(at, denied)
			rep.Skipped = append(rep.Skipped, skipped...)
			for _, p := range rules {
				if made[grant{p, g.access}] {
					continue
				}
				made[grant{p, g.access}] = true
				if !add(p, g.access) {
					rep.Skipped = append(rep.Skipped, p)
				}
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

// expand returns the host paths to grant so that the view path at is allowed
// except every denied view path (denied: as seenAt lists them). Landlock can
// only allow, so a tree holding a denied path is replaced by its entries
// (recursively down to the denied path); the directories on the way get no rule
// of their own. A rule on a host directory covers every place the view shows
// it, so a directory is granted whole only when none of them holds a denied
// path, and not at all when one of them lies inside one. Symlinks inside an
// expanded directory are skipped (their targets keep whatever rules cover
// them); so are the trees of the sandbox's own filesystems (no host rule there).
func (v *View) expand(at string, denied []string) (rules, skipped []string) {
	host, ok := v.hostOf(at)
	if !ok {
		return nil, nil
	}
	split := false
	for _, seen := range v.seenAt(host) {
		for _, d := range denied {
			if under(seen, d) {
				return nil, nil // the whole tree is denied (there)
			}
			if within(d, seen) {
				split = true
			}
		}
	}
	if !split {
		return []string{host}, nil
	}
	entries, err := os.ReadDir(host)
	if err != nil {
		return nil, []string{host}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			skipped = append(skipped, filepath.Join(host, e.Name()))
			continue
		}
		r, s := v.expand(filepath.Join(at, e.Name()), denied)
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
