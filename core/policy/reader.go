package policy

import (
	"math"
	"strings"
)

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
		r.probs.Addf("%s: want a list, got %T", k, v)
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
	r.probs.Addf("%s: want a string, got %T", k, v)
	return "", false
}

func (r reader) paths(k string) []string {
	var out []string
	for _, it := range r.list(k) {
		if s, ok := r.str(k, it); ok {
			if c := CheckPath(k, s, r.probs); c != "" {
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

func (r reader) names(k string) []string {
	var out []string
	for _, it := range r.list(k) {
		if s, ok := r.str(k, it); ok {
			if s == "" || strings.ContainsAny(s, "\x00 /") {
				r.probs.Addf("%s: %q is not a syscall name", k, s)
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
		r.probs.Addf("%s: want true or false, got %T", k, v)
	}
	return b
}

func (r reader) size(k string) int64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	if n, isInt := asInt(v); isInt {
		if n < 0 {
			r.probs.Addf("%s: %d is negative", k, n)
			return 0
		}
		return n
	}
	if s, isStr := v.(string); isStr {
		n, err := ParseSize(s)
		if err != nil {
			r.probs.Addf("%s: %v", k, err)
		}
		return n
	}
	r.probs.Addf("%s: want a byte count or a size string like \"256M\", got %T", k, v)
	return 0
}

func (r reader) count(k string) int64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	n, isInt := asInt(v)
	if !isInt {
		r.probs.Addf("%s: want an integer, got %T", k, v)
		return 0
	}
	if n <= 0 {
		r.probs.Addf("%s: %d must be positive", k, n)
		return 0
	}
	return n
}

func (r reader) seconds(k string) float64 {
	v, ok := r.get(k)
	if !ok {
		return 0
	}
	f, isNum := asFloat(v)
	if !isNum {
		r.probs.Addf("%s: want seconds as a number, got %T", k, v)
		return 0
	}
	if f <= 0 || math.IsNaN(f) || math.IsInf(f, 0) || f > 1e7 {
		r.probs.Addf("%s: %v must be a positive number of seconds", k, f)
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
		r.probs.Addf("%s: want a non-negative integer id, got %v", k, v)
		return nil
	}
	u := uint32(n)
	return &u
}

func (r reader) env(k string) map[string]string {
	v, ok := r.get(k)
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		r.probs.Addf("%s: want a map of strings, got %T", k, v)
		return nil
	}
	out := map[string]string{}
	for name, val := range m {
		s, isStr := val.(string)
		switch {
		case !isStr:
			r.probs.Addf("%s[%q]: want a string value, got %T", k, name, val)
		case name == "" || strings.ContainsAny(name, "=\x00"):
			r.probs.Addf("%s: %q is not a valid variable name", k, name)
		case strings.ContainsRune(s, 0):
			r.probs.Addf("%s[%q]: value contains a NUL byte", k, name)
		default:
			out[name] = s
		}
	}
	return out
}

func (r reader) ports(k string) []uint16 {
	items := r.list(k)
	out, probs := ParsePorts(items)
	for _, p := range probs {
		r.probs.Addf("%s: %s", k, p)
	}
	return out
}

