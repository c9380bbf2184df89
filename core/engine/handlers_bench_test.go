package engine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// getppidLoop builds a C program making n getppid() calls (argv[1]).
func getppidLoop(b *testing.B) string {
	d := b.TempDir()
	os.Chmod(d, 0o755)
	src, bin := filepath.Join(d, "loop.c"), filepath.Join(d, "loop")
	os.WriteFile(src, []byte("#include <unistd.h>\n#include <stdlib.h>\nint main(int c, char **v) { long n = atol(v[1]), i; for (i = 0; i < n; i++) getppid(); return 0; }\n"), 0o644)
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		b.Skipf("gcc: %v %s", err, out)
	}
	return bin
}

// BenchmarkHostJudgedCall: the round trip of one call the host judges, through the
// engine's ops with a Go answerer (continue on each): a loop of calls trapped for a
// handler against the same loop untrapped; ns/call is the difference per call.
//
//	go test -tags sandtrap_testhook -run '^$' -bench HostJudgedCall -benchtime 5x ./core/engine
func BenchmarkHostJudgedCall(b *testing.B) {
	const n = 5000
	loop := getppidLoop(b)
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", filepath.Dir(loop)}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	cont := map[string]any{"action": "continue"}
	runOnce := func(handlers bool) time.Duration {
		req := map[string]any{"op": "run", "argv": []any{loop, strconv.Itoa(n)}}
		if handlers {
			req["op"] = "run_handlers"
			req["handlers"] = []any{map[string]any{"syscall": "getppid", "id": 1}}
		}
		rb, _ := msgpack.Marshal(req)
		t := time.Now()
		resp, _ := sb.Exec(rb)
		calls := 0
		for {
			var m struct {
				Call *struct {
					ID uint64 `msgpack:"id"`
				} `msgpack:"call"`
				Pending uint64 `msgpack:"pending"`
				Success bool   `msgpack:"success"`
			}
			if err := msgpack.Unmarshal(resp, &m); err != nil {
				b.Fatal(err)
			}
			if m.Call == nil {
				if !m.Success {
					b.Fatalf("run failed: %v", resp)
				}
				break
			}
			calls++
			ab, _ := msgpack.Marshal(map[string]any{"op": "answer", "pending": m.Pending, "call": m.Call.ID, "value": cont})
			resp, _ = sb.Exec(ab)
		}
		if handlers && calls != n {
			b.Fatalf("%d calls asked, want %d", calls, n)
		}
		return time.Since(t)
	}
	runOnce(true)
	var trapped, plain time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		trapped += runOnce(true)
		plain += runOnce(false)
	}
	b.ReportMetric(float64((trapped-plain).Nanoseconds())/float64(b.N*n), "ns/call")
}

// BenchmarkHostJudgedExec: a C loop forking and exec'ing /bin/true 200 times,
// judged through the engine's ops with a Go answerer (continue on each): by the
// policy_fn (its execve and the loader's two opens), by a handler on execve only,
// on openat only; ns/exec is the difference per fork+exec against the loop unjudged.
//
//	go test -tags sandtrap_testhook -run '^$' -bench HostJudgedExec -benchtime 5x ./core/engine
func BenchmarkHostJudgedExec(b *testing.B) {
	for _, mode := range []string{"policy", "execve", "openat"} {
		b.Run(mode, func(b *testing.B) { judgedExec(b, mode) })
	}
}

func judgedExec(b *testing.B, mode string) {
	const n = 200
	d := b.TempDir()
	os.Chmod(d, 0o755)
	src, bin := filepath.Join(d, "loop.c"), filepath.Join(d, "loop")
	os.WriteFile(src, []byte("#include <stdlib.h>\n#include <sys/wait.h>\n#include <unistd.h>\nextern char **environ;\nint main(int c, char **v) { long n = atol(v[1]), i; char *av[] = {\"/bin/true\", 0}; for (i = 0; i < n; i++) { pid_t p = fork(); if (p == 0) { execve(av[0], av, environ); _exit(127);} int st; waitpid(p, &st, 0);} return 0; }\n"), 0o644)
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		b.Skipf("gcc: %v %s", err, out)
	}
	sb, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", "/lib64", "/etc", d}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	cont := map[string]any{"action": "continue"}
	kinds := map[string]int{}
	runOnce := func(handlers bool) time.Duration {
		req := map[string]any{"op": "run", "argv": []any{bin, strconv.Itoa(n)}}
		if handlers {
			req["op"] = "run_handlers"
			req["handlers"] = []any{}
			if mode == "policy" {
				req["policy_fn"] = map[string]any{"on_exception": "deny_eperm"}
			} else {
				req["handlers"] = []any{map[string]any{"syscall": mode, "id": 1}}
			}
		}
		rb, _ := msgpack.Marshal(req)
		t := time.Now()
		resp, _ := sb.Exec(rb)
		for {
			var m struct {
				Call *struct {
					ID      uint64 `msgpack:"id"`
					Syscall string `msgpack:"syscall"`
				} `msgpack:"call"`
				Pending uint64 `msgpack:"pending"`
				Success bool   `msgpack:"success"`
			}
			if err := msgpack.Unmarshal(resp, &m); err != nil {
				b.Fatal(err)
			}
			if m.Call == nil {
				if !m.Success {
					b.Fatalf("run failed: %v", resp)
				}
				break
			}
			kinds[m.Call.Syscall]++
			ab, _ := msgpack.Marshal(map[string]any{"op": "answer", "pending": m.Pending, "call": m.Call.ID, "value": cont})
			resp, _ = sb.Exec(ab)
		}
		return time.Since(t)
	}
	runOnce(true)
	var trapped, plain time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		trapped += runOnce(true)
		plain += runOnce(false)
	}
	b.ReportMetric(float64((trapped-plain).Nanoseconds())/float64(b.N*n), "ns/exec")
	if len(kinds) == 0 {
		b.Fatal("no call judged")
	}
}
