package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/hostcall"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	"github.com/vmihailenco/msgpack/v5"
)

// The cooperative Python sandbox's driver: coop_open makes a sandbox handle a
// cooperative sandbox (a worker policy for its level, built here), coop_exec runs
// code in its worker — a fork of the configuration's template, started on first use
// and again after a crash or after the host confined itself — answering the
// worker's calls of granted functions through host calls (package hostcall). The
// worker is hostile: every frame is checked (frames.go), one deadline covers the
// whole exec, host calls included, and any fault ends it. docs/protocol.md,
// "cooperative sandbox", has every key.

const (
	// DefaultTimeout is an exec's timeout when the portable policy has none (the
	// guest runtime's Policy() has the same default).
	DefaultTimeout = 30.0
	// Grace is how long a worker may overrun the timeout before it is killed.
	Grace = 0.5
	// initTimeout bounds a fresh worker's init.
	initTimeout = 30.0
	// workerMemory is what a worker may use beyond the policy's memory_limit_bytes (the
	// interpreter and the runtime) before the kernel stops it.
	workerMemory = 256 << 20
	// workerProcesses bounds a kernel worker's tasks (threads count).
	workerProcesses = 64
	// portableVersion is the guest runtime's portable policy format.
	portableVersion = 1
)

// the worker program, unless a test names another
const workerModule = "sandtrap_guest.worker"

type coop struct {
	owner         *engine.Sandbox
	level         string
	worker        *engine.Sandbox
	argv          []string
	start, init   []byte // the template start frame and the init frame
	spawn         bool
	timeout       float64 // 0: none
	hostFns       map[string]bool
	rpcTargets    map[string]bool // the host objects the host serves (rpc host calls)
	vfs           bool            // the host serves a VirtualFS (fs host calls)
	spool         bool            // spool_dir: the worker may answer with spooled values
	allowDegraded bool
	denySpawn     bool

	slot chan struct{} // one exec at a time (held while one waits for an answer)

	mu      sync.Mutex         // the fields below
	session uint64             // 0: no worker
	started bool               // a worker has run (the next start is a restart)
	base    []byte             // the worker sandbox's isolation report, encoded
	extra   map[string]any     // what the report adds to it: level, python, subprocess
	encoded msgpack.RawMessage // the report: base with extra
	sent    bool               // the binding has the report as it is (responses omit it)
	closed  bool
}

var (
	coopsMu sync.Mutex
	coops   = map[*engine.Sandbox]*coop{}
)

func init() {
	engine.RegisterOp("coop_open", coopOpen)
	engine.RegisterOp("coop_exec", coopExec)
	engine.RegisterOp("fork", forkOp)
	engine.RegisterOp("reduce", reduceOp)
}

func getCoop(s *engine.Sandbox) *coop {
	coopsMu.Lock()
	defer coopsMu.Unlock()
	return coops[s]
}

func coopOpen(s *engine.Sandbox, req []byte) ([]byte, string) {
	c, err := openCoop(s, req)
	if err != nil {
		return errorResponse(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = true
	return engine.Encode(map[string]any{"isolation": c.encoded}), ""
}

func openCoop(s *engine.Sandbox, req []byte) (*coop, error) {
	r, err := newReader(req, "coop_open", "op", "level", "policy", "interpreter", "sys_path", "module_dirs",
		"filesystem_root", "echo", "vfs", "allow_degraded", "preload_grants", "worker_module", "worker_path", "tag",
		"rpc_targets", "spool_dir")
	if err != nil {
		return nil, err
	}
	c := &coop{owner: s, slot: make(chan struct{}, 1)}
	c.level = r.str("level")
	if c.level != "process" && c.level != "kernel" {
		r.addf("level must be \"process\" or \"kernel\", got %q", c.level)
	}
	portable, limits := portablePolicy(r)
	interpName := r.str("interpreter")
	sysPath := r.absPaths("sys_path")
	moduleDirs := r.absPaths("module_dirs")
	root := r.str("filesystem_root")
	if root != "" {
		if real, err := filepath.EvalSymlinks(root); err != nil {
			r.addf("filesystem_root %s: %v", root, unwrap(err))
		} else if st, err := os.Stat(real); err != nil || !st.IsDir() {
			r.addf("filesystem_root %s: not a directory", root)
		} else {
			root = real
		}
		if !filepath.IsAbs(root) {
			r.addf("filesystem_root %q is not an absolute path", root)
		}
	}
	spoolDir := r.str("spool_dir")
	if spoolDir != "" {
		if err := checkSpoolDir(spoolDir, root); err != nil {
			r.addf("spool_dir %s: %v", spoolDir, err)
		}
		c.spool = true
	}
	echo := r.m["echo"]
	checkEcho(r, echo)
	// vfs: the host serves a VirtualFS; the worker asks for its files with fs calls
	vfsVal := r.m["vfs"]
	var vfsInit any
	if !vfsVal.IsNil() {
		f, ok := vfsVal.Fields()
		mr, okRoot := f["module_root"].Str()
		if !ok || len(f) != 1 || !okRoot || !strings.HasPrefix(mr, "/") {
			r.addf("vfs must be a map {module_root: an absolute path}")
		} else if root != "" {
			r.addf("give filesystem_root or vfs, not both")
		}
		c.vfs = true
		vfsInit = map[string]any{"module_root": mr}
	}
	c.allowDegraded = r.boolean("allow_degraded")
	// preload_grants (default true): the template imports the granted modules and
	// classes, and its forks inherit them; false: the template imports none of
	// them and each fork imports them at init (grants unsafe to import there)
	preload := !r.has("preload_grants") || r.boolean("preload_grants")
	module := r.str("worker_module")
	if module == "" {
		module = workerModule
	}
	workerPath := r.absPaths("worker_path")
	rpcTargets := r.strs("rpc_targets")
	for _, t := range rpcTargets {
		if t == "" || len(t) > maxRPCName || strings.HasPrefix(t, "grant:") {
			r.addf("rpc_targets: %q is not a target name (1 to %d bytes, not starting with \"grant:\")", truncate(t, 60), maxRPCName)
		}
	}
	interp, ierr := interpreter(interpName)
	if ierr != nil {
		r.addf("%v", ierr)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	if getCoop(s) != nil {
		return nil, &engine.Error{Kind: engine.KindInvalidRequest, Message: "invalid request: coop_open: this sandbox is a cooperative sandbox already"}
	}
	guest, err := guestDir()
	if err != nil {
		return nil, err
	}
	c.timeout = limits.timeout
	c.hostFns = limits.hostFns
	// the host objects a worker's proxies may call: the policy's live-object grants
	// ("grant:<name>") and the binding's rpc_handlers (rpc_targets)
	c.rpcTargets = limits.rpcTargets
	for _, t := range rpcTargets {
		c.rpcTargets[t] = true
	}
	c.denySpawn = c.level == "kernel" && !limits.allowSubprocess
	c.spawn = !c.denySpawn
	c.argv = []string{interp, "-S", "-m", module}

	env := map[string]any{"PYTHONPATH": strings.Join(append([]string{guest}, workerPath...), ":"),
		"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTHONSAFEPATH": "1"}
	var pol map[string]any
	var granted []Grant
	runtime := runtimePaths(interp)
	if c.level == "process" {
		// crash containment only: the worker sees everything this process sees
		pol = map[string]any{"fs_readable": []any{"/"}, "fs_writable": []any{"/"}, "net_allow": []any{"*"},
			"net_allow_udp": true, "net_allow_unix": true, "allow_degraded": true, "env": env,
			"max_processes": int64(0)} // no limit (not the default 64), as this level promises nothing but a crash boundary
		granted = []Grant{{Path: "/", Why: `isolation "process": the worker reads and writes what this process can`}}
	} else {
		granted = append(granted, runtime...)
		granted = append(granted, Grant{guest, "the guest runtime"})
		for _, d := range []string{"/usr", "/lib", "/lib64", "/lib32"} {
			if _, err := os.Stat(d); err == nil {
				granted = append(granted, Grant{d, "system libraries"})
			}
		}
		for _, d := range workerPath {
			granted = append(granted, Grant{d, "the worker program's directory"})
		}
		for _, d := range moduleDirs {
			granted = append(granted, Grant{d, "a granted module's directory (the worker imports it)"})
		}
		granted = dedupe(granted)
		var paths []string
		for _, g := range granted {
			paths = append(paths, g.Path)
		}
		// HOME is the root, set by the worker's init: the configuration's template
		// is the same for every root
		env["HOME"] = "/nonexistent"
		pol = map[string]any{"fs_readable": readablePaths(paths), "clean_env": true, "env": env,
			"allow_degraded": c.allowDegraded, "max_processes": int64(workerProcesses)}
		var writable []any
		if root != "" {
			writable = append(writable, root)
			granted = append(granted, Grant{root, "the filesystem root (read-write)"})
		}
		if spoolDir != "" {
			// spool=: the worker writes the result's large values there
			writable = append(writable, spoolDir)
			granted = append(granted, Grant{spoolDir, "the spool directory (read-write: the worker writes spooled values)"})
		}
		if writable != nil {
			pol["fs_writable"] = writable
		}
		if limits.allowNetwork {
			pol["net_allow"] = []any{"*"}
			pol["net_allow_udp"] = true
		}
	}
	if root != "" {
		pol["cwd"] = root
	}
	if limits.memory > 0 {
		pol["max_memory"] = limits.memory + workerMemory
	}
	c.worker, err = engine.NewFromMap(pol)
	if err != nil {
		return nil, err
	}
	compileGuest(interp, guest, runtime)
	var rootVal any
	if root != "" {
		rootVal = root
	}
	paths := make([]any, 0, len(sysPath))
	for _, p := range sysPath {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			paths = append(paths, p)
		}
	}
	// the start frame holds no filesystem root: one template serves every sandbox
	// that differs only in paths; each fork is then sent init like a fresh worker
	startPolicy := portable
	if !preload {
		startPolicy = withoutImports(portable, r.m["policy"])
	}
	c.start = encodeSorted(map[string]any{"op": "template", "policy": startPolicy, "sys_path": paths})
	echoVal := any(false)
	if !echo.IsNil() {
		echoVal = raw(echo)
	}
	var spoolVal any
	if spoolDir != "" {
		spoolVal = spoolDir
	}
	c.init = encodeSorted(map[string]any{"op": "init", "policy": portable, "filesystem_root": rootVal, "echo": echoVal,
		"vfs": vfsInit, "spool_dir": spoolVal})
	c.base = engine.Encode(c.worker.Isolation())
	c.extra = map[string]any{"level": c.level, "python": map[string]any{"interpreter": interp, "granted": granted}}
	c.reportSubprocess(nil)

	coopsMu.Lock()
	if coops[s] != nil {
		coopsMu.Unlock()
		c.worker.Close()
		return nil, &engine.Error{Kind: engine.KindInvalidRequest, Message: "invalid request: coop_open: this sandbox is a cooperative sandbox already"}
	}
	coops[s] = c
	coopsMu.Unlock()
	s.OnClose(c.close)
	return c, nil
}

// withoutImports is the portable policy out with only the grants that import
// nothing (host_fn and object: the host runs them): a template started with it imports no
// granted module or class (preload_grants false). policy is the request's policy,
// already checked by portablePolicy.
func withoutImports(out map[string]any, policy rawmsg.Value) map[string]any {
	t := make(map[string]any, len(out))
	for k, v := range out {
		t[k] = v
	}
	kept := []any{}
	m, _ := policy.Fields()
	items, _ := m["grants"].Items()
	for _, g := range items {
		f, _ := g.Fields()
		if kind, _ := f["kind"].Str(); kind == "host_fn" || kind == "object" {
			kept = append(kept, raw(g)) // run in the host: nothing to import
		}
	}
	t["grants"] = kept
	return t
}

// dedupe keeps the first grant of each path.
func dedupe(gs []Grant) []Grant {
	seen := map[string]bool{}
	out := gs[:0]
	for _, g := range gs {
		if !seen[g.Path] {
			seen[g.Path] = true
			out = append(out, g)
		}
	}
	return out
}

func unwrap(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

type portableLimits struct {
	timeout         float64
	memory          int64
	allowNetwork    bool
	allowSubprocess bool
	hostFns         map[string]bool
	rpcTargets      map[string]bool
}

// portablePolicy checks the request's policy (the guest runtime's portable form,
// Policy.to_portable) and fills in what a binding may leave out: version, grants,
// the default timeout. It returns the policy to send and what the engine reads of it.
func portablePolicy(r *reader) (map[string]any, portableLimits) {
	lim := portableLimits{hostFns: map[string]bool{}, rpcTargets: map[string]bool{}}
	out := map[string]any{}
	v, has := r.m["policy"]
	if !has {
		r.addf("policy is missing (the portable policy: Policy.to_portable())")
		return out, lim
	}
	m, ok := v.Fields()
	if !ok {
		r.addf("policy must be a map with string keys")
		return out, lim
	}
	for k, x := range m {
		out[k] = raw(x)
		switch k {
		case "version":
			if n, ok := x.Int(); !ok || n != portableVersion {
				r.addf("policy.version: want %d", portableVersion)
			}
		case "timeout":
			if x.IsNil() {
				continue
			}
			f, ok := x.Number()
			if !ok || f <= 0 {
				r.addf("policy.timeout must be a positive number of seconds or nil (no limit)")
			}
			lim.timeout = f
		case "tick_limit", "max_stdout":
			if n, ok := x.Int(); !x.IsNil() && (!ok || n < 0) {
				r.addf("policy.%s must be a non-negative integer or nil", k)
			}
		case "memory_limit_bytes":
			if x.IsNil() {
				continue
			}
			n, ok := x.Int()
			if !ok || n <= 0 {
				r.addf("policy.memory_limit_bytes must be a positive number of bytes or nil")
			}
			lim.memory = n
		case "allow_network", "allow_subprocess":
			b, ok := x.Bool()
			if !ok {
				r.addf("policy.%s must be a boolean", k)
			}
			if k == "allow_network" {
				lim.allowNetwork = b
			} else {
				lim.allowSubprocess = b
			}
		case "grants":
			items, ok := x.Items()
			if !ok {
				r.addf("policy.grants must be a list")
				continue
			}
			for i, g := range items {
				f, ok := g.Fields()
				kind, _ := f["kind"].Str()
				name, okName := f["name"].Str()
				if !ok || kind == "" || !okName {
					r.addf("policy.grants[%d] must be a map with kind and name", i)
					continue
				}
				switch kind {
				case "host_fn":
					lim.hostFns[name] = true
				case "object": // a live object: it stays in the host, the worker's proxy calls it
					lim.rpcTargets["grant:"+name] = true
				}
			}
		default:
			r.addf("policy: unknown field %q (known: version, timeout, tick_limit, memory_limit_bytes, max_stdout, allow_network, allow_subprocess, grants)", k)
		}
	}
	if _, has := m["version"]; !has {
		out["version"] = portableVersion
	}
	if _, has := m["grants"]; !has {
		out["grants"] = []any{}
	}
	if _, has := m["timeout"]; !has {
		out["timeout"] = DefaultTimeout
		lim.timeout = DefaultTimeout
	}
	return out, lim
}

// reportSubprocess sets the report's "subprocess" (may the worker create processes,
// and what refuses it) and encodes the report; engine is how many instructions of
// the engine's layer the worker installed (nil: none, or not started yet).
func (c *coop) reportSubprocess(engineLayer rawmsg.Value) error {
	var sub map[string]any
	var err error
	switch {
	case !c.denySpawn && c.level == "kernel":
		sub = map[string]any{"allowed": true, "why": "allow_subprocess=True"}
	case !c.denySpawn:
		sub = map[string]any{"allowed": true, "why": `isolation="process" refuses nothing at the kernel level`}
	default:
		var by []any
		if n, ok := engineLayer.Int(); ok && n > 0 {
			by = append(by, "the fork's seccomp layer (fork, vfork, clone without CLONE_THREAD, execve: EPERM)")
		}
		sub = map[string]any{"allowed": false, "enforced_by": by}
		if engineLayer != nil && len(by) == 0 {
			msg := "the worker could not refuse process creation (no seccomp layer installed: this kernel has no seccomp)"
			if !c.allowDegraded {
				err = &engine.Error{Kind: engine.KindIsolation, Message: msg}
			} else {
				rep := toMap(c.worker.Isolation())
				deg, _ := rep["degraded"].([]any)
				rep["degraded"] = append(deg, "subprocess: "+msg)
				c.base = engine.Encode(rep)
			}
		}
	}
	c.extra["subprocess"] = sub
	if enc := mapWith(c.base, c.extra); !bytes.Equal(enc, c.encoded) {
		c.encoded, c.sent = enc, false
	}
	return err
}

// close ends the worker (the owner sandbox closed).
func (c *coop) close() {
	coopsMu.Lock()
	delete(coops, c.owner)
	coopsMu.Unlock()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.worker.Close()
}

// send writes one frame to the worker and reads one back (timeout 0: no limit).
func (c *coop) send(frame []byte, timeout float64) ([]byte, *engine.SessionEnd) {
	c.mu.Lock()
	id := c.session
	c.mu.Unlock()
	if id == 0 {
		return nil, &engine.SessionEnd{Reason: "the worker is gone"}
	}
	reply, end, err := c.worker.SendFrame(id, frame, timeout)
	if err != nil {
		end = &engine.SessionEnd{Reason: err.Error()}
	}
	if end != nil {
		c.mu.Lock()
		if c.session == id {
			c.session = 0
		}
		c.mu.Unlock()
	}
	return reply, end
}

// endWorker kills the worker (a protocol fault, the deadline, an abort): the next
// exec starts a fresh one.
func (c *coop) endWorker() {
	c.mu.Lock()
	id := c.session
	c.session = 0
	c.mu.Unlock()
	if id != 0 {
		c.worker.CloseSession(id)
	}
}

func endReason(end *engine.SessionEnd) string {
	return fmt.Sprintf("%s; stderr: %s", end.Reason, tail(end.Result))
}

// startWorker opens a fork of the configuration's template and sends it init.
func (c *coop) startWorker() error {
	fail := func(why string) error {
		return &engine.Error{Kind: engine.KindIsolation, Message: "the sandbox worker did not start: " + why}
	}
	id, err := c.worker.OpenSession(&engine.RunRequest{Argv: c.argv}, c.start, c.spawn)
	if err != nil {
		return fail(err.Error())
	}
	c.mu.Lock()
	c.session = id
	c.mu.Unlock()
	reply, end := c.send(c.init, initTimeout)
	if end != nil {
		return fail(endReason(end))
	}
	f, op, perr := parseFrame(reply)
	if perr != nil {
		c.endWorker()
		return fail(perr.Error())
	}
	if op != "ready" {
		c.endWorker()
		if msg := f.str("message"); msg != "" {
			return fail(msg)
		}
		return fail(fmt.Sprintf("the worker answered %q to init", op))
	}
	layer := rawmsg.Value{0xc0}
	if sc, ok := f["seccomp"].Fields(); ok && !sc["engine"].IsNil() {
		layer = sc["engine"]
	}
	c.mu.Lock()
	err = c.reportSubprocess(layer)
	c.mu.Unlock()
	if err != nil {
		c.endWorker()
		return err
	}
	return nil
}

// execState is one coop_exec: the state an exec keeps while it waits for the host.
type execState struct {
	c         *coop
	frame     []byte
	deadline  time.Time // zero: none
	restarted bool
	retried   bool
	cancelled atomic.Bool
	untrack   func()
	began     time.Time
	lastEnd   string
	abandoned bool      // the host abandoned the exec during a host call (lastEnd says which)
	call      string    // the host function being called
	asked     time.Time // when the host was asked (host_time refunds at most what it waited)
	done      bool
	// freshFrame: the frame for a worker started for this exec (with the host's
	// state to restore first); nil: frame serves both
	freshFrame []byte
	encoded    bool // the response's state as bin (state_encoded)
}

// frameFor: what to send a worker that was (fresh) or was not started for this exec.
func (x *execState) frameFor(fresh bool) []byte {
	if fresh && x.freshFrame != nil {
		return x.freshFrame
	}
	return x.frame
}

func coopExec(s *engine.Sandbox, req []byte) ([]byte, string) {
	if !s.Enter() {
		return errorResponse(&engine.Error{Kind: engine.KindClosed, Message: "the sandbox is closed"})
	}
	defer s.Leave()
	c := getCoop(s)
	if c == nil {
		return errorResponse(&engine.Error{Kind: engine.KindInvalidRequest, Message: "invalid request: coop_exec: this sandbox is not a cooperative sandbox (send coop_open first)"})
	}
	r, err := newReader(req, "coop_exec", "op", "code", "namespace", "modules", "stdin", "argv", "echo", "state",
		"snapshot", "state_encoded", "prints", "tag", "top_level_await", "keep", "render_prints")
	if err != nil {
		return errorResponse(err)
	}
	if !r.has("code") {
		r.addf("code is missing")
	}
	code := r.str("code")
	// state: a map, or bin holding one encoded (what a response with state_encoded
	// carries: a binding that cannot hold msgpack's map keys keeps it opaque)
	state := r.m["state"]
	if b, ok := state.Bin(); ok {
		if rawmsg.Check(b, MaxDepth) != nil {
			r.addf("state (bin) must be one msgpack-encoded map")
		}
		state = rawmsg.Value(b)
	}
	for k, v := range map[string]rawmsg.Value{"namespace": r.m["namespace"], "modules": r.m["modules"], "state": state} {
		if !v.IsNil() {
			if _, ok := v.Fields(); !ok {
				r.addf("%s must be a map with string keys", k)
			}
		}
	}
	stdin := r.str("stdin")
	argv := r.strs("argv")
	checkEcho(r, r.m["echo"])
	snapshot := r.boolean("snapshot")
	encoded := r.boolean("state_encoded")
	prints := r.boolean("prints")
	topAwait := r.boolean("top_level_await")
	keep := r.strs("keep")
	var render []any
	if v := r.m["render_prints"]; !v.IsNil() {
		f, ok := v.Fields()
		per, okP := f["per_print"].Int()
		lim, okL := f["limit"].Int()
		if !ok || len(f) != 2 || !okP || !okL || per < 1 || lim < 1 {
			r.addf("render_prints must be {per_print: a positive int, limit: a positive int}")
		}
		render = []any{per, lim}
	}
	tag := r.str("tag")
	if err := r.err(); err != nil {
		return errorResponse(err)
	}
	fr := map[string]any{"op": "exec", "code": code, "namespace": raw(r.m["namespace"]), "modules": raw(r.m["modules"]),
		"stdin": nil, "argv": nil}
	if r.has("stdin") {
		fr["stdin"] = stdin
	}
	if r.has("argv") {
		fr["argv"] = argv
	}
	if echo := r.m["echo"]; !echo.IsNil() {
		fr["echo"] = raw(echo) // this exec's echo mode (checked above)
	}
	if snapshot {
		fr["snapshot"] = true
	}
	if prints {
		fr["prints"] = true // the result carries each print's values
	}
	if topAwait {
		fr["await"] = true // aexec: top-level await, async for and async with
	}
	if render != nil {
		fr["render"] = render // the result carries rendered_prints and print_count
	}
	if r.has("keep") && !r.m["keep"].IsNil() {
		fr["keep"] = keep // the names the result's namespace carries
	}
	x := &execState{c: c, frame: engine.Encode(fr), encoded: encoded}
	if !state.IsNil() {
		// restored only into a fresh worker (its first exec, or one after a restart)
		fr["restore"] = raw(state)
		x.freshFrame = engine.Encode(fr)
	}
	c.slot <- struct{}{} // one exec at a time
	c.mu.Lock()
	closed, running := c.closed, c.session != 0
	c.mu.Unlock()
	if closed {
		<-c.slot
		return errorResponse(&engine.Error{Kind: engine.KindClosed, Message: "the sandbox is closed"})
	}
	if !running {
		if err := c.startWorker(); err != nil {
			<-c.slot
			return errorResponse(err)
		}
		c.mu.Lock()
		x.restarted = c.started
		c.started = true
		c.mu.Unlock()
	}
	fresh := !running
	x.untrack = s.Track(tag, x.cancel)
	// one deadline for the whole exec: the code, every host call it makes, the
	// conversion of its namespace, the reply
	x.began = time.Now()
	if c.timeout > 0 {
		x.deadline = x.began.Add(time.Duration((c.timeout + Grace) * float64(time.Second)))
	}
	reply, end := c.send(x.frameFor(fresh), x.left())
	return hostcall.Deliver(s, x.handle(reply, end))
}

// left is the time left before the deadline, in seconds for SendFrame (0: none).
func (x *execState) left() float64 {
	if x.deadline.IsZero() {
		return 0
	}
	return max(time.Until(x.deadline).Seconds(), 0.001)
}

func (x *execState) expired() bool {
	return !x.deadline.IsZero() && !time.Now().Before(x.deadline)
}

func (x *execState) cancel() {
	x.cancelled.Store(true)
	// the worker runs the code to completion on its own: stop it by killing it
	x.c.worker.Cancel("", true)
}

// handle continues the exec with the worker's reply (or its end).
func (x *execState) handle(reply []byte, end *engine.SessionEnd) hostcall.Step {
	c := x.c
	for {
		if end != nil {
			if end.Confined && !x.retried {
				// the worker predates this process's confine(): it was ended before the
				// code ran; a fresh one holds the new confinement too
				x.retried = true
				if err := c.startWorker(); err != nil {
					x.finish()
					b, kind := errorResponse(err)
					return hostcall.Final(b, kind)
				}
				x.restarted = true
				reply, end = c.send(x.frameFor(true), x.left())
				continue
			}
			x.lastEnd = endReason(end)
			return x.failed("")
		}
		f, op, err := parseFrame(reply)
		if err == nil {
			switch op {
			case "call":
				if err = f.checkCall(); err != nil {
					break
				}
				name := f.str("name")
				if !c.hostFns[name] {
					reply, end = x.answerWorker(encodeSorted(map[string]any{"op": "raise", "type": "NameError",
						"message": fmt.Sprintf("no host function %q", name)}), "")
					continue
				}
				x.call = name
				x.asked = time.Now()
				return hostcall.Ask(hostcall.Call{Kind: "fn", Fields: map[string]any{
					"name": name, "args": raw(f["args"]), "kwargs": raw(f["kwargs"])}}, x)
			case "rpc":
				if err = f.checkRPC(); err != nil {
					break
				}
				target, method := f.str("target"), f.str("method")
				if !c.rpcTargets[target] {
					reply, end = x.answerWorker(encodeSorted(map[string]any{"op": "raise", "type": "LookupError",
						"message": fmt.Sprintf("no host object %q", truncate(target, 60))}), "")
					continue
				}
				x.call = fmt.Sprintf("%s.%s", target, method)
				x.asked = time.Now()
				return hostcall.Ask(hostcall.Call{Kind: "rpc", Fields: map[string]any{
					"target": target, "method": method, "args": raw(f["args"]), "kwargs": raw(f["kwargs"])}}, x)
			case "fs":
				if !c.vfs {
					err = protof("an fs call, but this sandbox serves no VirtualFS")
					break
				}
				if err = f.checkFS(); err != nil {
					break
				}
				name := f.str("name")
				x.call = "the filesystem's " + name
				return hostcall.Ask(hostcall.Call{Kind: "fs", Fields: map[string]any{
					"name": name, "args": raw(f["args"])}}, x)
			case "result":
				if err = f.checkResult(c.spool); err == nil {
					return x.result(f)
				}
			default:
				err = protof("unexpected worker frame %q", truncate(op, 60))
			}
		}
		c.endWorker()
		return x.failed("the worker broke the protocol and was ended: " + err.Error())
	}
}

// answerWorker sends a host call's answer to the worker and reads what comes next,
// unless the deadline passed while the host answered.
func (x *execState) answerWorker(frame []byte, _ string) ([]byte, *engine.SessionEnd) {
	if x.expired() {
		x.c.endWorker()
		return nil, &engine.SessionEnd{Reason: "timed out during host calls"}
	}
	return x.c.send(frame, x.left())
}

// Resume continues the exec with the host's answer to a call of a granted function.
func (x *execState) Resume(a hostcall.Answer) hostcall.Step {
	if !x.c.owner.Enter() {
		x.drop()
		b, kind := errorResponse(&engine.Error{Kind: engine.KindClosed, Message: "the sandbox is closed"})
		return hostcall.Final(b, kind)
	}
	defer x.c.owner.Leave()
	if x.cancelled.Load() || a.Abort {
		x.c.endWorker()
		if a.Abort && !x.cancelled.Load() {
			x.lastEnd = fmt.Sprintf("the host abandoned the exec during its call of %s", x.call)
			x.abandoned = true
		}
		x.cancelled.Store(true)
		return x.failed("")
	}
	var fr []byte
	var ans map[string]any
	if a.Error != nil {
		ans = map[string]any{"op": "raise", "type": a.Error.Type, "message": a.Error.Message}
	} else {
		ans = map[string]any{"op": "return", "value": raw(a.Value)}
	}
	if a.HostTime > 0 && !x.asked.IsZero() {
		// host time (the seed's host_time): the exec's deadline, and the worker's own
		// clock, do not count it — at most the time this call waited for the host
		refund := time.Duration(a.HostTime * float64(time.Second))
		if waited := time.Since(x.asked); refund > waited {
			refund = waited
		}
		if !x.deadline.IsZero() {
			x.deadline = x.deadline.Add(refund)
		}
		ans["host_time"] = refund.Seconds()
	}
	fr = encodeSorted(ans)
	reply, end := x.answerWorker(fr, x.call)
	return x.handle(reply, end)
}

// Drop: the owner closed while the exec waited for the host.
func (x *execState) Drop() { x.drop() }

func (x *execState) drop() {
	x.cancelled.Store(true)
	x.c.endWorker()
	x.finish()
}

// finish releases what the exec holds (once).
func (x *execState) finish() {
	if x.done {
		return
	}
	x.done = true
	if x.untrack != nil {
		x.untrack()
	}
	<-x.c.slot
}

// failed is the exec's response when the worker did not produce a result: a
// protocol fault (fault), a cancel, the deadline, or a crash.
func (x *execState) failed(fault string) hostcall.Step {
	x.finish()
	typ, module, msg := "WorkerCrashed", "sandtrap", fault
	switch {
	case fault != "":
	case x.cancelled.Load():
		typ, module = "StCancelled", "sandtrap_guest.errors"
		msg = "cancelled: the worker was killed (the next exec starts a fresh one)"
		if x.abandoned {
			msg = "cancelled: " + x.lastEnd + "; the worker was killed (the next exec starts a fresh one)"
		}
	case !x.deadline.IsZero() && time.Until(x.deadline) <= 50*time.Millisecond:
		typ, module = "StTimeout", "sandtrap_guest.errors"
		msg = fmt.Sprintf("the worker overran the timeout of %gs and was killed (%s)", x.c.timeout, x.lastEnd)
	default:
		msg = "the worker died: " + x.lastEnd
	}
	return x.respond(map[string]any{"stdout": "", "stderr": "", "namespace": map[string]any{},
		"error":     map[string]any{"type": typ, "module": module, "message": msg, "traceback": nil},
		"traceback": nil, "ticks": 0, "stdout_truncated": 0, "duration": time.Since(x.began).Seconds()})
}

func (x *execState) result(f frame) hostcall.Step {
	x.finish()
	out := map[string]any{}
	for _, k := range []string{"stdout", "stderr", "namespace", "error", "traceback", "ticks", "stdout_truncated", "duration"} {
		out[k] = raw(f[k])
	}
	for _, k := range []string{"state", "prints", "rendered_prints", "print_count"} {
		if v := f[k]; !v.IsNil() {
			out[k] = raw(v)
		}
	}
	// each namespace value's size as it crossed (the seed's result.sizes), read off
	// the checked frame: no value is decoded for it
	if ns, ok := f["namespace"].Fields(); ok {
		sizes := make(map[string]any, len(ns))
		for k, v := range ns {
			sizes[k] = len(v)
		}
		// spooled values: the size the worker wrote (checked by checkResult; the
		// binding checks it against the file)
		if sp, ok := f["spooled"].Fields(); ok {
			for k, v := range sp {
				e, _ := v.Fields()
				sizes[k], _ = e["size"].Int()
			}
			out["spooled"] = raw(f["spooled"])
		}
		out["sizes"] = sizes
	}
	if v := f["state"]; !v.IsNil() && x.encoded {
		out["state"] = []byte(v) // the map's own bytes, as bin
	}
	return x.respond(out)
}

func (x *execState) respond(out map[string]any) hostcall.Step {
	x.c.mu.Lock()
	if !x.c.sent { // the report changed (a worker started): the binding keeps the last one
		out["isolation"] = x.c.encoded
		x.c.sent = true
	}
	x.c.mu.Unlock()
	out["restarted"] = x.restarted
	return hostcall.Final(engine.Encode(out), "")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// checkSpoolDir: spool_dir is the binding's private directory for spooled values —
// absolute, no symbolic link on the way, a directory owned by this process's user
// with no access for group or others, and not inside the filesystem root (code
// there could replace a file before the host reads it).
func checkSpoolDir(dir, root string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("not a clean absolute path")
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return unwrap(err)
	}
	if real != dir {
		return fmt.Errorf("goes through a symbolic link (to %s)", real)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return unwrap(err)
	}
	if !st.IsDir() {
		return fmt.Errorf("not a directory")
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("mode %#o: must be private (0700)", st.Mode().Perm())
	}
	if uid, ok := fileOwner(st); ok && uid != os.Getuid() {
		return fmt.Errorf("owned by uid %d, not this process's (%d)", uid, os.Getuid())
	}
	if root != "" && (dir == root || strings.HasPrefix(dir, root+"/")) {
		return fmt.Errorf("inside the filesystem root %s: sandboxed code could replace a spooled value", root)
	}
	return nil
}

func fileOwner(st os.FileInfo) (int, bool) {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid), true
	}
	return 0, false
}

// checkEcho: echo is nil, a boolean, or one of the modes "none", "last", "all" (the
// guest runtime's names; a wrong one is the same error at every level).
func checkEcho(r *reader, echo rawmsg.Value) {
	switch {
	case echo.IsNil() || echo.Kind() == rawmsg.Bool:
	case echo.Kind() == rawmsg.Str:
		if s, _ := echo.Str(); s != "none" && s != "last" && s != "all" {
			r.addf("Invalid echo option: %q. Expected one of none, last, all (or a bool)", s)
		}
	default:
		r.addf("echo must be a boolean or one of \"none\", \"last\", \"all\"")
	}
}
