package plan

import (
	"os"
	"path/filepath"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	"github.com/sandtrap/sandtrap/core/spawn"
	"golang.org/x/sys/unix"
)

// cowView checks that the copy-on-write workdir (policy workdir) can be had: it
// needs the sandbox's own view (a mount namespace) and a pid 1 per run that
// mounts. It never degrades (allow_degraded or not): a workdir written in place
// would make a dry run real.
func (c *compiler) cowView() error {
	p, pl := c.p, c.pl
	if p.Workdir == "" {
		return nil
	}
	why := ""
	switch {
	case pl.View == nil:
		why = "it needs a view of the sandbox's own (a mount namespace): " + notApplied(pl)
	case !c.in.Features.PidNS:
		why = "it needs a pid namespace per run (whose pid 1 mounts the overlay)"
	case p.Chroot != "" && p.FSStorage != "":
		why = "fs_storage inside a chroot: each run's pid 1 makes its layer there, and the chroot does not show the host's directory; leave fs_storage out (a tmpfs layer)"
	}
	if why != "" {
		return protocol.Errorf(protocol.KindIsolation, "isolation unavailable: a copy-on-write workdir (%s); allow_degraded does not apply: the workdir would be written in place", why)
	}
	return nil
}

func notApplied(pl *Plan) string {
	for _, st := range pl.Steps {
		if st.Name == StepView && len(st.NotApplied) > 0 {
			return st.NotApplied[0]
		}
	}
	return "none"
}

// cowCaps are what pid 1 holds while it mounts the overlay (the overlay keeps its
// mounter's credentials for copy-up: reading lower files, creating them in the
// upper layer with their owner and mode); it drops them with the rest.
const cowCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID

// cowZygote adds the copy-on-write workdir to the zygote's specification: the
// Landlock rules on paths inside the workdir move from the table (the host's
// inodes, which the overlay hides) to rules pid 1 makes on the overlay.
func (c *compiler) cowZygote(zs *spawn.ZygoteSpec) {
	p := c.p
	cow := &spawn.COW{Workdir: p.Workdir, UserXattr: zs.UserNS}
	if p.WorkdirInside != "" {
		cow.Workdir = p.WorkdirInside // pid 1 mounts the overlay in its view, inside the chroot
	}
	if p.MaxDisk > 0 {
		cow.Size = uint64(p.MaxDisk)
	}
	zs.KeepCaps |= cowCaps
	if t := zs.Landlock; t != nil {
		kept := t.Paths[:0:0]
		var fds []int
		for i, pr := range t.Paths {
			if policy.Within(pr.Path, p.Workdir) {
				rel, _ := filepath.Rel(p.Workdir, pr.Path)
				if rel == "." {
					rel = ""
				}
				cow.Rules = append(cow.Rules, spawn.COWRule{Rel: rel, Rights: pr.Rights})
				continue
			}
			kept = append(kept, pr)
			fds = append(fds, zs.LandlockFDs[i])
		}
		t2 := *t
		t2.Paths = kept
		zs.Landlock, zs.LandlockFDs = &t2, fds
	}
	zs.COW = cow
}

// checkWorkdir resolves the workdir through its symlinks (the overlay is mounted
// on the directory reached, and the rules inside it are about that one) and
// checks it: an existing directory, not /, not kernel state.
func checkWorkdir(p *policy.Policy, probs *policy.Problems) {
	if p.Workdir == "" {
		if p.FSStorage != "" {
			probs.Add("fs_storage", "it holds the copy-on-write layers of a workdir: give workdir")
		}
		return // on_exit and on_error mean nothing then (the seed's constructor passes its defaults)
	}
	defer checkStorage(p, probs)
	real, err := filepath.EvalSymlinks(p.Workdir)
	if err != nil {
		probs.Add("workdir", "%s: %v", p.Workdir, unwrapPathErr(err))
		return
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		probs.Add("workdir", "%s: %v", real, unwrapPathErr(err))
		return
	case !st.IsDir():
		probs.Add("workdir", "%s is not a directory", real)
		return
	case real == "/":
		probs.Add("workdir", "/ cannot be the workdir: name the directory the run may change")
		return
	}
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if policy.Within(real, k) || policy.Within(k, real) {
			probs.Add("workdir", "%s holds or is inside %s: kernel state and devices are never copy-on-write", real, k)
			return
		}
	}
	p.Workdir = real
}

// checkStorage checks fs_storage (after the workdir): an existing directory,
// resolved through its symlinks, on a writable mount, neither inside the
// workdir (an upper layer inside its own lower one) nor holding it; not with
// max_disk, whose quota is the size of a run's tmpfs.
func checkStorage(p *policy.Policy, probs *policy.Problems) {
	if p.FSStorage == "" {
		return
	}
	real, err := filepath.EvalSymlinks(p.FSStorage)
	if err != nil {
		probs.Add("fs_storage", "%s: %v", p.FSStorage, unwrapPathErr(err))
		return
	}
	st, err := os.Stat(real)
	switch {
	case err != nil:
		probs.Add("fs_storage", "%s: %v", real, unwrapPathErr(err))
	case !st.IsDir():
		probs.Add("fs_storage", "%s is not a directory", real)
	case policy.Within(real, p.Workdir) || policy.Within(p.Workdir, real):
		probs.Add("fs_storage", "%s holds or is inside the workdir %s: the layers must lie beside it", real, p.Workdir)
	case fsview.ReadOnlyMount(real):
		probs.Add("fs_storage", "%s is on a read-only mount", real)
	case p.MaxDisk > 0:
		probs.Add("fs_storage", "not with max_disk: its quota is the size of each run's layer in a tmpfs, and a layer on disk has none")
	}
	p.FSStorage = real
}

// TmpfsQuota: max_disk is the size of the workdir's copy-on-write layer, a tmpfs.
const TmpfsQuota Mechanism = "tmpfs_quota"

// fileSizeLimit reports whether max_disk also needs RLIMIT_FSIZE: for writable
// trees outside the workdir (where nothing counts what the run adds, RLIMIT_FSIZE
// bounds each file). Inside the workdir the tmpfs quota counts every byte,
// and a file-size limit would refuse a sparse file the quota holds.
func fileSizeLimit(p *policy.Policy) bool {
	if p.Workdir == "" {
		return true
	}
	for _, w := range p.FSWritable {
		if !policy.Within(w, p.Workdir) {
			return true
		}
	}
	return false
}

func diskMechanism(p *policy.Policy) Mechanism {
	switch {
	case p.Workdir == "":
		return RlimitFsize
	case fileSizeLimit(p):
		return TmpfsQuota + "+" + RlimitFsize
	}
	return TmpfsQuota
}

func diskNote(p *policy.Policy) string {
	const fsize = "largest file the run may write (space reserved past a file's size is refused)"
	if p.Workdir == "" {
		return fsize
	}
	n := "bytes the run adds under the workdir: its copy-on-write layer is a tmpfs of this size (data, fallocate and the pages of sparse files count; the run gets ENOSPC, the result disk_limit)"
	if fileSizeLimit(p) {
		n += "; writable trees outside the workdir: " + fsize
	}
	return n
}
