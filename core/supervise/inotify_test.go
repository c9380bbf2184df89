//go:build linux

package supervise

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY

func (sb *sandbox) inotify(t testing.TB) int {
	t.Helper()
	a := sb.do(t, req{Op: "inotify_init"})
	if a.Errno != 0 {
		t.Fatalf("inotify_init: %s", errnoName(a.Errno))
	}
	return int(a.Val)
}

// watches: what the child's inotify instance watches (fdinfo).
func (sb *sandbox) watches(t testing.TB, ifd int) []string {
	t.Helper()
	a := sb.do(t, req{Op: "watches", FD: ifd})
	if a.Errno != 0 {
		t.Fatalf("fdinfo: %s", errnoName(a.Errno))
	}
	return a.Text
}

func TestInotifyRefusals(t *testing.T) {
	// watch: chdir to cwd (when set), then inotify_add_watch(path); the check is
	// whether the instance ends up watching the outside inode named by target
	type w struct{ cwd, path, target string }
	watch := func(x w) func(t *testing.T, sb *sandbox) syscall.Errno {
		return func(t *testing.T, sb *sandbox) syscall.Errno {
			sb.lastFD = sb.inotify(t)
			if x.cwd != "" {
				if e := sb.do(t, req{Op: "chdir", Path: filepath.Join(sb.base, x.cwd)}).Errno; e != 0 {
					t.Fatalf("chdir: %s", errnoName(e))
				}
			}
			path := strings.ReplaceAll(x.path, "<base>", sb.base)
			return sb.do(t, req{Op: "watch", FD: sb.lastFD, Path: path, Arg: watchMask}).Errno
		}
	}
	watching := func(target string) func(t *testing.T, sb *sandbox) bool {
		return func(t *testing.T, sb *sandbox) bool {
			return slices.Contains(sb.watches(t, sb.lastFD), kernelID(t, filepath.Join(sb.base, target), true))
		}
	}
	cases := []w{
		{path: "<base>/no/d", target: "no/d"},
		{path: "<base>/no/f", target: "no/f"},
		{path: "<base>/no", target: "no"},
		{path: "<base>", target: "."},
		{path: "<base>/rw/../no/d", target: "no/d"},
		{path: "<base>/rw/dlink", target: "no/d"},             // a symlink inside, to a directory outside
		{path: "<base>/rw/flink", target: "no/f"},             // a symlink inside, to a file outside
		{path: "<base>/rw/dlink/", target: "no/d"},            // the trailing slash follows it too
		{path: "<base>/rw/dlink/.", target: "no/d"},           //
		{cwd: "rw", path: "../no/d", target: "no/d"},          // relative, from a cwd inside
		{cwd: "no", path: "d", target: "no/d"},                // relative, from a cwd outside
		{cwd: "no/d", path: ".", target: "no/d"},              //
		{cwd: "rw", path: "dlink", target: "no/d"},            //
		{cwd: "no", path: "../no/f", target: "no/f"},          //
		{cwd: "no/d", path: "/proc/self/cwd", target: "no/d"}, // magic links: refused (ELOOP), they would be the supervisor's
		{path: "/proc/self/root<base>/no/d", target: "no/d"},
		{path: "/proc/thread-self/root<base>/no", target: "no"},
	}
	var attacks []attack
	for _, x := range cases {
		want := syscall.Errno(unix.EACCES)
		if strings.HasPrefix(x.path, "/proc/") {
			want = unix.ELOOP
		}
		name := strings.NewReplacer("<base>", "_base", "/", "_", ".", "dot").Replace(x.path)
		if x.cwd != "" {
			name = "cwd_" + strings.ReplaceAll(x.cwd, "/", "_") + "_" + name
		}
		attacks = append(attacks, attack{name: name, run: watch(x), want: want, check: watching(x.target)})
	}
	runAttacks(t, attacks)
}

func TestInotify(t *testing.T) {
	sb := newSandbox(t, sandboxOpts{})
	ifd := sb.inotify(t)
	watch := func(path string, mask uint32) resp {
		return sb.do(t, req{Op: "watch", FD: ifd, Path: path, Arg: int64(mask)})
	}
	ok := func(t *testing.T, path string, mask uint32, target string, follow bool) int64 {
		t.Helper()
		a := watch(path, mask)
		if a.Errno != 0 {
			t.Fatalf("watch %s: %s", path, errnoName(a.Errno))
		}
		if id := kernelID(t, target, follow); !slices.Contains(sb.watches(t, ifd), id) {
			t.Fatalf("watch %s: %s is not watched (%v)", path, id, sb.watches(t, ifd))
		}
		return a.Val
	}

	t.Run("inside_and_events_arrive", func(t *testing.T) {
		ok(t, filepath.Join(sb.rw, "d"), watchMask, filepath.Join(sb.rw, "d"), true)
		must(t, os.WriteFile(filepath.Join(sb.rw, "d", "new-file"), nil, 0o644))
		a := sb.do(t, req{Op: "events", FD: ifd, Arg: 2000})
		if !slices.Contains(a.Text, "new-file") {
			t.Fatalf("events %v, want new-file", a.Text)
		}
	})
	t.Run("read_only_tree_and_files", func(t *testing.T) {
		ok(t, filepath.Join(sb.ro, "d"), watchMask, filepath.Join(sb.ro, "d"), true)
		ok(t, filepath.Join(sb.ro, "f"), watchMask, filepath.Join(sb.ro, "f"), true)
		ok(t, sb.rw, watchMask, sb.rw, true)
	})
	t.Run("same_inode_same_wd", func(t *testing.T) {
		a := ok(t, filepath.Join(sb.rw, "f"), watchMask, filepath.Join(sb.rw, "f"), true)
		b := ok(t, filepath.Join(sb.rw, "d", "..", "f"), unix.IN_MODIFY, filepath.Join(sb.rw, "f"), true)
		if a != b {
			t.Fatalf("wd %d then %d for one inode", a, b)
		}
	})
	t.Run("symlink_inside_to_inside", func(t *testing.T) {
		ok(t, filepath.Join(sb.rw, "inlink"), watchMask, filepath.Join(sb.rw, "d"), true)
	})
	t.Run("dont_follow_watches_the_symlink_itself", func(t *testing.T) {
		// rw/dlink points outside, but IN_DONT_FOLLOW watches the link, which is inside
		ok(t, filepath.Join(sb.rw, "dlink"), watchMask|unix.IN_DONT_FOLLOW, filepath.Join(sb.rw, "dlink"), false)
		if slices.Contains(sb.watches(t, ifd), kernelID(t, filepath.Join(sb.no, "d"), true)) {
			t.Fatal("IN_DONT_FOLLOW followed the link outside")
		}
	})
	t.Run("relative_to_the_cwd", func(t *testing.T) {
		if e := sb.do(t, req{Op: "chdir", Path: sb.rw}).Errno; e != 0 {
			t.Fatalf("chdir: %s", errnoName(e))
		}
		ok(t, "d", watchMask, filepath.Join(sb.rw, "d"), true)
		ok(t, ".", watchMask, sb.rw, true)
		ok(t, "../ro/d", watchMask, filepath.Join(sb.ro, "d"), true)
	})
	t.Run("kernel_errors", func(t *testing.T) {
		for _, c := range []struct {
			name string
			r    req
			want syscall.Errno
		}{
			{"missing", req{Op: "watch", FD: ifd, Path: filepath.Join(sb.rw, "missing"), Arg: watchMask}, unix.ENOENT},
			{"empty", req{Op: "watch", FD: ifd, Path: "", Arg: watchMask}, unix.ENOENT},
			{"onlydir_on_a_file", req{Op: "watch", FD: ifd, Path: filepath.Join(sb.rw, "f"), Arg: watchMask | unix.IN_ONLYDIR}, unix.ENOTDIR},
			{"file_as_directory", req{Op: "watch", FD: ifd, Path: filepath.Join(sb.rw, "f") + "/", Arg: watchMask}, unix.ENOTDIR},
			{"bad_pointer", req{Op: "watch_ptr", FD: ifd, Arg2: 8, Arg: watchMask}, unix.EFAULT},
			{"too_long", req{Op: "watch", FD: ifd, Path: "/" + strings.Repeat("a", 5000), Arg: watchMask}, unix.ENAMETOOLONG},
			{"onlydir_outside", req{Op: "watch", FD: ifd, Path: filepath.Join(sb.no, "f"), Arg: watchMask | unix.IN_ONLYDIR}, unix.EACCES},
			{"bad_fd", req{Op: "watch", FD: 999, Path: sb.rw, Arg: watchMask}, unix.EBADF},
			{"not_inotify", req{Op: "watch", FD: 0, Path: sb.rw, Arg: watchMask}, unix.EINVAL},
		} {
			if e := sb.do(t, c.r).Errno; e != c.want {
				t.Errorf("%s: got %s, want %s", c.name, errnoName(e), errnoName(c.want))
			}
		}
		if a := watch(filepath.Join(sb.rw, "d"), watchMask|unix.IN_ONLYDIR); a.Errno != 0 {
			t.Errorf("IN_ONLYDIR on a directory: %s", errnoName(a.Errno))
		}
	})
}

// Allowed names a file (a Landlock rule on a file) and a directory above a mount:
// the walk crosses the read-only bind mount of ro/ to reach base.
func TestInotifyAllowedFileAndMountCrossing(t *testing.T) {
	probe(t)
	t.Run("file_rule", func(t *testing.T) {
		sb := newSandboxWith(t, func(sb *sandbox) Config { return Config{Allowed: []string{filepath.Join(sb.rw, "f")}} })
		ifd := sb.inotify(t)
		if e := sb.do(t, req{Op: "watch", FD: ifd, Path: filepath.Join(sb.rw, "f"), Arg: watchMask}).Errno; e != 0 {
			t.Fatalf("the allowed file: %s", errnoName(e))
		}
		if e := sb.do(t, req{Op: "watch", FD: ifd, Path: sb.rw, Arg: watchMask}).Errno; e != unix.EACCES {
			t.Fatalf("its directory: %s, want EACCES", errnoName(e))
		}
	})
	t.Run("above_a_mount", func(t *testing.T) {
		sb := newSandboxWith(t, func(sb *sandbox) Config { return Config{Allowed: []string{sb.base}} })
		ifd := sb.inotify(t)
		if e := sb.do(t, req{Op: "watch", FD: ifd, Path: filepath.Join(sb.ro, "d"), Arg: watchMask}).Errno; e != 0 {
			t.Fatalf("below the bind mount: %s", errnoName(e))
		}
		if e := sb.do(t, req{Op: "watch", FD: ifd, Path: filepath.Dir(sb.base), Arg: watchMask}).Errno; e != unix.EACCES {
			t.Fatalf("above the allowed tree: %s, want EACCES", errnoName(e))
		}
	})
}

// Another thread rewrites the path buffer between an inside and an outside path
// while inotify_add_watch runs: the copy is what is checked and watched, so no watch
// ever lands outside. A naive handler (check the copy, then CONTINUE: the kernel
// reads the buffer again) is caught.
func TestInotifyFlippedPathNeverWatchesOutside(t *testing.T) {
	naive := map[string]handlerFunc{"inotify_add_watch": func(c *call) reply {
		path, err := c.readString(c.arg(1), unix.PathMax)
		if err != nil {
			return fail(unix.EFAULT)
		}
		p, r := c.resolve(path, true)
		if r != nil {
			return *r
		}
		if in, _ := c.s.inside(p); !in {
			return fail(unix.EACCES)
		}
		return cont()
	}}
	for _, mode := range []string{"supervised", "naive"} {
		t.Run(mode, func(t *testing.T) {
			o := sandboxOpts{}
			if mode == "naive" {
				o.override = naive
			}
			sb := newSandbox(t, o)
			in, out := filepath.Join(sb.rw, "d"), filepath.Join(sb.no, "d")
			outID := kernelID(t, out, true)
			ifd := sb.inotify(t)
			escaped := false
			var a resp
			for round := 0; round < 10 && !escaped; round++ {
				a = sb.do(t, req{Op: "race_watch", FD: ifd, Path: in, B: out, N: 300, Arg: watchMask})
				escaped = slices.Contains(sb.watches(t, ifd), outID)
			}
			t.Logf("%s: last round %d watched, %d EACCES, %d other; escaped: %v", mode, a.Vals[0], a.Vals[1], a.Vals[2], escaped)
			if mode == "naive" {
				if !escaped {
					t.Fatal("the naive handler was not caught: the test cannot tell")
				}
				return
			}
			if escaped {
				t.Fatal("a flipped path left a watch outside the policy")
			}
			if a.Vals[0] == 0 || a.Vals[1] == 0 {
				t.Fatal("the race never flipped: both outcomes should occur")
			}
			if a.Vals[2] != 0 {
				t.Fatalf("%d calls failed otherwise", a.Vals[2])
			}
		})
	}
}
