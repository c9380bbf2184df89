// Command demo runs code an AI agent might write inside a sandtrap sandbox and shows
// what the sandbox let through and what it contained. Run it with `make demo`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandtrap/sandtrap/core/engine"
)

// agentScript is what an over-eager agent produced for "summarise the sales data":
// it does the job, then pokes around.
const agentScript = `
import os, socket, subprocess, sys, json

def attempt(name, fn):
    try:
        out = fn()
        print(f"{name:34} ALLOWED  {out}")
    except Exception as e:
        print(f"{name:34} BLOCKED  {type(e).__name__}: {e}")

# the actual task: read the input, write a summary into the workspace
rows = [l.split(",") for l in open(os.environ["WORKSPACE"] + "/sales.csv").read().split()[1:]]
total = sum(int(r[1]) for r in rows)
open(os.environ["WORKSPACE"] + "/summary.json", "w").write(json.dumps({"total": total}))
print(f"{'task: summarise sales.csv':34} DONE     total={total}")

attempt("read the host's SSH keys", lambda: open("/root/.ssh/id_rsa").read()[:20])
attempt("read /etc/shadow", lambda: open("/etc/shadow").read()[:20])
attempt("read the secret next to the input", lambda: open(os.environ["WORKSPACE"] + "/../secret.txt").read())
attempt("write outside the workspace", lambda: open("/tmp/pwned", "w").write("x"))
attempt("phone home (TCP 1.1.1.1:443)", lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))
attempt("DNS over UDP", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("chmod a system file", lambda: os.chmod("/usr/bin/python3", 0o777))
attempt("new user namespace (unshare -U)", lambda: os.unshare(os.CLONE_NEWUSER) if hasattr(os, "unshare") else __import__("ctypes").CDLL(None, use_errno=True).unshare(0x10000000) == 0 or (_ for _ in ()).throw(OSError(__import__("ctypes").get_errno(), "unshare")))
subprocess.Popen(["sh", "-c", "setsid sleep 600 &"]).wait()
print(f"{'start a daemon to outlive the run':34} STARTED  (the host checks below)")
def bomb():
    n = 0
    try:
        while True:
            if os.fork() == 0:
                import time; time.sleep(30); os._exit(0)
            n += 1
    except OSError as e:
        raise OSError(e.errno, f"fork refused after {n} children") from None
attempt("fork bomb", bomb)
`

func main() {
	tmp, err := os.MkdirTemp("", "sandtrap-demo")
	check(err)
	defer os.RemoveAll(tmp)
	work := filepath.Join(tmp, "workspace")
	check(os.Mkdir(work, 0o755))
	check(os.WriteFile(filepath.Join(work, "sales.csv"), []byte("region,amount\nnorth,120\nsouth,80\neast,42\n"), 0o644))
	check(os.WriteFile(filepath.Join(tmp, "secret.txt"), []byte("the host's secret"), 0o644))
	check(os.WriteFile(filepath.Join(tmp, "agent.py"), []byte(agentScript), 0o644))

	sb, err := engine.NewFromMap(map[string]any{
		"fs_readable":   []any{"/usr", "/lib", "/bin", filepath.Join(tmp, "agent.py")},
		"fs_writable":   []any{work},
		"max_memory":    "256M",
		"max_processes": int64(32),
		"max_cpu_time":  10.0,
		"timeout":       30.0,
		"clean_env":     true,
		"env":           map[string]any{"WORKSPACE": work},
	})
	check(err)
	defer sb.Close()

	fmt.Println("sandtrap demo: running agent-written code under Landlock + seccomp + limits")
	fmt.Printf("  readable: /usr /lib /bin agent.py   writable: %s   network: none\n\n", work)
	res := sb.Run(&engine.RunRequest{Argv: []string{"/usr/bin/python3", filepath.Join(tmp, "agent.py")}, StdinFD: -1, StdoutFD: -1})
	fmt.Print(string(res.Stdout))
	if len(res.Stderr) > 0 {
		fmt.Printf("\n(stderr)\n%s", res.Stderr)
	}
	summary, _ := os.ReadFile(filepath.Join(work, "summary.json"))
	_, pwned := os.Stat("/tmp/pwned")
	fmt.Printf("\nrun: success=%v exit=%v wall=%.2fs peak_rss=%d KiB\n", res.Success, deref(res.ExitCode), res.Usage.WallS, res.Usage.PeakMemory/1024)
	fmt.Printf("workspace/summary.json on the host: %s\n", summary)
	fmt.Printf("/tmp/pwned exists on the host: %v\n", pwned == nil)
	fmt.Printf("daemons left running: %d\n", countSleepers())
	iso := res.Isolation
	fmt.Printf("\nisolation: landlock ABI %d (%d rules), seccomp %d denied syscalls, pid namespace %v, tree kill %s, limits %s\n",
		iso.Landlock.ABI, len(iso.Landlock.Rules), len(iso.Seccomp.Denied), iso.PidNamespace, iso.TreeKill, limits(iso))
	if strings.Contains(string(res.Stdout), "ALLOWED") || countSleepers() > 0 || pwned == nil || !res.Success {
		fmt.Println("\nsomething was allowed that the policy should have contained")
		os.Exit(1)
	}
}

func limits(iso *engine.Isolation) string {
	var parts []string
	for k, v := range iso.Limits {
		parts = append(parts, k+"="+v.Via)
	}
	return strings.Join(parts, " ")
}

func countSleepers() int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), "sleep\x00600") {
			n++
		}
	}
	return n
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
