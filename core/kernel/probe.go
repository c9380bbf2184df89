// Package kernel detects what confinement this kernel and process can apply: the
// Landlock ABI, seccomp, cgroups and namespaces. Results are computed once.
package kernel

import (
	"os"
	"strconv"
	"strings"
	"sync"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Features is what the running kernel and process offer.
type Features struct {
	LandlockABI int  // 0: no Landlock
	Seccomp     bool // seccomp filters can be installed
	Root        bool // effective uid 0
	PidNS       bool // a new pid namespace can be created for children
	UserNS      bool // user namespaces can be created (every sandbox lives in one of its own)
	MountAPI    bool // open_tree, move_mount, mount_setattr (the sandbox's view of the filesystem)
	Cgroup      *CgroupInfo
	Disabled    []string // features turned off by the test hook (testhook.go; not in the shipped library)
}

// CgroupInfo describes where this process may create sandbox cgroups.
type CgroupInfo struct {
	Version int               // 1 or 2
	Dirs    map[string]string // controller -> directory of this process's own cgroup
}

var (
	once     sync.Once
	features Features
)

// Probe returns the detected features (cached after the first call).
func Probe() Features {
	once.Do(func() { features = probe() })
	mu.Lock()
	defer mu.Unlock()
	return features
}

func probe() Features {
	off := testDisabled()
	f := Features{Root: unix.Geteuid() == 0}
	for k := range off {
		f.Disabled = append(f.Disabled, k)
	}
	if !off["landlock"] {
		if v, err := ll.LandlockGetABIVersion(); err == nil && v > 0 {
			f.LandlockABI = v
			if c := testLandlockABI(); c > 0 && c < v {
				f.LandlockABI = c
				f.Disabled = append(f.Disabled, "landlock_abi>"+strconv.Itoa(c))
			}
		}
	}
	if !off["seccomp"] {
		if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err == nil {
			f.Seccomp = true
		}
	}
	if !off["pidns"] {
		f.UserNS = userNSWorks(f.Root)
		f.PidNS = f.Root || f.UserNS
	}
	if !off["view"] {
		// mount_setattr (5.12, the newest call the view uses) on an invalid fd
		_, _, e := unix.Syscall6(unix.SYS_MOUNT_SETATTR, ^uintptr(0), 0, 0, 0, 0, 0)
		f.MountAPI = e != unix.ENOSYS
	}
	if !off["cgroup"] {
		f.Cgroup = detectCgroup(f.Root)
	}
	return f
}

// userNSWorks reports whether a user namespace can be created: the kernel allows
// it unless a sysctl forbids it (for unprivileged users, or for everyone).
func userNSWorks(root bool) bool {
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return false
	}
	if root {
		return true
	}
	for p, forbids := range map[string]string{"/proc/sys/kernel/unprivileged_userns_clone": "0",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"} {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == forbids {
			return false
		}
	}
	return true
}

// MarkSeccompConfined records that the host itself now runs under the sandbox's
// seccomp filter, which refuses new namespaces: later runs use cgroups to contain
// their tree, or fail closed.
func MarkSeccompConfined() {
	Probe()
	mu.Lock()
	features.PidNS, features.UserNS = false, false
	mu.Unlock()
}

var mu sync.Mutex
