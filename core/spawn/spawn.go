// Package spawn starts confined processes without ever forking the host.
//
// Each sandbox gets a zygote: sandtrap-init (init/init.c, embedded, run from a
// sealed memfd), started once by clone(CLONE_VM|CLONE_VFORK) from C (launch.c),
// in the sandbox's own user and mount namespaces with its view of the filesystem
// laid out and every confinement step that survives execve applied in the child.
// The zygote applies RLIMIT_AS and the seccomp filter once, then starts one pid 1
// per run on request; pid 1 enters the Landlock ruleset and starts the target.
// Runs therefore inherit the filter instead of loading it (a load costs ~3 us per
// BPF instruction on this kind of machine). The engine and sandtrap-init speak
// the protocol of wire.h, the one definition both sides compile.
package spawn

/*
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include <string.h>
#include "launch.h"
#include "wire.h"
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/landlock"
	"golang.org/x/sys/unix"
)

//go:embed sandtrap-init
var initImage []byte

// Rlimit is one resource limit.
type Rlimit struct {
	Resource int
	Cur, Max uint64
}

// Sysctl is a value written in the sandbox's user namespace (/proc/sys/user/...).
type Sysctl struct {
	Path, Value string
}

// Stage is where starting a zygote or a run failed: a step of the launcher
// (launch.h's enum st_stage), the zygote (sandtrap-init: Error.Step says which of
// its steps) or the target's execve.
type Stage string

// The stages.
const (
	StageClone      Stage = "clone"
	StageSetsid     Stage = "setsid"
	StageCgroup     Stage = "cgroup"
	StageRlimit     Stage = "rlimit"
	StageIDs        Stage = "ids"
	StageShares     Stage = "shares"
	StageUserNS     Stage = "user_namespace"
	StageSysctl     Stage = "sysctl"
	StageUTS        Stage = "uts_namespace"
	StageView       Stage = "view"
	StageCaps       Stage = "capabilities"
	StageNoNewPrivs Stage = "no_new_privs"
	StageProcess    Stage = "process" // the personality and the CPU affinity of the policy
	StagePdeathsig  Stage = "pdeathsig"
	StageStdio      Stage = "stdio"
	StageCloseFDs   Stage = "close_fds"
	StageExec       Stage = "exec"
	StageZygote     Stage = "zygote" // sandtrap-init's answer (Error.Step)
	StageUnknown    Stage = "unknown"
)

// launcherStages are the launcher's stages, indexed by enum st_stage.
var launcherStages = map[C.int]Stage{
	C.ST_STAGE_CLONE: StageClone, C.ST_STAGE_SETSID: StageSetsid,
	C.ST_STAGE_CGROUP: StageCgroup, C.ST_STAGE_RLIMIT: StageRlimit, C.ST_STAGE_IDS: StageIDs, C.ST_STAGE_SHARES: StageShares,
	C.ST_STAGE_USERNS: StageUserNS, C.ST_STAGE_SYSCTL: StageSysctl, C.ST_STAGE_UTS: StageUTS, C.ST_STAGE_VIEW: StageView,
	C.ST_STAGE_CAPS: StageCaps, C.ST_STAGE_NO_NEW_PRIVS: StageNoNewPrivs, C.ST_STAGE_PROCESS: StageProcess,
	C.ST_STAGE_PDEATHSIG: StagePdeathsig, C.ST_STAGE_STDIO: StageStdio, C.ST_STAGE_CLOSE_FDS: StageCloseFDs,
	C.ST_STAGE_EXEC: StageExec,
}

// Protection reports whether a failure at s means a protection could not be
// applied (isolation unavailable) rather than the spawn failing.
func (s Stage) Protection() bool {
	switch s {
	case StageCaps, StageNoNewPrivs, StageCgroup, StageIDs, StageUserNS, StageSysctl, StageUTS, StageView, StagePdeathsig:
		return true
	}
	return false
}

// Step is a step of sandtrap-init that failed (wire.h's ST_STEP_*): the zygote's,
// or pid 1's of a run.
type Step uint32

// The steps whose failure the engine tells apart.
const (
	StepNone     Step = 0
	StepSeccomp  Step = C.ST_STEP_SECCOMP
	StepSpare    Step = C.ST_STEP_SPARE
	StepLandlock Step = C.ST_STEP_LANDLOCK
)

var stepNames = map[Step]string{C.ST_STEP_CONFIG: "reading its configuration", C.ST_STEP_RLIMIT_AS: "setting RLIMIT_AS",
	C.ST_STEP_DUMPABLE: "making itself non-dumpable", C.ST_STEP_THP: "turning transparent huge pages off", C.ST_STEP_SECCOMP: "loading the seccomp filter",
	C.ST_STEP_SIGCHLD: "setting its SIGCHLD disposition", C.ST_STEP_SPARE: "making the next run's pid 1",
	C.ST_STEP_REQUEST: "reading the run request",
	C.ST_STEP_PROC:    "mounting its /proc", C.ST_STEP_LANDLOCK: "entering the Landlock ruleset",
	C.ST_STEP_CAPS: "dropping capabilities", C.ST_STEP_CWD: "entering cwd", C.ST_STEP_FORK: "forking the target",
	C.ST_STEP_RLIMIT: "setting the run's rlimits", C.ST_STEP_STDIO: "placing stdio", C.ST_STEP_IDS: "switching user",
	C.ST_STEP_PDEATHSIG: "setting its parent-death signal", C.ST_STEP_SETSID: "making its session",
	C.ST_STEP_COW: "mounting its copy-on-write workdir", C.ST_STEP_DEV: "mounting its /dev/pts and /dev/shm"}

func (s Step) String() string {
	if n, ok := stepNames[s]; ok {
		return n
	}
	return fmt.Sprintf("step %d", uint32(s))
}

// Protection reports whether a failure of s means a protection could not be
// applied (the zygote's own confinement, or pid 1's).
func (s Step) Protection() bool {
	switch s {
	case C.ST_STEP_CONFIG, C.ST_STEP_SPARE, C.ST_STEP_REQUEST, C.ST_STEP_CWD, C.ST_STEP_FORK, C.ST_STEP_STDIO:
		return false
	}
	return s != StepNone
}

// Error is a failure while starting a zygote (in the child, before sandtrap-init,
// or sandtrap-init confining itself) or a run (the zygote's answer).
type Error struct {
	Stage Stage
	Step  Step // with StageZygote: the step of sandtrap-init that failed
	Errno unix.Errno
	Op    string // the view's failing mount operation, or the zygote's step
}

// Protection reports whether the failure means a protection could not be applied.
func (e *Error) Protection() bool {
	if e.Stage == StageZygote {
		return e.Step.Protection()
	}
	return e.Stage.Protection()
}

func (e *Error) Error() string {
	if e.Op != "" {
		return fmt.Sprintf("%s (%s): %s", e.Stage, e.Op, e.Errno.Error())
	}
	return fmt.Sprintf("%s: %s", e.Stage, e.Errno.Error())
}
func (e *Error) Unwrap() error { return e.Errno }

// highFD moves fd to >= 10 (close-on-exec) so that a child placing fds on 0..6
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

// ZygoteSpec is the confinement shared by every run of a sandbox.
type ZygoteSpec struct {
	Rlimits   []Rlimit
	Shares    []Rlimit // set before the user namespace: its share of the host user's budgets
	CgroupFDs []int    // cgroup.procs files the zygote joins (runs are born inside)

	DropGroups bool // no supplementary groups (root hosts)

	// UserNS: the zygote's own user and mount namespaces, its uid and gid mapped
	// to themselves (unless Unmapped), with these limits; MountNS (root): a mount
	// namespace alone. Either holds View.
	UserNS   bool
	Unmapped bool
	MountNS  bool
	Sysctls  []Sysctl
	View     *fsview.Plan

	Hostname string // non-empty: the zygote's own UTS namespace with this hostname

	// Process knobs every process of the sandbox inherits: Personality (when
	// SetPersonality, e.g. ADDR_NO_RANDOMIZE), NoTHP (PR_SET_THP_DISABLE), CPUs
	// (the affinity; nil: unchanged).
	SetPersonality bool
	Personality    uint32
	NoTHP          bool
	// CPUInfo, with a proc of each run's own (View.ProcOwn): the file pid 1 lays
	// over /proc/cpuinfo, that very inode (num_cpus)
	CPUInfo *FileInode
	CPUs    []int

	KeepCaps uint64 // capabilities (in the sandbox's user namespace) pid 1 of each run still needs

	SetIDs    bool // pid 1 becomes UID/GID (needs a zygote holding CAP_SETUID/CAP_SETGID)
	UID, GID  uint32
	RulesetFD int // -1: none; else the Landlock ruleset pid 1 of every run enters
	// Landlock, when set, is the ruleset as data, from which pid 1 of every run
	// builds its own, adding ProcRights for its /proc (View.ProcOwn); LandlockFDs
	// are O_PATH fds (>= 10) of its paths, in order, which the zygote holds.
	Landlock    *landlock.Table
	LandlockFDs []int
	ProcRights  uint64
	ASLimit     uint64 // 0: no RLIMIT_AS
	BPF         []byte // nil: no seccomp
	Listener    bool   // load BPF with a user-notification listener (Zygote.Listener)
	// Killable: with Listener, a trapped call the supervisor received waits for its
	// answer through signals (only a fatal one ends it): a call performed for the
	// caller is then never also restarted by it.
	Killable bool
	Cookie   uint64 // lets the zygote's clone and pid 1's proc mount through the filter
	NewPidNS bool
	NewIPCNS bool
	// Dev, when set, gives every run a /dev/pts and a /dev/shm of its own (a
	// chroot's /dev, View.DevOwn).
	Dev *Dev
	// COW, when set, makes every run see Workdir copy-on-write (wire.h's st_cow;
	// core/fsview/cow.go reads and applies what a run changed).
	COW *COW
}

// Dev is what pid 1 of every run mounts in a chroot's /dev: a devpts instance
// on /dev/pts and a tmpfs of ShmSize bytes on /dev/shm; with a Landlock table,
// the rules it adds on /dev (DirRights: listing it), /dev/pts and /dev/shm.
type Dev struct {
	ShmSize                         uint64
	DirRights, PtsRights, ShmRights uint64
}

// FileInode is a file by path and the inode it must be (its st_dev, st_ino).
type FileInode struct {
	Path     string
	Dev, Ino uint64
}

// COW is the copy-on-write workdir of every run of a zygote.
type COW struct {
	Workdir   string
	Size      uint64 // bytes of the run's upper layer (a tmpfs); 0: tmpfs's default
	UserXattr bool   // the overlay's own xattrs in user.overlay.* (the sandbox's user namespace)
	Rules     []COWRule
	// Storage ("": none) is a directory (fs_storage, writable in the view)
	// where each run's upper layer is made on disk, in a directory layer-<hex>
	// of its own, instead of a tmpfs.
	Storage string
}

// COWRule is a Landlock rule pid 1 adds on the overlay: Rel is relative to the
// workdir ("" for the workdir itself).
type COWRule struct {
	Rel    string
	Rights uint64
}

// Zygote serves the runs of one sandbox.
type Zygote struct {
	mu       sync.Mutex
	ctl      int
	pid      int
	pidfd    int
	closed   bool
	onClose  []func()
	cow      bool // its runs take a 5th fd (RunSpec.COWSock)
	Listener int  // the seccomp user-notification fd (-1: none); the caller owns it
}

func mountKind(k fsview.Kind) C.int {
	switch k {
	case fsview.Private:
		return C.ST_MOUNT_PRIVATE
	case fsview.Clone:
		return C.ST_MOUNT_CLONE
	case fsview.SetAttr:
		return C.ST_MOUNT_SETATTR
	case fsview.Move:
		return C.ST_MOUNT_MOVE
	case fsview.Tmpfs:
		return C.ST_MOUNT_TMPFS
	case fsview.File:
		return C.ST_MOUNT_FILE
	case fsview.Symlink:
		return C.ST_MOUNT_SYMLINK
	case fsview.Pivot:
		return C.ST_MOUNT_PIVOT
	case fsview.Dir:
		return C.ST_MOUNT_DIR
	}
	return 0
}

// cAlloc keeps C allocations until free.
type cAlloc []unsafe.Pointer

func (a *cAlloc) str(s string) *C.char {
	p := C.CString(s)
	*a = append(*a, unsafe.Pointer(p))
	return p
}

func (a *cAlloc) strs(ss []string) **C.char {
	arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof(uintptr(0)))))
	*a = append(*a, unsafe.Pointer(arr))
	view := unsafe.Slice(arr, len(ss)+1)
	for i, s := range ss {
		view[i] = a.str(s)
	}
	return arr
}

func (a *cAlloc) free() {
	for _, p := range *a {
		C.free(p)
	}
	*a = nil
}

// StartZygote launches a zygote and waits until it is confined.
func StartZygote(zs *ZygoteSpec) (*Zygote, error) {
	if err := Ready(); err != nil {
		return nil, err
	}
	if len(zs.Rlimits) > C.ST_MAX_RLIMITS || len(zs.Shares) > C.ST_MAX_RLIMITS || len(zs.CgroupFDs) > C.ST_MAX_CGROUP_FDS || len(zs.Sysctls) > C.ST_MAX_SYSCTLS {
		return nil, errors.New("BUG(spawn): too many rlimits, cgroups or sysctls")
	}
	if len(zs.BPF)%8 != 0 || len(zs.BPF)/8 > C.ST_MAX_BPF {
		return nil, fmt.Errorf("BUG(spawn): a %d-byte filter", len(zs.BPF))
	}
	var cfg C.struct_st_config
	cfg.magic = C.ST_CONFIG_MAGIC
	if zs.ASLimit > 0 {
		cfg.flags |= C.ST_CF_RLIMIT_AS
		cfg.as_limit = C.__u64(zs.ASLimit)
	}
	for _, f := range []struct {
		on   bool
		flag C.__u64
	}{{zs.NewPidNS, C.ST_CF_NEWPID}, {zs.NewIPCNS, C.ST_CF_NEWIPC}, {zs.RulesetFD >= 0, C.ST_CF_LANDLOCK},
		{zs.Listener && len(zs.BPF) > 0, C.ST_CF_LISTENER}, {zs.NoTHP, C.ST_CF_NO_THP}, {zs.Listener && zs.Killable && len(zs.BPF) > 0, C.ST_CF_KILLABLE},
		{zs.View != nil && zs.View.ProcOwn, C.ST_CF_PROC}, {zs.COW != nil, C.ST_CF_COW}, {zs.Dev != nil, C.ST_CF_DEV}} {
		if f.on {
			cfg.flags |= f.flag
		}
	}
	if zs.UserNS || unix.Geteuid() == 0 {
		cfg.flags |= C.ST_CF_CAPS
	}
	if zs.SetIDs {
		cfg.flags |= C.ST_CF_SET_IDS
		cfg.uid, cfg.gid = C.__u32(zs.UID), C.__u32(zs.GID)
	}
	if ci := zs.CPUInfo; ci != nil && zs.View != nil && zs.View.ProcOwn {
		if len(ci.Path) >= C.ST_MAX_CPUINFO_PATH {
			return nil, fmt.Errorf("the cpuinfo file's path is longer than %d bytes: %s", C.ST_MAX_CPUINFO_PATH-1, ci.Path)
		}
		cfg.flags |= C.ST_CF_CPUINFO
		cfg.cpuinfo_ino = C.__u64(ci.Ino)
		cfg.cpuinfo_dev_major, cfg.cpuinfo_dev_minor = C.__u32(unix.Major(ci.Dev)), C.__u32(unix.Minor(ci.Dev))
		for i := 0; i < len(ci.Path); i++ {
			cfg.cpuinfo_path[i] = C.char(ci.Path[i])
		}
	}
	if zs.Dev != nil {
		cfg.shm_size = C.__u64(zs.Dev.ShmSize)
	}
	cfg.cookie = C.__u64(zs.Cookie)
	cfg.test_fail = C.__u32(kernel.TestFailInit())
	cfg.bpf_len = C.__u64(len(zs.BPF) / 8)
	var keep []int
	var table []byte
	if t := zs.Landlock; t != nil && zs.RulesetFD >= 0 {
		if len(zs.LandlockFDs) != len(t.Paths) || len(t.Paths)+len(t.Ports) > C.ST_MAX_RULES {
			return nil, fmt.Errorf("BUG(spawn): a Landlock table of %d paths (%d fds) and %d ports", len(t.Paths), len(zs.LandlockFDs), len(t.Ports))
		}
		cfg.flags |= C.ST_CF_LANDLOCK_TABLE
		var lt C.struct_st_landlock_table
		lt.handled_fs, lt.handled_net, lt.scoped = C.__u64(t.HandledFS), C.__u64(t.HandledNet), C.__u64(t.Scoped)
		lt.attr_size, lt.proc_rights = C.__u64(t.AttrSize), C.__u64(zs.ProcRights)
		lt.npaths, lt.nports = C.__u32(len(t.Paths)), C.__u32(len(t.Ports))
		if d := zs.Dev; d != nil {
			lt.dev_rights, lt.pts_rights, lt.shm_rights = C.__u64(d.DirRights), C.__u64(d.PtsRights), C.__u64(d.ShmRights)
		}
		table = C.GoBytes(unsafe.Pointer(&lt), C.sizeof_struct_st_landlock_table)
		for i, pr := range t.Paths {
			var r C.struct_st_landlock_rule
			r.rights, r.fd = C.__u64(pr.Rights), C.__u32(zs.LandlockFDs[i])
			table = append(table, C.GoBytes(unsafe.Pointer(&r), C.sizeof_struct_st_landlock_rule)...)
			keep = append(keep, zs.LandlockFDs[i])
		}
		for _, pr := range t.Ports {
			var r C.struct_st_landlock_rule
			r.rights, r.port = C.__u64(pr.Rights), C.__u64(pr.Port)
			table = append(table, C.GoBytes(unsafe.Pointer(&r), C.sizeof_struct_st_landlock_rule)...)
		}
		slices.Sort(keep)
	}
	if zs.COW != nil {
		sec, err := cowSection(zs.COW, table != nil)
		if err != nil {
			return nil, err
		}
		table = append(table, sec...)
	}
	conf := append(append(C.GoBytes(unsafe.Pointer(&cfg), C.sizeof_struct_st_config), zs.BPF...), table...)
	cfgFD, err := sealedMemfd("sandtrap-config", conf)
	if err != nil {
		return nil, err
	}
	defer unix.Close(cfgFD)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, err1 := highFD(pair[0])
	theirs, err2 := highFD(pair[1])
	if err1 != nil || err2 != nil {
		return nil, errors.New("socketpair: cannot move fds")
	}
	unix.SetsockoptInt(ours, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20) // root only; else the default applies

	var mem cAlloc
	defer mem.free()
	var l C.struct_st_launch
	l.init_argv, l.envp = mem.strs([]string{"sandtrap-init"}), mem.strs(nil)
	l.stdio = [3]C.int{C.int(nullFD), C.int(nullFD), C.int(nullFD)}
	l.init_fd, l.config_fd, l.control_fd, l.ruleset_fd = C.int(initFD), C.int(cfgFD), C.int(theirs), -1
	if zs.RulesetFD >= 0 {
		rs, err := unix.FcntlInt(uintptr(zs.RulesetFD), unix.F_DUPFD_CLOEXEC, 10)
		if err != nil {
			unix.Close(ours)
			unix.Close(theirs)
			return nil, fmt.Errorf("ruleset fd: %w", err)
		}
		defer unix.Close(rs)
		l.ruleset_fd = C.int(rs)
	}
	for i, r := range zs.Rlimits {
		l.rl_resource[i] = C.int(r.Resource)
		l.rl_value[i].rlim_cur = C.rlim_t(r.Cur)
		l.rl_value[i].rlim_max = C.rlim_t(r.Max)
	}
	l.n_rlimits = C.int(len(zs.Rlimits))
	for i, r := range zs.Shares {
		l.share_resource[i] = C.int(r.Resource)
		l.share_value[i].rlim_cur = C.rlim_t(r.Cur)
		l.share_value[i].rlim_max = C.rlim_t(r.Max)
	}
	l.n_shares = C.int(len(zs.Shares))
	for i, fd := range zs.CgroupFDs {
		l.cgroup_fds[i] = C.int(fd)
	}
	l.n_cgroup_fds = C.int(len(zs.CgroupFDs))
	l.drop_groups = cbool(zs.DropGroups)
	if zs.UserNS {
		uid, gid := unix.Geteuid(), unix.Getegid()
		l.new_userns = 1
		if !zs.Unmapped {
			l.uid_map = mem.str(fmt.Sprintf("%d %d 1", uid, uid))
			l.gid_map = mem.str(fmt.Sprintf("%d %d 1", gid, gid))
		}
		for i, s := range zs.Sysctls {
			l.sysctl_path[i], l.sysctl_value[i] = mem.str(s.Path), mem.str(s.Value)
		}
		l.n_sysctls = C.int(len(zs.Sysctls))
	}
	if zs.Hostname != "" {
		l.hostname = mem.str(zs.Hostname)
	}
	l.set_personality, l.personality = cbool(zs.SetPersonality), C.ulong(zs.Personality)
	if len(zs.CPUs) > 0 {
		var set unix.CPUSet
		for _, c := range zs.CPUs {
			set.Set(c)
		}
		p := C.calloc(1, C.size_t(unsafe.Sizeof(set)))
		mem = append(mem, p)
		*(*unix.CPUSet)(p) = set
		l.cpu_mask, l.cpu_mask_len = (*C.ulong)(p), C.size_t(unsafe.Sizeof(set))
	}
	l.new_mountns = cbool(zs.MountNS && !zs.UserNS)
	if zs.UserNS || zs.MountNS {
		if zs.View != nil && len(zs.View.Ops) > 0 {
			ops := (*C.struct_st_mount_op)(C.calloc(C.size_t(len(zs.View.Ops)), C.sizeof_struct_st_mount_op))
			mem = append(mem, unsafe.Pointer(ops))
			view := unsafe.Slice(ops, len(zs.View.Ops))
			for i, op := range zs.View.Ops {
				view[i].kind = mountKind(op.Kind)
				view[i].path = mem.str(op.Path)
				view[i].slot = C.int(op.Slot)
				view[i].recursive = cbool(op.Recursive)
				view[i].attr_set, view[i].attr_clr = C.uint64_t(op.Set), C.uint64_t(op.Clr)
				view[i].dev, view[i].ino = C.uint64_t(op.Dev), C.uint64_t(op.Ino)
				view[i].mode = C.uint(op.Mode)
				if op.Target != "" {
					view[i].target = mem.str(op.Target)
				}
			}
			l.mount_ops, l.n_mount_ops = ops, C.int(len(zs.View.Ops))
		}
		if zs.View != nil && zs.View.Root != "" {
			l.cwd = mem.str("/") // a chroot: the host's working directory is not in it
		} else if wd, err := os.Getwd(); err == nil {
			l.cwd = mem.str(wd)
		}
	}
	holds := zs.UserNS || unix.Geteuid() == 0 // otherwise nothing is held
	l.drop_caps = cbool(holds)
	l.keep_caps = C.uint64_t(zs.KeepCaps)
	if len(keep) > 0 {
		arr := (*C.int)(C.calloc(C.size_t(len(keep)), C.sizeof_int))
		mem = append(mem, unsafe.Pointer(arr))
		for i, fd := range keep {
			unsafe.Slice(arr, len(keep))[i] = C.int(fd)
		}
		l.keep_fds, l.n_keep_fds = arr, C.int(len(keep))
	}
	done := make(chan C.int)
	spawner <- func() { done <- C.st_launch(&l) }
	rc := <-done
	unix.Close(theirs)
	if rc != 0 {
		unix.Close(ours)
		e := &Error{Stage: launcherStages[l.err_stage], Errno: unix.Errno(l.err_errno)}
		if e.Stage == "" {
			e.Stage = StageUnknown
		}
		if l.err_stage == C.ST_STAGE_VIEW && zs.View != nil && int(l.err_op) >= 0 && int(l.err_op) < len(zs.View.Ops) {
			op := zs.View.Ops[l.err_op]
			e.Op = fmt.Sprintf("%s %s", opName(op.Kind), op.Path)
		}
		return nil, e
	}
	z := &Zygote{ctl: ours, pid: int(l.pid), pidfd: int(l.pidfd), Listener: -1, cow: zs.COW != nil}
	// the zygote says it is confined, with the filter's listener when asked
	pid, fds, err := z.reply()
	if err != nil || pid != 0 || (zs.Listener && len(zs.BPF) > 0) != (len(fds) == 1) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		z.Close()
		var se *Error
		if errors.As(err, &se) {
			return nil, se // the step that failed, and why
		}
		if err == nil {
			err = fmt.Errorf("BUG(spawn): the zygote's hello: pid %d, %d fds", pid, len(fds))
		}
		return nil, fmt.Errorf("the sandbox's zygote did not start: %w", err)
	}
	if len(fds) == 1 {
		z.Listener = fds[0]
	}
	return z, nil
}

// cowSection is wire.h's st_cow section of the zygote's configuration.
func cowSection(c *COW, haveTable bool) ([]byte, error) {
	if len(c.Rules) > 0 && !haveTable {
		return nil, errors.New("BUG(spawn): copy-on-write rules without a Landlock table")
	}
	strs := append([]byte(c.Workdir), 0)
	var hdr C.struct_st_cow
	hdr.size, hdr.nrules = C.__u64(c.Size), C.__u32(len(c.Rules))
	if c.UserXattr {
		hdr.flags |= C.ST_COW_USERXATTR
	}
	if c.Storage != "" {
		hdr.flags |= C.ST_COW_STORAGE
		hdr.storage = C.__u32(len(strs))
		strs = append(append(strs, c.Storage...), 0)
	}
	var rules []byte
	for _, r := range c.Rules {
		var cr C.struct_st_cow_rule
		cr.rights, cr.name = C.__u64(r.Rights), C.__u32(len(strs))
		strs = append(append(strs, r.Rel...), 0)
		rules = append(rules, C.GoBytes(unsafe.Pointer(&cr), C.sizeof_struct_st_cow_rule)...)
	}
	hdr.strlen = C.__u32(len(strs))
	out := append(append(C.GoBytes(unsafe.Pointer(&hdr), C.sizeof_struct_st_cow), rules...), strs...)
	if len(out) > C.ST_MAX_COW {
		return nil, fmt.Errorf("the workdir's %d Landlock rules take %d bytes, more than %d", len(c.Rules), len(out), C.ST_MAX_COW)
	}
	return out, nil
}

func opName(k fsview.Kind) string {
	return map[fsview.Kind]string{fsview.Private: "private", fsview.Clone: "clone", fsview.SetAttr: "setattr",
		fsview.Move: "move", fsview.Tmpfs: "tmpfs", fsview.File: "file", fsview.Symlink: "symlink", fsview.Pivot: "pivot_root", fsview.Dir: "mkdir"}[k]
}

// reply reads one struct st_reply and the fds that came with it.
func (z *Zygote) reply() (int, []int, error) {
	buf := make([]byte, C.sizeof_struct_st_reply)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(z.ctl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != len(buf) {
			return 0, nil, ErrZygoteGone
		}
		var fds []int
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return 0, nil, fmt.Errorf("BUG(spawn): zygote control message: %v", err)
			}
			for i := range msgs {
				got, err := unix.ParseUnixRights(&msgs[i])
				if err == nil {
					fds = append(fds, got...)
				}
			}
		}
		rp := (*C.struct_st_reply)(unsafe.Pointer(&buf[0]))
		if rp.err != 0 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			step := Step(rp.step)
			return 0, nil, &Error{Stage: StageZygote, Step: step, Errno: unix.Errno(-rp.err), Op: step.String()}
		}
		return int(rp.pid), fds, nil
	}
}

// COW reports whether the zygote's runs see a copy-on-write workdir.
func (z *Zygote) COW() bool { return z.cow }

// Pid is the zygote's pid.
func (z *Zygote) Pid() int { return z.pid }

// OnClose runs f when the zygote is closed (after it is gone).
func (z *Zygote) OnClose(f func()) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.onClose = append(z.onClose, f)
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
	for _, f := range z.onClose {
		f()
	}
}

// RunSpec is one run. All fds stay owned by the caller.
type RunSpec struct {
	Path      string
	Argv, Env []string
	Dir       string
	Stdio     [3]int
	StatusFD  int
	CPUSecs   uint32 // RLIMIT_CPU of the run (0: none)
	NoFile    uint32 // RLIMIT_NOFILE of the run (0: the zygote's)
	COWSock   int    // with a COW zygote (only): the socket pid 1 sends the run's upper layer on
	// GateFD > 0: the target is made and parked before its execve until a byte can
	// be read from it (the read end of a pipe; end of file ends it unexec'd).
	GateFD int
	// ExtraFDs are placed on 3, 4, … of the target (a gather's named inputs).
	ExtraFDs []int
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
	var hdr C.struct_st_request
	hdr.magic = C.ST_REQ_MAGIC
	hdr.argc, hdr.envc = C.__u32(len(r.Argv)), C.__u32(len(r.Env))
	hdr.cpu_secs, hdr.nofile = C.__u32(r.CPUSecs), C.__u32(r.NoFile)
	if r.GateFD > 0 {
		hdr.flags |= C.ST_RQ_GATE
	}
	hdr.nextra = C.__u32(len(r.ExtraFDs))
	msg := C.GoBytes(unsafe.Pointer(&hdr), C.sizeof_struct_st_request)
	for _, s := range append(append([]string{r.Path, r.Dir}, r.Argv...), r.Env...) {
		msg = append(append(msg, s...), 0)
	}
	if len(msg) > C.ST_MAX_REQ {
		return nil, fmt.Errorf("argv and environment take %d bytes, more than a run request can carry (%d); pass large data on stdin", len(msg), C.ST_MAX_REQ)
	}
	fds := []int{r.Stdio[0], r.Stdio[1], r.Stdio[2], r.StatusFD}
	if z.cow {
		if r.COWSock <= 2 {
			return nil, errors.New("BUG(spawn): a copy-on-write run without its socket")
		}
		fds = append(fds, r.COWSock)
	}
	if r.GateFD > 0 {
		fds = append(fds, r.GateFD)
	}
	if len(fds)+len(r.ExtraFDs) > C.ST_MAX_FDS {
		return nil, fmt.Errorf("%d extra descriptors: a run takes at most %d", len(r.ExtraFDs), C.ST_MAX_FDS-len(fds))
	}
	fds = append(fds, r.ExtraFDs...)
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
	pid, got, err := z.reply()
	if err != nil {
		return nil, err
	}
	if len(got) != 1 {
		for _, fd := range got {
			unix.Close(fd)
		}
		return nil, errors.New("BUG(spawn): zygote reply without a pidfd")
	}
	return &Process{Pid: pid, PidFD: got[0]}, nil
}

// Status is what a run's pid 1 reported.
type Status struct {
	ExecErrno  unix.Errno // the target could not be exec'd
	InitFailed Step       // pid 1 could not apply its part (StepNone: it did)
	InitErrno  unix.Errno
	Parked     bool // the target exists and waits on its gate (RunSpec.GateFD)
	Started    bool // the target exec'd
	Ended      bool
	Wait       unix.WaitStatus
	UserMicros uint64
	SysMicros  uint64
	MaxRSSKiB  uint64
	HasUsage   bool
}

// StatusSize is the size of one status record.
const StatusSize = C.sizeof_struct_st_status

// MaxLandlockRules bounds the rules of a Landlock table that pid 1 builds (wire.h).
const MaxLandlockRules = C.ST_MAX_RULES

// ReadStatus decodes the status records.
func ReadStatus(b []byte) Status {
	var st Status
	for len(b) >= StatusSize {
		rec := C.struct_st_status{}
		C.memcpy(unsafe.Pointer(&rec), unsafe.Pointer(&b[0]), StatusSize)
		switch rec.kind {
		case C.ST_STATUS_EXEC:
			st.ExecErrno = unix.Errno(rec.value)
		case C.ST_STATUS_STARTED:
			st.Started = true
		case C.ST_STATUS_PARKED:
			st.Parked = true
		case C.ST_STATUS_EXIT:
			st.Ended, st.Wait = true, unix.WaitStatus(rec.value)
		case C.ST_STATUS_USAGE:
			st.UserMicros, st.SysMicros, st.MaxRSSKiB, st.HasUsage = uint64(rec.a), uint64(rec.b), uint64(rec.c), true
		case C.ST_STATUS_INIT:
			st.InitFailed, st.InitErrno = Step(rec.value), unix.Errno(rec.a)
			if st.InitFailed == StepNone {
				st.InitFailed = C.ST_STEP_CONFIG // not a step: still a failure
			}
		}
		b = b[StatusSize:]
	}
	return st
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
