//go:build sandtrap_testhook

package spawn

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// allowAll is a one-instruction seccomp filter: BPF_RET|BPF_K SECCOMP_RET_ALLOW.
var allowAll = []byte{0x06, 0, 0, 0, 0, 0, 0xff, 0x7f}

func zygoteSpec() *ZygoteSpec {
	return &ZygoteSpec{RulesetFD: -1, BPF: allowAll}
}

// Each step of sandtrap-init's own confinement that fails is reported to the
// engine with its errno (SANDTRAP_TEST_FAIL_INIT makes that step's call fail with
// EPERM), and counts as a protection that could not be applied.
func TestZygoteReportsFailedStep(t *testing.T) {
	for _, c := range []struct {
		letter string
		step   Step
		spec   func() *ZygoteSpec
	}{
		{"B", StepSeccomp, zygoteSpec},
		{"N", 'N', zygoteSpec},
		{"Q", 'Q', zygoteSpec},
		{"A", 'A', func() *ZygoteSpec { zs := zygoteSpec(); zs.ASLimit = 1 << 40; return zs }},
		{"H", 'H', func() *ZygoteSpec { zs := zygoteSpec(); zs.NoTHP = true; return zs }},
	} {
		t.Run(c.letter, func(t *testing.T) {
			t.Setenv("SANDTRAP_TEST_FAIL_INIT", c.letter)
			z, err := StartZygote(c.spec())
			if err == nil {
				z.Close()
				t.Fatal("the zygote started")
			}
			var se *Error
			if !errors.As(err, &se) || se.Stage != StageZygote || se.Step != c.step || se.Errno != unix.EPERM || !se.Protection() {
				t.Fatalf("err %#v (%v)", err, err)
			}
		})
	}
}

// A failure making the next run's pid 1 is the run request's answer (step and
// errno), not a hang or a dead zygote.
func TestSpareFailureIsAnswered(t *testing.T) {
	t.Setenv("SANDTRAP_TEST_FAIL_INIT", "W")
	z, err := StartZygote(zygoteSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	_, status, _ := run(t, z)
	_ = status
}

// A step of pid 1 that fails (its parent-death signal here) is reported on the
// run's status pipe with its errno.
func TestPid1ReportsFailedStep(t *testing.T) {
	t.Setenv("SANDTRAP_TEST_FAIL_INIT", "K")
	z, err := StartZygote(zygoteSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	proc, st, err := run(t, z)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(proc.PidFD)
	if st.InitFailed != 'K' || st.InitErrno != unix.EPERM || st.InitFailed.String() != "setting its parent-death signal" {
		t.Fatalf("status %+v", st)
	}
}

// run spawns /bin/true in z and reads its status (nil process: the spawn failed,
// and for the spare test that is checked here).
func run(t *testing.T, z *Zygote) (*Process, Status, error) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	null, _ := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	defer unix.Close(null)
	proc, err := z.Spawn(&RunSpec{Path: "/bin/true", Argv: []string{"true"}, Stdio: [3]int{null, null, null}, StatusFD: p[1]})
	unix.Close(p[1])
	defer unix.Close(p[0])
	if err != nil {
		var se *Error
		if t.Name() == "TestSpareFailureIsAnswered" {
			if !errors.As(err, &se) || se.Stage != StageZygote || se.Step != StepSpare || se.Errno != unix.EPERM || se.Protection() {
				t.Fatalf("err %#v (%v)", err, err)
			}
			return nil, Status{}, err
		}
		return nil, Status{}, err
	}
	if t.Name() == "TestSpareFailureIsAnswered" {
		t.Fatal("the run started although its pid 1 could not be made")
	}
	var buf []byte
	b := make([]byte, 256)
	for {
		n, _ := unix.Read(p[0], b)
		if n <= 0 {
			break
		}
		buf = append(buf, b[:n]...)
	}
	return proc, ReadStatus(buf), nil
}
