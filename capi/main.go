// Command capi is built with -buildmode=c-shared into libsandtrap.so. It only
// converts between C and the engine: every decision lives in core/.
package main

/*
#cgo CFLAGS: -O2 -Wall
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "../include/sandtrap.h"
#include "result.h"
int st_host_nofile(uint64_t *cur, uint64_t *max);
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/guest"
	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/sandtrap/sandtrap/core/policy"
	_ "github.com/sandtrap/sandtrap/core/session" // the cooperative sandbox's and map-reduce's ops
	"golang.org/x/sys/unix"
)

func main() {}

func init() {
	// Go raised the host's RLIMIT_NOFILE soft limit while initialising; put the
	// host's own value back.
	var cur, max C.uint64_t
	if C.st_host_nofile(&cur, &max) == 1 {
		var now unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &now) == nil && uint64(cur) < now.Cur {
			unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(cur), Max: now.Max})
		}
	}
}

// Status codes (include/sandtrap.h).
const (
	stOK             = 0
	stInvalidArg     = -1
	stInvalidRequest = -2
	stInvalidPolicy  = -3
	stIsolation      = -4
	stNotFound       = -5
	stSpawn          = -6
	stForked         = -7
	stClosed         = -8
	stInternal       = -99
)

func status(kind string) C.int {
	switch kind {
	case "":
		return stOK
	case engine.KindInvalidRequest:
		return stInvalidRequest
	case engine.KindInvalidPolicy:
		return stInvalidPolicy
	case engine.KindIsolation:
		return stIsolation
	case engine.KindNotFound:
		return stNotFound
	case engine.KindSpawn:
		return stSpawn
	case engine.KindForked:
		return stForked
	case engine.KindClosed:
		return stClosed
	}
	return stInternal
}

func errStatus(err error) C.int {
	if e, ok := err.(*engine.Error); ok {
		return status(e.Kind)
	}
	return stInternal
}

// setError stores a new sandtrap_error for err in *out (when out is not NULL): its
// status, kind, message and problems (include/sandtrap.h, "Errors").
func setError(out **C.struct_sandtrap_error, st C.int, err error) {
	if out == nil {
		return
	}
	kind, msg := engine.KindInternal, err.Error()
	var probs []policy.Problem
	if e, ok := err.(*engine.Error); ok {
		kind, probs = e.Kind, e.Problems
	}
	e := (*C.struct_sandtrap_error)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_sandtrap_error{}))))
	e.status = st
	e.kind = C.CString(kind)
	e.message = C.CString(msg)
	if n := len(probs); n > 0 {
		e.nproblems = C.size_t(n)
		e.fields = (**C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		e.messages = (**C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
		fields, messages := unsafe.Slice(e.fields, n), unsafe.Slice(e.messages, n)
		for i, p := range probs {
			fields[i], messages[i] = C.CString(p.Field), C.CString(p.Message)
		}
	}
	*out = e
}

func outBuf(b []byte, out **C.uint8_t, outLen *C.size_t) {
	p := C.malloc(C.size_t(len(b) + 1))
	if len(b) > 0 {
		C.memcpy(p, unsafe.Pointer(&b[0]), C.size_t(len(b)))
	}
	*out = (*C.uint8_t)(p)
	*outLen = C.size_t(len(b))
}

func goBytes(p *C.uint8_t, n C.size_t) []byte {
	if n == 0 {
		return nil
	}
	if uint64(n) > engine.MaxRequest {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(p), C.int(n))
}

//export stgo_probe
func stgo_probe(out **C.uint8_t, outLen *C.size_t) C.int {
	f := kernel.Probe()
	m := map[string]any{
		"landlock_abi": f.LandlockABI, "seccomp": f.Seccomp, "root": f.Root,
		"pid_namespace": f.PidNS, "user_namespace": f.UserNS, "cgroup": nil,
		"test_disabled": f.Disabled,
	}
	if d, err := guest.Dir(); err == nil {
		m["guest_dir"] = d
	} else {
		m["guest_dir_error"] = err.Error()
	}
	if f.Cgroup != nil {
		var cs []string
		for c := range f.Cgroup.Dirs {
			cs = append(cs, c)
		}
		m["cgroup"] = map[string]any{"version": f.Cgroup.Version, "controllers": cs}
	}
	outBuf(engine.Encode(m), out, outLen)
	return stOK
}

// handles maps the uintptr_t held by the C handles to their Go values. Unlike
// cgo.Handle, a stale or foreign handle is not a panic: it is simply not found.
var (
	handles    sync.Map // uintptr -> value
	lastHandle atomic.Uintptr
)

func newHandle(v any) C.uintptr_t {
	h := lastHandle.Add(1)
	handles.Store(h, v)
	return C.uintptr_t(h)
}

func handleValue(h C.uintptr_t) any {
	v, _ := handles.Load(uintptr(h))
	return v
}

//export stgo_handle_delete
func stgo_handle_delete(h C.uintptr_t) {
	handles.Delete(uintptr(h))
}

// builder: a policy map under construction, typed as the C setters give it.
type builder struct {
	mu sync.Mutex
	m  map[string]any
}

//export stgo_builder_new
func stgo_builder_new() C.uintptr_t {
	return newHandle(&builder{m: map[string]any{}})
}

func getBuilder(h C.uintptr_t) (*builder, bool) {
	b, ok := handleValue(h).(*builder)
	return b, ok
}

// set records v for the field with msgpack key key: appended to a list field, else
// set. The generated setters name only schema fields: any other key is a bug.
func set(h C.uintptr_t, key *C.char, v any) C.int {
	b, ok := getBuilder(h)
	f := policy.Lookup(C.GoString(key))
	if !ok {
		return stInvalidArg
	}
	if f == nil || !f.Supported() {
		return stInternal
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, isStr := v.(string)
	if f.Kind().List() || (f.Kind() == policy.KindDegrade && isStr) {
		// (allow_degraded: a name is added to its list; true already covers it)
		if f.Kind() == policy.KindDegrade && b.m[f.Key] == true {
			return stOK
		}
		l, _ := b.m[f.Key].([]any)
		b.m[f.Key] = append(l, v)
	} else {
		b.m[f.Key] = v
	}
	return stOK
}

//export stgo_builder_string
func stgo_builder_string(h C.uintptr_t, key, val *C.char) C.int {
	return set(h, key, C.GoString(val))
}

//export stgo_builder_u64
func stgo_builder_u64(h C.uintptr_t, key *C.char, v C.uint64_t) C.int {
	return set(h, key, uint64(v))
}

//export stgo_builder_bool
func stgo_builder_bool(h C.uintptr_t, key *C.char, v C.int) C.int {
	return set(h, key, v != 0)
}

// stgo_builder_ms records milliseconds as the field's seconds.
//
//export stgo_builder_ms
func stgo_builder_ms(h C.uintptr_t, key *C.char, ms C.uint64_t) C.int {
	return set(h, key, float64(ms)/1000)
}

//export stgo_builder_env
func stgo_builder_env(h C.uintptr_t, key, name, val *C.char) C.int {
	b, ok := getBuilder(h)
	if !ok {
		return stInvalidArg
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := C.GoString(key) // a field of kind env: "env", "credentials"
	env, _ := b.m[k].(map[string]any)
	if env == nil {
		env = map[string]any{}
		b.m[k] = env
	}
	env[C.GoString(name)] = C.GoString(val)
	return stOK
}

//export stgo_builder_mount
func stgo_builder_mount(h C.uintptr_t, key, inside, host *C.char) C.int {
	b, ok := getBuilder(h)
	if !ok {
		return stInvalidArg
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := C.GoString(key)
	m, _ := b.m[k].(map[string]any)
	if m == nil {
		m = map[string]any{}
		b.m[k] = m
	}
	m[C.GoString(inside)] = C.GoString(host)
	return stOK
}

func newSandbox(m map[string]any, out *C.uintptr_t, errp **C.struct_sandtrap_error) C.int {
	sb, err := engine.NewFromMap(m)
	if err != nil {
		st := errStatus(err)
		setError(errp, st, err)
		return st
	}
	engine.Register(sb)
	*out = newHandle(sb)
	return stOK
}

//export stgo_builder_build
func stgo_builder_build(h C.uintptr_t, out *C.uintptr_t, errp **C.struct_sandtrap_error) C.int {
	b, ok := getBuilder(h)
	if !ok {
		return stInvalidArg
	}
	b.mu.Lock()
	m := make(map[string]any, len(b.m))
	for k, v := range b.m { // copied: later setters do not reach the sandbox
		switch t := v.(type) {
		case []any:
			m[k] = append([]any(nil), t...)
		case map[string]any:
			c := make(map[string]any, len(t))
			for name, val := range t {
				c[name] = val
			}
			m[k] = c
		default:
			m[k] = v
		}
	}
	b.mu.Unlock()
	return newSandbox(m, out, errp)
}

//export stgo_sandbox_new
func stgo_sandbox_new(buf *C.uint8_t, n C.size_t, out *C.uintptr_t, errp **C.struct_sandtrap_error) C.int {
	m, err := engine.DecodeMap(goBytes(buf, n), "policy")
	if err != nil {
		e := &engine.Error{Kind: engine.KindInvalidPolicy, Message: err.Error()}
		if de, ok := err.(*engine.Error); ok {
			e.Problems = de.Problems
		}
		setError(errp, stInvalidPolicy, e)
		return stInvalidPolicy
	}
	return newSandbox(m, out, errp)
}

func getSandbox(h C.uintptr_t) (*engine.Sandbox, bool) {
	sb, ok := handleValue(h).(*engine.Sandbox)
	return sb, ok
}

//export stgo_sandbox_free
func stgo_sandbox_free(h C.uintptr_t) {
	if sb, ok := getSandbox(h); ok {
		engine.Unregister(sb)
		sb.Close()
	}
	stgo_handle_delete(h)
}

//export stgo_sandbox_id
func stgo_sandbox_id(h C.uintptr_t) C.uint64_t {
	if sb, ok := getSandbox(h); ok {
		return C.uint64_t(sb.ID())
	}
	return 0
}

//export stgo_sandbox_exec
func stgo_sandbox_exec(h C.uintptr_t, req *C.uint8_t, n C.size_t, out **C.uint8_t, outLen *C.size_t) C.int {
	sb, ok := getSandbox(h)
	if !ok {
		return stInvalidArg
	}
	resp, kind := sb.Exec(goBytes(req, n))
	outBuf(resp, out, outLen)
	return status(kind)
}

//export stgo_sandbox_cancel
func stgo_sandbox_cancel(h C.uintptr_t, tag *C.char) C.int {
	sb, ok := getSandbox(h)
	if !ok {
		return stInvalidArg
	}
	t := ""
	if tag != nil {
		t = C.GoString(tag)
	}
	return C.int(sb.Cancel(t, tag == nil))
}

//export stgo_confine
func stgo_confine(h C.uintptr_t, withSeccomp bool, errp **C.struct_sandtrap_error) C.int {
	sb, ok := getSandbox(h)
	if !ok {
		return stInvalidArg
	}
	if err := sb.Confine(withSeccomp); err != nil {
		st := errStatus(err)
		setError(errp, st, err)
		return st
	}
	return stOK
}

// cBytes copies b into a NUL-terminated malloc'd buffer (never NULL).
func cBytes(b []byte) (*C.uint8_t, C.size_t) {
	p := C.malloc(C.size_t(len(b) + 1))
	if len(b) > 0 {
		C.memcpy(p, unsafe.Pointer(&b[0]), C.size_t(len(b)))
	}
	*(*byte)(unsafe.Add(p, len(b))) = 0
	return (*C.uint8_t)(p), C.size_t(len(b))
}

// runStatus is the status sandtrap_sandbox_exec returns for the same run: a run's
// own fate (timeout, cancel, a limit) is a result, not a call failure
// (engine.CallKind).
func runStatus(e *engine.ErrorInfo) C.int { return status(engine.CallKind(e)) }

// stgo_sandbox_run is sandtrap_sandbox_run: the typed form of {"op": "run"}. abi.c
// has checked the arguments; this converts them to a RunRequest and the engine's
// Result into r.
//
//export stgo_sandbox_run
func stgo_sandbox_run(h C.uintptr_t, argv **C.char, argc C.int, stdin *C.uint8_t, stdinLen C.size_t,
	timeoutMS C.uint64_t, tag *C.char, maxOutput C.uint64_t, r *C.struct_sandtrap_result) C.int {
	req := &engine.RunRequest{StdinFD: -1, StdoutFD: -1, Timeout: float64(timeoutMS) / 1000, MaxOutput: int64(maxOutput)}
	for _, a := range unsafe.Slice(argv, int(argc)) {
		req.Argv = append(req.Argv, C.GoString(a))
	}
	if stdinLen > 0 {
		req.Stdin = append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(stdin)), int(stdinLen))...)
	}
	if tag != nil {
		req.Tag = C.GoString(tag)
	}
	sb, ok := getSandbox(h)
	if !ok { // a stale handle: a bug of the caller or of the library
		r.exit_code = -1
		r.out, r.out_len = cBytes(nil)
		r.err, r.err_len = cBytes(nil)
		r.error_kind = C.CString(engine.KindInternal)
		r.error_message = C.CString("not a live sandbox handle")
		return stInternal
	}
	res := sb.Run(req)
	r.success = cBool(res.Success)
	r.exit_code, r.signal = -1, 0
	if res.ExitCode != nil {
		r.exit_code = C.int(*res.ExitCode)
	}
	if res.Signal != nil {
		r.signal = C.int(*res.Signal)
	}
	r.stdout_truncated, r.stderr_truncated = cBool(res.StdoutTruncated), cBool(res.StderrTruncated)
	r.timed_out, r.cancelled = cBool(res.TimedOut), cBool(res.Cancelled)
	r.out, r.out_len = cBytes(res.Stdout)
	r.err, r.err_len = cBytes(res.Stderr)
	r.reason = C.CString(res.Reason)
	if res.Error != nil {
		r.error_kind = C.CString(res.Error.Kind)
		r.error_message = C.CString(res.Error.Message)
	}
	cDenials(res, r)
	return runStatus(res.Error)
}

// cDenials copies res's denials into r (malloc'd: sandtrap_result_free frees them).
func cDenials(res *engine.Result, r *C.struct_sandtrap_result) {
	r.denials_dropped = C.uint64_t(res.DenialsDropped)
	if len(res.Denials) == 0 {
		return
	}
	arr := (*C.struct_sandtrap_denial)(C.calloc(C.size_t(len(res.Denials)), C.size_t(unsafe.Sizeof(C.struct_sandtrap_denial{}))))
	if arr == nil {
		return
	}
	opt := func(s string) *C.char {
		if s == "" {
			return nil
		}
		return C.CString(s)
	}
	for i, d := range res.Denials {
		c := (*C.struct_sandtrap_denial)(unsafe.Add(unsafe.Pointer(arr), uintptr(i)*unsafe.Sizeof(C.struct_sandtrap_denial{})))
		c.syscall, c.path, c.address, c.reason = C.CString(d.Syscall), opt(d.Path), opt(d.Address), opt(d.Reason)
		c.errno_name, c.errno_nr, c.count, c.source = C.CString(d.Errno), C.int(d.ErrnoNr), C.uint64_t(d.Count), C.CString(d.Source)
	}
	r.denials, r.ndenials = arr, C.size_t(len(res.Denials))
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
