package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Eval answers as the compiled filter: what the supervisor relies on to keep the
// built-in rules first for the calls it traps for the host.
func TestEvalAnswersAsTheFilter(t *testing.T) {
	prog, err := Compile(Config{NoInet: true, Traps: []Trap{{Syscall: "flock", Arg: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	arch := uint32(auditArch())
	nr := func(n string) int32 {
		x, ok := Nr(n)
		if !ok {
			t.Fatalf("no %s", n)
		}
		return x
	}
	for _, tc := range []struct {
		name string
		args [6]uint64
		want uint32
	}{
		{"getpid", [6]uint64{}, RetAllow},
		{"ptrace", [6]uint64{}, RetErrno | uint32(unix.EPERM)},
		{"openat", [6]uint64{0xffffff9c, 0x1000, unix.O_CREAT | unix.O_WRONLY, 0o4755}, RetErrno | uint32(unix.EPERM)},
		{"openat", [6]uint64{0xffffff9c, 0x1000, unix.O_CREAT | unix.O_WRONLY, 0o755}, RetAllow},
		{"openat2", [6]uint64{}, RetErrno | uint32(unix.ENOSYS)},
		{"flock", [6]uint64{3, unix.LOCK_EX}, RetUserNotif},
		{"socket", [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, RetErrno | uint32(unix.EPERM)},
	} {
		got, err := Eval(prog.BPF, nr(tc.name), arch, 0, tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s %v: %#x, want %#x", tc.name, tc.args, got, tc.want)
		}
	}
	if got, _ := Eval(prog.BPF, nr("getpid"), 0x40000003 /* i386 */, 0, [6]uint64{}); got&RetActionFull != RetKillProcess {
		t.Errorf("foreign arch: %#x", got)
	}
	if Name(nr("openat")) != "openat" {
		t.Errorf("Name")
	}
}
