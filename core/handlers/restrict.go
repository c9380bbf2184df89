package handlers

import (
	"fmt"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandtrap/sandtrap/core/supervise"
	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"
)

// ctx.restrict_pid_network and ctx.deny_path (issue 14; the peer's semantics):
//
//   - restrict_pid_network(pid, ips): from then on the process that pid is a task
//     of (the event's pid: a thread id of the host) reaches only ips with connect,
//     sendto and bind, on top of every other rule. The process is pinned by a
//     pidfd of its thread-group leader when the restriction is made: a process that
//     later gets the same pid number is not restricted, and a call counts as that
//     process's when the caller's thread group is that pid and the pidfd is still
//     alive (the pid cannot be reused while it is). Several restrictions of one
//     process intersect. Processes it forks are not covered (the engine does not
//     trap forks): use restrict_network for the whole run.
//   - deny_path(path): from then on the run's calls the host judges refuse (EACCES)
//     that path and everything beneath it: lexically on the copied path (made
//     absolute with the caller's cwd when it is not), and, for the calls the
//     supervisor performs (open, unlink, mkdir), on the file it opened or the
//     directory it acted in: by the path the kernel names it by (symlinks and ".."
//     resolved) and by its identity (st_dev, st_ino, taken when deny_path was
//     called: a hard link or a rename of a denied file is still denied).

type pidNet struct {
	tgid  int
	pidfd int
	sets  [][]netip.Prefix
}

type deniedPath struct {
	path     string
	dev, ino uint64 // 0, 0: it did not exist when denied
}

// parsePidNets reads restrict_pid_network: [[pid, [ips...]], ...].
func parsePidNets(raw []byte) ([]pidNet, string) {
	var v any
	if err := msgpack.Unmarshal(raw, &v); err != nil {
		return nil, "restrict_pid_network: " + err.Error()
	}
	list, ok := v.([]any)
	if !ok {
		return nil, "restrict_pid_network must be a list of [pid, [addresses]]"
	}
	var out []pidNet
	for _, x := range list {
		pair, ok := x.([]any)
		if !ok || len(pair) != 2 {
			return nil, "restrict_pid_network must be a list of [pid, [addresses]]"
		}
		pid, ok := toInt64(pair[0])
		if !ok || pid <= 0 {
			return nil, fmt.Sprintf("restrict_pid_network: %v is not a pid", pair[0])
		}
		ips, ok := pair[1].([]any)
		if !ok {
			return nil, "restrict_pid_network: the addresses must be a list"
		}
		set, why := parseNetSet(ips)
		if why != "" {
			return nil, strings.Replace(why, "restrict_network", "restrict_pid_network", 1)
		}
		out = append(out, pidNet{tgid: int(pid), pidfd: -1, sets: [][]netip.Prefix{set}})
	}
	return out, ""
}

func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case uint64:
		return int64(n), true
	case int8, int16, int32, uint8, uint16, uint32, int:
		x, err := strconv.ParseInt(fmt.Sprint(n), 10, 64)
		return x, err == nil
	}
	return 0, false
}

// tgidOfTask is the thread group of a task (0: gone).
func tgidOfTask(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// addPidNets pins each restricted process (its leader's pidfd) and records it:
// a pid that names no live task is an error (the judge's exception policy).
func (r *hostRun) addPidNets(ps []pidNet) string {
	for _, p := range ps {
		tgid := tgidOfTask(p.tgid)
		if tgid == 0 {
			return fmt.Sprintf("restrict_pid_network: no process %d", p.tgid)
		}
		fd, err := unix.PidfdOpen(tgid, 0)
		if err != nil {
			return fmt.Sprintf("restrict_pid_network: process %d: %v", tgid, err)
		}
		if tgidOfTask(p.tgid) != tgid { // the task went (and its number was reused) in between
			unix.Close(fd)
			return fmt.Sprintf("restrict_pid_network: no process %d", p.tgid)
		}
		p.tgid, p.pidfd = tgid, fd
		r.mu.Lock()
		i := slices.IndexFunc(r.pidNets, func(q pidNet) bool { return q.tgid == tgid && alive(q.pidfd) })
		if i >= 0 {
			r.pidNets[i].sets = append(r.pidNets[i].sets, p.sets...)
			unix.Close(fd)
		} else {
			r.pidNets = append(r.pidNets, p)
		}
		r.mu.Unlock()
	}
	return ""
}

func alive(pidfd int) bool { return unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil }

// pidRefused: ev's caller is a restricted process and a is outside one of its sets.
func (r *hostRun) pidRefused(ev *supervise.Event, a netip.Addr) (syscall.Errno, string) {
	r.mu.Lock()
	has := len(r.pidNets) > 0
	r.mu.Unlock()
	if !has {
		return 0, ""
	}
	tgid := tgidOfTask(int(ev.Tid))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pidNets {
		if p.tgid != tgid || !alive(p.pidfd) {
			continue
		}
		for _, set := range p.sets {
			if !slices.ContainsFunc(set, func(q netip.Prefix) bool { return q.Contains(a) }) {
				return unix.EACCES, fmt.Sprintf("%s %s (restrict_pid_network %d)", ev.Syscall, netip.AddrPortFrom(a, uint16(ev.Port)), tgid)
			}
		}
	}
	return 0, ""
}

// parseDenyPaths reads deny_path: [paths...] (absolute).
func parseDenyPaths(raw []byte) ([]deniedPath, string) {
	var v any
	if err := msgpack.Unmarshal(raw, &v); err != nil {
		return nil, "deny_path: " + err.Error()
	}
	list, ok := v.([]any)
	if !ok {
		return nil, "deny_path must be a list of paths"
	}
	var out []deniedPath
	for _, x := range list {
		s, ok := x.(string)
		if !ok || !strings.HasPrefix(s, "/") {
			return nil, fmt.Sprintf("deny_path: %v is not an absolute path", x)
		}
		d := deniedPath{path: path.Clean(s)}
		var st unix.Stat_t
		if unix.Stat(d.path, &st) == nil {
			d.dev, d.ino = st.Dev, st.Ino
		}
		out = append(out, d)
	}
	return out, ""
}

func beneath(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// pathRefused: the copied path (made absolute) is a denied one or beneath one.
func (r *hostRun) pathRefused(ev *supervise.Event) (syscall.Errno, string) {
	if ev.HasPath && ev.Syscall != "symlink" && ev.Syscall != "symlinkat" { // a symlink's target is no name it resolves
		if e, why := r.onePathRefused(ev, ev.Path); e != 0 {
			return e, why
		}
	}
	if ev.HasPath2 {
		return r.onePathRefused(ev, ev.Path2)
	}
	return 0, ""
}

func (r *hostRun) onePathRefused(ev *supervise.Event, p string) (syscall.Errno, string) {
	r.mu.Lock()
	denied := r.denied
	r.mu.Unlock()
	if len(denied) == 0 {
		return 0, ""
	}
	orig := p
	if !strings.HasPrefix(p, "/") {
		cwd, err := os.Readlink("/proc/" + strconv.Itoa(int(ev.Tid)) + "/cwd")
		if err != nil {
			return unix.EACCES, "deny_path: the caller's cwd: " + err.Error()
		}
		p = cwd + "/" + p
	}
	p = path.Clean(p)
	for _, d := range denied {
		if beneath(p, d.path) {
			return unix.EACCES, fmt.Sprintf("%s %s (deny_path %s)", ev.Syscall, orig, d.path)
		}
	}
	return 0, ""
}

// DeniedFile (supervise.PathDenier): the file the supervisor opened or acts in for
// the run, named p by the kernel, with identity (dev, ino).
func (r *hostRun) DeniedFile(p string, dev, ino uint64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.denied {
		if beneath(p, d.path) || d.ino != 0 && d.dev == dev && d.ino == ino {
			return "deny_path " + d.path
		}
	}
	return ""
}

// HasDenied (supervise.PathDenier).
func (r *hostRun) HasDenied() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.denied) > 0
}

func (r *hostRun) closePidNets() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pidNets {
		unix.Close(p.pidfd)
	}
	r.pidNets = nil
}
