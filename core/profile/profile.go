// Package profile reads sandbox profiles: TOML files whose sections ([config],
// [determinism], [program], [filesystem], [network], [http], [syscalls], [limits])
// hold the policy fields of core/policy's schema, each in the section its Schema
// entry names. Every problem of a file is reported at once, each with the file, the
// line and the key, and a fix where one is known; the values are checked by the
// policy's own decoder, so a profile and a binding refuse a value in the same words.
package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/sandtrap/sandtrap/core/policy"
)

// ProgramKeys are the keys of [program] that are not policy fields: the program a
// profile runs when the command line names none (`sandtrap run --profile NAME`).
var ProgramKeys = []string{"exec", "args"}

// Problem is one problem of a profile.
type Problem struct {
	File    string `msgpack:"file" json:"file"`
	Line    int    `msgpack:"line" json:"line"`       // 1-based; 0: the file as a whole
	Key     string `msgpack:"key" json:"key"`         // "section.key", "section" or ""
	Field   string `msgpack:"field" json:"field"`     // the policy field (msgpack key), if the key is one
	Message string `msgpack:"message" json:"message"` // what is wrong, and the fix when one is known
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Key != "" {
		b.WriteString(": " + p.Key)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// Error lists every problem of a profile.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	if len(lines) == 1 {
		return "invalid profile " + lines[0]
	}
	return fmt.Sprintf("invalid profile %s (%d problems):\n- %s", e.File, len(lines), strings.Join(lines, "\n- "))
}

// Profile is a profile that was read and checked.
type Profile struct {
	Name   string         // the NAME of --profile NAME; "" for a file given by path
	Path   string         // the file read ("" for FromDict)
	Doc    map[string]any // the file's sections, as written (values as TOML decodes them)
	Policy map[string]any // the policy map (msgpack keys), for engine.NewFromMap
	Exec   string         // [program] exec, "" when not given
	Args   []string       // [program] args
}

// Argv is the program of [program] (exec then args), nil when the profile names none.
func (p *Profile) Argv() []string {
	if p.Exec == "" {
		return nil
	}
	return append([]string{p.Exec}, p.Args...)
}

// Dir is where named profiles are saved: $XDG_CONFIG_HOME/sandtrap/profiles, or
// ~/.config/sandtrap/profiles.
func Dir() string { return Env{}.Dir() }

// Env is the environment profiles are found by: a library loaded into another
// language's process reads the variables that process has now (Go's copy of the
// environment is the one at load), so the bindings pass them. Empty fields are
// read from this process's environment.
type Env struct{ ConfigHome, Home string }

// Dir is Dir for e.
func (e Env) Dir() string {
	base, home := e.ConfigHome, e.Home
	if base == "" {
		base = os.Getenv("XDG_CONFIG_HOME")
	}
	if base == "" || !filepath.IsAbs(base) {
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		if home == "" {
			home = "/"
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "sandtrap", "profiles")
}

// Path is the file of a profile named name (Dir()/NAME.toml). A name has no '/'
// and does not start with '.'.
func Path(name string) (string, error) { return Env{}.Path(name) }

// Path is Path for e.
func (e Env) Path(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("profile name %q: want a name like \"python\" (no '/', not starting with '.'); give a file with --profile-file", name)
	}
	return filepath.Join(e.Dir(), name+".toml"), nil
}

// List names the saved profiles (Dir()/*.toml), sorted.
func List() ([]string, error) { return Env{}.List() }

// List is List for e.
func (e Env) List() ([]string, error) {
	ents, err := os.ReadDir(e.Dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".toml"); ok && !e.IsDir() && n != "" && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Load reads the profile named name (Dir()/NAME.toml).
func Load(name string) (*Profile, error) { return Env{}.Load(name) }

// Load is Load for e.
func (e Env) Load(name string) (*Profile, error) {
	path, err := e.Path(name)
	if err != nil {
		return nil, err
	}
	p, err := LoadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		known, _ := e.List()
		hint := "no profile is saved yet"
		if len(known) > 0 {
			hint = "saved profiles: " + strings.Join(known, ", ")
		}
		return nil, &NotFoundError{fmt.Sprintf("profile %q: there is no %s (%s)", name, path, hint)}
	}
	if p != nil {
		p.Name = name
	}
	return p, err
}

// LoadFile reads a profile from a file.
func LoadFile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// LoadAny reads a profile by name, or from a file when s looks like a path (it has
// a '/' or ends in .toml).
func LoadAny(s string) (*Profile, error) { return Env{}.LoadAny(s) }

// LoadAny is LoadAny for e.
func (e Env) LoadAny(s string) (*Profile, error) {
	if strings.Contains(s, "/") || strings.HasSuffix(s, ".toml") {
		return LoadFile(s)
	}
	return e.Load(s)
}

// Parse checks a profile's text; file names it in problems.
func Parse(file string, data []byte) (*Profile, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, &Error{File: file, Problems: []Problem{{File: file, Line: line, Key: strings.Join(de.Key(), "."),
				Message: "not valid TOML: " + de.Error() + " (https://toml.io: key = value lines under [section] headers)"}}}
		}
		return nil, &Error{File: file, Problems: []Problem{{File: file, Message: "not valid TOML: " + err.Error()}}}
	}
	p, err := check(file, doc, lines(data))
	if p != nil {
		p.Path = file
	}
	return p, err
}

// FromDict checks a profile given as sections of keys (the shape of a TOML file,
// as Python's and Node's loadProfile return it) and returns it; problems name
// source instead of a file and carry no line.
func FromDict(source string, doc map[string]any) (*Profile, error) {
	return check(source, doc, nil)
}

// lines maps "section.key" (and "section") to the line it is written on.
func lines(data []byte) map[string]int {
	out := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	keyOf := func(n *unstable.Node) ([]string, int) {
		var parts []string
		line := 0
		it := n.Key()
		for it.Next() {
			k := it.Node()
			if line == 0 {
				line = p.Shape(k.Raw).Start.Line
			}
			parts = append(parts, string(k.Data))
		}
		return parts, line
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, line := keyOf(e)
			table = parts
			if k := strings.Join(parts, "."); out[k] == 0 {
				out[k] = line
			}
		case unstable.KeyValue:
			parts, line := keyOf(e)
			full := append(append([]string{}, table...), parts...)
			for i := 1; i <= len(full); i++ { // a dotted key defines its tables on its line
				if k := strings.Join(full[:i], "."); out[k] == 0 {
					out[k] = line
				}
			}
		}
	}
	return out
}

// examples are values of each kind as a profile writes them: the fix of a problem.
var examples = map[policy.Kind]string{
	policy.KindPaths: `["/usr", "/lib"]`, policy.KindPath: `"/work"`, policy.KindTargets: `["api.example.com:443", "udp://1.1.1.1:53"]`,
	policy.KindPorts: `[8080, "9000-9005"]`, policy.KindBool: `true`, policy.KindSize: `"256M"`, policy.KindCount: `64`,
	policy.KindSeconds: `30`, policy.KindID: `1000`, policy.KindEnv: `{ LANG = "C.UTF-8" }`, policy.KindNames: `["ptrace", "mount"]`,
	policy.KindHost: `"build-01"`, policy.KindCPUs: `[0, "2-3"]`, policy.KindOptBool: `false`,
	policy.KindHTTP: `["GET api.example.com/v1/*"]`, policy.KindBranch: `"abort"`, policy.KindHTTPAuth: `["POST api.openai.com/* bearer openai"]`,
	policy.KindSeed: `42`, policy.KindTime: `2000-01-01T00:00:00Z`,
	policy.KindGPUs: `[0, 1]`,
	policy.KindProt: `["fs_ioctl_dev"]`, policy.KindDegrade: `["signal_scope"]`,
	policy.KindMounts: `{ "/work" = "/srv/work" }`,
}

// Example is a value of kind k as a profile writes it.
func Example(k policy.Kind) string { return examples[k] }

func check(file string, doc map[string]any, at map[string]int) (*Profile, error) {
	var probs []Problem
	add := func(key, field, format string, a ...any) {
		line := 0
		if at != nil {
			line = at[key]
		}
		probs = append(probs, Problem{File: file, Line: line, Key: key, Field: field, Message: fmt.Sprintf(format, a...)})
	}
	known := map[string]bool{}
	for _, s := range policy.Sections {
		known[s] = true
	}
	pol := map[string]any{}
	where := map[string]string{} // field -> "section.key"
	prof := &Profile{Doc: doc}
	for _, sec := range sortedKeys(doc) {
		v := doc[sec]
		if f := policy.Lookup(sec); f != nil && !known[sec] {
			add(sec, f.Key, "keys are written in sections: put it under [%s]", sectionOf(f))
			continue
		}
		if !known[sec] {
			if s := policy.Suggest(sec, policy.Sections); s != "" {
				add(sec, "", "unknown section; did you mean [%s]? (sections: %s)", s, strings.Join(policy.Sections, ", "))
			} else {
				add(sec, "", "unknown section (sections: %s)", strings.Join(policy.Sections, ", "))
			}
			continue
		}
		tab, ok := v.(map[string]any)
		if !ok {
			add(sec, "", "want a table of keys, got %s: write [%s] on a line of its own, then key = value lines", tomlType(v), sec)
			continue
		}
		for _, k := range sortedKeys(tab) {
			val := tab[k]
			key := sec + "." + k
			if sec == "program" && k == "exec" {
				if s, ok := val.(string); ok && s != "" {
					prof.Exec = s
				} else {
					add(key, "", "want the program to run, a non-empty string, got %s; for example: exec = \"python3\"", tomlType(val))
				}
				continue
			}
			if sec == "program" && k == "args" {
				l, ok := val.([]any)
				for _, it := range l {
					s, isStr := it.(string)
					ok = ok && isStr
					prof.Args = append(prof.Args, s)
				}
				if !ok {
					prof.Args = nil
					add(key, "", "want a list of strings, got %s; for example: args = [\"-c\", \"print(1)\"]", tomlType(val))
				}
				continue
			}
			f := policy.Lookup(k)
			switch {
			case f == nil:
				names := sectionKeys(sec)
				if s := policy.Suggest(k, names); s != "" {
					add(key, "", "unknown key; did you mean %s? ([%s] holds: %s)", s, sec, strings.Join(names, ", "))
				} else if s := policy.Suggest(k, policy.Fields); s != "" {
					add(key, "", "unknown key; did you mean %s (in [%s])?", s, sectionOf(policy.Lookup(s)))
				} else {
					add(key, "", "unknown key ([%s] holds: %s)", sec, strings.Join(names, ", "))
				}
			case f.Section == "":
				add(key, f.Key, "%s", f.UnsupportedMessage(func(f *policy.Field) string { return f.Key }))
			case f.Section != sec:
				add(key, f.Key, "%s belongs in [%s], not [%s]: move the line there", k, f.Section, sec)
			case f.Kind() == policy.KindTime && isTime(val):
				// a TOML date-time is an instant (a local one is UTC, as the string form's)
				pol[k] = tomlInstant(val)
				where[k] = key
			case isTime(val):
				add(key, f.Key, "want %s, got a date or time; for example: %s = %s", kindWord(f), k, examples[f.Kind()])
			default:
				pol[k] = val
				where[k] = key
			}
		}
	}
	// the values, by the policy's own decoder (unsupported fields included: it
	// refuses them in its own words)
	_, pprobs := policy.Decode(pol)
	for _, pp := range pprobs {
		key := where[pp.Field]
		if key == "" {
			key = pp.Field
		}
		msg := pp.Message
		if f := policy.Lookup(pp.Field); f != nil && f.Supported() && strings.HasPrefix(msg, "want ") {
			msg += fmt.Sprintf("; for example: %s = %s", f.Key, examples[f.Kind()])
		}
		add(key, pp.Field, "%s", msg)
	}
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
		return nil, &Error{File: file, Problems: probs}
	}
	prof.Policy = pol
	return prof, nil
}

func sectionOf(f *policy.Field) string {
	if f.Section == "" {
		return "(none: not a profile key)"
	}
	return f.Section
}

// sectionKeys lists the keys a section holds (supported or not).
func sectionKeys(sec string) []string {
	var out []string
	if sec == "program" {
		out = append(out, ProgramKeys...)
	}
	for i := range policy.Schema {
		if policy.Schema[i].Section == sec {
			out = append(out, policy.Schema[i].Key)
		}
	}
	return out
}

func kindWord(f *policy.Field) string {
	switch f.Kind() {
	case policy.KindPaths, policy.KindTargets, policy.KindPorts, policy.KindNames, policy.KindCPUs, policy.KindHTTP, policy.KindHTTPAuth, policy.KindProt:
		return "a list"
	case policy.KindGPUs:
		return "\"all\" or a list"
	case policy.KindDegrade:
		return "a boolean or a list"
	case policy.KindBool, policy.KindOptBool:
		return "a boolean"
	case policy.KindEnv, policy.KindMounts:
		return "a table"
	case policy.KindCount, policy.KindID, policy.KindSeed:
		return "an integer"
	case policy.KindSeconds:
		return "a number"
	case policy.KindTime:
		return "a date-time, a string or a number"
	}
	return "a string"
}

func isTime(v any) bool {
	switch v.(type) {
	case time.Time, toml.LocalDate, toml.LocalDateTime, toml.LocalTime:
		return true
	}
	return false
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	if isTime(v) {
		return "a date or time"
	}
	return fmt.Sprintf("a %T", v)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// tomlInstant is a TOML date-time as the ISO-8601 string time_start reads.
func tomlInstant(v any) any {
	switch t := v.(type) {
	case time.Time:
		return t.Format(time.RFC3339Nano)
	case toml.LocalDateTime:
		return t.String()
	case toml.LocalDate:
		return t.String()
	}
	return v // a time of day alone: refused by the decoder
}
