package fsview

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	"golang.org/x/sys/unix"
)

// Chroot is a sandbox whose root is a directory of the host (policy chroot):
// after the host's view is laid out (every mount read-only but the grants), the
// launcher binds the directory onto itself, mounts the policy's fs_mount and
// fs_mount_ro sources at their paths inside it, a minimal /dev and a hidden (or
// each run's own) /proc, and makes it the root (pivot_root): the host's tree is
// detached, so no path, "..", symlink or /proc/self/root leads out of it.
//
// Every mount inside it is a bind of the host's own inodes, so Landlock's rules,
// made on the host paths that the view's paths resolve to (Resolve), cover
// exactly what the target sees.
type Chroot struct {
	Root   string        // the host directory (resolved)
	Mounts []ChrootMount // by depth of Inside
	Dev    []string      // device nodes of /dev (names: "null", ...), bound from the host's /dev
	// OwnDev: every run mounts a devpts on /dev/pts and a tmpfs on /dev/shm of
	// its own (it needs a pid 1 per run, in a pid namespace of its own);
	// without, /dev has neither
	OwnDev bool
	// Inside names the path inside of host files that the view lays a file
	// over (Spec.Overlays: http_inject_ca), for the report
	Inside map[string]string
}

// ChrootMount is one mount of a chroot: Host (resolved) at Inside.
type ChrootMount struct {
	Inside, Host string
	RO           bool // the mount is read-only (EROFS), whatever the grants
	Dir          bool // a directory (else a file)
}

// ChrootDev are the device nodes of a chroot's /dev.
var ChrootDev = []string{"null", "zero", "full", "random", "urandom", "tty"}

// chrootLinks are the symlinks of a chroot's /dev.
var chrootLinks = [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}}

// NewChroot is the chroot of root (a host directory, resolved), without mounts.
func NewChroot(root string) *Chroot { return &Chroot{Root: root, Dev: ChrootDev} }

// Add mounts m (Host resolved) at m.Inside, resolved in the view so far: the
// target must exist there, a directory for a directory, a file for a file. Add
// mounts in order of depth (SortMounts): a mount inside another is resolved
// through it. It returns the mount's canonical path inside.
func (c *Chroot) Add(m ChrootMount) (string, error) {
	in, host, err := c.Resolve(m.Inside)
	if err != nil {
		return "", err
	}
	if in == "/" {
		return "", unix.EBUSY
	}
	st, err := os.Stat(host)
	if err != nil {
		return "", unwrap(err)
	}
	hs, err := os.Stat(m.Host)
	if err != nil {
		return "", unwrap(err)
	}
	switch {
	case hs.IsDir() && !st.IsDir():
		return "", unix.ENOTDIR
	case !hs.IsDir() && st.IsDir():
		return "", unix.EISDIR
	}
	m.Inside, m.Dir = in, hs.IsDir()
	c.Mounts = append(c.Mounts, m)
	return in, nil
}

// SortMounts orders inside paths by depth, then by name (the order to Add them).
func SortMounts(paths []string) {
	sort.Slice(paths, func(i, j int) bool {
		if di, dj := depth(paths[i]), depth(paths[j]); di != dj {
			return di < dj
		}
		return paths[i] < paths[j]
	})
}

// HostOf is the host path that the canonical inside path p (no symlinks, no
// "..") is a view of: under the deepest mount that holds it, else under Root.
func (c *Chroot) HostOf(p string) string {
	for i := len(c.Mounts) - 1; i >= 0; i-- {
		m := c.Mounts[i]
		if policy.Within(p, m.Inside) {
			rel, _ := filepath.Rel(m.Inside, p)
			return filepath.Join(m.Host, rel)
		}
	}
	return filepath.Join(c.Root, p)
}

// ErrLoop: too many symlinks on the way.
var ErrLoop = unix.ELOOP

// Resolve resolves p, a path inside the chroot (absolute, or relative to /),
// as the target would: every symlink is followed inside the view (an absolute
// one from the chroot's /, ".." never above it), across the chroot's mounts. It
// returns the canonical inside path and the host path of the file reached.
func (c *Chroot) Resolve(p string) (inside, host string, err error) {
	return c.resolve(p, true)
}

// resolve is Resolve; with follow false, a symlink as the last component is
// not followed.
func (c *Chroot) resolve(p string, follow bool) (string, string, error) {
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	hops := 0
	for len(todo) > 0 {
		comp := todo[0]
		todo = todo[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, comp)
		st, err := os.Lstat(c.HostOf(next))
		if err != nil {
			return "", "", unwrap(err)
		}
		if st.Mode()&os.ModeSymlink == 0 || (!follow && len(todo) == 0) {
			if len(todo) > 0 && !st.IsDir() {
				return "", "", unix.ENOTDIR
			}
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", "", ErrLoop
		}
		t, err := os.Readlink(c.HostOf(next))
		if err != nil {
			return "", "", unwrap(err)
		}
		if strings.HasPrefix(t, "/") {
			cur = "/"
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return cur, c.HostOf(cur), nil
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ops appends the chroot's operations to pl (after the host's view) and
// replaces its report with the view inside the chroot.
func (c *Chroot) ops(pl *Plan) {
	const n = MaxSlots // the scratch slot
	at := func(inside string) string { return filepath.Join(c.Root, inside) }
	pl.Root = c.Root
	// the root: a copy of the directory in the view made so far (read-only but
	// the grants inside it), over itself: a mount point for pivot_root
	pl.Ops = append(pl.Ops,
		Op{Kind: Clone, Path: c.Root, Slot: n, Recursive: true},
		Op{Kind: Move, Path: c.Root, Slot: n})
	var mounts []Mount
	hostMode := map[string]string{}
	var overlays []Mount
	for _, m := range pl.Mounts {
		hostMode[m.Path] = m.Mode
		if in, ok := c.Inside[m.Path]; ok && m.Mode == "overlay" {
			overlays = append(overlays, Mount{in, "overlay"})
		}
	}
	root := "ro"
	if hostMode[c.Root] == "rw" {
		root = "rw"
	}
	mounts = append(mounts, Mount{"/", root})
	for _, m := range c.Mounts {
		pl.Ops = append(pl.Ops, Op{Kind: Clone, Path: m.Host, Slot: n, Recursive: true})
		mode := "ro"
		if m.RO {
			pl.Ops = append(pl.Ops, Op{Kind: SetAttr, Slot: n, Recursive: true, Set: sealed})
		} else if hostMode[m.Host] == "rw" {
			mode = "rw"
		}
		pl.Ops = append(pl.Ops, Op{Kind: Move, Path: at(m.Inside), Slot: n})
		mounts = append(mounts, Mount{m.Inside, mode})
	}
	mounts = append(mounts, overlays...)
	// /dev: a tmpfs of the sandbox's with the host's harmless devices bound in
	// (each a dev mount the host's view made: Spec.Devices), made read-only
	dev := at("/dev")
	pl.Ops = append(pl.Ops, Op{Kind: Tmpfs, Path: dev, Slot: -1, Set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC, Mode: 0o755})
	for _, d := range c.Dev {
		pl.Ops = append(pl.Ops,
			Op{Kind: File, Path: filepath.Join(dev, d), Slot: -1, Mode: 0o666},
			Op{Kind: Clone, Path: "/dev/" + d, Slot: n},
			Op{Kind: Move, Path: filepath.Join(dev, d), Slot: n})
		mounts = append(mounts, Mount{"/dev/" + d, "dev"})
	}
	for _, l := range chrootLinks {
		pl.Ops = append(pl.Ops, Op{Kind: Symlink, Path: filepath.Join(dev, l[0]), Slot: -1, Target: l[1]})
	}
	if c.OwnDev {
		// mount points of each run's devpts and tmpfs (pid 1 mounts them)
		pl.DevOwn = true
		pl.Ops = append(pl.Ops,
			Op{Kind: Dir, Path: filepath.Join(dev, "pts"), Slot: -1, Mode: 0o755},
			Op{Kind: Dir, Path: filepath.Join(dev, "shm"), Slot: -1, Mode: 0o755},
			Op{Kind: Symlink, Path: filepath.Join(dev, "ptmx"), Slot: -1, Target: "pts/ptmx"})
		mounts = append(mounts, Mount{"/dev/pts", "own"}, Mount{"/dev/shm", "own"})
	}
	pl.Ops = append(pl.Ops, Op{Kind: SetAttr, Path: dev, Slot: -1, Set: unix.MOUNT_ATTR_RDONLY})
	// /proc: each run's own (pid 1 mounts it on /proc, inside the chroot), or hidden
	if pl.ProcOwn {
		// the kernel lets a user namespace mount a proc only where one is fully
		// visible in its mount namespace already: the host's, read-only, which
		// each run's own then covers
		pl.Ops = append(pl.Ops,
			Op{Kind: Clone, Path: "/proc", Slot: n, Recursive: true},
			Op{Kind: Move, Path: at("/proc"), Slot: n})
		mounts = append(mounts, Mount{"/proc", "own"})
	} else {
		pl.Ops = append(pl.Ops, Op{Kind: Tmpfs, Path: at("/proc"), Slot: -1, Set: sealed | unix.MOUNT_ATTR_NOEXEC})
		mounts = append(mounts, Mount{"/proc", "hidden"})
	}
	pl.Ops = append(pl.Ops, Op{Kind: Pivot, Path: c.Root, Slot: -1})
	pl.Mounts = mounts
}
