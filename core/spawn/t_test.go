package spawn

import (
	"os/exec"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func med(f func()) time.Duration {
	var ds []time.Duration
	for i := 0; i < 300; i++ {
		t := time.Now()
		f()
		ds = append(ds, time.Since(t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func TestProto(t *testing.T) {
	null, _ := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	fd, _ := HighFD(null)
	cfg, err := NewConfig(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	run := func(pidns bool) func() {
		return func() {
			var p [2]int
			unix.Pipe2(p[:], unix.O_CLOEXEC)
			r, _ := HighFD(p[0])
			w, _ := HighFD(p[1])
			pr, err := Start(&Spec{Path: "/bin/true", Argv: []string{"true"}, Stdio: [3]int{fd, fd, fd}, NewPidNS: pidns, DropCaps: true, NoNewPrivs: true, LandlockFD: -1, Config: cfg, StatusFD: w})
			unix.Close(w)
			if err != nil {
				t.Fatal(err)
			}
			var ws unix.WaitStatus
			unix.Wait4(pr.Pid, &ws, 0, nil)
			unix.Close(pr.PidFD)
			unix.Close(r)
		}
	}
	for i := 0; i < 2; i++ {
		t.Logf("os/exec %v", med(func() { exec.Command("/bin/true").Run() }))
		t.Logf("launch+init %v", med(run(false)))
		t.Logf("launch+init+pidns %v", med(run(true)))
	}
}
