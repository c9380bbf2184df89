package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandtrap/sandtrap/core/kernel"
	"golang.org/x/sys/unix"
)

// Freezer is one run's own cgroup v2, whose cgroup.freeze stops every member at once
// (Process.Pause): a frozen task runs no code, so nothing inside the run can thaw
// it, and a SIGCONT — from inside or from anyone — does not resume it (the SIGSTOP
// of every member can be undone by any member still running). A fatal signal still
// kills a frozen task (cgroup v2), so kill() works on a paused run.
//
// It lives beneath the sandbox's cgroup when that is v2 (its limits hold for the run
// as before), else beneath the host's own cgroup of the v2 hierarchy (on a hybrid
// host, /sys/fs/cgroup/unified: cgroup.freeze is a core file of v2, it needs no
// controller, and moving a process there leaves its v1 cgroups, the limits, as
// they are). Members are moved in while the run is parked (pid 1 and its target
// before its execve), so every process the program makes is born inside.
type Freezer struct {
	dir    string
	mu     sync.Mutex
	frozen bool
}

// freezer names a run's freezer cgroup (the janitor's pattern: sandtrap-<pid>-<n>).
func freezerName() string { return fmt.Sprintf("sandtrap-%d-%d", os.Getpid(), seq.Add(1)) }

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
	// testNoFreezer makes FreezerRoot fail (freeze_testhook.go: tests of the SIGSTOP fallback)
	testNoFreezer bool
)

// FreezerRoot is the directory of the host's own cgroup in the v2 hierarchy, where
// a run's freezer goes when its sandbox has no v2 cgroup; an error says why there
// is none (then a pause falls back to SIGSTOP, and says so).
func FreezerRoot() (string, error) {
	if testNoFreezer {
		return "", errors.New("the freezer is disabled (test hook)")
	}
	if d := kernel.Probe().Disabled; slices.Contains(d, "cgroup") || slices.Contains(d, "freezer") {
		return "", errors.New("the freezer is disabled (test hook)")
	}
	rootOnce.Do(func() {
		rootDir, rootErr = findRoot()
		if rootErr == nil {
			rootErr = probeFreeze(rootDir)
		}
	})
	return rootDir, rootErr
}

// findRoot: the mount point of cgroup2 (mountinfo) joined with this process's path in
// it (the "0::" line of /proc/self/cgroup).
func findRoot() (string, error) {
	mnt := ""
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		i := strings.Index(l, " - ")
		if i < 0 {
			continue
		}
		after := strings.Fields(l[i+3:])
		before := strings.Fields(l[:i])
		if len(after) > 0 && after[0] == "cgroup2" && len(before) > 4 {
			mnt = before[4]
			break
		}
	}
	if mnt == "" {
		return "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			dir := filepath.Join(mnt, p)
			if unix.Access(dir, unix.W_OK) != nil {
				return "", fmt.Errorf("this process cannot create cgroups in %s (not delegated to it)", dir)
			}
			return dir, nil
		}
	}
	return "", errors.New("this process has no cgroup v2 path")
}

// probeFreeze makes and removes a cgroup under dir to see that it can be frozen.
func probeFreeze(dir string) error {
	d := filepath.Join(dir, freezerName())
	if err := os.Mkdir(d, 0o755); err != nil {
		return fmt.Errorf("cgroup v2 in %s: %w", dir, err)
	}
	defer os.Remove(d)
	if _, err := os.Stat(filepath.Join(d, "cgroup.freeze")); err != nil {
		return errors.New("the kernel has no cgroup v2 freezer (cgroup.freeze, Linux 5.2)")
	}
	return nil
}

// NewFreezer makes a run's freezer beneath parent's v2 cgroup (parent nil or not v2:
// beneath FreezerRoot). Close removes it.
func NewFreezer(parent *Group) (*Freezer, error) {
	var base string
	if parent != nil && parent.info.Version == 2 && parent.dirs["unified"] != "" {
		if testNoFreezer {
			return nil, errors.New("the freezer is disabled (test hook)")
		}
		base = parent.dirs["unified"]
	} else {
		var err error
		if base, err = FreezerRoot(); err != nil {
			return nil, err
		}
		freezerJanitor(base)
	}
	d := filepath.Join(base, freezerName())
	if err := os.Mkdir(d, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup v2 freezer: %w", err)
	}
	return &Freezer{dir: d}, nil
}

var freezerJanitorOnce sync.Once

// freezerJanitor removes the empty freezers left by host processes that are gone.
func freezerJanitor(base string) {
	freezerJanitorOnce.Do(func() {
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			var pid, n int
			if _, err := fmt.Sscanf(e.Name(), "sandtrap-%d-%d", &pid, &n); err != nil || pid == os.Getpid() {
				continue
			}
			if unix.Kill(pid, 0) == unix.ESRCH {
				os.Remove(filepath.Join(base, e.Name()))
			}
		}
	})
}

// Dir is the freezer's cgroup directory.
func (f *Freezer) Dir() string { return f.dir }

// Join moves pid (the whole thread group) into the freezer.
func (f *Freezer) Join(pid int) error {
	if err := write(f.dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return err
	}
	return nil
}

// Members are the pids in the freezer.
func (f *Freezer) Members() []int {
	b, _ := os.ReadFile(filepath.Join(f.dir, "cgroup.procs"))
	var out []int
	for _, s := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Freeze stops every member and returns once the kernel reports them all frozen
// (cgroup.events "frozen 1"), within 2 s.
func (f *Freezer) Freeze() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := write(f.dir, "cgroup.freeze", "1"); err != nil {
		return err
	}
	f.frozen = true
	deadline := time.Now().Add(2 * time.Second)
	for !f.eventFrozen() {
		if time.Now().After(deadline) {
			return errors.New("the run's cgroup did not freeze within 2 s")
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// Thaw lets every member run again.
func (f *Freezer) Thaw() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := write(f.dir, "cgroup.freeze", "0"); err != nil {
		return err
	}
	f.frozen = false
	return nil
}

// Frozen reports what the kernel says (cgroup.events).
func (f *Freezer) Frozen() bool { return f.eventFrozen() }

func (f *Freezer) eventFrozen() bool {
	b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return strings.Contains(string(b), "frozen 1")
}

// Close removes the freezer once its members are gone (they die with the run's
// pid 1: a frozen task still takes SIGKILL); members left are killed first.
func (f *Freezer) Close() {
	if f == nil {
		return
	}
	for i := 0; i < 2000; i++ {
		err := os.Remove(f.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if i == 100 {
			write(f.dir, "cgroup.kill", "1")
			write(f.dir, "cgroup.freeze", "0")
		}
		if i < 50 {
			time.Sleep(20 * time.Microsecond) // the last members are being reaped
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}
