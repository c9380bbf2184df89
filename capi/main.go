// Command capi is built with -buildmode=c-shared into libsandtrap.so. It only
// converts between C and the engine: every decision lives in core/.
package main

/*
#cgo CFLAGS: -O2 -Wall
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "result.h"
int st_host_nofile(uint64_t *cur, uint64_t *max);
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/guest"
	"github.com/sandtrap/sandtrap/core/kernel"
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

func setErr(errmsg **C.char, err error) {
	if errmsg != nil {
		*errmsg = C.CString(err.Error())
	}
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

// builder: a policy map under construction.
type builder struct {
	mu sync.Mutex
	m  map[string]any
}

//export stgo_builder_new
func stgo_builder_new() C.uintptr_t {
	return C.uintptr_t(cgo.NewHandle(&builder{m: map[string]any{}}))
}

//export stgo_handle_delete
func stgo_handle_delete(h C.uintptr_t) {
	cgo.Handle(h).Delete()
}

func getBuilder(h C.uintptr_t) *builder {
	b, _ := cgo.Handle(h).Value().(*builder)
	return b
}

// list-valued builder fields and the policy key they append to
var listKeys = map[string]string{
	"fs_readable": "fs_readable", "fs_writable": "fs_writable", "fs_denied": "fs_denied",
	"net_allow": "net_allow", "net_allow_bind_str": "net_allow_bind", "net_allow_bind": "net_allow_bind",
	"extra_allow_syscall": "extra_allow_syscalls", "extra_deny_syscall": "extra_deny_syscalls",
}

func (b *builder) set(name string, v any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if key, ok := listKeys[name]; ok {
		l, _ := b.m[key].([]any)
		b.m[key] = append(l, v)
		return
	}
	b.m[name] = v
}

//export stgo_builder_str
func stgo_builder_str(h C.uintptr_t, name, val *C.char) C.int {
	getBuilder(h).set(C.GoString(name), C.GoString(val))
	return stOK
}

//export stgo_builder_num
func stgo_builder_num(h C.uintptr_t, name *C.char, v C.double) C.int {
	n := C.GoString(name)
	switch n {
	case "max_cpu_time", "timeout":
		getBuilder(h).set(n, float64(v))
	default:
		getBuilder(h).set(n, int64(v))
	}
	return stOK
}

//export stgo_builder_bool
func stgo_builder_bool(h C.uintptr_t, name *C.char, v C.int) C.int {
	getBuilder(h).set(C.GoString(name), v != 0)
	return stOK
}

//export stgo_builder_env
func stgo_builder_env(h C.uintptr_t, name, val *C.char) C.int {
	b := getBuilder(h)
	b.mu.Lock()
	defer b.mu.Unlock()
	env, _ := b.m["env"].(map[string]any)
	if env == nil {
		env = map[string]any{}
		b.m["env"] = env
	}
	env[C.GoString(name)] = C.GoString(val)
	return stOK
}

func newSandbox(m map[string]any, out *C.uintptr_t, errmsg **C.char) C.int {
	sb, err := engine.NewFromMap(m)
	if err != nil {
		setErr(errmsg, err)
		return errStatus(err)
	}
	engine.Register(sb)
	*out = C.uintptr_t(cgo.NewHandle(sb))
	return stOK
}

//export stgo_builder_build
func stgo_builder_build(h C.uintptr_t, out *C.uintptr_t, errmsg **C.char) C.int {
	b := getBuilder(h)
	b.mu.Lock()
	m := make(map[string]any, len(b.m))
	for k, v := range b.m {
		m[k] = v
	}
	b.mu.Unlock()
	return newSandbox(m, out, errmsg)
}

//export stgo_sandbox_new
func stgo_sandbox_new(buf *C.uint8_t, n C.size_t, out *C.uintptr_t, errmsg **C.char) C.int {
	m, err := engine.DecodeMap(goBytes(buf, n), "policy")
	if err != nil {
		setErr(errmsg, err)
		return stInvalidPolicy
	}
	return newSandbox(m, out, errmsg)
}

func getSandbox(h C.uintptr_t) *engine.Sandbox {
	sb, _ := cgo.Handle(h).Value().(*engine.Sandbox)
	return sb
}

//export stgo_sandbox_free
func stgo_sandbox_free(h C.uintptr_t) {
	sb := getSandbox(h)
	engine.Unregister(sb)
	sb.Close()
	cgo.Handle(h).Delete()
}

//export stgo_sandbox_id
func stgo_sandbox_id(h C.uintptr_t) C.uint64_t {
	return C.uint64_t(getSandbox(h).ID())
}

//export stgo_sandbox_exec
func stgo_sandbox_exec(h C.uintptr_t, req *C.uint8_t, n C.size_t, out **C.uint8_t, outLen *C.size_t) C.int {
	resp, kind := getSandbox(h).Exec(goBytes(req, n))
	outBuf(resp, out, outLen)
	return status(kind)
}

//export stgo_sandbox_cancel
func stgo_sandbox_cancel(h C.uintptr_t, tag *C.char) C.int {
	t := ""
	if tag != nil {
		t = C.GoString(tag)
	}
	return C.int(getSandbox(h).Cancel(t, tag == nil))
}

//export stgo_confine
func stgo_confine(h C.uintptr_t, withSeccomp bool, errmsg **C.char) C.int {
	if err := getSandbox(h).Confine(withSeccomp); err != nil {
		setErr(errmsg, err)
		return errStatus(err)
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
	timeout C.double, tag *C.char, maxOutput C.uint64_t, r *C.struct_sandtrap_result) C.int {
	req := &engine.RunRequest{StdinFD: -1, StdoutFD: -1, Timeout: float64(timeout), MaxOutput: int64(maxOutput)}
	for _, a := range unsafe.Slice(argv, int(argc)) {
		req.Argv = append(req.Argv, C.GoString(a))
	}
	if stdinLen > 0 {
		req.Stdin = append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(stdin)), int(stdinLen))...)
	}
	if tag != nil {
		req.Tag = C.GoString(tag)
	}
	res := getSandbox(h).Run(req)
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
	if res.Error != nil {
		r.error_kind = C.CString(res.Error.Kind)
		r.error_message = C.CString(res.Error.Message)
	}
	return runStatus(res.Error)
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
