package engine

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"

	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
)

// drive runs a run_handlers request, answering each host call with decide (nil:
// abort). It returns the final response.
func drive(t *testing.T, sb *Sandbox, req map[string]any, decide func(call map[string]any) map[string]any) map[string]any {
	t.Helper()
	req["op"] = "run_handlers"
	m, _ := request(t, sb, req)
	for {
		c, ok := m["call"].(map[string]any)
		if !ok {
			return m
		}
		ans := map[string]any{"op": "answer", "pending": m["pending"], "call": c["id"]}
		v := decide(c)
		switch {
		case v == nil:
			ans["abort"] = true
		case v["__error"] != nil:
			ans["error"] = map[string]any{"type": "RuntimeError", "message": v["__error"]}
		default:
			ans["value"] = v
		}
		m, _ = request(t, sb, ans)
	}
}

func exitCode(m map[string]any) int64 {
	n, _ := policy.AsInt(m["exit_code"])
	return n
}

func TestHandlersPathDenyAndChainOrder(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	os.WriteFile(secret, []byte("s3cret"), 0o644)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}})
	var mu sync.Mutex
	var seen []string
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/cat", secret},
		"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
		func(c map[string]any) map[string]any {
			p, _ := c["path"].(string)
			mu.Lock()
			seen = append(seen, p)
			mu.Unlock()
			if strings.HasSuffix(p, "secret.txt") {
				return map[string]any{"action": "errno", "errno": 13}
			}
			return map[string]any{"action": "continue"}
		})
	if exitCode(res) == 0 || strings.Contains(string(res["stdout"].([]byte)), "s3cret") {
		t.Fatalf("the handler's denial did not hold: %v", res)
	}
	if !strings.Contains(string(res["stderr"].([]byte)), "Permission denied") {
		t.Fatalf("stderr: %q", res["stderr"])
	}
	found := false
	for _, p := range seen {
		found = found || p == secret
	}
	if !found {
		t.Fatalf("paths seen: %v", seen)
	}
}

func TestHandlersCannotLoosen(t *testing.T) {
	// Landlock refuses /etc; a handler that continues everything changes nothing
	sb := newSB(t, nil)
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/cat", "/etc/hostname"},
		"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
		func(c map[string]any) map[string]any { return map[string]any{"action": "continue"} })
	if exitCode(res) == 0 {
		t.Fatalf("continue loosened Landlock: %v", res)
	}
	// the filter's own refusals stay: openat creating a set-uid file
	dir := t.TempDir()
	sb2 := newSB(t, map[string]any{"fs_writable": []any{dir}})
	asked := 0
	res = drive(t, sb2, map[string]any{"argv": []any{"/usr/bin/python3", "-c",
		"import os,sys\ntry:\n os.open(sys.argv[1], os.O_CREAT|os.O_WRONLY, 0o4755)\nexcept OSError as e:\n print(e.errno)\n", filepath.Join(dir, "suid")},
		"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
		func(c map[string]any) map[string]any { asked++; return map[string]any{"action": "continue"} })
	if strings.TrimSpace(string(res["stdout"].([]byte))) != "1" {
		t.Fatalf("set-uid create was not refused with EPERM: %v", res)
	}
	// registering on a syscall the deny list refuses is an error
	m, kind := request(t, sb, map[string]any{"op": "run_handlers", "argv": []any{"/bin/true"},
		"handlers": []any{map[string]any{"syscall": "ptrace", "id": 1}}})
	if kind != KindInvalidRequest || !strings.Contains(m["error"].(map[string]any)["message"].(string), "handlers[0].syscall") {
		t.Fatalf("ptrace handler: %s %v", kind, m)
	}
	// and on chdir, which cannot be performed for the caller (its continue would be raceable)
	m, kind = request(t, sb, map[string]any{"op": "run_handlers", "argv": []any{"/bin/true"},
		"handlers": []any{map[string]any{"syscall": "getppid", "id": 1}, map[string]any{"syscall": "chdir", "id": 2}}})
	if msg, _ := m["error"].(map[string]any)["message"].(string); kind != KindInvalidRequest || !strings.Contains(msg, "handlers[1].syscall") ||
		!strings.Contains(msg, "chdir cannot be performed") {
		t.Fatalf("chdir handler: %s %v", kind, m)
	}
}

func TestPolicyFnSeesExecveArgvAndRestrictsNetwork(t *testing.T) {
	sb := newSB(t, nil)
	var argvs [][]any
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c", "c=cu; /bin/echo hi; /bin/true ${c}rl"},
		"policy_fn": map[string]any{}},
		func(c map[string]any) map[string]any {
			if c["syscall"] == "execve" {
				a, _ := c["argv"].([]any)
				argvs = append(argvs, a)
				for _, x := range a {
					if strings.Contains(x.(string), "curl") {
						return map[string]any{"action": "errno", "errno": 1}
					}
				}
				return map[string]any{"action": "continue", "restrict_network": []any{}}
			}
			return map[string]any{"action": "continue"}
		})
	if string(res["stdout"].([]byte)) != "hi\n" || exitCode(res) == 0 {
		t.Fatalf("result: %v", res)
	}
	if len(argvs) != 3 || argvs[0][0] != "/bin/sh" {
		t.Fatalf("argvs: %v", argvs)
	}
}

// Two restrict_network sets in one answer (two ctx.restrict_network calls) are
// intersected by membership: 127.0.0.0/8 and 127.0.0.1 leave 127.0.0.1 (as strings
// they have nothing in common, which refused everything).
func TestRestrictNetworkSetsIntersectByMembership(t *testing.T) {
	sb := newSB(t, map[string]any{"net_allow": []any{"127.0.0.0/8:9"}})
	code := "import socket\nfor h in ('127.0.0.1','127.0.0.2'):\n s=socket.socket()\n try:\n  s.connect((h, 9))\n except OSError as e:\n  print(h, e.errno)\n"
	for _, tc := range []struct {
		name string
		rn   any
		want string
	}{
		{"two sets", []any{[]any{"127.0.0.0/8"}, []any{"127.0.0.1"}}, "127.0.0.1 111\n127.0.0.2 13\n"},
		{"one flat set", []any{"127.0.0.2", "10.0.0.0/8"}, "127.0.0.1 13\n127.0.0.2 111\n"},
		{"none", []any{}, "127.0.0.1 13\n127.0.0.2 13\n"},
	} {
		res := drive(t, sb, map[string]any{"argv": []any{"/usr/bin/python3", "-c", code}, "policy_fn": map[string]any{}},
			func(c map[string]any) map[string]any {
				if c["syscall"] == "execve" {
					return map[string]any{"action": "continue", "restrict_network": tc.rn}
				}
				return map[string]any{"action": "continue"}
			})
		if got := string(res["stdout"].([]byte)); got != tc.want {
			t.Errorf("%s: stdout %q, want %q (%v)", tc.name, got, tc.want, res["stderr"])
		}
	}
	// a set that is not a list of strings applies the exception policy (deny_eperm)
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/true"}, "policy_fn": map[string]any{}},
		func(c map[string]any) map[string]any {
			return map[string]any{"action": "continue", "restrict_network": []any{[]any{"127.0.0.1"}, "x"}}
		})
	if res["success"] == true || !strings.Contains(fmt.Sprint(res["error"]), "operation not permitted") {
		t.Errorf("a malformed restrict_network was accepted: %v", res)
	}
}

func TestHandlerExceptionPolicies(t *testing.T) {
	sb := newSB(t, nil)
	for _, tc := range []struct {
		policy string
		want   func(m map[string]any) bool
	}{
		{"kill", func(m map[string]any) bool { s, _ := policy.AsInt(m["signal"]); return s == 9 || exitCode(m) == 137 }},
		{"deny_eperm", func(m map[string]any) bool {
			return strings.Contains(string(m["stderr"].([]byte)), "Operation not permitted")
		}},
		{"deny_eio", func(m map[string]any) bool {
			return strings.Contains(string(m["stderr"].([]byte)), "Input/output error")
		}},
		{"continue", func(m map[string]any) bool { return exitCode(m) == 0 && string(m["stdout"].([]byte)) == "x\n" }},
	} {
		res := drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c", "/bin/echo x"},
			"handlers": []any{map[string]any{"syscall": "execve", "id": 5, "on_exception": tc.policy}}},
			func(c map[string]any) map[string]any {
				if a, _ := c["argv"].([]any); len(a) > 0 && a[0] == "/bin/echo" {
					return map[string]any{"__error": "boom"}
				}
				return map[string]any{"action": "continue"}
			})
		if !tc.want(res) {
			t.Errorf("%s: %v", tc.policy, res)
		}
	}
}

func TestHandlerAbortKillsRun(t *testing.T) {
	sb := newSB(t, nil)
	start := time.Now()
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c", "/bin/sleep 20"},
		"handlers": []any{map[string]any{"syscall": "execve", "id": 1}}},
		func(c map[string]any) map[string]any {
			if a, _ := c["argv"].([]any); len(a) > 0 && a[0] == "/bin/sleep" {
				return nil // abort
			}
			return map[string]any{"action": "continue"}
		})
	if time.Since(start) > 5*time.Second || res["cancelled"] != true {
		t.Fatalf("abort: %v", res)
	}
}

func TestHandlerDeferDoesNotStallOtherCalls(t *testing.T) {
	// a deferred (async) answer for one thread's call: another process's calls are
	// served meanwhile; the deferred one is answered later by handler_decide
	sb := newSB(t, nil)
	var first map[string]any
	var deferredAt, otherAt time.Time
	done := make(chan struct{})
	res := drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c", "/bin/sleep 0.01 & /bin/echo other; wait"},
		"handlers": []any{map[string]any{"syscall": "execve", "id": 1}}},
		func(c map[string]any) map[string]any {
			a, _ := c["argv"].([]any)
			if len(a) > 0 && a[0] == "/bin/sleep" && first == nil {
				first = c
				deferredAt = time.Now()
				go func() {
					defer close(done)
					time.Sleep(500 * time.Millisecond)
					m, _ := request(t, sb, map[string]any{"op": "handler_decide", "run": c["run"], "event": c["event"],
						"value": map[string]any{"action": "continue"}})
					if m["success"] != true {
						t.Errorf("decide: %v", m)
					}
				}()
				return map[string]any{"action": "defer"}
			}
			if len(a) > 0 && a[0] == "/bin/echo" {
				otherAt = time.Now()
			}
			return map[string]any{"action": "continue"}
		})
	if first != nil {
		<-done
	}
	if string(res["stdout"].([]byte)) != "other\n" || exitCode(res) != 0 {
		t.Fatalf("result: %v", res)
	}
	if otherAt.IsZero() || otherAt.Sub(deferredAt) > 300*time.Millisecond {
		t.Fatalf("the other call waited for the deferred one: %v", otherAt.Sub(deferredAt))
	}
}

// A second thread flips the path between an allowed and a denied file while the
// first opens it: every open the handler allowed must have read the allowed file.
func TestHandlerPathRace(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok"), []byte("ok"), 0o644)
	os.WriteFile(filepath.Join(dir, "no"), []byte("SECRET"), 0o644)
	bin := cProgram(t, dir, "race", raceC)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}})
	res := drive(t, sb, map[string]any{"argv": []any{bin, dir},
		"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
		func(c map[string]any) map[string]any {
			if p, _ := c["path"].(string); strings.HasSuffix(p, "/no") {
				return map[string]any{"action": "errno", "errno": 13}
			}
			return map[string]any{"action": "continue"}
		})
	out := string(res["stdout"].([]byte))
	if strings.Contains(out, "LEAK") {
		t.Fatalf("a racing thread changed the outcome: %s", out)
	}
	t.Logf("race: %s", out)
}

const raceC = `
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static char path[4096];
static volatile int stop;
static size_t off;
static void *flip(void *a) {
	(void)a;
	volatile int i;
	volatile char *p = path;
	while (!stop) {
		p[off] = 'n'; p[off+1] = 'o';
		for (i = 0; i < 2000; i++) ;
		p[off] = 'o'; p[off+1] = 'k';
		for (i = 0; i < 2000; i++) ;
	}
	return 0;
}
int main(int argc, char **argv) {
	pthread_t t; int i, leak = 0, opened = 0;
	snprintf(path, sizeof path, "%s/ok", argv[1]);
	off = strlen(path) - 2;
	pthread_create(&t, 0, flip, 0);
	for (i = 0; i < 3000; i++) {
		char buf[16] = {0};
		int fd = open(path, O_RDONLY);
		if (fd < 0) continue;
		opened++;
		read(fd, buf, sizeof buf - 1);
		close(fd);
		if (strcmp(buf, "SECRET") == 0) leak++;
	}
	stop = 1; pthread_join(t, 0);
	printf("%s opened=%d leaks=%d\n", leak ? "LEAK" : "clean", opened, leak);
	return 0;
}
`

var _ = msgpack.Marshal

// A second thread flips the connect address between an allowed and a refused host
// while the host judges it: no connection the host refused reaches its listener.
func TestHandlerConnectRace(t *testing.T) {
	okL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer okL.Close()
	port := okL.Addr().(*net.TCPAddr).Port
	noL, err := net.Listen("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		t.Skipf("127.0.0.2: %v", err)
	}
	defer noL.Close()
	var leaks, oks atomic.Int64
	for _, l := range []struct {
		l net.Listener
		n *atomic.Int64
	}{{okL, &oks}, {noL, &leaks}} {
		go func() {
			for {
				c, err := l.l.Accept()
				if err != nil {
					return
				}
				l.n.Add(1)
				c.Close()
			}
		}()
	}
	dir := t.TempDir()
	bin := cProgram(t, dir, "c", connectRaceC)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}, "net_allow": []any{fmt.Sprintf(":%d", port)}})
	res := drive(t, sb, map[string]any{"argv": []any{bin, strconv.Itoa(port)}, "policy_fn": map[string]any{}},
		func(c map[string]any) map[string]any {
			if c["syscall"] == "connect" && c["host"] == "127.0.0.2" {
				return map[string]any{"action": "errno", "errno": 13}
			}
			return map[string]any{"action": "continue"}
		})
	time.Sleep(200 * time.Millisecond)
	t.Logf("connect race: %s; accepted ok=%d refused-host=%d", res["stdout"], oks.Load(), leaks.Load())
	if leaks.Load() > 0 {
		t.Fatalf("a racing thread reached the refused host %d times", leaks.Load())
	}
	if oks.Load() == 0 {
		t.Fatalf("no connection got through at all: %v", res)
	}
}

const connectRaceC = `
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
static struct sockaddr_in sa;
static volatile int stop;
static void *flip(void *a) {
	volatile unsigned char *p = (unsigned char *)&sa.sin_addr;
	volatile int i;
	(void)a;
	while (!stop) {
		p[3] = 2; for (i = 0; i < 2000; i++) ;
		p[3] = 1; for (i = 0; i < 2000; i++) ;
	}
	return 0;
}
int main(int argc, char **argv) {
	pthread_t t; int i, ok = 0;
	sa.sin_family = AF_INET; sa.sin_port = htons(atoi(argv[1]));
	sa.sin_addr.s_addr = htonl(0x7f000001);
	pthread_create(&t, 0, flip, 0);
	for (i = 0; i < 1500; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) ok++;
		close(s);
	}
	stop = 1; pthread_join(t, 0);
	printf("connected=%d\n", ok);
	return 0;
}
`

// Closing the sandbox while a call waits for the host kills the run (fail closed):
// nothing of it survives, and the operation is gone.
func TestHandlerCloseWhileParked(t *testing.T) {
	m := map[string]any{}
	for k, v := range basePolicy {
		m[k] = v
	}
	sb, err := NewFromMap(m)
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := request(t, sb, map[string]any{"op": "run_handlers", "argv": []any{"/bin/sh", "-c", "/bin/sleep 30"},
		"handlers": []any{map[string]any{"syscall": "execve", "id": 1}}})
	var pids []int
	for {
		c, ok := resp["call"].(map[string]any)
		if !ok {
			t.Fatalf("the run ended: %v", resp)
		}
		if a, _ := c["argv"].([]any); len(a) > 0 && a[0] == "/bin/sleep" {
			pid, _ := policy.AsInt(c["pid"])
			pids = append(pids, int(pid))
			break
		}
		resp, _ = request(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"],
			"value": map[string]any{"action": "continue"}})
	}
	start := time.Now()
	sb.Close() // the call still waits for its answer
	if time.Since(start) > 5*time.Second {
		t.Fatalf("close took %v", time.Since(start))
	}
	for _, p := range pids {
		if err := unix.Kill(p, 0); err == nil {
			t.Fatalf("pid %d outlived its closed sandbox", p)
		}
	}
}

// One attribution for denials and host calls: concurrent runs on one host zygote
// each get only their own calls (the supervisor routes by the attached run's pid
// namespace), and a judge's refusal is in the result.denials of the run it refused.
func TestHandlerRunsAttributedByNamespace(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644)
	}
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin", dir}})
	var wg sync.WaitGroup
	results := make([]map[string]any, 2)
	strays := make([]int, 2)
	for i, mine := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := map[string]string{"a": "b", "b": "a"}[mine]
			var tok any
			results[i] = drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c",
				fmt.Sprintf("for i in 1 2 3 4 5 6 7 8; do /bin/cat %s/%s %s/%s; done", dir, mine, dir, other)},
				"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
				func(c map[string]any) map[string]any {
					if tok == nil {
						tok = c["run"]
					}
					if c["run"] != tok {
						strays[i]++
					}
					if c["path"] == filepath.Join(dir, other) {
						return map[string]any{"action": "errno", "errno": 13}
					}
					return map[string]any{"action": "continue"}
				})
		}()
	}
	wg.Wait()
	for i, mine := range []string{"a", "b"} {
		res := results[i]
		if strays[i] != 0 || string(res["stdout"].([]byte)) != strings.Repeat(mine, 8) {
			t.Fatalf("run %s: %d calls of another run; stdout %q", mine, strays[i], res["stdout"])
		}
		other := filepath.Join(dir, map[string]string{"a": "b", "b": "a"}[mine])
		ds, _ := res["denials"].([]any)
		if len(ds) != 1 {
			t.Fatalf("run %s: denials %v (sources %v)", mine, ds, res["denials_sources"])
		}
		d := ds[0].(map[string]any)
		if d["syscall"] != "openat" || d["path"] != other || d["errno"] != "EACCES" || exitCodeOf(d["count"]) != 8 {
			t.Fatalf("run %s: denial %v", mine, d)
		}
	}
}

func exitCodeOf(v any) int64 { n, _ := policy.AsInt(v); return n }

// ctx.restrict_max_memory / restrict_max_processes lower the sandbox's cgroup
// limits for the rest of the run (a program allocating or forking past the lowered
// limit fails where it succeeds without), and the policy's limits hold again after
// it; a sandbox without a cgroup cannot lower them: the judge's exception policy.
func TestRestrictMaxMemoryAndProcesses(t *testing.T) {
	sb := newSB(t, map[string]any{"max_memory": "512M", "max_processes": int64(64)})
	alloc := []any{"/usr/bin/python3", "-c", "b = bytearray(200 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok')"}
	lowerOn := func(key string, n int64) func(c map[string]any) map[string]any {
		return func(c map[string]any) map[string]any {
			if c["syscall"] == "execve" && n > 0 {
				return map[string]any{"action": "continue", key: n}
			}
			return map[string]any{"action": "continue"}
		}
	}
	// without a cgroup: the exception policy (policy_fn: deny_eperm) refuses the call
	// whose answer restricted, and says why in the run's denials
	noCgroup := func(sb *Sandbox) {
		t.Helper()
		res := drive(t, sb, map[string]any{"argv": []any{"/bin/sh", "-c", "/bin/true || echo refused"}, "policy_fn": map[string]any{}},
			func(c map[string]any) map[string]any {
				if a, _ := c["argv"].([]any); len(a) > 0 && a[0] == "/bin/true" {
					return map[string]any{"action": "continue", "restrict_max_memory": int64(64 << 20)}
				}
				return map[string]any{"action": "continue"}
			})
		if string(res["stdout"].([]byte)) != "refused\n" || !strings.Contains(fmt.Sprint(res["denials"]), "the sandbox has no cgroup") {
			t.Fatalf("a restriction without a cgroup: %v", res)
		}
	}
	if sb.Group() == nil { // unprivileged here: rlimits, which cannot be lowered from outside
		noCgroup(sb)
		return
	}
	res := drive(t, sb, map[string]any{"argv": alloc, "policy_fn": map[string]any{}}, lowerOn("restrict_max_memory", 64<<20))
	if string(res["stdout"].([]byte)) == "ok\n" || res["success"] == true {
		t.Fatalf("200 MiB under a 64 MiB restriction: %v", res)
	}
	res = drive(t, sb, map[string]any{"argv": alloc, "policy_fn": map[string]any{}}, lowerOn("restrict_max_memory", 0))
	if string(res["stdout"].([]byte)) != "ok\n" {
		t.Fatalf("200 MiB after the restricted run ended (policy 512M): %v", res)
	}
	count := []any{"/usr/bin/python3", "-c", "import os, time\nn = 0\nfor i in range(12):\n try:\n  if os.fork() == 0:\n   time.sleep(1); os._exit(0)\n  n += 1\n except OSError:\n  pass\nprint(n)\nfor i in range(n): os.wait()\n"}
	res = drive(t, sb, map[string]any{"argv": count, "policy_fn": map[string]any{}}, lowerOn("restrict_max_processes", 6))
	lowered, _ := strconv.Atoi(strings.TrimSpace(string(res["stdout"].([]byte))))
	res = drive(t, sb, map[string]any{"argv": count, "policy_fn": map[string]any{}}, lowerOn("restrict_max_processes", 0))
	full, _ := strconv.Atoi(strings.TrimSpace(string(res["stdout"].([]byte))))
	t.Logf("forks: %d under restrict_max_processes(6), %d after", lowered, full)
	if lowered >= 6 || full != 12 {
		t.Fatalf("forks: %d under restrict_max_processes(6), %d after (want < 6, 12): %v", lowered, full, res)
	}
	plain := newSB(t, map[string]any{"max_processes": int64(0)}) // no limit at all: no cgroup (the default 64 makes one)
	noCgroup(plain)
}

// Calls the host allows that the supervisor performs (unlink, mkdir, bind) are
// made in the sandbox's Landlock domain: what Landlock refuses the program itself
// stays refused (a readable-only tree, a TCP port not in net_allow_bind), what it
// allows is done.
func TestHandlerPerformedCallsKeepLandlock(t *testing.T) {
	top := t.TempDir()
	ro := filepath.Join(top, "denied") // on the writable mount, refused by Landlock alone
	rw := filepath.Join(top, "ok")
	for _, d := range []string{ro, rw} {
		os.Mkdir(d, 0o777)
		os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
		os.Chmod(d, 0o777)
	}
	allowed, refused := freeTCPPort(t), freeTCPPort(t)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc"}, "fs_writable": []any{top}, "fs_denied": []any{ro},
		"net_allow_bind": []any{int64(allowed)}})
	for _, prefix := range []string{"", threaded} { // continued as the caller's own, performed for it
		script := prefix + fmt.Sprintf(`
import os, socket
def try_(f):
    try:
        f(); return "ok"
    except OSError as e:
        return "errno%%d" %% e.errno
print(try_(lambda: os.unlink(%[1]q + "/f")), try_(lambda: os.unlink(%[2]q + "/f")),
      try_(lambda: os.mkdir(%[1]q + "/d")), try_(lambda: os.mkdir(%[2]q + "/d")),
      try_(lambda: socket.socket().bind(("127.0.0.1", %[3]d))), try_(lambda: socket.socket().bind(("127.0.0.1", %[4]d))))
`, ro, rw, refused, allowed)
		os.Remove(filepath.Join(rw, "d"))
		os.WriteFile(filepath.Join(rw, "f"), []byte("x"), 0o644)
		res := drive(t, sb, map[string]any{"argv": []any{"/usr/bin/python3", "-c", script},
			"handlers": []any{map[string]any{"syscall": "unlinkat", "id": 1}, map[string]any{"syscall": "mkdir", "id": 2},
				map[string]any{"syscall": "bind", "id": 3}}},
			func(c map[string]any) map[string]any { return map[string]any{"action": "continue"} })
		out := strings.TrimSpace(string(res["stdout"].([]byte)))
		if out != "errno13 ok errno13 ok errno13 ok" {
			t.Fatalf("threaded %v: want Landlock's EACCES on the readable tree and the port not allowed, got %q (%v)", prefix != "", out, res)
		}
		if _, err := os.Stat(filepath.Join(ro, "f")); err != nil {
			t.Fatalf("the readable-only file went: %v", err)
		}
		if _, err := os.Stat(filepath.Join(rw, "d")); err != nil {
			t.Fatalf("the writable tree's mkdir: %v", err)
		}
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// An execve judged by the host from a vfork child (posix_spawn: Python's
// subprocess) of a multi-threaded parent: the parent's threads are held while the
// kernel reads the arguments, then let go; the program runs and the parent goes on.
func TestHandlerExecFromVforkOfThreads(t *testing.T) {
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc"}})
	script := `
import subprocess, threading, time
stop = False
n = [0]
def spin():
    while not stop:
        n[0] += 1
ts = [threading.Thread(target=spin) for _ in range(3)]
for t in ts: t.start()
out = [subprocess.run(["/bin/echo", "hi%d" % i], capture_output=True, text=True).stdout.strip() for i in range(5)]
stop = True
for t in ts: t.join()
print(",".join(out), n[0] > 0)
`
	var execs atomic.Int64
	res := drive(t, sb, map[string]any{"argv": []any{"/usr/bin/python3", "-c", script}, "policy_fn": map[string]any{}},
		func(c map[string]any) map[string]any {
			if c["syscall"] == "execve" {
				execs.Add(1)
			}
			return map[string]any{"action": "continue"}
		})
	out := strings.TrimSpace(string(res["stdout"].([]byte)))
	if out != "hi0,hi1,hi2,hi3,hi4 True" || exitCode(res) != 0 {
		t.Fatalf("got %q (%v)", out, res)
	}
	if execs.Load() < 6 {
		t.Fatalf("the host judged %d execs, want 6", execs.Load())
	}
}

// The path calls performed for the caller besides unlink and mkdir (stat, access,
// readlink, truncate, mknod) answer as the kernel answers the program without
// handlers, Landlock included: the same script's output with every one of them
// judged (and continued) and in a plain run, and truncate and mkfifo refused
// (EACCES) in a tree Landlock leaves readable only.
func TestHandlerPerformedPathCallsAsTheKernel(t *testing.T) {
	top := t.TempDir()
	ro := filepath.Join(top, "denied") // on the writable mount, refused by Landlock alone
	rw := filepath.Join(top, "ok")
	reset := func() { // the directories stay (Landlock's rules hold their inodes)
		for _, d := range []string{ro, rw} {
			os.Mkdir(d, 0o777)
			os.Chmod(d, 0o777)
			for _, n := range []string{"f", "l", "p", "n"} {
				os.Remove(filepath.Join(d, n))
			}
			os.WriteFile(filepath.Join(d, "f"), []byte("xyz"), 0o644)
			os.Symlink("f", filepath.Join(d, "l"))
		}
	}
	reset()
	// a directory no one without a capability may search: the look-ups performed on
	// the answering thread take the caller's credentials (core/supervise/creds.go)
	shut := filepath.Join(top, "shut")
	os.Mkdir(shut, 0o700)
	os.WriteFile(filepath.Join(shut, "f"), nil, 0o644)
	os.Symlink("f", filepath.Join(shut, "l"))
	os.Chmod(shut, 0)
	t.Cleanup(func() { os.Chmod(shut, 0o700) })
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc"}, "fs_writable": []any{top}, "fs_denied": []any{ro}})
	script := fmt.Sprintf(`
import os, stat
D, O, S = %q, %q, %q
def t(f):
    try:
        return repr(f())
    except OSError as e:
        return "errno%%d" %% e.errno
def st(p, **kw):
    s = os.stat(p, **kw)
    return (stat.filemode(s.st_mode), s.st_size, s.st_uid, s.st_gid, s.st_nlink)
print(t(lambda: os.truncate(D + "/f", 0)), t(lambda: os.truncate(O + "/f", 1)),
      t(lambda: os.mkfifo(D + "/p")), t(lambda: os.mkfifo(O + "/p")), t(lambda: os.mknod(O + "/n", 0o600 | stat.S_IFREG)))
print(t(lambda: st(D + "/f")), t(lambda: st(O + "/f")), t(lambda: st(O + "/l", follow_symlinks=False)), t(lambda: st(O + "/p")),
      t(lambda: st(O + "/missing")), t(lambda: st("/usr/bin")))
print(t(lambda: os.access(D + "/f", os.W_OK)), t(lambda: os.access(O + "/f", os.W_OK)), t(lambda: os.access("/usr", os.W_OK)),
      t(lambda: os.access(O + "/n", os.R_OK)), t(lambda: os.readlink(O + "/l")), t(lambda: os.readlink(O + "/f")))
print(t(lambda: st(S + "/f")), t(lambda: st(S + "/l", follow_symlinks=False)), t(lambda: os.readlink(S + "/l")),
      t(lambda: os.access(S + "/f", os.F_OK)))
`, ro, rw, shut)
	argv := []any{"/usr/bin/python3", "-c", script}
	reset()
	plain, _ := request(t, sb, map[string]any{"op": "run", "argv": argv})
	reset()
	calls := []string{"newfstatat", "statx", "faccessat", "faccessat2", "access", "readlinkat", "readlink", "truncate", "mknodat", "mknod"}
	var hs []any
	for i, c := range calls {
		hs = append(hs, map[string]any{"syscall": c, "id": int64(i + 1)})
	}
	judged := map[string]int{}
	var mu sync.Mutex
	res := drive(t, sb, map[string]any{"argv": argv, "handlers": hs}, func(c map[string]any) map[string]any {
		mu.Lock()
		judged[fmt.Sprint(c["syscall"])]++
		mu.Unlock()
		return map[string]any{"action": "continue"}
	})
	want, got := string(plain["stdout"].([]byte)), string(res["stdout"].([]byte))
	t.Logf("judged %v\n%s", judged, got)
	if want != got || exitCode(res) != 0 {
		t.Fatalf("plain run:\n%s%v\njudged:\n%s%v", want, plain["stderr"], got, res["stderr"])
	}
	if !strings.HasPrefix(got, "errno13 None errno13 None None\n") {
		t.Fatalf("want Landlock's EACCES for truncate and mkfifo in the readable tree: %q", got)
	}
	if !strings.HasSuffix(got, "\nerrno13 errno13 errno13 False\n") {
		t.Fatalf("want EACCES beneath a directory of mode 0 (the caller's credentials): %q", got)
	}
	for _, kind := range [][]string{{"newfstatat", "statx"}, {"access", "faccessat", "faccessat2"}, {"readlink", "readlinkat"}, {"truncate"}, {"mknod", "mknodat"}} {
		n := 0
		for _, c := range kind {
			n += judged[c]
		}
		if n == 0 {
			t.Errorf("none of %v judged: %v", kind, judged)
		}
	}
}

// A two-path call is put to the judge with both of its paths (path, path2) and
// performed with them; a judge refusing by the second refuses the call, and
// ctx.deny_path holds for either.
func TestHandlerTwoPathCallsJudgeBothPaths(t *testing.T) {
	top := t.TempDir()
	os.Chmod(top, 0o777)
	secret := filepath.Join(top, "secret")
	os.Mkdir(secret, 0o777)
	os.Chmod(secret, 0o777)
	os.WriteFile(filepath.Join(top, "a"), []byte("x"), 0o666)
	os.WriteFile(filepath.Join(secret, "s"), []byte("s"), 0o666)
	sb := newSB(t, map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc"}, "fs_writable": []any{top}})
	script := fmt.Sprintf(`
import os
T = %q
def t(f):
    try:
        f(); return "ok"
    except OSError as e:
        return "errno%%d" %% e.errno
print(t(lambda: os.rename(T + "/a", T + "/secret/a")), t(lambda: os.link(T + "/secret/s", T + "/stolen")),
      t(lambda: os.symlink("/etc/passwd", T + "/secret/l")), t(lambda: os.rename(T + "/a", T + "/b")),
      t(lambda: os.link(T + "/b", T + "/c")), t(lambda: os.symlink("b", T + "/l")))
`, top)
	var mu sync.Mutex
	var seen []string
	res := drive(t, sb, map[string]any{"argv": []any{"/usr/bin/python3", "-c", script},
		"handlers": []any{map[string]any{"syscall": "rename", "id": 1}, map[string]any{"syscall": "link", "id": 2},
			map[string]any{"syscall": "symlink", "id": 3}}},
		func(c map[string]any) map[string]any {
			p, _ := c["path"].(string)
			p2, _ := c["path2"].(string)
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s %s", c["syscall"], filepath.Base(p), filepath.Base(p2)))
			mu.Unlock()
			if strings.Contains(p, "/secret") || strings.Contains(p2, "/secret") {
				return map[string]any{"action": "errno", "errno": int64(13)}
			}
			return map[string]any{"action": "continue"}
		})
	out := strings.TrimSpace(string(res["stdout"].([]byte)))
	t.Logf("%s; judged %v", out, seen)
	if out != "errno13 errno13 errno13 ok ok ok" {
		t.Fatalf("want the three calls naming the secret tree refused, the others done: %q (%v)", out, res)
	}
	if want := "rename a a,link s stolen,symlink passwd l,rename a b,link b c,symlink b l"; strings.Join(seen, ",") != want {
		t.Fatalf("judged %v, want %s", seen, want)
	}
	if _, err := os.Stat(filepath.Join(top, "stolen")); err == nil {
		t.Fatal("the secret was linked out")
	}
	named := false // the refusal names both paths
	ds, _ := res["denials"].([]any)
	for _, d := range ds {
		if m, _ := d.(map[string]any); m != nil && m["syscall"] == "rename" && m["path"] == filepath.Join(top, "a")+" -> "+filepath.Join(secret, "a") {
			named = true
		}
	}
	if !named {
		t.Fatalf("denials: %v", ds)
	}
	if l, err := os.Readlink(filepath.Join(top, "l")); err != nil || l != "b" {
		t.Fatalf("the symlink: %q %v", l, err)
	}
	// ctx.deny_path on the second path: from the first answer on
	first := true
	res = drive(t, sb, map[string]any{"argv": []any{"/usr/bin/python3", "-c",
		fmt.Sprintf("import os\nfor i in range(2):\n try:\n  os.link(%q, %q + str(i))\n  print('ok')\n except OSError as e:\n  print(e.errno)\n", filepath.Join(top, "b"), filepath.Join(secret, "n"))},
		"handlers": []any{map[string]any{"syscall": "link", "id": 1}}},
		func(c map[string]any) map[string]any {
			if first {
				first = false
				return map[string]any{"action": "continue", "deny_path": []any{secret}}
			}
			return map[string]any{"action": "continue"}
		})
	if out := strings.Fields(string(res["stdout"].([]byte))); len(out) != 2 || out[1] != "13" {
		t.Fatalf("deny_path on path2: %q (%v)", out, res)
	}
}

// A call the supervisor performs for the caller (an open a handler lets through)
// takes the caller's ids and supplementary groups: those of the run's program, not
// the engine's, and after a uid switch not the engine's groups either. The ids come
// from the caller's pidfd at each call and the groups once per run
// (core/supervise/creds.go). The engine runs here in a child process with a
// supplementary group of its own (4242), as root. Files are owned by uid 4321 and
// readable by their group only.
func TestHandlerPerformedOpenTakesTheCallersGroups(t *testing.T) {
	if os.Getenv("SANDTRAP_GROUPS_CHILD") == "" {
		if !kernel.Probe().Root {
			t.Skip("needs root: a supplementary group to hand the engine")
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHandlerPerformedOpenTakesTheCallersGroups$", "-test.v")
		cmd.Env = append(os.Environ(), "SANDTRAP_GROUPS_CHILD=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{4242}}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	top := quietTempDir(t, "groups-")
	for _, f := range []struct {
		name string
		gid  int
	}{{"g4242", 4242}, {"g4243", 4243}, {"gnobody", 65534}} {
		p := filepath.Join(top, f.name)
		os.WriteFile(p, []byte(f.name+"\n"), 0o040)
		os.Chown(p, 4321, f.gid) // group-readable only, owned by nobody the runs are
		os.Chmod(p, 0o040)
	}
	// several processes, each reading each file twice: the first performed call of
	// a run reads its groups, the rest use them
	script := "for i in 1 2; do for f in g4242 g4243 gnobody; do cat " + top + "/$f 2>/dev/null || echo no-$f; done; done"
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		// root: the engine's supplementary group does not reach the run (the zygote
		// drops its groups on a root host) nor its performed calls, which would open
		// g4242 with the supervisor's own groups
		{"engine's ids", map[string]any{}, "no-g4242 no-g4243 no-gnobody"},
		// nobody: its own gid, and no supplementary group left
		{"uid switch", map[string]any{"uid": int64(65534), "gid": int64(65534)}, "no-g4242 no-g4243 gnobody"},
	} {
		m := map[string]any{"fs_readable": []any{"/usr", "/lib", "/lib64", "/bin", "/etc", top}}
		for k, v := range tc.extra {
			m[k] = v
		}
		sb := newSB(t, m)
		// cat, its process's only thread: each allowed open continued as its own
		// (supervise pathContinued); a Python program with a second thread: each
		// performed for it
		for _, argv := range [][]any{{"/bin/sh", "-c", script}, {"/usr/bin/python3", "-c", threaded + fmt.Sprintf(`
for i in (1, 2):
    for f in ("g4242", "g4243", "gnobody"):
        try:
            print(open(%q + "/" + f).read().strip())
        except OSError:
            print("no-" + f)
`, top)}} {
			opens := 0
			res := drive(t, sb, map[string]any{"argv": argv,
				"handlers": []any{map[string]any{"syscall": "openat", "id": 1}}},
				func(c map[string]any) map[string]any { opens++; return map[string]any{"action": "continue"} })
			got := strings.Join(strings.Fields(string(res["stdout"].([]byte))), " ")
			if want := tc.want + " " + tc.want; got != want {
				t.Fatalf("%s, %s: got %q, want %q (%v)", tc.name, argv[0], got, want, res)
			}
			if opens < 6 {
				t.Fatalf("%s, %s: %d opens judged", tc.name, argv[0], opens)
			}
		}
	}
}

// threaded starts a Python program's second thread: its allowed path calls are then
// performed for it, not continued as its own (supervise pathContinued needs the
// caller to be its process's only thread).
const threaded = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"

// cProgram writes src to dir/name.c and builds dir/name with gcc (-O2 -pthread),
// skipping the test where gcc is missing; dir is made searchable for the sandbox.
func cProgram(t *testing.T, dir, name, src string) string {
	t.Helper()
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", bin, c).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v %s", err, out)
	}
	os.Chmod(dir, 0o755)
	return bin
}
