// Command determinism benchmarks what the determinism fields (random_seed,
// time_start, deterministic_dirs) cost, each against the same policy without
// them, interleaved in one run: /bin/true, a getrandom-heavy loop (a C program
// timing N getrandom calls of 32 bytes itself), `python3 -c pass` (every open
// trapped), `ls -f` of a 1,000-entry directory, and a clock_gettime loop.
// Usage: go run ./bench/determinism [-n 300] [-rounds 3]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
)

const loopC = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
int main(int argc, char **argv) {
	int n = atoi(argv[2]); char buf[32]; struct timespec ts; double t = now();
	for (int i = 0; i < n; i++) {
		if (!strcmp(argv[1], "getrandom")) { if (getrandom(buf, sizeof buf, 0) != 32) return 1; }
		else clock_gettime(CLOCK_REALTIME, &ts);
	}
	printf("%.3f\n", (now() - t) / n / 1000.0); /* µs per call */
	return 0;
}
`

func median(ds []float64) float64 {
	sort.Float64s(ds)
	return ds[len(ds)/2]
}

func main() {
	n := flag.Int("n", 300, "runs per contender and round")
	rounds := flag.Int("rounds", 3, "interleaved rounds")
	calls := flag.Int("calls", 20000, "calls per loop run")
	flag.Parse()
	tmp, _ := os.MkdirTemp("", "sandtrap-bench-det")
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	loop := filepath.Join(tmp, "loop")
	os.WriteFile(loop+".c", []byte(loopC), 0o644)
	if out, err := exec.Command("cc", "-O2", "-o", loop, loop+".c").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cc: %v %s\n", err, out)
		os.Exit(1)
	}
	dir := filepath.Join(tmp, "d")
	os.Mkdir(dir, 0o755)
	for i := 0; i < 1000; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", (i*7919)%1000)), nil, 0o644)
	}
	base := func(extra map[string]any) *engine.Sandbox {
		m := map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", "/etc", tmp}, "max_memory": "256M",
			"max_processes": int64(64), "clean_env": true, "timeout": 30.0}
		for k, v := range extra {
			m[k] = v
		}
		sb, err := engine.NewFromMap(m)
		if err != nil {
			fmt.Fprintln(os.Stderr, "policy:", err)
			os.Exit(1)
		}
		return sb
	}
	off := base(nil)
	defer off.Close()
	on := base(map[string]any{"random_seed": int64(1), "time_start": "2000-01-01T00:00:00Z", "deterministic_dirs": true})
	defer on.Close()
	seedOnly := base(map[string]any{"random_seed": int64(1)})
	defer seedOnly.Close()
	run := func(sb *engine.Sandbox, argv ...string) (time.Duration, string) {
		t := time.Now()
		r := sb.Run(&engine.RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1})
		d := time.Since(t)
		if !r.Success {
			fmt.Fprintf(os.Stderr, "%v: %+v %s\n", argv, r.Error, r.Stderr)
			os.Exit(1)
		}
		return d, strings.TrimSpace(string(r.Stdout))
	}
	type contender struct {
		name string
		sb   *engine.Sandbox
		argv []string
		per  bool // the program prints its own µs per call
		n    int
	}
	cs := []contender{
		{"/bin/true, determinism off", off, []string{"/bin/true"}, false, *n},
		{"/bin/true, determinism on (all three fields)", on, []string{"/bin/true"}, false, *n},
		{"python3 -c pass, off", off, []string{"/usr/bin/python3", "-I", "-c", "pass"}, false, *n / 5},
		{"python3 -c pass, on", on, []string{"/usr/bin/python3", "-I", "-c", "pass"}, false, *n / 5},
		{"ls -f (1,000 entries), off", off, []string{"/bin/ls", "-f", dir}, false, *n / 3},
		{"ls -f (1,000 entries), deterministic_dirs", on, []string{"/bin/ls", "-f", dir}, false, *n / 3},
		{"getrandom(32 B) per call, no seed", off, []string{loop, "getrandom", strconv.Itoa(*calls)}, true, 5},
		{"getrandom(32 B) per call, random_seed", seedOnly, []string{loop, "getrandom", strconv.Itoa(*calls)}, true, 5},
		{"clock_gettime(REALTIME) per call, off (vDSO)", off, []string{loop, "clock", strconv.Itoa(*calls)}, true, 5},
		{"clock_gettime(REALTIME) per call, time_start", on, []string{loop, "clock", strconv.Itoa(*calls)}, true, 5},
	}
	res := make([][]float64, len(cs))
	for r := 0; r < *rounds; r++ {
		for i, c := range cs {
			for k := 0; k < c.n; k++ {
				d, out := run(c.sb, c.argv...)
				if c.per {
					v, _ := strconv.ParseFloat(out, 64)
					res[i] = append(res[i], v)
				} else if k >= c.n/10 {
					res[i] = append(res[i], float64(d.Microseconds())/1000)
				}
			}
		}
	}
	for i, c := range cs {
		unit := "ms a run"
		if c.per {
			unit = "µs a call"
		}
		fmt.Printf("%-50s %8.3f %s\n", c.name, median(res[i]), unit)
	}
}
