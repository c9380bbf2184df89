package kernel

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// detectCgroup finds a writable cgroup hierarchy beneath this process's own cgroup:
// cgroup v2 where the subtree is delegated to us (or we are root), cgroup v1 as root.
func detectCgroup(root bool) *CgroupInfo {
	own := ownCgroups()
	// cgroup v2: unified hierarchy with controllers we can use.
	if p, ok := own[""]; ok {
		var st unix.Statfs_t
		if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			dir := filepath.Join("/sys/fs/cgroup", p)
			if unix.Access(dir, unix.W_OK) == nil {
				ctrl, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
				info := &CgroupInfo{Version: 2, Dirs: map[string]string{"unified": dir}}
				for _, c := range strings.Fields(string(ctrl)) {
					info.Dirs[c] = dir
				}
				return info
			}
		}
	}
	if !root {
		return nil
	}
	info := &CgroupInfo{Version: 1, Dirs: map[string]string{}}
	for _, c := range []string{"pids", "memory", "cpu", "cpuacct", "freezer", "cpuset"} {
		p, ok := own[c]
		if !ok {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", c, p)
		if st, err := os.Stat(dir); err == nil && st.IsDir() && unix.Access(dir, unix.W_OK) == nil {
			info.Dirs[c] = dir
		}
	}
	if len(info.Dirs) == 0 {
		return nil
	}
	return info
}

// ownCgroups maps each v1 controller (and "" for v2) to this process's cgroup path.
func ownCgroups() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}
