// Package landlock turns a policy's paths and ports into a Landlock ruleset fd that a
// child enforces on itself right before execve (and that confine() enforces on every
// thread of the host). fs_denied is carved out of allowed trees by expansion.
package landlock

import (
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
	ConnectPorts, BindPorts    []uint16
	AnyConnect                 bool // do not handle TCP connect
	Scope                      bool // scope abstract unix sockets and signals
}

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
	}
	return r & handled
}

// Build creates the ruleset for abi (> 0).
func Build(abi int, s Spec) (*Ruleset, error) {
	handled := fsRights(abi)
	attr := ll.RulesetAttr{HandledAccessFS: handled}
	rep := Report{ABI: abi}
	if abi >= 4 {
		attr.HandledAccessNet = ll.AccessNetBindTCP
		if !s.AnyConnect {
			attr.HandledAccessNet |= ll.AccessNetConnectTCP
		}
		rep.Net = true
	}
	if abi >= 6 && s.Scope {
		attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
		rep.Scoped = []string{"abstract_unix_socket", "signal"}
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	rs := &Ruleset{FD: fd}
	fail := func(err error) (*Ruleset, error) {
		rs.Close()
		return nil, err
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
			if err := addPath(fd, p, g.access, handled); err != nil {
				return fail(err)
			}
			rep.Rules = append(rep.Rules, PathRule{p, g.access})
		}
	}
	for _, p := range s.Devices {
		if err := addPath(fd, p, Device, handled); err == nil {
			rep.Rules = append(rep.Rules, PathRule{p, Device})
		}
	}
	if rep.Net {
		for _, port := range s.BindPorts {
			if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: ll.AccessNetBindTCP, Port: uint64(port)}, 0); err != nil {
				return fail(fmt.Errorf("landlock bind rule %d: %w", port, err))
			}
		}
		if !s.AnyConnect {
			for _, port := range s.ConnectPorts {
				if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(port)}, 0); err != nil {
					return fail(fmt.Errorf("landlock connect rule %d: %w", port, err))
				}
			}
		}
		rep.BindPorts, rep.ConnectPorts = s.BindPorts, s.ConnectPorts
	}
	rs.Report = rep
	return rs, nil
}

func addPath(rulesetFD int, path, access string, handled uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	rights := rightsFor(access, st.Mode&unix.S_IFMT == unix.S_IFDIR, handled)
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
