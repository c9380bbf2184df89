// Package spawn starts one confined child: clone(CLONE_VM|CLONE_VFORK) from C, every
// confinement step applied in the child before execve, the host never forked.
package spawn

/*
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include "launch.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Rlimit is one resource limit to set in the child.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Spec is everything the child needs; all fds must be >= 3 and open in the host.
type Spec struct {
	Path       string
	Argv       []string
	Env        []string
	Dir        string
	Stdio      [3]int
	NewPidNS   bool
	NewUserNS  bool
	CgroupFDs  []int
	Rlimits    []Rlimit
	RlimitAS   *Rlimit
	SetIDs     bool
	UID, GID   uint32
	DropCaps   bool
	NoNewPrivs bool
	LandlockFD int // -1: none
	BPF        []byte
}

// Process is a started child.
type Process struct {
	Pid   int
	PidFD int
}

// Stage names, indexed by enum st_stage.
var stageNames = []string{"none", "clone", "signals", "setsid", "pdeathsig", "cgroup",
	"rlimit", "ids", "chdir", "stdio", "capabilities", "no_new_privs", "landlock",
	"close_fds", "rlimit_as", "seccomp", "exec"}

// Error is a failure in the child before the target ran.
type Error struct {
	Stage string
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Stage, e.Errno.Error()) }
func (e *Error) Unwrap() error { return e.Errno }

func cStrings(ss []string) (**C.char, func()) {
	arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	view := unsafe.Slice(arr, len(ss)+1)
	for i, s := range ss {
		view[i] = C.CString(s)
	}
	return arr, func() {
		for i := range ss {
			C.free(unsafe.Pointer(view[i]))
		}
		C.free(unsafe.Pointer(arr))
	}
}

// Start launches the child. On success the target program is running.
func Start(s *Spec) (*Process, error) {
	if len(s.CgroupFDs) > C.ST_MAX_CGROUP_FDS || len(s.Rlimits) > C.ST_MAX_RLIMITS {
		return nil, fmt.Errorf("BUG(spawn): too many cgroups or rlimits")
	}
	var l C.struct_st_launch
	path := C.CString(s.Path)
	defer C.free(unsafe.Pointer(path))
	l.path = path
	argv, freeArgv := cStrings(s.Argv)
	defer freeArgv()
	l.argv = argv
	envp, freeEnv := cStrings(s.Env)
	defer freeEnv()
	l.envp = envp
	if s.Dir != "" {
		dir := C.CString(s.Dir)
		defer C.free(unsafe.Pointer(dir))
		l.cwd = dir
	}
	for i := 0; i < 3; i++ {
		l.stdio[i] = C.int(s.Stdio[i])
	}
	l.new_pid_ns = cbool(s.NewPidNS)
	l.new_user_ns = cbool(s.NewUserNS)
	for i, fd := range s.CgroupFDs {
		l.cgroup_fds[i] = C.int(fd)
	}
	l.n_cgroup_fds = C.int(len(s.CgroupFDs))
	for i, r := range s.Rlimits {
		l.rl_resource[i] = C.int(r.Resource)
		l.rl_value[i].rlim_cur = C.rlim_t(r.Cur)
		l.rl_value[i].rlim_max = C.rlim_t(r.Max)
	}
	l.n_rlimits = C.int(len(s.Rlimits))
	if s.RlimitAS != nil {
		l.has_rlimit_as = 1
		l.rlimit_as.rlim_cur = C.rlim_t(s.RlimitAS.Cur)
		l.rlimit_as.rlim_max = C.rlim_t(s.RlimitAS.Max)
	}
	l.set_ids = cbool(s.SetIDs)
	l.uid = C.uint32_t(s.UID)
	l.gid = C.uint32_t(s.GID)
	l.drop_caps = cbool(s.DropCaps)
	l.no_new_privs = cbool(s.NoNewPrivs)
	l.landlock_fd = C.int(s.LandlockFD)
	if len(s.BPF) > 0 {
		bpf := C.CBytes(s.BPF)
		defer C.free(bpf)
		l.bpf = bpf
		l.bpf_len = C.uint16_t(len(s.BPF) / 8)
	}
	if C.st_launch(&l) != 0 {
		st := int(l.err_stage)
		name := "unknown"
		if st >= 0 && st < len(stageNames) {
			name = stageNames[st]
		}
		return nil, &Error{Stage: name, Errno: unix.Errno(l.err_errno)}
	}
	return &Process{Pid: int(l.pid), PidFD: int(l.pidfd)}, nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
