// Package confine restricts the calling process itself, for good: no_new_privs and a
// Landlock domain on every thread (through psx, which reaches threads the host
// created too), and optionally the seccomp filter synchronised to every thread.
package confine

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"github.com/sandtrap/sandtrap/core/kernel"
	"golang.org/x/sys/unix"
)

// Plan is what to apply: a built ruleset fd (-1: none) and a BPF program (nil: none).
type Plan struct {
	LandlockFD int
	BPF        []byte
	// BlocksNamespaces: the filter refuses new namespaces (the sandbox's full one)
	BlocksNamespaces bool
}

// Apply confines every thread of the process. It refuses, touching nothing, when
// /proc/self/task is unreadable: psx would otherwise kill the whole host.
func Apply(p Plan) error {
	if err := Check(p, nil); err != nil {
		return err
	}
	if err := ll.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if p.LandlockFD >= 0 {
		if err := ll.AllThreadsLandlockRestrictSelf(p.LandlockFD, 0); err != nil {
			return fmt.Errorf("landlock_restrict_self: %w", err)
		}
	}
	if p.BPF != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		prog := unix.SockFprog{Len: uint16(len(p.BPF) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&p.BPF[0]))}
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
		runtime.KeepAlive(p.BPF)
		if errno != 0 {
			return fmt.Errorf("seccomp (tsync): %w", errno)
		}
		if p.BlocksNamespaces {
			// later runs must not ask for a pid namespace
			kernel.MarkSeccompConfined()
		}
	}
	return nil
}

// Check reports whether Apply can proceed, without changing anything: every
// thread reachable, and no child process but those in own (which the caller
// stops) — a child keeps running unconfined, with whatever it holds open.
func Check(p Plan, own map[int]bool) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("refusing to confine: /proc/self/task is unreadable (%v); psx cannot reach every thread", err)
	}
	if p.LandlockFD < 0 && p.BPF == nil {
		return fmt.Errorf("nothing to confine with")
	}
	var kids []string
	for _, t := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || own[pid] || zombie(pid) {
				continue
			}
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			kids = append(kids, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
		}
	}
	if len(kids) > 0 {
		return fmt.Errorf("refusing to confine: this process has child processes that would stay unconfined, "+
			"with everything they hold open: %s; confine() before starting them (or end them first)", strings.Join(kids, ", "))
	}
	return nil
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // gone
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}
