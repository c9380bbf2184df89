// Package spawn starts one confined child: clone(CLONE_VM|CLONE_VFORK) from C, every
// confinement step applied in the child, then sandtrap-init (init/init.c, embedded
// and run from a sealed memfd) as pid 1, which applies RLIMIT_AS and seccomp last
// and runs the target as pid 2. The host is never forked.
package spawn

/*
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include "launch.h"
*/
import "C"

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

//go:embed sandtrap-init
var initImage []byte

// Rlimit is one resource limit to set in the child.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Spec is everything the child needs. All fds must be open in the host and >= 10.
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
	SetIDs     bool
	UID, GID   uint32
	DropCaps   bool
	NoNewPrivs bool
	LandlockFD int // -1: none
	Config     *Config
	StatusFD   int // write end of the status pipe
}

// Process is a started sandtrap-init.
type Process struct {
	Pid   int
	PidFD int
}

// Stage names, indexed by enum st_stage.
var stageNames = []string{"none", "clone", "signals", "setsid", "pdeathsig", "cgroup",
	"rlimit", "ids", "chdir", "stdio", "capabilities", "no_new_privs", "landlock",
	"close_fds", "exec"}

// Error is a failure in the child before sandtrap-init ran.
type Error struct {
	Stage string
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Stage, e.Errno.Error()) }
func (e *Error) Unwrap() error { return e.Errno }

var (
	initOnce sync.Once
	initFD   = -1
	initErr  error
)

// HighFD moves fd to >= 10 (close-on-exec) so the child's dup2 onto 0..5 never
// clobbers a source.
func HighFD(fd int) (int, error) {
	if fd >= 10 {
		return fd, nil
	}
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
	unix.Close(fd)
	if err != nil {
		return -1, err
	}
	return n, nil
}

// sealedMemfd returns a read-only, sealed memfd holding data.
func sealedMemfd(name string, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	for off := 0; off < len(data); {
		n, err := unix.Write(fd, data[off:])
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealing memfd: %w", err)
	}
	return HighFD(fd)
}

// Ready prepares the init image; call it before confining the host (which may
// forbid memfd_create).
func Ready() error {
	initOnce.Do(func() { initFD, initErr = sealedMemfd("sandtrap-init", initImage) })
	return initErr
}

// Config is what sandtrap-init applies last: RLIMIT_AS and the seccomp filter.
// One sealed memfd per sandbox, shared by all its runs.
type Config struct{ FD int }

const configMagic = 0x31304e49545453

// NewConfig writes a config; asLimit 0 means no RLIMIT_AS, bpf nil no seccomp.
func NewConfig(asLimit uint64, bpf []byte) (*Config, error) {
	hdr := make([]byte, 40, 40+len(bpf))
	binary.LittleEndian.PutUint64(hdr[0:], configMagic)
	if asLimit > 0 {
		binary.LittleEndian.PutUint64(hdr[8:], 1)
		binary.LittleEndian.PutUint64(hdr[16:], asLimit)
		binary.LittleEndian.PutUint64(hdr[24:], asLimit)
	}
	binary.LittleEndian.PutUint64(hdr[32:], uint64(len(bpf)/8))
	fd, err := sealedMemfd("sandtrap-config", append(hdr, bpf...))
	if err != nil {
		return nil, err
	}
	return &Config{FD: fd}, nil
}

// Close releases the config.
func (c *Config) Close() {
	if c != nil && c.FD >= 0 {
		unix.Close(c.FD)
		c.FD = -1
	}
}

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

// Start launches sandtrap-init, which then runs the target.
func Start(s *Spec) (*Process, error) {
	if err := Ready(); err != nil {
		return nil, err
	}
	if len(s.CgroupFDs) > C.ST_MAX_CGROUP_FDS || len(s.Rlimits) > C.ST_MAX_RLIMITS || s.Config == nil {
		return nil, fmt.Errorf("BUG(spawn): bad spec")
	}
	var l C.struct_st_launch
	argv, freeArgv := cStrings(append([]string{"sandtrap-init", s.Path}, s.Argv...))
	defer freeArgv()
	l.init_argv = argv
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
	l.init_fd = C.int(initFD)
	l.config_fd = C.int(s.Config.FD)
	l.status_fd = C.int(s.StatusFD)
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
	l.set_ids = cbool(s.SetIDs)
	l.uid = C.uint32_t(s.UID)
	l.gid = C.uint32_t(s.GID)
	l.drop_caps = cbool(s.DropCaps)
	l.no_new_privs = cbool(s.NoNewPrivs)
	l.landlock_fd = C.int(s.LandlockFD)
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

// Status is what sandtrap-init reported about the target.
type Status struct {
	ExecErrno  unix.Errno // the target could not be exec'd
	InitFailed string     // init could not apply its part ("rlimit_as", "seccomp", "config", "fork")
	InitErrno  unix.Errno
	Ended      bool
	Wait       unix.WaitStatus
}

// ReadStatus decodes the status records init wrote (8 bytes each).
func ReadStatus(b []byte) Status {
	var st Status
	for len(b) >= 8 {
		kind := binary.LittleEndian.Uint32(b)
		val := binary.LittleEndian.Uint32(b[4:])
		switch kind {
		case 'E':
			st.ExecErrno = unix.Errno(val)
		case 'X':
			st.Ended, st.Wait = true, unix.WaitStatus(val)
		case 'A':
			st.InitFailed, st.InitErrno = "rlimit_as", unix.Errno(val)
		case 'S':
			st.InitFailed, st.InitErrno = "seccomp", unix.Errno(val)
		case 'C':
			st.InitFailed, st.InitErrno = "config", unix.Errno(val)
		case 'F':
			st.InitFailed, st.InitErrno = "fork", unix.Errno(val)
		}
		b = b[8:]
	}
	return st
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
