package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/vmihailenco/msgpack/v5"
)

const python = "/usr/bin/python3"

func handle(t *testing.T) *engine.Sandbox {
	t.Helper()
	sb, err := engine.NewFromMap(map[string]any{"allow_degraded": true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return sb
}

func call(t *testing.T, sb *engine.Sandbox, req map[string]any) (map[string]any, string) {
	t.Helper()
	b, _ := msgpack.Marshal(req)
	resp, kind := sb.Exec(b)
	var m map[string]any
	if err := msgpack.Unmarshal(resp, &m); err != nil {
		t.Fatalf("response: %v", err)
	}
	return m, kind
}

func num(v any) int64 {
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case int64:
		return n
	case uint8:
		return int64(n)
	case uint16:
		return int64(n)
	case uint32:
		return int64(n)
	case uint64:
		return int64(n)
	}
	return -1
}

// A granted function is a host call: the exec waits for the answer, which the
// sandboxed code gets as the call's value.
func TestCoopExecWithAHostCall(t *testing.T) {
	for _, level := range []string{"process", "kernel"} {
		t.Run(level, func(t *testing.T) {
			sb := handle(t)
			root := t.TempDir()
			open, kind := call(t, sb, map[string]any{"op": "coop_open", "level": level, "interpreter": python,
				"filesystem_root": root, "policy": map[string]any{"timeout": 20.0,
					"grants": []any{map[string]any{"kind": "host_fn", "name": "twice", "ref": "twice"}}}})
			if kind != "" {
				t.Fatalf("coop_open: %v", open)
			}
			iso := open["isolation"].(map[string]any)
			if iso["level"] != level || iso["python"].(map[string]any)["interpreter"] != python {
				t.Fatalf("report: %v", iso)
			}
			resp, kind := call(t, sb, map[string]any{"op": "coop_exec", "code": "x = twice(21)\nprint(x)"})
			c, ok := resp["call"].(map[string]any)
			if kind != "" || !ok || c["kind"] != "fn" || c["name"] != "twice" || num(c["args"].([]any)[0]) != 21 {
				t.Fatalf("want a call of twice(21), got %v", resp)
			}
			resp, kind = call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"], "value": 42})
			if kind != "" || resp["error"] != nil || resp["stdout"] != "42\n" || num(resp["namespace"].(map[string]any)["x"]) != 42 {
				t.Fatalf("exec: %v", resp)
			}
			if r, ok := resp["isolation"].(map[string]any); ok { // sent when it changed
				iso = r
			}
			sub := iso["subprocess"].(map[string]any)
			if sub["allowed"] != (level == "process") {
				t.Fatalf("subprocess: %v", sub)
			}
			// an error answer raises in the sandboxed code; an unknown name never reaches the host
			resp, _ = call(t, sb, map[string]any{"op": "coop_exec", "code": "try:\n    twice(1)\nexcept Exception as e:\n    m = str(e)\ntry:\n    other = globals()\nexcept Exception:\n    pass\n"})
			c = resp["call"].(map[string]any)
			resp, _ = call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"],
				"error": map[string]any{"type": "ValueError", "message": "no"}})
			if ns, _ := resp["namespace"].(map[string]any); ns["m"] != "ValueError: no" {
				t.Fatalf("error answer: %v", resp)
			}
			// abort: the exec ends (the worker is killed), the next one gets a fresh worker
			resp, _ = call(t, sb, map[string]any{"op": "coop_exec", "code": "twice(1)"})
			c = resp["call"].(map[string]any)
			resp, _ = call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"], "abort": true})
			if e, _ := resp["error"].(map[string]any); e["type"] != "StCancelled" {
				t.Fatalf("abort: %v", resp)
			}
			resp, _ = call(t, sb, map[string]any{"op": "coop_exec", "code": "y = 1"})
			if resp["restarted"] != true || resp["error"] != nil {
				t.Fatalf("after abort: %v", resp)
			}
		})
	}
}

func TestCoopOpenNamesEveryProblem(t *testing.T) {
	sb := handle(t)
	resp, kind := call(t, sb, map[string]any{"op": "coop_open", "level": "vm", "interpreter": "/nonexistent/python3",
		"filesystem_root": "/nonexistent/root", "policy": map[string]any{"timeout": -1, "tick_limt": 3}, "bogus": 1,
		"preload_grants": "yes"})
	msg, _ := resp["error"].(map[string]any)["message"].(string)
	if kind != engine.KindInvalidRequest {
		t.Fatalf("kind %q: %v", kind, resp)
	}
	for _, want := range []string{"level", "/nonexistent/python3", "/nonexistent/root", "policy.timeout", "tick_limt", "bogus",
		"preload_grants must be a boolean"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q not named in %q", want, msg)
		}
	}
	if _, kind := call(t, sb, map[string]any{"op": "coop_exec", "code": "x = 1"}); kind != engine.KindInvalidRequest {
		t.Fatalf("coop_exec before coop_open: %q", kind)
	}
}

// preload_grants false: the template's start frame keeps only the grants that import
// nothing (host_fn); the init frame keeps them all.
func TestWithoutImportsKeepsOnlyHostFunctions(t *testing.T) {
	pol := map[string]any{"version": 1, "timeout": 5.0, "grants": []any{
		map[string]any{"kind": "module", "name": "json", "ref": "json"},
		map[string]any{"kind": "host_fn", "name": "twice", "ref": "twice"},
		map[string]any{"kind": "cls", "name": "Fraction", "ref": "fractions:Fraction"}}}
	b, _ := msgpack.Marshal(map[string]any{"op": "coop_open", "policy": pol})
	r, err := newReader(b, "coop_open", "op", "policy")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := portablePolicy(r)
	var got, full map[string]any
	if err := msgpack.Unmarshal(encodeSorted(withoutImports(out, r.m["policy"])), &got); err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(encodeSorted(out), &full); err != nil {
		t.Fatal(err)
	}
	gs := got["grants"].([]any)
	if len(gs) != 1 || gs[0].(map[string]any)["name"] != "twice" || got["timeout"] != 5.0 {
		t.Fatalf("template policy: %v", got)
	}
	if len(full["grants"].([]any)) != 3 {
		t.Fatalf("the full policy lost grants: %v", full)
	}
}

func TestWorkerFramesAreCheckedWhole(t *testing.T) {
	result := func(over map[string]any) []byte {
		m := map[string]any{"op": "result", "stdout": "", "stderr": "", "namespace": map[string]any{}, "error": nil,
			"traceback": nil, "ticks": 0, "stdout_truncated": 0, "duration": 0.5}
		for k, v := range over {
			m[k] = v
		}
		b, _ := msgpack.Marshal(m)
		return b
	}
	good := result(nil)
	if f, op, err := parseFrame(good); err != nil || op != "result" || f.checkResult(false) != nil {
		t.Fatalf("a good result: %v %v", err, f.checkResult(false))
	}
	bad := map[string][]byte{
		"ticks a string":    result(map[string]any{"ticks": "many"}),
		"ticks a bool":      result(map[string]any{"ticks": true}),
		"stdout bytes":      result(map[string]any{"stdout": []byte("x")}),
		"namespace a list":  result(map[string]any{"namespace": []any{1}}),
		"error without msg": result(map[string]any{"error": map[string]any{"type": "ValueError"}}),
		"duration missing":  result(map[string]any{"duration": nil}),
	}
	for name, b := range bad {
		f, _, err := parseFrame(b)
		if err == nil {
			err = f.checkResult(false)
		}
		if _, ok := err.(*protocolError); !ok {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	// spooled values (spool=): only a bare spool file name, each once, never a path
	file := strings.Repeat("ab", 16) + ".msgpack"
	sp := func(entries map[string]any) []byte { return result(map[string]any{"spooled": entries}) }
	entry := func(size any, file any) map[string]any { return map[string]any{"size": size, "file": file} }
	okSpool := sp(map[string]any{"big": entry(70000, file)})
	if f, _, err := parseFrame(okSpool); err != nil || f.checkResult(true) != nil {
		t.Fatalf("a good spooled result: %v %v", err, f.checkResult(true))
	}
	badSpool := map[string][]byte{
		"no spool_dir":      okSpool, // checked with spool false below
		"dot-dot":           sp(map[string]any{"big": entry(1, "../"+file)}),
		"absolute":          sp(map[string]any{"big": entry(1, "/etc/passwd")}),
		"subdirectory":      sp(map[string]any{"big": entry(1, "x/"+file)}),
		"other suffix":      sp(map[string]any{"big": entry(1, strings.Repeat("ab", 16)+".pkl")}),
		"upper hex":         sp(map[string]any{"big": entry(1, strings.Repeat("AB", 16)+".msgpack")}),
		"newline":           sp(map[string]any{"big": entry(1, file+"\n")}),
		"negative size":     sp(map[string]any{"big": entry(-1, file)}),
		"size a string":     sp(map[string]any{"big": entry("1", file)}),
		"extra key":         sp(map[string]any{"big": map[string]any{"size": 1, "file": file, "path": "/x"}}),
		"same file twice":   sp(map[string]any{"a": entry(1, file), "b": entry(1, file)}),
		"also in namespace": result(map[string]any{"namespace": map[string]any{"big": 1}, "spooled": map[string]any{"big": entry(1, file)}}),
		"not a map":         result(map[string]any{"spooled": []any{file}}),
	}
	for name, b := range badSpool {
		f, _, err := parseFrame(b)
		if err == nil {
			err = f.checkResult(name != "no spool_dir")
		}
		if _, ok := err.(*protocolError); !ok {
			t.Errorf("spooled, %s: accepted (%v)", name, err)
		}
	}
	for name, b := range map[string][]byte{"deep": append([]byte(strings.Repeat("\x91", 200)), 0xc0),
		"trailing": append(good, 0), "no op": {0x80}, "int key": {0x81, 0x01, 0x02}} {
		if _, _, err := parseFrame(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	c, _ := msgpack.Marshal(map[string]any{"op": "call", "name": "f", "args": []any{}, "kwargs": map[any]any{1: 2}})
	if f, _, err := parseFrame(c); err != nil || f.checkCall() == nil {
		t.Errorf("a call with an int keyword name was accepted")
	}
}

func TestForkStreamsClonesAndReduceOrdersThem(t *testing.T) {
	sb, err := engine.NewFromMap(map[string]any{"fs_readable": []any{"/usr", "/lib", "/bin"}, "max_output": 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	resp, kind := call(t, sb, map[string]any{"op": "fork", "n": 3, "interpreter": python, "init_src": "base = 40",
		"work_src": "print(base + CLONE_ID)\nif CLONE_ID == 1:\n    print('x' * 100)"})
	got := map[int64]map[string]any{}
	for kind == "" && resp["call"] != nil {
		c := resp["call"].(map[string]any)
		if c["kind"] != "clones" {
			t.Fatalf("call kind %v", c["kind"])
		}
		for _, it := range c["items"].([]any) {
			m := it.(map[string]any)
			got[num(m["id"])] = m
		}
		resp, kind = call(t, sb, map[string]any{"op": "answer", "pending": resp["pending"], "call": c["id"]})
	}
	if kind != "" || resp["done"] != true || num(resp["clones"]) != 3 || len(got) != 3 {
		t.Fatalf("fork: %v %v (%d clones)", kind, resp, len(got))
	}
	if string(got[0]["stdout"].([]byte)) != "40\n" || got[1]["stdout_truncated"] != true || len(got[1]["stdout"].([]byte)) != 10 {
		t.Fatalf("clones: %v", got)
	}
	py := resp["isolation"].(map[string]any)["python"].(map[string]any)
	if py["interpreter"] != python {
		t.Fatalf("report: %v", py)
	}
	r, _ := call(t, sb, map[string]any{"op": "reduce", "argv": []any{"cat"}, "clones": []any{
		map[string]any{"id": 2, "stdout": []byte("c")}, map[string]any{"id": 0, "stdout": []byte("a")},
		map[string]any{"id": 1, "stdout": []byte("b")}}})
	if string(r["stdout"].([]byte)) != "abc" {
		t.Fatalf("reduce: %v", r)
	}
	// an init that fails names init_fn; one without init does not
	r, kind = call(t, sb, map[string]any{"op": "fork", "n": 1, "interpreter": python, "init_src": "1/0", "work_src": "pass"})
	if msg := r["error"].(map[string]any)["message"].(string); kind != engine.KindSpawn || !strings.HasPrefix(msg, "init_fn failed in the template: ZeroDivisionError") {
		t.Fatalf("failing init: %q %v", kind, r)
	}
}

func TestRuntimePathsOfAVirtualEnvironment(t *testing.T) {
	venv := t.TempDir()
	os.Mkdir(filepath.Join(venv, "bin"), 0o755)
	os.Symlink(python, filepath.Join(venv, "bin", "python"))
	os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = /usr/bin\ninclude-system-site-packages = false\n"), 0o644)
	got := findRuntime(filepath.Join(venv, "bin", "python"))
	if len(got) < 2 || got[0].Path != venv || !strings.Contains(got[0].Why, "pyvenv.cfg") || got[1].Path != "/usr" {
		t.Fatalf("runtime paths: %+v", got)
	}
	if p, err := interpreter(""); err != nil || script(p) {
		t.Fatalf("the engine's pick: %q %v", p, err)
	}
}

// The engine's default exec timeout is the guest runtime's Policy() default: a
// binding that leaves it out (Node) and one that sends Policy().timeout (Python) agree.
func TestTheDefaultTimeoutIsPolicys(t *testing.T) {
	src, err := os.ReadFile("../guest/python/sandtrap_guest/policy.py")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("timeout: float | None = %.1f", DefaultTimeout)
	if !strings.Contains(string(src), want) {
		t.Fatalf("policy.py's Policy() does not default to %gs (%q)", DefaultTimeout, want)
	}
}

// state_encoded: the response's state is bin, the state map's own msgpack bytes
// (kept opaque by a binding that cannot hold msgpack's map keys, as JavaScript);
// sent back as state, bin restores it into a fresh worker as the map does, and a
// bin that is not one encoded map is refused.
func TestCoopStateEncoded(t *testing.T) {
	open := func() *engine.Sandbox {
		sb := handle(t)
		if resp, kind := call(t, sb, map[string]any{"op": "coop_open", "level": "process", "interpreter": python,
			"policy": map[string]any{"timeout": 20.0}}); kind != "" {
			t.Fatalf("coop_open: %v", resp)
		}
		return sb
	}
	sb := open()
	resp, kind := call(t, sb, map[string]any{"op": "coop_exec", "code": "d = {'a': 'one'}\ndef f():\n    return d['a']\n",
		"snapshot": true, "state_encoded": true})
	b, ok := resp["state"].([]byte)
	if kind != "" || !ok {
		t.Fatalf("want the state as bin: %v", resp)
	}
	var st map[string]any
	if err := msgpack.Unmarshal(b, &st); err != nil || st["version"] == nil || !strings.Contains(fmt.Sprint(st["source"]), "def f") {
		t.Fatalf("the bin is not the state map: %v %v", err, st)
	}
	plain, _ := call(t, sb, map[string]any{"op": "coop_exec", "code": "", "snapshot": true})
	if _, ok := plain["state"].(map[string]any); !ok {
		t.Fatalf("without state_encoded the state is a map: %v", plain)
	}
	fresh := open()
	resp, kind = call(t, fresh, map[string]any{"op": "coop_exec", "code": "x = f()", "state": b})
	if ns, _ := resp["namespace"].(map[string]any); kind != "" || resp["error"] != nil || ns["x"] != "one" {
		t.Fatalf("restored from bin: %v", resp)
	}
	for _, bad := range [][]byte{{0x91, 0x01}, {0x81, 0xa1, 'a'}, []byte("not msgpack")} {
		resp, kind = call(t, open(), map[string]any{"op": "coop_exec", "code": "", "state": bad})
		if kind != engine.KindInvalidRequest {
			t.Fatalf("state %x: want invalid_request, got %q %v", bad, kind, resp)
		}
	}
}

func TestRPCFramesAndTargets(t *testing.T) {
	rpc := func(over map[string]any) []byte {
		m := map[string]any{"op": "rpc", "target": "h", "method": "get", "args": []any{1}, "kwargs": map[string]any{"k": 2}}
		for k, v := range over {
			m[k] = v
		}
		b, _ := msgpack.Marshal(m)
		return b
	}
	if f, _, err := parseFrame(rpc(nil)); err != nil || f.checkRPC() != nil {
		t.Fatalf("a good rpc frame: %v %v", err, f.checkRPC())
	}
	for name, over := range map[string]map[string]any{
		"dunder":       {"method": "__class__"},
		"private":      {"method": "_secret"},
		"dotted":       {"method": "a.b"},
		"unicode":      {"method": "gét"},
		"digit first":  {"method": "1x"},
		"long method":  {"method": strings.Repeat("m", 201)},
		"method int":   {"method": 1},
		"no target":    {"target": ""},
		"long target":  {"target": strings.Repeat("t", 201)},
		"args map":     {"args": map[string]any{}},
		"kwargs list":  {"kwargs": []any{}},
		"kwargs int k": {"kwargs": map[any]any{1: 2}},
	} {
		f, _, err := parseFrame(rpc(over))
		if err == nil {
			err = f.checkRPC()
		}
		if _, ok := err.(*protocolError); !ok {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	// a live-object grant is an rpc target ("grant:<name>") and imports nothing
	pol := map[string]any{"version": 1, "grants": []any{
		map[string]any{"kind": "object", "name": "ledger", "ref": "ledger", "methods": []any{"add"}, "attributes": []any{}},
		map[string]any{"kind": "module", "name": "json", "ref": "json"}}}
	b, _ := msgpack.Marshal(map[string]any{"op": "coop_open", "policy": pol})
	r, err := newReader(b, "coop_open", "op", "policy")
	if err != nil {
		t.Fatal(err)
	}
	out, lim := portablePolicy(r)
	if !lim.rpcTargets["grant:ledger"] || len(lim.rpcTargets) != 1 {
		t.Fatalf("rpc targets: %v", lim.rpcTargets)
	}
	var got map[string]any
	if err := msgpack.Unmarshal(encodeSorted(withoutImports(out, r.m["policy"])), &got); err != nil {
		t.Fatal(err)
	}
	if gs := got["grants"].([]any); len(gs) != 1 || gs[0].(map[string]any)["name"] != "ledger" {
		t.Fatalf("template policy: %v", got)
	}
}
