//go:build linux

package supervise

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The uapi structures of <linux/seccomp.h>.
type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

type seccompNotifSizes struct {
	Notif, Resp, Data uint16
}

// bufSize is what RECV and SEND buffers are allocated with: the kernel copies its own
// struct size (SECCOMP_GET_NOTIF_SIZES), which is checked against it in Start, and
// requires the RECV buffer zeroed.
const bufSize = 128

func init() {
	if unsafe.Sizeof(seccompNotif{}) != 80 || unsafe.Sizeof(seccompNotifResp{}) != 24 || unsafe.Sizeof(unix.Flock_t{}) != 32 {
		panic("BUG(supervise): uapi struct sizes")
	}
}

// nativeArch is the AUDIT_ARCH_* of the calls we decode.
var nativeArch = func() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0 // unsupported: every trapped call is refused
}()

func notifSizes() (seccompNotifSizes, error) {
	var s seccompNotifSizes
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_NOTIF_SIZES, 0, uintptr(unsafe.Pointer(&s))); e != 0 {
		return s, fmt.Errorf("seccomp(SECCOMP_GET_NOTIF_SIZES): %w", e)
	}
	if int(s.Notif) > bufSize || int(s.Resp) > bufSize || s.Notif < 80 || s.Resp < 24 {
		return s, fmt.Errorf("seccomp notification sizes %+v are not supported", s)
	}
	return s, nil
}

func ioctlPtr(fd uintptr, req uint, p unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(p)); e != 0 {
		return e
	}
	return nil
}

// addfdSend installs a descriptor in the caller and answers its call with the
// number (SECCOMP_ADDFD_FLAG_SEND), with every signal blocked on this thread for
// the ioctl: the kernel marks the call replied when it queues the request, and an
// ioctl a signal interrupts before the caller took the descriptor withdraws the
// request, leaving the caller to return 0 — its stdin — with nothing installed
// (seen on 6.18: 414 of 3,000 opens under a stream of signals,
// TestHostInjectFDUnderSignals). Signals come to any thread of the process: a
// ptrace stop's SIGCHLD, the Go runtime's preemption, the host program's own.
func addfdSend(fd uintptr, a *seccompNotifAddfd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	all, old := unix.Sigset_t{}, unix.Sigset_t{}
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		return err
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_ADDFD, unsafe.Pointer(a))
}

// recv reads one notification (the caller knows one is pending: RECV would block).
func recv(fd uintptr) (seccompNotif, error) {
	var buf [bufSize]byte
	err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&buf[0]))
	return *(*seccompNotif)(unsafe.Pointer(&buf[0])), err
}

func send(fd uintptr, r seccompNotifResp) error {
	var buf [bufSize]byte
	*(*seccompNotifResp)(unsafe.Pointer(&buf[0])) = r
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&buf[0]))
}

// SECCOMP_IOCTL_NOTIF_SET_FLAGS: _IOW('!', 4, __u64)
const ioctlNotifSetFlags = 0x40082104

func setFlags(fd uintptr, flags uint64) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, ioctlNotifSetFlags, uintptr(flags))
	if e != 0 {
		return e
	}
	return nil
}

func idValid(fd uintptr, id uint64) error {
	return ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id))
}
