// Command spawn benchmarks the median time to run /bin/true under sandtrap's full
// policy against a plain unconfined spawn from the same Go process and against
// bubblewrap, all in one run. Usage: go run ./bench/spawn [-n 500]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
)

func median(n int, f func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n+n/10; i++ {
		t := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		if i >= n/10 { // warm-up
			ds = append(ds, time.Since(t))
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], nil
}

func main() {
	n := flag.Int("n", 500, "runs per contender")
	flag.Parse()
	tmp, _ := os.MkdirTemp("", "sandtrap-bench")
	defer os.RemoveAll(tmp)
	sb, err := engine.NewFromMap(map[string]any{
		"fs_readable": []any{"/usr", "/lib", "/bin", "/etc"}, "fs_writable": []any{tmp},
		"max_memory": "256M", "max_processes": int64(64), "max_open_files": int64(256),
		"max_disk": "64M", "max_cpu_time": 10.0, "clean_env": true, "timeout": 10.0,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "policy:", err)
		os.Exit(1)
	}
	defer sb.Close()
	// the same with /proc readable: each run then mounts a proc of its own pid
	// namespace in a mount namespace of its own, and builds its Landlock ruleset
	withProc, err := engine.NewFromMap(map[string]any{
		"fs_readable": []any{"/usr", "/lib", "/bin", "/etc", "/proc"}, "fs_writable": []any{tmp},
		"max_memory": "256M", "max_processes": int64(64), "max_open_files": int64(256),
		"max_disk": "64M", "max_cpu_time": 10.0, "clean_env": true, "timeout": 10.0,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "policy:", err)
		os.Exit(1)
	}
	defer withProc.Close()
	plain := func() error { return exec.Command("/bin/true").Run() }
	runIn := func(sb *engine.Sandbox) func() error {
		return func() error {
			r := sb.Run(&engine.RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1})
			if !r.Success {
				return fmt.Errorf("confined run failed: %+v", r.Error)
			}
			return nil
		}
	}
	confined, confinedProc := runIn(sb), runIn(withProc)
	bwrap := func() error { return exec.Command("bwrap", "--ro-bind", "/", "/", "/bin/true").Run() }

	// interleave rounds so that machine noise hits every contender alike
	var pl, co, cp, bw []time.Duration
	hasBwrap := exec.Command("bwrap", "--ro-bind", "/", "/", "/bin/true").Run() == nil
	for round := 0; round < 5; round++ {
		d, err := median(*n/5, plain)
		check(err)
		pl = append(pl, d)
		d, err = median(*n/5, confined)
		check(err)
		co = append(co, d)
		d, err = median(*n/5, confinedProc)
		check(err)
		cp = append(cp, d)
		if hasBwrap {
			d, err = median(*n/5, bwrap)
			check(err)
			bw = append(bw, d)
		}
	}
	p, c := med(pl), med(co)
	r := sb.Run(&engine.RunRequest{Argv: []string{"/bin/true"}, StdinFD: -1, StdoutFD: -1})
	fmt.Printf("policy: Landlock ABI %d, seccomp %v, pid ns %v, cgroup %q, limits %d\n",
		r.Isolation.Landlock.ABI, r.Isolation.Seccomp != nil, r.Isolation.PidNamespace, r.Isolation.Cgroup, len(r.Isolation.Limits))
	fmt.Printf("| contender | median spawn of /bin/true | ratio to plain |\n|---|---:|---:|\n")
	fmt.Printf("| plain os/exec (unconfined) | %.3f ms | 1.00 |\n", ms(p))
	fmt.Printf("| sandtrap, full policy | %.3f ms | %.2f |\n", ms(c), float64(c)/float64(p))
	fmt.Printf("| sandtrap, full policy + /proc readable | %.3f ms | %.2f |\n", ms(med(cp)), float64(med(cp))/float64(p))
	if hasBwrap {
		b := med(bw)
		fmt.Printf("| bwrap --ro-bind / / | %.3f ms | %.2f |\n", ms(b), float64(b)/float64(p))
		fmt.Printf("\nsandtrap / bubblewrap = %.2f\n", float64(c)/float64(b))
	} else {
		fmt.Println("\nbubblewrap: not installed (apt-get install bubblewrap)")
	}
}

func med(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
