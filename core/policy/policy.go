// Package policy is the sandbox policy model: decoding from msgpack, human sizes and
// port lists, and validation that reports every problem at once.
package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Policy is a validated sandbox policy. Zero values mean "not set".
type Policy struct {
	FSReadable   []string
	FSWritable   []string
	FSDenied     []string
	NetAllow     []NetRule // where sockets may connect and send (net.go)
	NetDeny      []NetRule // or where they may not (everything else may); never both
	NetAllowBind []uint16
	NetAllowUDP  bool
	NetAllowUnix bool
	PortRemap    bool       // binds of NetAllowBind ports land on real ports of the sandbox's own (core/supervise/ports.go)
	Name         string     // the sandbox's hostname, in a UTS namespace of its own ("": the host's)
	HTTPAllow    []HTTPRule // requests the proxy lets through (http.go; core/httpproxy)
	HTTPDeny     []HTTPRule // requests it refuses, checked first
	HTTPPorts    []uint16   // TCP ports whose connects go to the proxy (empty: DefaultHTTPPorts)
	// HTTPS interception (http.go; core/httpproxy/ca.go): on with HTTPIntercept or
	// HTTPCA; the CA's certificate and key files (PEM), else an ephemeral CA.
	HTTPIntercept   bool
	HTTPCA, HTTPKey string
	HTTPInjectCA    []string          // trust bundles the run sees with the CA appended
	HTTPCAOut       string            // where the CA's certificate (PEM) is written
	Credentials     map[string]string // name -> "env:VAR" or "file:PATH" (read by the engine)
	HTTPAuth        []HTTPAuth        // headers the proxy adds after the rule check
	HTTPAuthPlain   bool              // credentials may go over plain HTTP too (warned)

	MaxMemory    int64   // bytes
	MaxProcesses int64   // tasks in the sandbox
	MaxOpenFiles int64   // per process
	MaxDisk      int64   // bytes per file written
	MaxCPU       int64   // percent of one CPU (throttled)
	MaxCPUTime   float64 // CPU seconds for the whole run (then killed)
	Timeout      float64 // default wall-clock seconds of a run
	MaxOutput    int64   // bytes kept per output stream

	Env      map[string]string
	CleanEnv bool
	Cwd      string
	UID, GID *uint32

	ExtraAllowSyscalls []string
	ExtraDenySyscalls  []string

	NoRandomizeMemory bool  // personality(ADDR_NO_RANDOMIZE) for every process of the run
	NoHugePages       bool  // PR_SET_THP_DISABLE
	NoCoredump        *bool // nil or true: RLIMIT_CORE 0; false: core dumps allowed (core_pattern checked)
	CPUCores          []int // sched_setaffinity of the run (refused to the program); sorted, distinct
	NumCPUs           int64 // the CPUs the run sees (and may use): 0, every one it may use
	GPUDevices        *GPUs // nil: GPUs are devices like any other (openable only when named)
	NoSupervisor      bool  // Landlock and a deny-only filter: no user-notification supervisor

	// Determinism (core/supervise/determinism.go).
	RandomSeed        *uint64  // getrandom, /dev/urandom and /dev/random, AT_RANDOM from a stream keyed by it
	TimeStart         *float64 // the run's CLOCK_REALTIME starts here (Unix seconds) and advances
	DeterministicDirs bool     // getdents64 answers entries sorted by name

	AllowDegraded bool // every protection may be left out where the kernel lacks it
	// DegradedProtections: the protections (protection.go) that may be left out
	// where the kernel lacks them (allow_degraded given as a list); Disable: those
	// never applied.
	DegradedProtections []string
	Disable             []string
	// MaxProcessesDefault: MaxProcesses is the schema's default, not asked for (a
	// kernel that cannot enforce it reports it degraded instead of failing).
	MaxProcessesDefault bool

	// Workdir, when set, is seen copy-on-write by every run (core/fsview/cow.go);
	// OnExit and OnError are BranchCommit, BranchAbort or BranchKeep ("": the
	// defaults, commit and abort).
	Workdir         string
	OnExit, OnError string
	FSStorage       string // with Workdir: where each run's upper layer is made on disk
	// WorkdirInside, with Chroot: the workdir as a path inside it, where each
	// run's pid 1 mounts the overlay; Workdir is then the host path shown there.
	WorkdirInside string
	// Chroot, when set, is the host directory that is each run's root; the
	// other paths of the policy are then paths inside it (core/plan/chroot.go).
	// FSMount and FSMountRO map paths inside it to host paths (resolved).
	Chroot             string
	FSMount, FSMountRO map[string]string
}

// ExitAction is what becomes of a run's workdir changes: on_exit when it
// succeeded, on_error otherwise.
func (p *Policy) ExitAction(success bool) string {
	if success {
		if p.OnExit == "" {
			return BranchCommit
		}
		return p.OnExit
	}
	if p.OnError == "" {
		return BranchAbort
	}
	return p.OnError
}

// DefaultMaxOutput caps each captured stream unless the policy says otherwise.
const DefaultMaxOutput = 16 << 20

// DefaultMaxProcesses is max_processes when the policy does not give it (the
// seed API's default); max_processes = 0 means no limit.
const DefaultMaxProcesses = 64

// Problem is one validation problem: the field (or request key) it is about,
// "" for the input as a whole, and what is wrong with it. Messages do not name
// other fields, except uid and gid, whose names are the same in every binding:
// a binding shows a problem under its own name for Field.
type Problem struct {
	Field   string `msgpack:"field"`
	Message string `msgpack:"message"`
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// Error lists every problem found in a policy or request.
type Error struct{ Problems []Problem }

func (e *Error) Error() string { return FormatProblems("invalid policy", e.Problems) }

// FormatProblems is the human message of a list of problems: "what: problem" for
// one, "what (N problems):\n- a\n- b" for more.
func FormatProblems(what string, probs []Problem) string {
	if len(probs) == 1 {
		return what + ": " + probs[0].String()
	}
	lines := make([]string, len(probs))
	for i, p := range probs {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%s (%d problems):\n- %s", what, len(probs), strings.Join(lines, "\n- "))
}

// Problems collects validation failures.
type Problems []Problem

// Add records a problem of field.
func (p *Problems) Add(field, format string, a ...any) {
	*p = append(*p, Problem{Field: field, Message: fmt.Sprintf(format, a...)})
}

// Err returns nil or an *Error holding every problem.
func (p Problems) Err() *Error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: append([]Problem(nil), p...)}
}

// FromMap decodes and validates a policy map (as decoded from msgpack). Unknown keys,
// wrong types and invalid values are all reported together.
func FromMap(m map[string]any) (*Policy, error) {
	p, probs := Decode(m)
	if err := probs.Err(); err != nil {
		return nil, err
	}
	return p, nil
}

// Decode is FromMap that returns the policy read so far with every problem, so that
// callers can add their own checks to the same list. Every field is read as its
// Schema entry says.
func Decode(m map[string]any) (*Policy, Problems) {
	var p Policy
	var probs Problems
	var other []string
	for k := range m {
		if f := Lookup(k); f == nil || !f.Supported() {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	for _, k := range other {
		if f := Lookup(k); f != nil {
			probs.Add(k, "%s", f.UnsupportedMessage(func(f *Field) string { return f.Key }))
		} else {
			probs.Add(k, "%s", UnknownMessage(k, Fields))
		}
	}
	r := reader{m: m, probs: &probs}
	for i := range Schema {
		if f := &Schema[i]; f.Supported() {
			f.bind.read(r, f.Key, &p)
		}
	}
	if _, ok := m["max_output"]; !ok {
		p.MaxOutput = DefaultMaxOutput
	}
	if v, ok := m["max_processes"]; !ok || v == nil {
		p.MaxProcesses, p.MaxProcessesDefault = DefaultMaxProcesses, true
	}
	if len(p.NetAllow) > 0 && len(p.NetDeny) > 0 {
		probs.Add("net_deny", "cannot be combined with an allow list: give the destinations that may be reached, or those that may not")
	}
	if len(p.NetDeny) > 0 && p.NetAllowUDP {
		probs.Add("net_allow_udp", "means nothing with a deny list: UDP is allowed wherever the deny list does not refuse it")
	}
	if len(p.HTTPPorts) > 0 && !p.HTTPRules() {
		probs.Add("http_ports", "means nothing without HTTP rules (http_allow or http_deny)")
	}
	p.checkHTTPS(&probs)
	if p.MaxCPU > 100*1024 {
		probs.Add("max_cpu", "%d%% is more than any machine has", p.MaxCPU)
	}
	switch {
	case p.UID != nil && p.GID == nil:
		probs.Add("uid", "must be given together with gid")
	case p.UID == nil && p.GID != nil:
		probs.Add("gid", "must be given together with uid")
	}
	for _, a := range p.ExtraAllowSyscalls {
		for _, d := range p.ExtraDenySyscalls {
			if a == d {
				probs.Add("extra_deny_syscalls", "syscall %q is both allowed and denied", a)
			}
		}
	}
	return &p, probs
}

// Within reports whether path p is dir or lies beneath it (both clean and absolute).
func Within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// ParseSize parses 1234, "1234", "64K", "256M", "1.5G", "2GiB", "1T" (binary units).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := float64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || f < 0 || f != f || f*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a size (examples: 1048576, \"512K\", \"256M\", \"1.5G\")", s)
	}
	return int64(f * mult), nil
}

// ParsePorts expands 80, "443", "8000-8005", "22,443,8000-8005" into a sorted,
// de-duplicated list. Ranges are merged before expansion, so any input costs at
// most 65535 steps.
func ParsePorts(items []any) ([]uint16, []string) {
	type span struct{ lo, hi int64 }
	var spans []span
	var probs []string
	add := func(lo, hi int64, orig any) {
		if lo < 1 || hi > 65535 || hi < lo {
			probs = append(probs, fmt.Sprintf("port %v out of range 1-65535", orig))
			return
		}
		spans = append(spans, span{lo, hi})
	}
	for _, it := range items {
		if n, ok := asInt(it); ok {
			add(n, n, it)
			continue
		}
		list, ok := it.(string)
		if !ok {
			probs = append(probs, fmt.Sprintf("port %v: want an integer or a string like \"8000-8005\" or \"22,443\"", it))
			continue
		}
		for _, s := range strings.Split(list, ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
			a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
			}
			if err1 != nil || err2 != nil || b < a {
				probs = append(probs, fmt.Sprintf("port %q: want \"N\", \"LOW-HIGH\" or a comma list of them (\"22,443,8000-8005\")", s))
				continue
			}
			add(a, b, s)
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	var out []uint16
	next := int64(1) // first port not yet emitted
	for _, sp := range spans {
		if sp.lo > next {
			next = sp.lo
		}
		for ; next <= sp.hi; next++ {
			out = append(out, uint16(next))
		}
	}
	return out, probs
}

// AsInt converts any msgpack integer to int64.
func AsInt(v any) (int64, bool) { return asInt(v) }

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > 1<<62 {
			return 0, false
		}
		return int64(n), true
	case uint:
		return int64(n), true
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch f := v.(type) {
	case float64:
		return f, true
	case float32:
		return float64(f), true
	}
	if n, ok := asInt(v); ok {
		return float64(n), true
	}
	return 0, false
}

// CheckPathAt is CheckPath for the policy's filesystem fields (fs_readable,
// fs_writable, fs_denied, workdir): a relative path is resolved against the
// working directory of the process building the sandbox (the caller's: the
// engine runs in the host process, whose cwd the binding shares), and the
// absolute path is what the sandbox uses and reports.
func CheckPathAt(field, s string, probs *Problems) string {
	if s == "" || strings.ContainsRune(s, 0) || filepath.IsAbs(s) {
		return CheckPath(field, s, probs)
	}
	wd, err := os.Getwd()
	if err != nil {
		probs.Add(field, "path %q is relative and the working directory is unknown (%v); give an absolute path", s, err)
		return ""
	}
	return filepath.Join(wd, s)
}

// CheckPath validates an absolute path without NUL and returns it cleaned.
func CheckPath(field, s string, probs *Problems) string {
	switch {
	case s == "":
		probs.Add(field, "empty path")
	case strings.ContainsRune(s, 0):
		probs.Add(field, "path %q contains a NUL byte", s)
	case !filepath.IsAbs(s):
		probs.Add(field, "path %q is relative; give an absolute path", s)
	default:
		return filepath.Clean(s)
	}
	return ""
}

// GPUs is gpu_devices: every GPU of the host (All) or those of Indices (sorted,
// distinct): /dev/nvidiaN.
type GPUs struct {
	All     bool
	Indices []int
}
