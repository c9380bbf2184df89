// Package fsview plans a sandbox's view of the filesystem: the mount operations
// that the launcher (core/spawn) performs in the sandbox's own mount namespace
// before its zygote starts, once per sandbox.
//
// The view is the host's mount tree with every mount read-only, nosuid and nodev,
// except (and /proc and /sys are read-only whatever the policy):
//   - the writable trees: read-write (still nosuid and nodev);
//   - readable trees inside a writable one: read-only again;
//   - device nodes the policy names (and the harmless ones every program opens):
//     usable (dev), each its own bind mount;
//   - /proc: hidden under an empty read-only tmpfs, unless the policy grants it,
//     in which case every run mounts a proc of its own pid namespace there (the
//     zygote does that per run; see ProcOwn).
//
// So whatever the sandbox may only read, it cannot change either — not its bytes
// (Landlock), nor its mode, owner, times, extended attributes or flags (the
// kernel answers EROFS), whoever the host is; nothing it writes can carry a
// set-uid bit that its own view honours; and a device node it reaches through a
// broad grant cannot be opened (EACCES). Landlock's rules are tied to inodes, and
// every mount here is a bind of the host's own, so the engine's rules (built from
// host paths) cover exactly what the target sees.
package fsview

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	"golang.org/x/sys/unix"
)

// Kind is a mount operation (the launcher's enum st_mount_kind).
type Kind int

const (
	Private Kind = iota + 1 // propagation of every mount under Path: private
	Clone                   // a detached copy of the tree at Path into Slot
	SetAttr                 // mount attributes of Slot (or of Path when Slot < 0)
	Move                    // attach Slot at Path
	Tmpfs                   // an empty tmpfs with Set over Path (Mode: its root's; 0: 0555)
	File                    // an empty file at Path (Mode): a mount point
	Symlink                 // a symlink at Path to Target
	Pivot                   // Path (a mount point) becomes /; the old root is detached
	Dir                     // an empty directory at Path (Mode): a mount point of each run's
)

// Op is one mount operation.
type Op struct {
	Kind      Kind
	Path      string
	Slot      int
	Recursive bool
	Set, Clr  uint64 // unix.MOUNT_ATTR_*
	// Dev, Ino: a Clone of this very file (not a symlink, nor another file put in
	// its place); 0: whatever Path names
	Dev, Ino uint64
	Mode     uint32
	Target   string
}

// Spec is what the view must give.
type Spec struct {
	Readable, Writable []string // resolved absolute paths
	Devices            []string // device nodes to keep usable
	Chroot             *Chroot  // nil: the host's root
	Overlays           []Overlay
}

// Overlay is a file of the engine's laid over a host file in the view,
// read-only (a bind mount of Source on Path): the sandbox's own trust bundle
// with its interception CA (core/plan/intercept.go). The host file is unchanged.
type Overlay struct {
	Path   string // the file the sandbox sees replaced (resolved, regular)
	Source string // the engine's file it sees there
}

// Mount is one entry of the report: a path and how the view presents it.
type Mount struct {
	Path string `msgpack:"path"`
	Mode string `msgpack:"mode"` // "rw" | "ro" | "dev" | "hidden" | "own" (each run's own: a proc of its pid namespace; a chroot's /dev/pts and /dev/shm) | "overlay" (Overlay)
}

// MaxSlots bounds the detached copies a plan holds at once; one more is the
// scratch slot (ST_MAX_SLOTS in launch.h is larger).
const MaxSlots = 60

// Plan is a planned view.
type Plan struct {
	Ops     []Op
	ProcOwn bool // every run mounts a proc of its own pid namespace on /proc (read-only)
	DevOwn  bool // every run mounts a devpts on /dev/pts and a tmpfs on /dev/shm of its own (a chroot's)
	Mounts  []Mount
	Root    string // the chroot (host path) that is / of the sandbox; "": the host's
}

const (
	sealed = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	rwTree = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// Build plans the view for s. Paths must exist (the engine checked them).
func Build(s Spec) (*Plan, error) {
	pl := &Plan{Ops: []Op{{Kind: Private, Path: "/", Slot: -1, Recursive: true}}}
	for _, p := range append(append([]string{}, s.Readable...), s.Writable...) {
		if p == "/proc" || policy.Within("/proc", p) {
			pl.ProcOwn = true
		} else if policy.Within(p, "/proc") {
			return nil, fmt.Errorf("%s: paths inside /proc cannot be granted one by one (each run has a /proc of its own); grant /proc", p)
		}
	}
	// Kernel state is never writable: /proc and /sys stay read-only even inside a
	// writable grant (a root host's run could otherwise write the host's sysctls,
	// say its hostname); each run's /proc is mounted read-only.
	readable := append([]string{}, s.Readable...)
	for _, k := range []string{"/proc", "/sys"} {
		for _, w := range s.Writable {
			if policy.Within(k, w) {
				readable = append(readable, k)
				break
			}
		}
	}
	s.Readable = readable
	// Writable trees and device nodes are copied first, with the host's own flags
	// (a read-write mount stays so; no flag the host locked is ever cleared), then
	// every mount is made read-only, nosuid and nodev, then the copies are put
	// back on top: nosuid and nodev, and for devices dev allowed again. A readable
	// tree inside a writable one is copied from the view and made read-only.
	// When / itself is writable, nothing is made read-only (a mount over / would
	// not be seen by a process whose root is /).
	type grant struct {
		path string
		rw   bool
	}
	var grants []grant
	seen := map[string]bool{}
	rootRW := false
	for _, p := range s.Writable {
		if p == "/" {
			rootRW = true
		}
		if !seen[p] {
			seen[p] = true
			grants = append(grants, grant{p, true})
		}
	}
	for _, p := range s.Readable {
		if !seen[p] {
			seen[p] = true
			grants = append(grants, grant{p, false})
		}
	}
	sort.Slice(grants, func(i, j int) bool {
		if di, dj := depth(grants[i].path), depth(grants[j].path); di != dj {
			return di < dj
		}
		return grants[i].path < grants[j].path
	})
	enclosing := func(i int) bool { // access of the nearest shallower grant (default: the base)
		rw, best := rootRW, -1
		for j := 0; j < i; j++ {
			if g := grants[j]; policy.Within(grants[i].path, g.path) && depth(g.path) > best {
				rw, best = g.rw, depth(g.path)
			}
		}
		return rw
	}
	devs := append([]string{}, s.Devices...)
	sort.Strings(devs)
	devs = slices.Compact(devs)
	slot := map[string]int{}
	take := func(path string, recursive bool) {
		slot[path] = len(slot)
		pl.Ops = append(pl.Ops, Op{Kind: Clone, Path: path, Slot: slot[path], Recursive: recursive})
	}
	var mounted []grant
	for i, g := range grants {
		if g.path != "/" && g.rw != enclosing(i) {
			mounted = append(mounted, g)
			if g.rw {
				take(g.path, true)
			}
		} else if g.rw {
			pl.Mounts = append(pl.Mounts, Mount{g.path, "rw"})
		}
	}
	for _, d := range devs {
		take(d, false)
	}
	if len(slot) > MaxSlots {
		return nil, fmt.Errorf("%d writable trees and device nodes: more than %d", len(slot), MaxSlots)
	}
	base := Op{Kind: SetAttr, Path: "/", Slot: -1, Recursive: true, Set: sealed}
	if rootRW {
		base.Set = rwTree
	}
	pl.Ops = append(pl.Ops, base)
	for _, g := range mounted {
		if g.rw {
			pl.Ops = append(pl.Ops,
				Op{Kind: SetAttr, Slot: slot[g.path], Recursive: true, Set: rwTree},
				Op{Kind: Move, Path: g.path, Slot: slot[g.path]})
			pl.Mounts = append(pl.Mounts, Mount{g.path, "rw"})
			continue
		}
		const n = MaxSlots // the scratch slot: attached at once
		pl.Ops = append(pl.Ops,
			Op{Kind: Clone, Path: g.path, Slot: n, Recursive: true},
			Op{Kind: SetAttr, Slot: n, Recursive: true, Set: sealed},
			Op{Kind: Move, Path: g.path, Slot: n})
		pl.Mounts = append(pl.Mounts, Mount{g.path, "ro"})
	}
	for _, d := range devs {
		pl.Ops = append(pl.Ops,
			Op{Kind: SetAttr, Slot: slot[d], Set: unix.MOUNT_ATTR_NOSUID},
			Op{Kind: Move, Path: d, Slot: slot[d]})
		pl.Mounts = append(pl.Mounts, Mount{d, "dev"})
	}
	for _, o := range s.Overlays { // last: on top of every tree put back above
		const n = MaxSlots
		pl.Ops = append(pl.Ops,
			Op{Kind: Clone, Path: o.Source, Slot: n},
			Op{Kind: SetAttr, Slot: n, Set: sealed},
			Op{Kind: Move, Path: o.Path, Slot: n})
		pl.Mounts = append(pl.Mounts, Mount{o.Path, "overlay"})
	}
	if s.Chroot != nil {
		s.Chroot.ops(pl)
		return pl, nil
	}
	if pl.ProcOwn {
		pl.Mounts = append(pl.Mounts, Mount{"/proc", "own"})
	} else if st, err := os.Stat("/proc"); err == nil && st.IsDir() {
		pl.Ops = append(pl.Ops, Op{Kind: Tmpfs, Path: "/proc", Slot: -1, Set: sealed | unix.MOUNT_ATTR_NOEXEC})
		pl.Mounts = append(pl.Mounts, Mount{"/proc", "hidden"})
	}
	return pl, nil
}

// IsDevice reports whether path is a character or block device node.
func IsDevice(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&(os.ModeDevice|os.ModeCharDevice) != 0
}

// ReadOnlyMount reports whether path lies on a read-only mount of this process's
// view (a writable grant there cannot be made writable).
func ReadOnlyMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(filepath.Clean(path), &st) == nil && st.Flags&unix.ST_RDONLY != 0
}
