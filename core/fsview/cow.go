package fsview

// The copy-on-write workdir, after a run: what the run changed (the upper layer
// of its overlay, read through the descriptor its pid 1 handed over), and
// applying it to the workdir (COMMIT) or dropping it (ABORT).
//
// Each run's pid 1 (core/spawn/init/init.c, mount_cow) mounts a tmpfs of the
// run's own, makes upper/ in it and mounts an overlay of the workdir (lower)
// and upper/ over the workdir, in the run's own mount namespace; the engine
// holds upper/ open, which keeps the tmpfs alive after the run.
//
// The upper layer is the run's to shape: names, symlinks anywhere, whiteouts,
// modes. Nothing here follows a symlink of it or of the workdir: every
// directory is entered one component at a time (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS from a descriptor of the workdir opened with
// RESOLVE_NO_SYMLINKS), symlinks are copied as symlinks, never resolved, and
// set-uid/set-gid bits are never committed.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Change is one path the run added (A), modified (M) or deleted (D), relative
// to the workdir. A rename is a D and an A; directories are listed too.
type Change struct {
	Kind string `msgpack:"kind"`
	Path string `msgpack:"path"`
}

// Layer is a run's upper layer, held until Commit or Abort (or Close).
type Layer struct {
	mu      sync.Mutex
	upper   int // the upper layer's directory; -1 once dropped
	workdir string
	xattr   string // the overlay's xattr prefix: "user.overlay." or "trusted.overlay."
	changes []Change
	listed  bool
	dir     string // on disk (fs_storage): the layer's directory, layer-<hex>; "": a tmpfs
}

// NewLayer takes ownership of upper, a directory fd of the run's upper layer.
func NewLayer(upper int, workdir string, userXattr bool) *Layer {
	x := "trusted.overlay."
	if userXattr {
		x = "user.overlay."
	}
	return &Layer{upper: upper, workdir: workdir, xattr: x}
}

// Workdir is the directory the layer is over.
func (l *Layer) Workdir() string { return l.workdir }

// OnDisk tells the layer it lies in storage (fs_storage) rather than in a
// tmpfs: its directory (storage/layer-<hex> whose upper/ is the layer's
// descriptor's inode) is removed when it is dropped. A layer that is not
// found there is left alone.
func (l *Layer) OnDisk(storage string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st unix.Stat_t
	if l.upper < 0 || unix.Fstat(l.upper, &st) != nil {
		return
	}
	ents, _ := os.ReadDir(storage)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "layer-") {
			continue
		}
		var u unix.Stat_t
		dir := filepath.Join(storage, e.Name())
		if unix.Lstat(filepath.Join(dir, "upper"), &u) == nil && u.Dev == st.Dev && u.Ino == st.Ino {
			l.dir = dir
			return
		}
	}
}

// Dir is the layer's directory on disk ("": a tmpfs).
func (l *Layer) Dir() string { return l.dir }

// Abort drops the layer: its tmpfs goes with its last descriptor; on disk, its
// directory is removed.
func (l *Layer) Abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.upper >= 0 {
		unix.Close(l.upper)
		l.upper = -1
	}
	if l.dir != "" {
		removeLayer(l.dir)
		l.dir = ""
	}
}

// Release lets go of the layer without removing it: a tmpfs's goes, a layer
// on disk stays (a kept branch when its sandbox closes).
func (l *Layer) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.upper >= 0 {
		unix.Close(l.upper)
		l.upper = -1
	}
}

// removeLayer removes a layer's directory: overlayfs leaves directories
// without permissions in work/ (and a run may make them in upper/).
func removeLayer(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() && d.Type()&os.ModeSymlink == 0 {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}

// ErrDropped is the error of a layer already committed or aborted.
var ErrDropped = errors.New("the run's changes were already committed or aborted")

// Usage is the bytes the layer holds and whether its filesystem is full (the
// quota, max_disk, was hit).
func (l *Layer) Usage() (used int64, full bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.upper < 0 {
		return 0, false
	}
	var st unix.Statfs_t
	if unix.Fstatfs(l.upper, &st) != nil {
		return 0, false
	}
	used = int64(st.Blocks-st.Bfree) * st.Bsize
	// a tmpfs without room for one more page, or without one more inode
	return used, st.Bavail == 0 || (st.Files > 0 && st.Ffree == 0)
}

// Changes lists what the run changed, sorted by path (computed once).
func (l *Layer) Changes() ([]Change, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.upper < 0 {
		return nil, ErrDropped
	}
	if l.listed {
		return l.changes, nil
	}
	w := &walker{l: l, out: []Change{}}
	if err := w.dir(l.upper, "", true, l.opaque(l.upper, ".")); err != nil {
		return nil, err
	}
	sort.Slice(w.out, func(i, j int) bool { return w.out[i].Path < w.out[j].Path })
	l.changes, l.listed = w.out, true
	return l.changes, nil
}

type walker struct {
	l   *Layer
	out []Change
}

func (w *walker) add(kind, rel string) { w.out = append(w.out, Change{kind, rel}) }

func (l *Layer) lower(rel string) string { return path.Join(l.workdir, rel) }

// opaque reports whether the upper directory name (in dir) hides the lower one's entries.
func (l *Layer) opaque(dir int, name string) bool {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, l.xattr+"opaque", buf)
	return err == nil && n >= 1 && buf[0] == 'y'
}

func whiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func readNames(dir int) ([]string, error) {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// dir walks the upper directory fd (at rel); lowerDir: the workdir has a
// directory at rel; opaque: the upper one hides the lower's entries.
func (w *walker) dir(fd int, rel string, lowerDir, opaque bool) error {
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("reading the upper layer at %q: %w", rel, err)
	}
	inUpper := map[string]bool{}
	for _, name := range names {
		inUpper[name] = true
		r := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("the upper layer's %q: %w", r, err)
		}
		var lst os.FileInfo
		if lowerDir {
			lst, _ = os.Lstat(w.l.lower(r))
		}
		switch {
		case whiteout(&st):
			if lst != nil {
				w.deleted(r, lst)
			}
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("the upper layer's %q: %w", r, err)
			}
			below := lst != nil && lst.IsDir()
			switch {
			case lst == nil:
				w.add("A", r)
			case !below:
				w.add("M", r) // a file (or symlink) became a directory
			case uint32(lst.Mode().Perm()) != st.Mode&0o777:
				w.add("M", r)
			}
			err = w.dir(sub, r, below, below && w.l.opaque(fd, name))
			unix.Close(sub)
			if err != nil {
				return err
			}
		default:
			switch {
			case lst == nil:
				w.add("A", r)
			case w.l.differs(fd, name, r, &st, lst):
				w.add("M", r)
			}
		}
	}
	if opaque && lowerDir {
		// the run removed the directory and made it anew: the lower's entries are gone
		ents, _ := os.ReadDir(w.l.lower(rel))
		for _, e := range ents {
			if !inUpper[e.Name()] {
				if info, err := e.Info(); err == nil {
					w.deleted(path.Join(rel, e.Name()), info)
				}
			}
		}
	}
	return nil
}

// deleted lists rel and, for a directory, everything beneath it in the workdir.
func (w *walker) deleted(rel string, info os.FileInfo) {
	w.add("D", rel)
	if !info.IsDir() {
		return
	}
	ents, _ := os.ReadDir(w.l.lower(rel))
	for _, e := range ents {
		if i, err := e.Info(); err == nil {
			w.deleted(path.Join(rel, e.Name()), i)
		}
	}
}

// differs reports whether the upper entry name (in dir) differs from the lower
// one at rel: type, permission bits, symlink target or content (a copy-up alone
// — a file opened for writing and left as it was — is not a change).
func (l *Layer) differs(dir int, name, rel string, st *unix.Stat_t, lst os.FileInfo) bool {
	lm := lst.Mode()
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if lm&os.ModeSymlink == 0 {
			return true
		}
		a, err1 := readlinkat(dir, name)
		b, err2 := os.Readlink(l.lower(rel))
		return err1 != nil || err2 != nil || a != b
	case unix.S_IFREG:
		if !lm.IsRegular() || uint32(lm.Perm()) != st.Mode&0o777 || lst.Size() != st.Size {
			return true
		}
		return !sameContent(dir, name, l.lower(rel))
	}
	return uint32(lm.Perm()) != st.Mode&0o777 || lm.Type() != modeType(st.Mode)
}

func modeType(m uint32) os.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	case unix.S_IFSOCK:
		return os.ModeSocket
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case unix.S_IFBLK:
		return os.ModeDevice
	}
	return 0
}

func readlinkat(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func sameContent(dir int, name, lowerPath string) bool {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	a := os.NewFile(uintptr(fd), name)
	defer a.Close()
	b, err := os.OpenFile(lowerPath, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer b.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return ea == eb || (errors.Is(ea, io.EOF) || errors.Is(ea, io.ErrUnexpectedEOF)) && (errors.Is(eb, io.EOF) || errors.Is(eb, io.ErrUnexpectedEOF))
		}
	}
}

// ---- commit ---------------------------------------------------------------------

// CommitResult is what a commit applied, and what it refused.
type CommitResult struct {
	Applied []Change // in the order applied
	Refused []Change // changes to paths the run could not write (metadata only: Landlock does not govern it)
}

// resolveBeneath opens name (one component) in dir without following any
// symlink and without leaving dir.
func resolveBeneath(dir int, name string, flags int) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
}

// Commit applies the layer's changes to the workdir, file by file: each file is
// written to a temporary name in its directory, synced and renamed over the old
// one, so that a crash leaves every file old or new. writable says whether the
// run could write the path (changes elsewhere are refused). The layer is
// dropped afterwards, whether or not every change applied; the result says
// which did.
func (l *Layer) Commit(writable func(rel string) bool) (*CommitResult, error) {
	changes, err := l.Changes()
	if err != nil {
		return nil, err
	}
	defer l.Abort()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.upper < 0 {
		return nil, ErrDropped
	}
	res := &CommitResult{Applied: []Change{}, Refused: []Change{}}
	want := map[string]string{}
	for _, c := range changes {
		if !writable(c.Path) {
			res.Refused = append(res.Refused, c)
			continue
		}
		want[c.Path] = c.Kind
	}
	root, err := unix.Openat2(unix.AT_FDCWD, l.workdir, &unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_RDONLY,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return res, fmt.Errorf("commit: the workdir %s: %w", l.workdir, err)
	}
	defer unix.Close(root)
	c := &committer{l: l, want: want, res: res}
	if err := c.dir(l.upper, root, ""); err != nil {
		return res, err
	}
	return res, nil
}

type committer struct {
	l    *Layer
	want map[string]string
	res  *CommitResult
}

// meta gives dst (an fd of the committed file or directory) what the run gave
// its copy besides data, mode and times: its user.* extended attributes (not
// the overlay's own, user.overlay.*), and, when the engine runs as root, its
// owner (the run's uid and gid as the host sees them; otherwise every
// committed file is the engine's user's). Mode bits beyond 0777 (0o1777 for a
// directory) are never committed.
func (c *committer) meta(src, dst int, st *unix.Stat_t) error {
	if os.Geteuid() == 0 {
		if err := unix.Fchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	sz, err := unix.Flistxattr(src, nil)
	if err != nil || sz == 0 {
		return nil // a filesystem without xattrs: nothing to carry
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(src, buf); err != nil {
		return nil
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") || strings.HasPrefix(name, c.l.xattr) || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		n, err := unix.Fgetxattr(src, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, n)
		if n, err = unix.Fgetxattr(src, name, val); err != nil {
			continue
		}
		if err := unix.Fsetxattr(dst, name, val[:n], 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

func (c *committer) applied(kind, rel string) {
	c.res.Applied = append(c.res.Applied, Change{kind, rel})
}

// appliedTree records the deletion of rel and of everything listed beneath it.
func (c *committer) appliedTree(rel string) {
	c.applied("D", rel)
	var below []string
	for p, k := range c.want {
		if k == "D" && len(p) > len(rel) && p[:len(rel)+1] == rel+"/" {
			below = append(below, p)
		}
	}
	sort.Strings(below)
	for _, p := range below {
		c.applied("D", p)
	}
}

func tmpName() string {
	b := make([]byte, 8)
	rand.Read(b)
	return ".sandtrap-commit-" + hex.EncodeToString(b)
}

// dir applies the upper directory up (at rel) to the workdir's directory dst.
func (c *committer) dir(up, dst int, rel string) error {
	names, err := readNames(up)
	if err != nil {
		return fmt.Errorf("commit: reading the upper layer at %q: %w", rel, err)
	}
	// deletions first (a renamed entry's old name), then the rest
	sort.SliceStable(names, func(i, j int) bool {
		return c.isWhiteout(up, names[i]) && !c.isWhiteout(up, names[j])
	})
	for _, name := range names {
		r := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(up, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("commit: the upper layer's %q: %w", r, err)
		}
		kind, changed := c.want[r]
		if whiteout(&st) {
			if changed {
				if err := removeAll(dst, name); err != nil {
					return fmt.Errorf("commit: removing %q: %w", r, err)
				}
				c.appliedTree(r)
			}
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := c.subdir(up, dst, name, r, &st, kind, changed); err != nil {
				return err
			}
			continue
		}
		if !changed {
			continue
		}
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFSOCK || t == unix.S_IFCHR || t == unix.S_IFBLK {
			c.res.Refused = append(c.res.Refused, Change{kind, r}) // sockets and device nodes are never committed
			continue
		}
		if err := c.file(up, dst, name, &st); err != nil {
			return fmt.Errorf("commit: %q: %w", r, err)
		}
		c.applied(kind, r)
	}
	// deletions under an opaque directory: what the workdir has and the upper does not
	for p, k := range c.want {
		if k == "D" && path.Dir(p) == cleanRel(rel) && !contains(names, path.Base(p)) {
			if err := removeAll(dst, path.Base(p)); err != nil {
				return fmt.Errorf("commit: removing %q: %w", p, err)
			}
			c.appliedTree(p)
		}
	}
	return nil
}

func cleanRel(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (c *committer) isWhiteout(up int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(up, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && whiteout(&st)
}

func (c *committer) subdir(up, dst int, name, r string, st *unix.Stat_t, kind string, changed bool) error {
	var cur unix.Stat_t
	exists := unix.Fstatat(dst, name, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil
	if changed {
		if exists && cur.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unix.Unlinkat(dst, name, 0); err != nil {
				return fmt.Errorf("commit: replacing %q: %w", r, err)
			}
			exists = false
		}
		if !exists {
			if err := unix.Mkdirat(dst, name, 0o700); err != nil {
				return fmt.Errorf("commit: making %q: %w", r, err)
			}
		}
	} else if !exists {
		return nil // nothing of it changed and the workdir has none: nothing to do beneath either
	}
	sub, err := resolveBeneath(dst, name, unix.O_DIRECTORY|unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("commit: entering %q: %w", r, err)
	}
	defer unix.Close(sub)
	usub, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("commit: the upper layer's %q: %w", r, err)
	}
	defer unix.Close(usub)
	if changed {
		if err := c.meta(usub, sub, st); err != nil {
			return fmt.Errorf("commit: %q: %w", r, err)
		}
		if err := unix.Fchmod(sub, st.Mode&0o1777); err != nil {
			return fmt.Errorf("commit: %q: %w", r, err)
		}
		c.applied(kind, r)
	}
	if err := c.dir(usub, sub, r); err != nil {
		return err
	}
	if changed {
		// the run's times, once what it put beneath is in
		ts := []unix.Timespec{st.Atim, st.Mtim}
		if err := unix.UtimesNanoAt(sub, "", ts, 0); err != nil {
			unix.UtimesNanoAt(dst, name, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	return nil
}

// file puts the upper entry name (a regular file, symlink or fifo) at name in
// dst: made under a temporary name, then renamed over whatever was there.
func (c *committer) file(up, dst int, name string, st *unix.Stat_t) error {
	tmp := tmpName()
	perm := st.Mode & 0o777 // never set-uid, set-gid or sticky
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		src, err := unix.Openat(up, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		in := os.NewFile(uintptr(src), name)
		defer in.Close()
		fd, err := unix.Openat(dst, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		out := os.NewFile(uintptr(fd), tmp)
		err = copySparse(out, in, st.Size)
		if err == nil {
			err = c.meta(src, fd, st)
		}
		if err == nil {
			err = out.Chmod(os.FileMode(perm))
		}
		if err == nil {
			ts := []unix.Timespec{st.Atim, st.Mtim}
			err = unix.UtimesNanoAt(dst, tmp, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err == nil {
			err = out.Sync()
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			unix.Unlinkat(dst, tmp, 0)
			return err
		}
	case unix.S_IFLNK:
		target, err := readlinkat(up, name)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(target, dst, tmp); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mknodat(dst, tmp, unix.S_IFIFO|perm, 0); err != nil {
			return err
		}
	default:
		return fmt.Errorf("a %o file cannot be committed", st.Mode&unix.S_IFMT)
	}
	var cur unix.Stat_t
	if unix.Fstatat(dst, name, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil && cur.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := removeAll(dst, name); err != nil {
			unix.Unlinkat(dst, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(dst, tmp, dst, name); err != nil {
		unix.Unlinkat(dst, tmp, 0)
		return err
	}
	return nil
}

// copySparse copies in's data to out, keeping in's holes (a sparse file the run
// wrote stays sparse: the quota counted its pages, not its size).
func copySparse(out, in *os.File, size int64) error {
	buf := make([]byte, 256<<10)
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for p := data; p < hole; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), hole-p)], p)
			if n > 0 {
				if _, werr := out.WriteAt(buf[:n], p); werr != nil {
					return werr
				}
				p += int64(n)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return err
			}
		}
		off = hole
	}
	return out.Truncate(size)
}

// removeAll removes name in dir and, for a directory, everything beneath it,
// never following a symlink.
func removeAll(dir int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(dir, name, 0)
	}
	sub, err := resolveBeneath(dir, name, unix.O_DIRECTORY|unix.O_RDONLY)
	if err != nil {
		return err
	}
	names, err := readNames(sub)
	if err == nil {
		for _, n := range names {
			if err = removeAll(sub, n); err != nil {
				break
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}
