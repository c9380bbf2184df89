// Package policy is the sandbox policy model: decoding from msgpack, human sizes and
// port lists, and validation that reports every problem at once.
package policy

import (
	"fmt"
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
	AllowDegraded      bool
}

// DefaultMaxOutput caps each captured stream unless the policy says otherwise.
const DefaultMaxOutput = 16 << 20

// Error lists every problem found in a policy or request.
type Error struct{ Problems []string }

func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "invalid policy: " + e.Problems[0]
	}
	return fmt.Sprintf("invalid policy (%d problems):\n- %s", len(e.Problems), strings.Join(e.Problems, "\n- "))
}

// Problems collects validation failures.
type Problems []string

func (p *Problems) Addf(format string, a ...any) { *p = append(*p, fmt.Sprintf(format, a...)) }

// Err returns nil or an *Error holding every problem.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: append([]string(nil), p...)}
}

// Fields lists every policy key accepted in a msgpack policy map.
var Fields = []string{"fs_readable", "fs_writable", "fs_denied", "net_allow", "net_deny", "net_allow_bind",
	"net_allow_udp", "net_allow_unix", "max_memory", "max_processes", "max_open_files",
	"max_disk", "max_cpu", "max_cpu_time", "timeout", "max_output", "env", "clean_env", "cwd",
	"uid", "gid", "extra_allow_syscalls", "extra_deny_syscalls", "allow_degraded"}

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
// callers can add their own checks to the same list.
func Decode(m map[string]any) (*Policy, Problems) {
	var p Policy
	var probs Problems
	known := map[string]bool{}
	for _, f := range Fields {
		known[f] = true
	}
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		probs.Addf("unknown field %q", k)
	}
	r := reader{m: m, probs: &probs}
	p.FSReadable = r.paths("fs_readable")
	p.FSWritable = r.paths("fs_writable")
	p.FSDenied = r.paths("fs_denied")
	p.NetAllow = ParseNetRules("net_allow", r.list("net_allow"), &probs)
	p.NetDeny = ParseNetRules("net_deny", r.list("net_deny"), &probs)
	p.NetAllowBind = r.ports("net_allow_bind")
	p.NetAllowUDP = r.boolean("net_allow_udp")
	p.NetAllowUnix = r.boolean("net_allow_unix")
	if len(p.NetAllow) > 0 && len(p.NetDeny) > 0 {
		probs.Addf("net_allow and net_deny are mutually exclusive: give what may be reached, or what may not")
	}
	if len(p.NetDeny) > 0 && p.NetAllowUDP {
		probs.Addf("net_allow_udp means nothing with net_deny: UDP is allowed wherever net_deny does not refuse it")
	}
	p.MaxMemory = r.size("max_memory")
	p.MaxProcesses = r.count("max_processes")
	p.MaxOpenFiles = r.count("max_open_files")
	p.MaxDisk = r.size("max_disk")
	p.MaxCPU = r.count("max_cpu")
	if p.MaxCPU > 100*1024 {
		probs.Addf("max_cpu: %d%% is more than any machine has", p.MaxCPU)
	}
	p.MaxCPUTime = r.seconds("max_cpu_time")
	p.Timeout = r.seconds("timeout")
	p.MaxOutput = r.size("max_output")
	if _, ok := m["max_output"]; !ok {
		p.MaxOutput = DefaultMaxOutput
	}
	p.Env = r.env("env")
	p.CleanEnv = r.boolean("clean_env")
	p.Cwd = r.path("cwd")
	p.UID = r.id("uid")
	p.GID = r.id("gid")
	if (p.UID == nil) != (p.GID == nil) {
		probs.Addf("uid and gid must be given together")
	}
	p.ExtraAllowSyscalls = r.names("extra_allow_syscalls")
	p.ExtraDenySyscalls = r.names("extra_deny_syscalls")
	p.AllowDegraded = r.boolean("allow_degraded")

	for _, a := range p.ExtraAllowSyscalls {
		for _, d := range p.ExtraDenySyscalls {
			if a == d {
				probs.Addf("syscall %q is in both extra_allow_syscalls and extra_deny_syscalls", a)
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

// ParsePorts expands 80, "443", "8000-8005" into a sorted, de-duplicated list.
// Ranges are merged before expansion, so any input costs at most 65535 steps.
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
		s, ok := it.(string)
		if !ok {
			probs = append(probs, fmt.Sprintf("port %v: want an integer or a string like \"8000-8005\"", it))
			continue
		}
		lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		}
		if err1 != nil || err2 != nil || b < a {
			probs = append(probs, fmt.Sprintf("port %q: want \"N\" or \"LOW-HIGH\"", s))
			continue
		}
		add(a, b, s)
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

// CheckPath validates an absolute path without NUL and returns it cleaned.
func CheckPath(field, s string, probs *Problems) string {
	switch {
	case s == "":
		probs.Addf("%s: empty path", field)
	case strings.ContainsRune(s, 0):
		probs.Addf("%s: path %q contains a NUL byte", field, s)
	case !filepath.IsAbs(s):
		probs.Addf("%s: path %q is relative; give an absolute path", field, s)
	default:
		return filepath.Clean(s)
	}
	return ""
}
