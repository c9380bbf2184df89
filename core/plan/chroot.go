package plan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/landlock"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
)

// resolveChroot checks the chroot (policy chroot, fs_mount, fs_mount_ro) and,
// with one, translates the policy's paths, which are paths inside it, to the
// host paths the view shows there (fsview.Chroot.Resolve: symlinks followed
// inside the view, never out of it): Landlock's rules and the host's view are
// made on those. A mount is a grant: fs_mount's paths are added to fs_writable,
// fs_mount_ro's to fs_readable. cwd stays a path inside (the run's). /proc is
// each run's own (granted by naming /proc) and /dev is sandtrap's: its device
// nodes are the host's harmless ones (fsview.ChrootDev), always granted.
func resolveChroot(p *policy.Policy, probs *policy.Problems) *fsview.Chroot {
	if p.Chroot == "" {
		for _, f := range []struct {
			key string
			m   map[string]string
		}{{"fs_mount", p.FSMount}, {"fs_mount_ro", p.FSMountRO}} {
			if len(f.m) > 0 {
				probs.Add(f.key, "mounts are made inside a chroot: give chroot (the host's own tree is granted with fs_readable and fs_writable)")
			}
		}
		return nil
	}
	n := len(*probs)
	root, err := filepath.EvalSymlinks(p.Chroot)
	if err != nil {
		probs.Add("chroot", "%s: %v", p.Chroot, unwrapPathErr(err))
		return nil
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		probs.Add("chroot", "%s is not a directory", root)
		return nil
	}
	if root == "/" {
		probs.Add("chroot", "/ is the host's root: name the directory that is the sandbox's")
		return nil
	}
	for _, d := range []string{"dev", "proc"} {
		if st, err := os.Lstat(filepath.Join(root, d)); err != nil || !st.IsDir() {
			probs.Add("chroot", "%s has no directory %s (an empty one will do: sandtrap mounts its own /%s there)", root, d, d)
		}
	}
	c := fsview.NewChroot(root)
	type mnt struct {
		host string
		ro   bool
	}
	byInside := map[string]mnt{}
	var insides []string
	for _, f := range []struct {
		key string
		m   map[string]string
		ro  bool
	}{{"fs_mount", p.FSMount, false}, {"fs_mount_ro", p.FSMountRO, true}} {
		for in, h := range f.m {
			if _, dup := byInside[in]; dup {
				probs.Add(f.key, "%s is mounted twice (read-write and read-only)", in)
				continue
			}
			if policy.Within(in, "/dev") || policy.Within(in, "/proc") {
				probs.Add(f.key, "%s: /dev and /proc are sandtrap's inside a chroot", in)
				continue
			}
			real, err := filepath.EvalSymlinks(h)
			if err != nil {
				probs.Add(f.key, "%s: %s: %v", in, h, unwrapPathErr(err))
				continue
			}
			byInside[in] = mnt{real, f.ro}
			insides = append(insides, in)
		}
	}
	fsview.SortMounts(insides)
	var rw, ro []string
	for _, in := range insides {
		m := byInside[in]
		key := "fs_mount"
		if m.ro {
			key = "fs_mount_ro"
		}
		canon, err := c.Add(fsview.ChrootMount{Inside: in, Host: m.host, RO: m.ro})
		if err != nil {
			probs.Add(key, "%s: %v in the chroot (the mount point must exist there, a directory for a directory, a file for a file)", in, err)
			continue
		}
		if m.ro {
			ro = append(ro, canon)
		} else {
			rw = append(rw, canon)
		}
	}
	if len(*probs) > n {
		return nil
	}
	translate := func(field string, list []string) []string {
		out := make([]string, 0, len(list))
		for _, in := range list {
			switch {
			case in == "/proc":
				out = append(out, in) // each run's own (fsview: ProcOwn)
				continue
			case policy.Within(in, "/proc"):
				probs.Add(field, "%s: paths inside /proc cannot be granted one by one (each run has a /proc of its own); grant /proc", in)
				continue
			case policy.Within(in, "/dev"):
				if name := strings.TrimPrefix(in, "/dev/"); slices.Contains(c.Dev, name) {
					out = append(out, in) // the host's node, bound in (always granted)
				} else {
					probs.Add(field, "%s: /dev inside a chroot is sandtrap's, with only %s (always granted)", in, strings.Join(c.Dev, ", "))
				}
				continue
			}
			_, host, err := c.Resolve(in)
			if err != nil {
				probs.Add(field, "%s: %v in the chroot", in, err)
				continue
			}
			out = append(out, host)
		}
		return out
	}
	p.FSReadable = translate("fs_readable", append(slices.Clone(p.FSReadable), ro...))
	p.FSWritable = translate("fs_writable", append(slices.Clone(p.FSWritable), rw...))
	p.FSDenied = translate("fs_denied", p.FSDenied)
	// http_inject_ca: the bundles the run sees, paths inside; the engine's
	// copies are laid over the host files shown there (the view's overlays,
	// which the chroot's copies of the root and of its mounts carry)
	p.HTTPInjectCA = slices.Clone(p.HTTPInjectCA)
	for i, in := range p.HTTPInjectCA {
		canon, host, err := c.Resolve(in)
		if err != nil {
			probs.Add("http_inject_ca", "%s: %v in the chroot", in, err)
			continue
		}
		if c.Inside == nil {
			c.Inside = map[string]string{}
		}
		c.Inside[host] = canon
		p.HTTPInjectCA[i] = host
	}
	if p.Workdir != "" {
		// a path inside: the overlay goes there in each run's view; the engine
		// lists and commits the changes on the host path it shows
		in, host, err := c.Resolve(p.Workdir)
		switch {
		case err != nil:
			probs.Add("workdir", "%s: %v in the chroot", p.Workdir, err)
		case in == "/" || policy.Within(in, "/dev") || policy.Within(in, "/proc"):
			probs.Add("workdir", "%s: the chroot's /, /dev and /proc are never copy-on-write", in)
		default:
			p.WorkdirInside, p.Workdir = in, host
			for _, m := range c.Mounts {
				if m.Inside != in && policy.Within(m.Inside, in) {
					// an overlay does not cross mounts: it would show what lies under the mount point
					probs.Add("workdir", "%s holds the mount %s, which its copy-on-write overlay would not show: mount it outside the workdir", in, m.Inside)
				}
			}
		}
	}
	if p.Cwd != "" {
		in, host, err := c.Resolve(p.Cwd)
		if err != nil {
			probs.Add("cwd", "%s: %v in the chroot", p.Cwd, err)
		} else if st, err := os.Stat(host); err != nil || !st.IsDir() {
			probs.Add("cwd", "%s is not a directory in the chroot", p.Cwd)
		} else {
			p.Cwd = in
		}
	}
	p.Chroot = root
	p.FSMount, p.FSMountRO = map[string]string{}, map[string]string{}
	for _, m := range c.Mounts {
		if m.RO {
			p.FSMountRO[m.Inside] = m.Host
		} else {
			p.FSMount[m.Inside] = m.Host
		}
	}
	return c
}

// ChrootOf is the chroot of a prepared policy (nil: none): its paths resolved.
func ChrootOf(p *policy.Policy) *fsview.Chroot {
	if p.Chroot == "" {
		return nil
	}
	c := fsview.NewChroot(p.Chroot)
	var insides []string
	for in := range p.FSMount {
		insides = append(insides, in)
	}
	for in := range p.FSMountRO {
		insides = append(insides, in)
	}
	fsview.SortMounts(insides)
	for _, in := range insides {
		if h, ok := p.FSMount[in]; ok {
			c.Mounts = append(c.Mounts, fsview.ChrootMount{Inside: in, Host: h})
		} else {
			c.Mounts = append(c.Mounts, fsview.ChrootMount{Inside: in, Host: p.FSMountRO[in], RO: true})
		}
	}
	return c
}

// chrootView checks that the chroot can be had: it needs the sandbox's own
// mount namespace. It never degrades (allow_degraded or not): without it the
// run would see the host's root instead.
func (c *compiler) chrootView() error {
	if c.p.Chroot == "" || c.pl.View != nil {
		return nil
	}
	return protocol.Errorf(protocol.KindIsolation, "isolation unavailable: a chroot needs a mount namespace of the sandbox's own: %s; allow_degraded does not apply: the run would see the host's root", notApplied(c.pl))
}

// landlockView is the chroot's view for Landlock's rules (nil: none, the host's
// tree): its root, its mounts, and sandtrap's /dev (a tmpfs with the host's
// device nodes bound in) and /proc (each run's own, or an empty tmpfs), which
// hide whatever the root has there.
func landlockView(c *fsview.Chroot) *landlock.View {
	if c == nil {
		return nil
	}
	v := &landlock.View{Mounts: []landlock.ViewMount{{At: "/", Source: c.Root}}}
	for _, m := range c.Mounts {
		v.Mounts = append(v.Mounts, landlock.ViewMount{At: m.Inside, Source: m.Host})
	}
	v.Mounts = append(v.Mounts, landlock.ViewMount{At: "/dev"}, landlock.ViewMount{At: "/proc"})
	for _, d := range c.Dev {
		v.Mounts = append(v.Mounts, landlock.ViewMount{At: "/dev/" + d, Source: "/dev/" + d})
	}
	return v
}
