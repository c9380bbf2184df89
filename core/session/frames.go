package session

import (
	"fmt"
	"regexp"

	"github.com/sandtrap/sandtrap/core/rawmsg"
)

// A frame from a worker or a template is the word of a program that runs
// untrusted code: it is checked whole before anything of it is used or forwarded.
// Whatever fails — not one well-formed msgpack value, nested deeper than MaxDepth,
// a string that is not UTF-8, an array or map as a map key, an extension type, a
// missing field or one of the wrong type — is a protocolError, and the program is
// ended.

type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protof(format string, a ...any) error { return &protocolError{fmt.Sprintf(format, a...)} }

// frame is a checked frame's fields, raw.
type frame map[string]rawmsg.Value

// parseFrame checks b and splits it: a map with string keys and a string "op".
func parseFrame(b []byte) (frame, string, error) {
	if err := rawmsg.Check(b, MaxDepth); err != nil {
		return nil, "", protof("the frame does not decode: %v", err)
	}
	f, ok := rawmsg.Value(b).Fields()
	if !ok {
		return nil, "", protof("the frame is not a map with string keys: %s", rawmsg.Value(b).Kind())
	}
	op, ok := f["op"].Str()
	if !ok {
		return nil, "", protof("the frame has no op")
	}
	return frame(f), op, nil
}

// want checks that f[key] has one of kinds (optional: it may be absent or nil).
func (f frame) want(key string, optional bool, kinds ...rawmsg.Kind) error {
	v, has := f[key]
	if !has || v.IsNil() {
		if optional {
			return nil
		}
		if !has {
			return protof("missing %q", key)
		}
	}
	k := v.Kind()
	for _, w := range kinds {
		if k == w {
			return nil
		}
	}
	return protof("%q is a %s", key, k)
}

func (f frame) checkAll(checks ...error) error {
	for _, e := range checks {
		if e != nil {
			return e
		}
	}
	return nil
}

// checkResult: a worker's exec result (worker.py "result").
func (f frame) checkResult(spool bool) error {
	const S, I, F, M = rawmsg.Str, rawmsg.Int, rawmsg.Float, rawmsg.Map
	if err := f.checkAll(f.want("stdout", false, S), f.want("stderr", false, S), f.want("namespace", false, M),
		f.want("spooled", true, M),
		f.want("traceback", true, S), f.want("ticks", false, I), f.want("stdout_truncated", false, I),
		f.want("duration", false, I, F), f.want("error", true, M), f.want("state", true, M),
		f.want("prints", true, rawmsg.Array), f.want("rendered_prints", true, rawmsg.Array),
		f.want("print_count", true, I)); err != nil {
		return err
	}
	if items, ok := f["rendered_prints"].Items(); ok {
		for _, it := range items {
			if it.Kind() != S {
				return protof("'rendered_prints' holds a %v (str only)", it.Kind())
			}
		}
	}
	ns, ok := f["namespace"].Fields()
	if !ok {
		return protof("namespace names must be str (and distinct)")
	}
	if err := checkSpooled(f["spooled"], ns, spool); err != nil {
		return err
	}
	if e := f["error"]; !e.IsNil() {
		ef, ok := e.Fields()
		if !ok {
			return protof("'error' is not a map with string keys")
		}
		ee := frame(ef)
		if err := ee.checkAll(ee.want("type", false, S), ee.want("module", false, S), ee.want("message", false, S),
			ee.want("traceback", true, S), ee.want("args", true, rawmsg.Array)); err != nil {
			return err
		}
		if args, ok := ee["args"].Items(); ok { // scalars only (wire.error_to_wire)
			for _, a := range args {
				if k := a.Kind(); !a.IsNil() && k != rawmsg.Bool && k != rawmsg.Int && k != rawmsg.Float && k != S {
					return protof("'error.args' holds a %v (scalars only)", k)
				}
			}
		}
		return nil
	}
	return nil
}

// spoolFile: the only file name a worker may give for a spooled value (spool.py):
// a bare name, no separator, no dot-dot, nothing the host could follow elsewhere.
var spoolFile = regexp.MustCompile(`^[0-9a-f]{32}\.msgpack$`)

// checkSpooled: a result's spooled values (spool_dir given at coop_open only): each
// name str, not also in the namespace, {size: int >= 0, file: a spool file name},
// each file named once.
func checkSpooled(v rawmsg.Value, ns map[string]rawmsg.Value, spool bool) error {
	if v.IsNil() {
		return nil
	}
	if !spool {
		return protof("'spooled' values, but this sandbox spools nothing")
	}
	sp, ok := v.Fields()
	if !ok {
		return protof("'spooled' names must be str (and distinct)")
	}
	files := make(map[string]bool, len(sp))
	for name, e := range sp {
		if _, dup := ns[name]; dup {
			return protof("%q is both in the namespace and spooled", truncate(name, 60))
		}
		ef, ok := e.Fields()
		size, okS := ef["size"].Int()
		file, okF := ef["file"].Str()
		if !ok || len(ef) != 2 || !okS || !okF || size < 0 {
			return protof("spooled %q must be {size: an int >= 0, file: str}", truncate(name, 60))
		}
		if !spoolFile.MatchString(file) {
			return protof("spooled %q: file %q is not a spool file name (32 hex digits + .msgpack)", truncate(name, 60), truncate(file, 80))
		}
		if files[file] {
			return protof("spooled file %q named twice", file)
		}
		files[file] = true
	}
	return nil
}

// fsOps: the operations of a VirtualFS a worker may ask the host for (vfs.py OPS)
// and how many arguments each takes.
var fsOps = map[string]int{"read": 1, "stat": 1, "list": 1, "mkdir": 1, "remove": 1, "rmdir": 1, "write": 3, "rename": 2}

// checkFS: a worker's VirtualFS operation (worker.py "fs"): a known name, its
// number of arguments, paths as str (at most 4096 bytes), write's data as bin and
// its append flag as bool.
func (f frame) checkFS() error {
	if err := f.checkAll(f.want("name", false, rawmsg.Str), f.want("args", false, rawmsg.Array)); err != nil {
		return err
	}
	name := f.str("name")
	n, ok := fsOps[name]
	if !ok {
		return protof("no filesystem operation %q", truncate(name, 40))
	}
	args, _ := f["args"].Items()
	if len(args) != n {
		return protof("fs %s takes %d arguments, got %d", name, n, len(args))
	}
	for i, a := range args {
		want := rawmsg.Str
		if name == "write" && i == 1 {
			want = rawmsg.Bin
		} else if name == "write" && i == 2 {
			want = rawmsg.Bool
		}
		if a.Kind() != want {
			return protof("fs %s: argument %d is a %v, not a %v", name, i, a.Kind(), want)
		}
		if s, isStr := a.Str(); isStr && len(s) > 4096 {
			return protof("fs %s: a path longer than 4096 bytes", name)
		}
	}
	return nil
}

// checkCall: a worker's call of a host function (worker.py "call").
func (f frame) checkCall() error {
	if err := f.checkAll(f.want("name", false, rawmsg.Str), f.want("args", false, rawmsg.Array),
		f.want("kwargs", false, rawmsg.Map)); err != nil {
		return err
	}
	if _, ok := f["kwargs"].Fields(); !ok {
		return protof("keyword names must be str")
	}
	return nil
}

// maxRPCName bounds a host object's target name and a method name.
const maxRPCName = 200

// checkRPC: a worker proxy's method call on a host object (worker.py "rpc"): a
// target, a public method name (an identifier not starting with "_"), args, kwargs.
func (f frame) checkRPC() error {
	if err := f.checkAll(f.want("target", false, rawmsg.Str), f.want("method", false, rawmsg.Str),
		f.want("args", false, rawmsg.Array), f.want("kwargs", false, rawmsg.Map)); err != nil {
		return err
	}
	if _, ok := f["kwargs"].Fields(); !ok {
		return protof("keyword names must be str")
	}
	if t := f.str("target"); t == "" || len(t) > maxRPCName {
		return protof("rpc: a target of %d bytes", len(t))
	}
	if m := f.str("method"); !publicIdent(m) {
		return protof("rpc: %q is not a public method name", truncate(m, 60))
	}
	return nil
}

// publicIdent: an ASCII identifier of at most maxRPCName bytes not starting with "_"
// (the host refuses other Unicode identifiers by its own check as well).
func publicIdent(s string) bool {
	if s == "" || len(s) > maxRPCName || s[0] == '_' || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// checkClones: a fork template's batch of finished clones (template.py "clones").
func (f frame) checkClones() error {
	if err := f.checkAll(f.want("items", false, rawmsg.Array), f.want("done", false, rawmsg.Bool)); err != nil {
		return err
	}
	items, _ := f["items"].Items()
	for i, it := range items {
		m, ok := it.Fields()
		if !ok {
			return protof("clone item %d is not a map with string keys", i)
		}
		c := frame(m)
		const I, B = rawmsg.Int, rawmsg.Bool
		if err := c.checkAll(c.want("id", false, I), c.want("stdout", false, rawmsg.Bin), c.want("stderr", false, rawmsg.Bin),
			c.want("exit_code", true, I), c.want("signal", true, I), c.want("timed_out", false, B),
			c.want("stdout_truncated", false, B), c.want("session", true, I)); err != nil {
			return protof("clone item %d: %v", i, err)
		}
	}
	return nil
}

func (f frame) str(key string) string {
	s, _ := f[key].Str()
	return s
}
