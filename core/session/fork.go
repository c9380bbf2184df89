package session

import (
	"fmt"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/hostcall"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/rawmsg"
	runs "github.com/sandtrap/sandtrap/core/run"
	"github.com/sandtrap/sandtrap/core/seccomp"
	"github.com/vmihailenco/msgpack/v5"
)

// COW-fork map-reduce's driver: fork starts the guest runtime's template
// (python3 -m sandtrap_guest.template) in a sandbox of the mapper's policy plus what
// the Python runtime itself needs to read, runs init there, and streams the clones
// back as host calls of kind "clones" as they finish; reduce runs a program with
// the clones' stdout, in clone order, on its stdin. docs/protocol.md, "map-reduce".

const (
	// forkInitTimeout bounds the template's start and init (init_fn may load data).
	forkInitTimeout = 3600.0
	// forkFrameTimeout bounds the template's answer to the fork frame.
	forkFrameTimeout = 60.0
	// nextSlack is how much longer than a clone's timeout a batch may take.
	nextSlack = 60.0
	// noTimeoutWait bounds a batch's wait when clones have no timeout.
	noTimeoutWait = 3600.0
	// attachWait bounds the wait for the template's run to be attached to its
	// supervisor (it is, right after its spawn, long before its init answers).
	attachWait = 5 * time.Second
)

var templateModule = "sandtrap_guest.template"

type forkState struct {
	owner     *engine.Sandbox
	tsb       *engine.Sandbox // the template's sandbox
	session   uint64
	wait      float64 // for one batch
	reported  int64
	done      bool
	finished  bool
	cancelled atomic.Bool
	stopped   string // why the host stopped it
	untrack   func()
	report    any
	clones    *runs.CloneDenials // the template run's denials, by clone (its session)
	sources   map[string]string  // what the clones' denials report (denials_sources)
}

func forkOp(s *engine.Sandbox, req []byte) ([]byte, string) {
	if !s.Enter() {
		return errorResponse(&engine.Error{Kind: engine.KindClosed, Message: "the sandbox is closed"})
	}
	defer s.Leave()
	f, err := startFork(s, req)
	if err != nil {
		return errorResponse(err)
	}
	return hostcall.Deliver(s, f.next())
}

func startFork(s *engine.Sandbox, req []byte) (*forkState, error) {
	r, err := newReader(req, "fork", "op", "n", "init_ref", "init_src", "work_ref", "work_src", "sys_path",
		"main_path", "interpreter", "parallel", "timeout", "tag", "first")
	if err != nil {
		return nil, err
	}
	n := r.count("n")
	if !r.has("n") {
		r.addf("n is missing (how many clones)")
	}
	first := int64(0) // the first clone's id: a share of a larger fork (sandtrap.ray)
	if r.has("first") {
		v, ok := r.m["first"].Int()
		if !ok || v < 0 || v > 1<<31-n {
			r.addf("first must be an integer from 0 to 2^31-1-n")
		} else {
			first = v
		}
	}
	initFrame := map[string]any{"op": "init"}
	for _, k := range []string{"init_ref", "init_src", "work_ref", "work_src"} {
		if r.has(k) {
			initFrame[k] = r.str(k)
		}
	}
	if r.has("init_ref") && r.has("init_src") {
		r.addf("give init_ref or init_src, not both")
	}
	switch {
	case r.has("work_ref") && r.has("work_src"):
		r.addf("give work_ref or work_src, not both")
	case !r.has("work_ref") && !r.has("work_src"):
		r.addf("work_ref or work_src is missing (what each clone runs)")
	}
	sysPath := r.absPaths("sys_path")
	mainPath := r.str("main_path")
	if mainPath != "" && !filepath.IsAbs(mainPath) {
		r.addf("main_path %q is not an absolute path", mainPath)
	}
	parallel := r.count("parallel")
	timeout := r.number("timeout")
	tag := r.str("tag")
	interp, ierr := interpreter(r.str("interpreter"))
	if ierr != nil {
		r.addf("%v", ierr)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = s.Policy.Timeout // the policy's timeout is every clone's, as it is every run's
	}
	guest, err := guestDir()
	if err != nil {
		return nil, err
	}
	paths := make([]any, 0, len(sysPath))
	for _, p := range sysPath {
		paths = append(paths, p)
	}
	initFrame["sys_path"] = paths
	if mainPath != "" {
		initFrame["main_path"] = mainPath
	}

	// The template's policy: the mapper's, plus what the library itself chose to
	// run (the interpreter, the guest runtime, the functions' modules), reported.
	tp := *s.Policy
	tp.FSReadable = append([]string{}, s.Policy.FSReadable...)
	covered := func(p string) bool {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return true // nothing to grant
		}
		for _, a := range append(append([]string{}, tp.FSReadable...), tp.FSWritable...) {
			if policy.Within(real, a) {
				return true
			}
		}
		return false
	}
	runtime := runtimePaths(interp)
	cands := append([]Grant{}, runtime...)
	cands = append(cands, Grant{guest, "the guest runtime"})
	for _, p := range sysPath {
		cands = append(cands, Grant{p, "the import root of a function passed by reference"})
	}
	if mainPath != "" {
		cands = append(cands, Grant{filepath.Dir(mainPath), "the directory of the host's __main__ (loaded as __mp_main__)"})
	}
	var added []Grant
	for _, g := range cands {
		if !covered(g.Path) {
			real, _ := filepath.EvalSymlinks(g.Path)
			tp.FSReadable = append(tp.FSReadable, real)
			added = append(added, Grant{real, g.Why})
		}
	}
	tp.Env = map[string]string{}
	for k, v := range s.Policy.Env {
		tp.Env[k] = v
	}
	tp.Env["PYTHONPATH"] = guest
	if _, ok := tp.Env["PYTHONDONTWRITEBYTECODE"]; !ok {
		tp.Env["PYTHONDONTWRITEBYTECODE"] = "1"
	}
	tp.Timeout = 0 // the template lives while it forks; each clone gets the timeout
	tsb, err := engine.New(&tp)
	if err != nil {
		return nil, err
	}
	compileGuest(interp, guest, runtime)
	f := &forkState{owner: s, tsb: tsb, wait: noTimeoutWait + nextSlack}
	if timeout > 0 {
		f.wait = timeout + nextSlack
	}
	if added == nil {
		added = []Grant{}
	}
	f.report = msgpack.RawMessage(mapWith(engine.Encode(tsb.Isolation()), map[string]any{
		"python": map[string]any{"interpreter": interp, "granted": added}}))
	fail := func(err error) (*forkState, error) {
		tsb.Close()
		return nil, err
	}
	f.clones = runs.NewCloneDenials()
	f.session, err = tsb.OpenSession(&engine.RunRequest{Argv: []string{interp, "-m", templateModule}, NoTimeout: true,
		Clones: f.clones}, nil, true)
	if err != nil {
		return fail(err)
	}
	reply, err := f.exchange(encodeSorted(initFrame), forkInitTimeout)
	if err != nil {
		return fail(err)
	}
	if op := reply.str("op"); op != "ready" {
		return fail(&engine.Error{Kind: engine.KindSpawn, Message: initFailure(reply, mainPath)})
	}
	// Each clone makes itself a session of its own and loads this layer (no setsid,
	// no setpgid after): the supervisor finds a denial's clone by its session, and a
	// clone's leftovers die with its session (core/supervise/sessions.go).
	var layer []byte
	if pl, err := tsb.Plan(); err == nil && pl.BPF != nil {
		sl, err := seccomp.SessionLayer()
		if err != nil {
			return fail(&engine.Error{Kind: engine.KindIsolation, Message: "seccomp: " + err.Error()})
		}
		layer = sl.BPF
	}
	f.sources = f.clones.Wait(time.After(attachWait))
	if layer == nil {
		f.sources[runs.SourceSupervisor] = "not reported by clone: no seccomp here to keep each clone in its session"
	}
	fr := map[string]any{"op": "fork", "n": n, "first": first, "parallel": nil, "timeout": nil, "max_output": s.Policy.MaxOutput,
		"max_processes": nil, "session": layer}
	if parallel > 0 {
		fr["parallel"] = parallel
	}
	if timeout > 0 {
		fr["timeout"] = timeout
	}
	if s.Policy.MaxProcesses > 0 {
		// the template keeps its forkers and clones within the process limit
		fr["max_processes"] = s.Policy.MaxProcesses
	}
	if reply, err = f.exchange(encodeSorted(fr), forkFrameTimeout); err != nil {
		return fail(err)
	}
	if reply.str("op") != "forking" {
		return fail(&engine.Error{Kind: engine.KindSpawn, Message: "fork failed in the template: " + reply.str("message")})
	}
	f.untrack = s.Track(tag, f.cancel)
	return f, nil
}

// initFailure names what failed in the template's init: the host's __main__, init_fn
// or work_fn (template.py says which step).
func initFailure(reply frame, mainPath string) string {
	what := "the template's init failed"
	switch reply.str("step") {
	case "main":
		what = fmt.Sprintf("the host's __main__ (%s, loaded as __mp_main__ for a function defined there) failed in the template", mainPath)
	case "init":
		what = "init_fn failed in the template"
	case "work":
		what = "work_fn could not be loaded in the template"
	}
	msg := what + ": " + reply.str("message")
	if tb := reply.str("traceback"); tb != "" {
		msg += "\n" + tb
	}
	return msg
}

// exchange sends one frame to the template and checks the answer's shape.
func (f *forkState) exchange(fr []byte, timeout float64) (frame, error) {
	reply, end, err := f.tsb.SendFrame(f.session, fr, timeout)
	if err == nil && end != nil {
		err = &engine.Error{Kind: engine.KindSpawn, Message: "the fork template ended: " + endReason(end)}
	}
	if err != nil {
		return nil, err
	}
	fm, _, perr := parseFrame(reply)
	if perr != nil {
		return nil, &engine.Error{Kind: engine.KindSpawn, Message: "the fork template broke the protocol: " + perr.Error()}
	}
	return fm, nil
}

func (f *forkState) cancel() {
	f.cancelled.Store(true)
	f.tsb.Cancel("", true) // the template and every clone: forking stops
}

// next asks the template for the clones finished since the last batch.
func (f *forkState) next() hostcall.Step {
	for !f.done && !f.cancelled.Load() {
		reply, err := f.exchange(encodeSorted(map[string]any{"op": "next"}), f.wait)
		if err == nil && reply.str("op") != "clones" {
			err = &engine.Error{Kind: engine.KindSpawn, Message: "fork template: " + reply.str("message")}
		}
		if err == nil {
			if perr := reply.checkClones(); perr != nil {
				err = &engine.Error{Kind: engine.KindSpawn, Message: "the fork template broke the protocol: " + perr.Error()}
			}
		}
		if err != nil {
			if f.cancelled.Load() {
				break
			}
			return f.final(err)
		}
		f.done, _ = reply["done"].Bool()
		if n := reply["items"].Len(); n > 0 {
			f.reported += int64(n)
			return hostcall.Ask(hostcall.Call{Kind: "clones", Fields: map[string]any{"items": f.withDenials(reply["items"])}}, f)
		}
	}
	return f.final(nil)
}

// withDenials is a batch's items, each with what its clone was refused ("denials",
// "denials_dropped"): the template's session log of the clone ("session": the pidfs
// inode of the clone, its session's leader), taken once.
func (f *forkState) withDenials(items rawmsg.Value) []any {
	its, _ := items.Items()
	out := make([]any, len(its))
	for i, it := range its {
		m, _ := it.Fields()
		var ds []runs.Denial
		dropped := 0
		if ino, ok := m["session"].Int(); ok && ino > 0 {
			ds, dropped = f.clones.Take(uint64(ino))
		}
		if ds == nil {
			ds = []runs.Denial{}
		}
		out[i] = msgpack.RawMessage(mapWith(it, map[string]any{"denials": ds, "denials_dropped": dropped}))
	}
	return out
}

// Resume: the host took a batch (a value: go on; an error or abort: stop forking).
func (f *forkState) Resume(a hostcall.Answer) hostcall.Step {
	if !f.owner.Enter() {
		f.Drop()
		b, kind := errorResponse(&engine.Error{Kind: engine.KindClosed, Message: "the sandbox is closed"})
		return hostcall.Final(b, kind)
	}
	defer f.owner.Leave()
	if a.Abort || a.Error != nil {
		f.stopped = "the host stopped taking clones"
		if a.Error != nil {
			f.stopped += fmt.Sprintf(" (%s: %s)", a.Error.Type, a.Error.Message)
		}
		f.cancel()
	}
	return f.next()
}

// Drop: the mapper closed while the host held a batch.
func (f *forkState) Drop() {
	f.cancel()
	f.close()
}

func (f *forkState) close() {
	if f.finished {
		return
	}
	f.finished = true
	if f.untrack != nil {
		f.untrack()
	}
	f.tsb.Close() // kills the template and every clone still running
}

func (f *forkState) final(err error) hostcall.Step {
	f.close()
	out := map[string]any{"done": true, "clones": f.reported, "cancelled": false, "isolation": f.report, "error": nil,
		"denials_sources": f.sources}
	kind := ""
	switch {
	case f.cancelled.Load():
		why := "cancelled: the template and its clones were killed"
		if f.stopped != "" {
			why = "cancelled: " + f.stopped + "; the template and its clones were killed"
		}
		out["cancelled"] = true
		out["error"] = map[string]any{"kind": engine.KindCancelled, "message": why}
	case err != nil:
		e, ok := err.(*engine.Error)
		if !ok {
			e = &engine.Error{Kind: engine.KindInternal, Message: err.Error()}
		}
		out["error"] = map[string]any{"kind": e.Kind, "message": e.Message}
		kind = e.Kind
	}
	return hostcall.Final(engine.Encode(out), kind)
}

// reduceOp: run argv with the clones' stdout, concatenated in clone order, on its
// stdin; every other key is run's.
func reduceOp(s *engine.Sandbox, req []byte) ([]byte, string) {
	r, err := newReader(req, "reduce", "op", "argv", "clones", "timeout", "env", "cwd", "max_output", "tag")
	if err != nil {
		return errorResponse(err)
	}
	type clone struct {
		id  int64
		out []byte
	}
	var clones []clone
	items, ok := r.m["clones"].Items()
	if !ok {
		r.addf("clones must be a list of {id, stdout}")
	}
	seen := map[int64]bool{}
	for i, it := range items {
		m, ok := it.Fields()
		id, okID := m["id"].Int()
		out, okOut := m["stdout"].Bin()
		if !okOut {
			if s, isStr := m["stdout"].Str(); isStr {
				out, okOut = []byte(s), true
			}
		}
		if !ok || !okID || !okOut {
			r.addf("clones[%d] must be {id: int, stdout: bytes}", i)
			continue
		}
		if seen[id] {
			r.addf("clones[%d]: clone %d is given twice", i, id)
		}
		seen[id] = true
		clones = append(clones, clone{id, out})
	}
	if err := r.err(); err != nil {
		return errorResponse(err)
	}
	sort.Slice(clones, func(i, j int) bool { return clones[i].id < clones[j].id })
	size := 0
	for _, c := range clones {
		size += len(c.out)
	}
	stdin := make([]byte, 0, size)
	for _, c := range clones {
		stdin = append(stdin, c.out...)
	}
	run := map[string]any{"op": "run", "stdin": stdin}
	for k, v := range r.m {
		if k != "op" && k != "clones" {
			run[k] = raw(v)
		}
	}
	return s.Exec(engine.Encode(run))
}
