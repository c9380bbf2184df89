// Package spawn starts confined processes without ever forking the host.
//
// Each sandbox gets a zygote: sandtrap-init (init/init.c, embedded, run from a
// sealed memfd), started once by clone(CLONE_VM|CLONE_VFORK) from C with every
// confinement step that survives execve applied in the child. The zygote applies
// RLIMIT_AS and the seccomp filter once, then forks one pid 1 per run on request;
// pid 1 starts the target. Runs therefore inherit the filter instead of loading it
// (a load costs ~3 us per BPF instruction on this kind of machine).
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
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

//go:embed sandtrap-init
var initImage []byte

// Rlimit is one resource limit.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Stage names, indexed by enum st_stage.
var stageNames = []string{"none", "clone", "signals", "setsid", "pdeathsig", "cgroup",
	"rlimit", "ids", "chdir", "stdio", "capabilities", "no_new_privs", "landlock",
	"close_fds", "exec"}

// Error is a failure while starting a zygote (in the child, before sandtrap-init).
type Error struct {
	Stage string
	Errno unix.Errno
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Stage, e.Errno.Error()) }
func (e *Error) Unwrap() error { return e.Errno }

// highFD moves fd to >= 10 (close-on-exec) so that a child placing fds on 0..5
// never clobbers a source.
func highFD(fd int) (int, error) {
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
	return highFD(fd)
}

var (
	initOnce sync.Once
	initFD   = -1
	initErr  error
	nullFD   = -1
)

// Ready prepares the init image and the spawner thread; call it before confining
// the host (which may forbid memfd_create).
func Ready() error {
	initOnce.Do(func() {
		initFD, initErr = sealedMemfd("sandtrap-init", initImage)
		if initErr != nil {
			return
		}
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			nullFD, err = highFD(fd)
		}
		if err != nil {
			initErr = fmt.Errorf("/dev/null: %w", err)
			return
		}
		spawner = make(chan func())
		go func() {
			// Zygotes die with the thread that started them (PR_SET_PDEATHSIG):
			// start them all from this one, which lives as long as the host.
			runtime.LockOSThread()
			for f := range spawner {
				f()
			}
		}()
	})
	return initErr
}

var spawner chan func()

// Zygote config flags (struct config in init.c).
const (
	cfRlimitAS  = 1
	cfNewPid    = 2
	cfNewUser   = 4
	configMagic = 0x31304e49545453
	reqMagic    = 0x51525453
)

// ZygoteSpec is the confinement shared by every run of a sandbox.
type ZygoteSpec struct {
	NewPidNS   bool
	NewUserNS  bool
	Rlimits    []Rlimit
	DropCaps   bool
	KeepCaps   uint64 // what pid 1 of each run still needs before dropping everything
	LandlockFD int    // -1: none
	ASLimit    uint64 // 0: no RLIMIT_AS
	BPF        []byte // nil: no seccomp
	Cookie     uint64 // lets the zygote's clone through the filter
	CgroupFDs  []int  // cgroup.procs files the zygote joins (runs are born inside)
}

// Zygote serves the runs of one sandbox.
type Zygote struct {
	mu     sync.Mutex
	ctl    int
	pid    int
	pidfd  int
	closed bool
}

// StartZygote launches a zygote.
func StartZygote(zs *ZygoteSpec) (*Zygote, error) {
	if err := Ready(); err != nil {
		return nil, err
	}
	if len(zs.Rlimits) > C.ST_MAX_RLIMITS {
		return nil, errors.New("BUG(spawn): too many rlimits")
	}
	hdr := make([]byte, 48, 48+len(zs.BPF))
	var flags uint64
	if zs.ASLimit > 0 {
		flags |= cfRlimitAS
		binary.LittleEndian.PutUint64(hdr[16:], zs.ASLimit)
		binary.LittleEndian.PutUint64(hdr[24:], zs.ASLimit)
	}
	if zs.NewPidNS {
		flags |= cfNewPid
	}
	if zs.NewUserNS {
		flags |= cfNewUser
	}
	binary.LittleEndian.PutUint64(hdr[0:], configMagic)
	binary.LittleEndian.PutUint64(hdr[8:], flags)
	binary.LittleEndian.PutUint64(hdr[32:], zs.Cookie)
	binary.LittleEndian.PutUint64(hdr[40:], uint64(len(zs.BPF)/8))
	cfg, err := sealedMemfd("sandtrap-config", append(hdr, zs.BPF...))
	if err != nil {
		return nil, err
	}
	defer unix.Close(cfg)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, err1 := highFD(pair[0])
	theirs, err2 := highFD(pair[1])
	if err1 != nil || err2 != nil {
		return nil, errors.New("socketpair: cannot move fds")
	}
	defer unix.Close(theirs)
	unix.SetsockoptInt(ours, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20) // root only; else the default applies

	var l C.struct_st_launch
	argv, freeArgv := cStrings([]string{"sandtrap-init"})
	defer freeArgv()
	env, freeEnv := cStrings(nil)
	defer freeEnv()
	l.init_argv, l.envp = argv, env
	l.stdio = [3]C.int{C.int(nullFD), C.int(nullFD), C.int(nullFD)}
	l.init_fd, l.config_fd, l.control_fd = C.int(initFD), C.int(cfg), C.int(theirs)
	for i, r := range zs.Rlimits {
		l.rl_resource[i] = C.int(r.Resource)
		l.rl_value[i].rlim_cur = C.rlim_t(r.Cur)
		l.rl_value[i].rlim_max = C.rlim_t(r.Max)
	}
	l.n_rlimits = C.int(len(zs.Rlimits))
	if len(zs.CgroupFDs) > C.ST_MAX_CGROUP_FDS {
		return nil, errors.New("BUG(spawn): too many cgroups")
	}
	for i, fd := range zs.CgroupFDs {
		l.cgroup_fds[i] = C.int(fd)
	}
	l.n_cgroup_fds = C.int(len(zs.CgroupFDs))
	l.drop_caps = cbool(zs.DropCaps)
	l.keep_caps = C.uint64_t(zs.KeepCaps)
	l.no_new_privs = 1
	l.landlock_fd = C.int(zs.LandlockFD)
	done := make(chan C.int)
	spawner <- func() { done <- C.st_launch(&l) }
	if <-done != 0 {
		unix.Close(ours)
		st := int(l.err_stage)
		name := "unknown"
		if st >= 0 && st < len(stageNames) {
			name = stageNames[st]
		}
		return nil, &Error{Stage: name, Errno: unix.Errno(l.err_errno)}
	}
	return &Zygote{ctl: ours, pid: int(l.pid), pidfd: int(l.pidfd)}, nil
}

// Close stops the zygote (runs must be over).
func (z *Zygote) Close() {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return
	}
	z.closed = true
	unix.Close(z.ctl)
	unix.PidfdSendSignal(z.pidfd, unix.SIGKILL, nil, 0)
	var ws unix.WaitStatus
	unix.Wait4(z.pid, &ws, unix.WALL, nil)
	unix.Close(z.pidfd)
}

// RunSpec is one run. All fds stay owned by the caller.
type RunSpec struct {
	Path      string
	Argv, Env []string
	Dir       string
	Stdio     [3]int
	StatusFD  int
	CgroupFDs []int
	SetIDs    bool
	UID, GID  uint32
	CPUSecs   uint32 // RLIMIT_CPU of the run (0: none)
	NProc     uint32 // RLIMIT_NPROC of the run (0: none)
}

// Process is a run's pid 1.
type Process struct {
	Pid   int
	PidFD int
}

// ErrZygoteGone means the zygote died; start a new one.
var ErrZygoteGone = errors.New("sandbox zygote is gone")

// Spawn asks the zygote for a run.
func (z *Zygote) Spawn(r *RunSpec) (*Process, error) {
	var msg []byte
	hdr := make([]byte, 40)
	binary.LittleEndian.PutUint32(hdr[0:], reqMagic)
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(r.Argv)))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(len(r.Env)))
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(r.CgroupFDs)))
	if r.SetIDs {
		binary.LittleEndian.PutUint32(hdr[16:], r.UID)
		binary.LittleEndian.PutUint32(hdr[20:], r.GID)
		binary.LittleEndian.PutUint32(hdr[24:], 1)
	}
	binary.LittleEndian.PutUint32(hdr[28:], r.CPUSecs)
	binary.LittleEndian.PutUint32(hdr[32:], r.NProc)
	msg = append(msg, hdr...)
	for _, s := range append(append([]string{r.Path, r.Dir}, r.Argv...), r.Env...) {
		msg = append(append(msg, s...), 0)
	}
	fds := append([]int{r.Stdio[0], r.Stdio[1], r.Stdio[2], r.StatusFD}, r.CgroupFDs...)
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.closed {
		return nil, ErrZygoteGone
	}
	if err := unix.Sendmsg(z.ctl, msg, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		if err == unix.EMSGSIZE || err == unix.ENOBUFS {
			return nil, fmt.Errorf("argv and environment take %d bytes, more than a run request can carry here; pass large data on stdin", len(msg))
		}
		return nil, ErrZygoteGone
	}
	reply := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(z.ctl, reply, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 8 {
			return nil, ErrZygoteGone
		}
		pid := int(int32(binary.LittleEndian.Uint32(reply)))
		e := int(int32(binary.LittleEndian.Uint32(reply[4:])))
		if e != 0 {
			return nil, &Error{Stage: "zygote", Errno: unix.Errno(-e)}
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return nil, errors.New("BUG(spawn): zygote reply without a pidfd")
		}
		got, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(got) != 1 {
			return nil, errors.New("BUG(spawn): zygote reply without a pidfd")
		}
		return &Process{Pid: pid, PidFD: got[0]}, nil
	}
}

// Status is what a run's pid 1 reported.
type Status struct {
	ExecErrno  unix.Errno // the target could not be exec'd
	InitFailed string     // pid 1 could not apply its part
	Ended      bool
	Wait       unix.WaitStatus
	UserMicros uint64
	SysMicros  uint64
	MaxRSSKiB  uint64
	HasUsage   bool
}

var initSteps = map[uint32]string{'G': "joining the cgroup", 'U': "switching user", 'P': "dropping capabilities", 'D': "entering cwd", 'F': "forking the target"}

// ReadStatus decodes the status records (32 bytes each).
func ReadStatus(b []byte) Status {
	var st Status
	for len(b) >= 32 {
		kind := binary.LittleEndian.Uint32(b)
		val := binary.LittleEndian.Uint32(b[4:])
		a, bb, c := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:])
		switch kind {
		case 'E':
			st.ExecErrno = unix.Errno(val)
		case 'X':
			st.Ended, st.Wait = true, unix.WaitStatus(val)
		case 'R':
			st.UserMicros, st.SysMicros, st.MaxRSSKiB, st.HasUsage = a, bb, c, true
		case 'I':
			st.InitFailed = initSteps[val]
			if st.InitFailed == "" {
				st.InitFailed = "setup"
			}
		}
		b = b[32:]
	}
	return st
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

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
