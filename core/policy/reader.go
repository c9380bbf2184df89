package policy

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// typeName names the type of a decoded msgpack value, for messages that every
// binding shows as they are ("want a list, got a string").
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case string:
		return "a string"
	case []byte:
		return "bytes"
	case bool:
		return "a boolean"
	case float32, float64:
		return "a float"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	if _, ok := asInt(v); ok {
		return "an integer"
	}
	if _, ok := v.(uint64); ok {
		return "an integer"
	}
	return "a value of another type"
}

// reader extracts typed fields from a decoded map, recording every problem.
type reader struct {
	m     map[string]any
	probs *Problems
}

func (r reader) get(k string) (any, bool) {
	v, ok := r.m[k]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

func (r reader) list(k string) []any {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	l, isList := v.([]any)
	if !isList {
		r.probs.Add(k, "want a list, got %s", typeName(v))
		return nil
	}
	return l
}

func (r reader) str(k string, v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	r.probs.Add(k, "want a string, got %s", typeName(v))
	return "", false
}

func (r reader) paths(k string) []string {
	var out []string
	for _, it := range r.list(k) {
		if s, ok := r.str(k, it); ok {
			if c := CheckPathAt(k, s, r.probs); c != "" {
				out = append(out, c)
			}
		}
	}
	return out
}

func (r reader) path(k string) string {
	v, ok := r.get(k)
	if !ok {
		return ""
	}
	if s, ok := r.str(k, v); ok {
		return CheckPath(k, s, r.probs)
	}
	return ""
}

// dirPath is path for a field that may be relative (resolved like fs_*: CheckPathAt).
func (r reader) dirPath(k string) string {
	v, ok := r.get(k)
	if !ok {
		return ""
	}
	if s, ok := r.str(k, v); ok {
		return CheckPathAt(k, s, r.probs)
	}
	return ""
}

// Branch actions (on_exit, on_error).
const (
	BranchCommit = "commit"
	BranchAbort  = "abort"
	BranchKeep   = "keep"
)

func (r reader) branch(k string) string {
	v, ok := r.get(k)
	if !ok {
		return ""
	}
	s, ok := r.str(k, v)
	if !ok {
		return ""
	}
	switch t := strings.ToLower(s); t {
	case BranchCommit, BranchAbort, BranchKeep:
		return t
	}
	r.probs.Add(k, "%q is not a branch action (commit, abort or keep)", s)
	return ""
}

func (r reader) names(k string) []string {
	var out []string
	for _, it := range r.list(k) {
		if s, ok := r.str(k, it); ok {
			if s == "" || strings.ContainsAny(s, "\x00 /") {
				r.probs.Add(k, "%q is not a syscall name", s)
				continue
			}
			out = append(out, s)
		}
	}
	return out
}

func (r reader) boolean(k string) bool {
	v, ok := r.get(k)
	if !ok {
		return false
	}
	b, isBool := v.(bool)
	if !isBool {
		r.probs.Add(k, "want true or false, got %s", typeName(v))
	}
	return b
}

// optBoolean reads a boolean that may be absent (nil).
func (r reader) optBoolean(k string) *bool {
	if _, ok := r.get(k); !ok {
		return nil
	}
	b := r.boolean(k)
	return &b
}

// MaxCPU is one past the highest CPU number cpu_cores accepts (the kernel's
// cpu_set_t, CPU_SETSIZE).
const MaxCPU = 1024

// cpus reads CPU numbers and ranges ("2-3"), sorted and without duplicates.
func (r reader) cpus(k string) []int {
	items := r.list(k)
	seen := map[int]bool{}
	add := func(lo, hi int64, what any) {
		if lo < 0 || hi >= MaxCPU || lo > hi {
			r.probs.Add(k, "%v is not a CPU number or range (0 to %d)", what, MaxCPU-1)
			return
		}
		for c := lo; c <= hi; c++ {
			seen[int(c)] = true
		}
	}
	for _, it := range items {
		if n, ok := asInt(it); ok {
			add(n, n, n)
			continue
		}
		s, ok := it.(string)
		if !ok {
			r.probs.Add(k, "want CPU numbers or \"lo-hi\" ranges, got %s", typeName(it))
			continue
		}
		lo, hi, isRange := strings.Cut(s, "-")
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		}
		if err1 != nil || err2 != nil {
			r.probs.Add(k, "%q is not a CPU number or range", s)
			continue
		}
		add(a, b, strconv.Quote(s))
	}
	if len(seen) == 0 {
		return nil
	}
	out := make([]int, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Ints(out)
	return out
}

// MaxGPU is one past the highest GPU index gpu_devices accepts.
const MaxGPU = 256

// gpus reads "all", or GPU indices and ranges ("0-1") like cpus (a list holding
// "all" alone is "all" too).
func (r reader) gpus(k string) *GPUs {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	if s, isStr := v.(string); isStr {
		if strings.TrimSpace(s) == "all" {
			return &GPUs{All: true}
		}
		v = []any{s}
	}
	l, isList := v.([]any)
	if !isList {
		r.probs.Add(k, "want \"all\" or a list of GPU indices, got %s", typeName(v))
		return nil
	}
	var rest []any
	all := false
	for _, it := range l {
		if s, isStr := it.(string); isStr && strings.TrimSpace(s) == "all" {
			all = true
			continue
		}
		rest = append(rest, it)
	}
	if all {
		if len(rest) > 0 {
			r.probs.Add(k, "\"all\" stands alone: give it or indices, not both")
		}
		return &GPUs{All: true}
	}
	seen := map[int]bool{}
	for _, it := range rest {
		lo, hi, what, ok := r.indexRange(k, it, "GPU index")
		if !ok {
			continue
		}
		if lo < 0 || hi >= MaxGPU || lo > hi {
			r.probs.Add(k, "%v is not a GPU index or range (0 to %d)", what, MaxGPU-1)
			continue
		}
		for c := lo; c <= hi; c++ {
			seen[int(c)] = true
		}
	}
	out := make([]int, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Ints(out)
	return &GPUs{Indices: out}
}

// indexRange reads one number or "lo-hi" range of a list of them.
func (r reader) indexRange(k string, it any, what string) (lo, hi int64, shown any, ok bool) {
	if n, isInt := asInt(it); isInt {
		return n, n, n, true
	}
	s, isStr := it.(string)
	if !isStr {
		r.probs.Add(k, "want %s numbers or \"lo-hi\" ranges, got %s", what, typeName(it))
		return 0, 0, nil, false
	}
	a, b, isRange := strings.Cut(s, "-")
	lo, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	hi, err2 := lo, error(nil)
	if isRange {
		hi, err2 = strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	}
	if err1 != nil || err2 != nil {
		r.probs.Add(k, "%q is not a %s or range", s, what)
		return 0, 0, nil, false
	}
	return lo, hi, strconv.Quote(s), true
}

func (r reader) size(k string) int64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	if n, isInt := asInt(v); isInt {
		if n < 0 {
			r.probs.Add(k, "%d is negative", n)
			return 0
		}
		return n
	}
	if s, isStr := v.(string); isStr {
		n, err := ParseSize(s)
		if err != nil {
			r.probs.Add(k, "%v", err)
		}
		return n
	}
	if u, isU := v.(uint64); isU {
		r.probs.Add(k, "%d bytes is too large", u)
		return 0
	}
	r.probs.Add(k, "want a byte count or a size string like \"256M\", got %s", typeName(v))
	return 0
}

func (r reader) count(k string) int64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	n, isInt := asInt(v)
	if !isInt {
		r.probs.Add(k, "want an integer, got %s", typeName(v))
		return 0
	}
	if n <= 0 {
		r.probs.Add(k, "%d must be positive", n)
		return 0
	}
	return n
}

// limitOrNone reads a count where 0 means "no limit" (max_processes, whose
// default is not "none").
func (r reader) limitOrNone(k string) int64 {
	if v, ok := r.get(k); ok {
		if n, isInt := asInt(v); isInt && n == 0 {
			return 0
		}
	}
	return r.count(k)
}

func (r reader) seconds(k string) float64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	f, isNum := asFloat(v)
	if !isNum {
		r.probs.Add(k, "want seconds as a number, got %s", typeName(v))
		return 0
	}
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) || f > 1e7 {
		r.probs.Add(k, "%v must be a positive number of seconds", f)
		return 0
	}
	return f
}

func (r reader) id(k string) *uint32 {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	n, isInt := asInt(v)
	if !isInt || n < 0 || n >= math.MaxUint32 {
		r.probs.Add(k, "want a non-negative integer id, got %v", v)
		return nil
	}
	u := uint32(n)
	return &u
}

// stringMap reads a map of strings, reporting a value that is not one; each
// decides what an entry means and keeps it (or reports it) in out.
func (r reader) stringMap(k, want string, each func(name, val string, out map[string]string)) map[string]string {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		r.probs.Add(k, "want %s, got %s", want, typeName(v))
		return nil
	}
	out := map[string]string{}
	for name, val := range m {
		if s, isStr := val.(string); isStr {
			each(name, s, out)
		} else {
			r.probs.Add(k, "the value of %q is %s, not a string", name, typeName(val))
		}
	}
	return out
}

func (r reader) env(k string) map[string]string {
	return r.stringMap(k, "a map of strings", func(name, s string, out map[string]string) {
		switch {
		case name == "" || strings.ContainsAny(name, "=\x00"):
			r.probs.Add(k, "%q is not a valid variable name", name)
		case strings.ContainsRune(s, 0):
			r.probs.Add(k, "the value of %q contains a NUL byte", name)
		default:
			out[name] = s
		}
	})
}

func (r reader) ports(k string) []uint16 {
	items := r.list(k)
	out, probs := ParsePorts(items)
	for _, p := range probs {
		r.probs.Add(k, "%s", p)
	}
	return out
}

// netRules reads net_allow and net_deny (the grammar is net.go's).
func (r reader) netRules(k string) []NetRule { return ParseNetRules(k, r.list(k), r.probs) }

// hostname reads a host name: 1 to 64 bytes (the kernel's __NEW_UTS_LEN) of
// letters, digits, '-' and '.', in labels that neither start nor end with '-'.
func (r reader) hostname(k string) string {
	v, ok := r.get(k)
	if !ok {
		return ""
	}
	s, ok := r.str(k, v)
	if !ok {
		return ""
	}
	if err := CheckHostname(s); err != "" {
		r.probs.Add(k, "%q %s", s, err)
		return ""
	}
	return s
}

// CheckHostname says what is wrong with a host name ("" when nothing).
func CheckHostname(s string) string {
	if len(s) == 0 || len(s) > 64 {
		return "must be 1 to 64 characters"
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" {
			return "has an empty label (two dots, or a dot at an end)"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "has a label that starts or ends with '-'"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return "may hold only letters, digits, '-' and '.'"
			}
		}
	}
	return ""
}

// seed reads random_seed: an integer from 0 to 2^62.
func (r reader) seed(k string) *uint64 {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	n, isInt := asInt(v)
	if !isInt {
		r.probs.Add(k, "want an integer, got %s", typeName(v))
		return nil
	}
	if n < 0 {
		r.probs.Add(k, "%d must be 0 or more", n)
		return nil
	}
	u := uint64(n)
	return &u
}

// instantLayouts are the ISO-8601 forms time_start accepts; those without a zone are UTC.
var instantLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999", "2006-01-02T15:04Z07:00", "2006-01-02T15:04", "2006-01-02"}

// MaxInstant is the latest time_start accepted (Unix seconds: 9999-12-31T23:59:59Z).
const MaxInstant = 253402300799

// instant reads time_start: an ISO-8601 string or Unix seconds (a number, or a
// string of digits), as Unix seconds, from 0 (1970) to MaxInstant.
func (r reader) instant(k string) *float64 {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	var secs float64
	switch x := v.(type) {
	case string:
		s := strings.TrimSpace(x)
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			secs = f
			break
		}
		parsed := false
		for _, l := range instantLayouts {
			if t, err := time.Parse(l, s); err == nil {
				secs, parsed = float64(t.UnixNano())/1e9, true
				if t.Unix() < 0 || t.Unix() > MaxInstant {
					secs = -1
				}
				break
			}
		}
		if !parsed {
			r.probs.Add(k, "%q is not an ISO-8601 instant (\"2000-01-01T00:00:00Z\", \"2000-01-01\") or Unix seconds", x)
			return nil
		}
	default:
		f, isNum := asFloat(v)
		if !isNum {
			r.probs.Add(k, "want an ISO-8601 string or Unix seconds, got %s", typeName(v))
			return nil
		}
		secs = f
	}
	if math.IsNaN(secs) || secs < 0 || secs > MaxInstant {
		r.probs.Add(k, "%v is outside 1970-01-01 to 9999-12-31", v)
		return nil
	}
	return &secs
}

// protections reads a list of protection names (protection.go), each once.
func (r reader) protections(k string) []string {
	return r.protectionList(k, r.list(k))
}

func (r reader) protectionList(k string, items []any) []string {
	out := []string{}
	for _, it := range items {
		s, ok := r.str(k, it)
		if !ok {
			continue
		}
		n := strings.ToLower(strings.TrimSpace(s))
		if LookupProtection(n) == nil {
			r.probs.Add(k, "%q is not a protection (%s)", s, strings.Join(ProtectionNames(), ", "))
			continue
		}
		if !slicesContains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// degrade reads allow_degraded: true (every protection), false, or a list of
// protection names (those alone). It returns the boolean and the list.
func (r reader) degrade(k string) (bool, []string) {
	v, ok := r.get(k)
	if !ok {
		return false, nil
	}
	switch t := v.(type) {
	case bool:
		return t, nil
	case []any:
		return false, r.protectionList(k, t)
	}
	r.probs.Add(k, "want true, false or a list of protections (%s), got %s", strings.Join(ProtectionNames(), ", "), typeName(v))
	return false, nil
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// mounts reads a map of mounts of a chroot: absolute paths inside it to host
// paths (relative host paths resolve like fs_*: CheckPathAt). A value "…:ro" is
// refused: the read-only form is a field of its own (fs_mount_ro), so that the
// mapping cannot be misread as a host path ending in ":ro".
func (r reader) mounts(k string) map[string]string {
	return r.stringMap(k, "a map of paths inside the chroot to host paths", func(inside, host string, out map[string]string) {
		if strings.HasSuffix(host, ":ro") || strings.HasSuffix(host, ":rw") {
			r.probs.Add(k, "%q: %q: a mapping takes no mode suffix (the read-only form is a field of its own)", inside, host)
			return
		}
		in := CheckPath(k, inside, r.probs)
		h := CheckPathAt(k, host, r.probs)
		switch {
		case in == "" || h == "":
		case in == "/":
			r.probs.Add(k, "/ cannot be mounted over: it is the chroot itself")
		default:
			out[in] = h
		}
	})
}
