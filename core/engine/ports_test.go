package engine

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/sys/unix"
)

// The sandbox's name is its hostname, in a UTS namespace every run shares; the
// target cannot change it (seccomp refuses sethostname, and with the filter's rule
// lifted the kernel still does: no capability in the namespace's owner), and the
// host's hostname stays.
func TestNameIsTheHostname(t *testing.T) {
	host, _ := os.Hostname()
	sethost := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.sethostname(b"evil", 4)
print(os.uname().nodename, r, os.strerror(ctypes.get_errno()) if r else "")`
	for _, extra := range []map[string]any{{}, {"extra_allow_syscalls": []any{"sethostname"}}} {
		m := map[string]any{"name": "api.local"}
		for k, v := range extra {
			m[k] = v
		}
		sb := newSB(t, m)
		if iso := sb.isolation(); iso.Hostname != "api.local" || len(iso.Degraded) != 0 {
			t.Fatalf("report: hostname %q, degraded %v", iso.Hostname, iso.Degraded)
		}
		for i := 0; i < 2; i++ { // every run shares it
			r := run(sb, "uname", "-n")
			if !r.Success || string(r.Stdout) != "api.local\n" {
				t.Fatalf("uname -n: %q %q %+v", r.Stdout, r.Stderr, r.Error)
			}
		}
		r := run(sb, "/usr/bin/python3", "-c", sethost)
		if got := strings.TrimSpace(string(r.Stdout)); got != "api.local -1 Operation not permitted" {
			t.Errorf("sethostname from the target (%v): %q %s", extra, got, r.Stderr)
		}
	}
	if now, _ := os.Hostname(); now != host {
		t.Fatalf("the host's hostname changed: %q -> %q", host, now)
	}
	// without a name: the host's
	if r := run(newSB(t, nil), "uname", "-n"); strings.TrimSpace(string(r.Stdout)) != host {
		t.Errorf("no name: %q, want %q", r.Stdout, host)
	}
}

func TestNameAndPortRemapProblems(t *testing.T) {
	_, err := NewFromMap(map[string]any{"fs_readable": []any{"/usr"}, "name": "a..b", "port_remap": true})
	if err == nil {
		t.Fatal("accepted")
	}
	e := err.(*Error)
	got := map[string]bool{}
	for _, p := range e.Problems {
		got[p.Field] = true
	}
	if !got["name"] || !got["port_remap"] || len(e.Problems) != 2 {
		t.Fatalf("problems: %+v", e.Problems)
	}
}

// A server that binds the virtual port, reports what getsockname answers, connects
// to itself through the virtual port on loopback, then serves its marker to each
// connection.
const portServer = `import socket, sys
v, mark = int(sys.argv[1]), sys.argv[2].encode()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", v))
s.listen(8)
c = socket.create_connection(("127.0.0.1", v), timeout=5)
a, _ = s.accept()
a.sendall(mark); a.close()
print("ready", s.getsockname()[1], c.recv(16).decode(), flush=True)
c.close()
while True:
    a, _ = s.accept()
    a.sendall(mark)
    a.close()
`

// Two sandboxes bind virtual port 8080 at once: each gets a real port of its own
// (ports()), getsockname answers 8080 inside, a connect to 127.0.0.1:8080 inside
// reaches the sandbox's own server, and the host reaches each server on its real
// port. The mapping goes with the run. A bind of a port not in net_allow_bind is
// still EACCES.
func TestPortRemapTwoSandboxes(t *testing.T) {
	const v = 8080
	pol := map[string]any{"port_remap": true, "net_allow_bind": []any{int64(v)}, "fs_readable": []any{"/usr", "/lib", "/bin", "/etc"}}
	var sbs [2]*Sandbox
	var dones [2]<-chan *Result
	reals := map[uint16]string{}
	for i, mark := range []string{"A", "B"} {
		sbs[i] = newSB(t, pol)
		if iso := sbs[i].isolation(); !iso.Net.PortRemap {
			t.Fatalf("report: %+v", iso.Net)
		}
		lines, done := streamRun(t, sbs[i], "/usr/bin/python3", "-c", portServer, strconv.Itoa(v), mark)
		dones[i] = done
		if l := nextLine(t, lines, 20*time.Second); l != fmt.Sprintf("ready %d %s", v, mark) {
			t.Fatalf("sandbox %s: %q", mark, l)
		}
		ports, socks, err := sbs[i].Ports()
		if err != nil || len(ports) != 1 || len(socks) != 1 || ports[v] == 0 || socks[0].Proto != "tcp" || socks[0].Address != "0.0.0.0" {
			t.Fatalf("sandbox %s: ports %v %+v %v", mark, ports, socks, err)
		}
		if _, dup := reals[ports[v]]; dup {
			t.Fatalf("both sandboxes have real port %d", ports[v])
		}
		reals[ports[v]] = mark
	}
	t.Logf("virtual %d -> real %v", v, reals)
	for real, mark := range reals {
		c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(int(real)), 5*time.Second)
		if err != nil {
			t.Fatalf("the host cannot reach %s on %d: %v", mark, real, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != mark {
			t.Errorf("real port %d answers %q, want %q", real, b, mark)
		}
	}
	// the protocol op
	resp, kind := sbs[0].Exec(mustPack(map[string]any{"op": "ports"}))
	var op struct {
		Success bool              `msgpack:"success"`
		Ports   map[uint16]uint16 `msgpack:"ports"`
		Sockets []PortSocket      `msgpack:"sockets"`
	}
	if err := msgpack.Unmarshal(resp, &op); err != nil || kind != "" || !op.Success || len(op.Ports) != 1 || reals[op.Ports[v]] != "A" || len(op.Sockets) != 1 {
		t.Fatalf("ports op: %v %v %+v", kind, err, op)
	}
	if _, kind := sbs[0].Exec(mustPack(map[string]any{"op": "ports", "x": 1})); kind != KindInvalidRequest {
		t.Errorf("ports with an unknown key: %q", kind)
	}
	for _, sb := range sbs {
		sb.Cancel("", true)
	}
	for _, d := range dones {
		<-d
	}
	for _, sb := range sbs {
		if ports, _, _ := sb.Ports(); len(ports) != 0 {
			t.Errorf("after the run: %v", ports)
		}
	}
	// a port that is not virtual, and the privileged-port floor
	r := run(sbs[0], "/usr/bin/python3", "-c", `import socket
for p in (8081, 0):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p, "bound")
    except OSError as e:
        print(p, e.errno)`)
	if got := strings.TrimSpace(string(r.Stdout)); got != fmt.Sprintf("8081 %d\n0 %d", unix.EACCES, unix.EACCES) {
		t.Errorf("binds outside net_allow_bind: %q %s", got, r.Stderr)
	}
}

// Landlock's bind rules stay the policy's under port_remap (the floor under what the
// not see (the test hook turns the bind trap into "continue" for the whole call)
// of a port outside net_allow_bind is still EACCES, from the kernel.
func TestPortRemapKeepsLandlockBindRules(t *testing.T) {
	sb := newSB(t, map[string]any{"port_remap": true, "net_allow_bind": []any{int64(8080)}})
	// a child of the sandbox binding from a process the supervisor answers with
	// continue would need a hook; the kernel's own rule is checked by confine's
	// filter-less path instead: the Landlock ruleset's bind ports are the policy's.
	if iso := sb.isolation(); iso.Landlock == nil || len(iso.Landlock.BindPorts) != 1 || iso.Landlock.BindPorts[0] != 8080 {
		t.Fatalf("landlock bind ports: %+v", iso.Landlock)
	}
	_ = bufio.NewScanner
}
