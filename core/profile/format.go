package profile

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sandtrap/sandtrap/core/policy"
)

// Format writes a policy map (the msgpack keys, as a profile's Policy holds them)
// and a program as a profile: each field under its section, the sections in the
// schema's order, lists one item a line; argv, when given, as [program] exec and
// args. comment, when not empty, is the first line (a TOML comment). Parse reads
// the text back to the same policy and argv (TestFormatRoundTrip).
func Format(pol map[string]any, argv []string, comment string) (string, error) {
	bySection := map[string][]string{}
	for k := range pol {
		f := policy.Lookup(k)
		if f == nil || f.Section == "" {
			return "", fmt.Errorf("%s: not a field a profile holds", k)
		}
		bySection[f.Section] = append(bySection[f.Section], k)
	}
	order := map[string]int{}
	for i := range policy.Schema {
		order[policy.Schema[i].Key] = i
	}
	var b strings.Builder
	if comment != "" {
		for _, l := range strings.Split(comment, "\n") {
			b.WriteString("# " + l + "\n")
		}
	}
	first := true
	for _, sec := range policy.Sections {
		keys := bySection[sec]
		if len(keys) == 0 && (sec != "program" || len(argv) == 0) {
			continue
		}
		sort.Slice(keys, func(i, j int) bool { return order[keys[i]] < order[keys[j]] })
		if !first {
			b.WriteByte('\n')
		}
		first = false
		fmt.Fprintf(&b, "[%s]\n", sec)
		if sec == "program" && len(argv) > 0 {
			exec, err := tomlValue(argv[0])
			if err != nil {
				return "", fmt.Errorf("exec: %v", err)
			}
			fmt.Fprintf(&b, "exec = %s\n", exec)
			if len(argv) > 1 {
				args, err := tomlValue(argv[1:])
				if err != nil {
					return "", fmt.Errorf("args: %v", err)
				}
				fmt.Fprintf(&b, "args = %s\n", args)
			}
		}
		for _, k := range keys {
			s, err := tomlValue(pol[k])
			if err != nil {
				return "", fmt.Errorf("%s: %v", k, err)
			}
			fmt.Fprintf(&b, "%s = %s\n", k, s)
		}
	}
	return b.String(), nil
}

// tomlValue is a policy value as TOML: strings, booleans, numbers, lists (one item
// a line) and tables of strings (inline).
func tomlValue(v any) (string, error) {
	switch x := v.(type) {
	case string:
		if !utf8.ValidString(x) {
			return "", fmt.Errorf("%q is not UTF-8, which TOML needs", x)
		}
		return tomlString(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint32:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint64:
		if x > math.MaxInt64 {
			return "", fmt.Errorf("%d is beyond TOML's integers", x)
		}
		return strconv.FormatUint(x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("%v is not a value", x)
		}
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatFloat(x, 'f', 1, 64), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case []string:
		l := make([]any, len(x))
		for i, s := range x {
			l[i] = s
		}
		return tomlValue(l)
	case []any:
		if len(x) == 0 {
			return "[]", nil
		}
		var b strings.Builder
		b.WriteString("[\n")
		for _, it := range x {
			s, err := tomlValue(it)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "  %s,\n", s)
		}
		b.WriteString("]")
		return b.String(), nil
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return tomlValue(m)
	case map[string]any:
		keys := sortedKeys(x)
		parts := make([]string, len(keys))
		for i, k := range keys {
			s, err := tomlValue(x[k])
			if err != nil {
				return "", err
			}
			parts[i] = tomlString(k) + " = " + s
		}
		if len(parts) == 0 {
			return "{}", nil
		}
		return "{ " + strings.Join(parts, ", ") + " }", nil
	}
	return "", fmt.Errorf("a %T cannot be written in a profile", v)
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
