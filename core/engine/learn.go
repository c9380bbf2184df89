package engine

// Learn mode: run a command permissively but recorded, and emit the smallest policy
// it needed.
//
// Permissive is bounded: the learning run may read and execute everything ("/"
// readable, as a read-only view), write only where the sandbox's own policy lets it
// (fs_writable), and reach the network only where its policy lets it; with no
// net_deny, every other destination is refused by the supervisor (a sentinel
// net_allow rule for a documentation address, 192.0.2.1:1, makes it check every
// connect and send) and recorded. Every other protection of the policy (limits,
// the filter, namespaces, uid) stays. So learning never gives the program more than
// reading the host's files; what it would write elsewhere is refused, recorded and
// learned, as is every destination it tried.
//
// Recorded: every path the run opens, executes (and the ELF interpreter the kernel
// opens for it), creates, removes or renames (core/supervise/learn.go), and the
// refused connects and sends (the run's denials). The policy: fs_readable the files
// read and executed, a directory instead of its files when more than
// learnDirFiles of them were read or when it was listed itself, /proc as a whole
// when anything in it was read (a run's /proc is its own); fs_writable the files
// written, and the directories entries were made or removed in; net_allow the
// destinations (addresses, as the program reached them: replace them with host
// names where the address may change). Paths that did not exist are left out (a
// policy names existing paths), and the device nodes every sandbox has.

import (
	"debug/elf"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/profile"
	"github.com/sandtrap/sandtrap/core/supervise"
)

// learnDirFiles: more files than this read from one directory grant the directory.
const learnDirFiles = 4

// maxLearned bounds the paths recorded (further ones are counted, and the result says so).
const maxLearned = 65536

// learnSentinel makes the supervisor check every destination (see the top).
var learnSentinel = []string{"192.0.2.1:1", "udp://192.0.2.1:1"}

// LearnResult is what a learning run found.
type LearnResult struct {
	Result   *Result             `msgpack:"result"`
	Policy   map[string]any      `msgpack:"policy"`   // the policy map: fs_readable, fs_writable, net_allow
	Profile  string              `msgpack:"profile"`  // the same as TOML, in the profile format
	Observed map[string][]string `msgpack:"observed"` // read, write, exec, create (paths as named), connect
	Dropped  int                 `msgpack:"dropped"`  // paths not recorded beyond maxLearned
	Mode     string              `msgpack:"mode"`     // what the learning run was allowed
}

type learnRecorder struct {
	mu      sync.Mutex
	seen    map[[2]string]bool
	order   [][2]string
	dropped int
}

func (r *learnRecorder) add(kind, path string) {
	if kind == supervise.LearnWrite {
		// told before the kernel runs the call: a file opened for writing that does
		// not exist yet is created, which its directory must allow (the sandbox's
		// paths are the host's: its view mirrors them)
		if _, err := os.Lstat(path); err != nil {
			kind = supervise.LearnCreate
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]string{kind, path}
	if r.seen[k] {
		return
	}
	if len(r.order) >= maxLearned {
		r.dropped++
		return
	}
	if r.seen == nil {
		r.seen = map[[2]string]bool{}
	}
	r.seen[k] = true
	r.order = append(r.order, k)
}

// Learn runs req under the learning policy derived from the sandbox's and returns
// what it needed.
func (s *Sandbox) Learn(req *RunRequest) (*LearnResult, error) {
	if !s.in.Features.Seccomp {
		return nil, errorf(KindIsolation, "isolation unavailable: learn mode records through the supervisor, which needs seccomp user notification")
	}
	lp := *s.Policy
	lp.FSReadable = []string{"/"}
	lp.FSWritable = append([]string{}, s.Policy.FSWritable...)
	lp.FSDenied = append([]string{}, s.Policy.FSDenied...)
	mode := "read and execute everything (a read-only view of /); write only in fs_writable"
	if len(lp.NetDeny) == 0 {
		var probs policy.Problems
		items := make([]any, len(learnSentinel))
		for i, r := range learnSentinel {
			items[i] = r
		}
		lp.NetAllow = append(append([]policy.NetRule{}, s.Policy.NetAllow...), policy.ParseNetRules("net_allow", items, &probs)...)
		if err := probs.Err(); err != nil {
			return nil, errorf(KindInternal, "BUG(engine): learn's sentinel rules: %v", err)
		}
		mode += "; connect and send only where net_allow allows, every other destination refused and recorded"
	} else {
		mode += "; the network as net_deny says (destinations it allows are not recorded)"
	}
	rec := &learnRecorder{}
	lsb, err := build(&lp, nil, func(sb *Sandbox) { sb.in.Learn = rec.add })
	if err != nil {
		return nil, err
	}
	res := lsb.Run(req)
	lsb.Close()
	out := &LearnResult{Result: res, Mode: mode, Dropped: rec.dropped}
	rec.mu.Lock()
	order := append([][2]string{}, rec.order...)
	rec.mu.Unlock()
	out.Observed, out.Policy = learned(order, res, s.Policy)
	out.Profile = profileTOML(out.Policy)
	return out, nil
}

// learned turns the record into the observed accesses and the policy.
func learned(order [][2]string, res *Result, base *policy.Policy) (map[string][]string, map[string]any) {
	obs := map[string][]string{"read": {}, "write": {}, "exec": {}, "create": {}, "connect": {}}
	for _, k := range order {
		obs[k[0]] = append(obs[k[0]], k[1])
	}
	devices := map[string]bool{}
	for _, d := range DevicePaths {
		devices[d] = true
	}
	readFiles := map[string]bool{}
	readDirs := map[string]bool{}
	writable := map[string]bool{}
	proc := false
	addRead := func(p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return
		}
		switch {
		case real == "/proc":
			return // sandtrap's pid 1 opens it to mount the run's own; a program that lists it reads inside too
		case policy.Within(real, "/proc"):
			proc = true
			return
		case devices[real]:
			return
		}
		if st, err := os.Stat(real); err == nil && st.IsDir() {
			readDirs[real] = true
		} else if err == nil {
			readFiles[real] = true
		}
	}
	existing := func(p string) string { // the nearest existing path, resolved
		for ; p != "/" && p != "."; p = filepath.Dir(p) {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return real
			}
		}
		return "/"
	}
	for _, k := range order {
		kind, p := k[0], k[1]
		switch kind {
		case supervise.LearnRead:
			addRead(p)
		case supervise.LearnExec:
			addRead(p)
			if real, err := filepath.EvalSymlinks(p); err == nil {
				if interp := elfInterp(real); interp != "" {
					addRead(interp)
				}
			}
		case supervise.LearnWrite:
			if st, err := os.Stat(p); err == nil {
				real, _ := filepath.EvalSymlinks(p)
				if st.Mode().IsRegular() || st.IsDir() {
					writable[real] = true
				}
			} else {
				writable[existing(filepath.Dir(p))] = true
			}
		case supervise.LearnCreate:
			writable[existing(filepath.Dir(p))] = true
		}
	}
	for w := range writable {
		if w == "/" || devices[w] || w == "/proc" || policy.Within(w, "/proc") {
			delete(writable, w) // never learned as writable: the whole host, or kernel state
		}
	}
	byDir := map[string]int{}
	for f := range readFiles {
		byDir[filepath.Dir(f)]++
	}
	for d, n := range byDir {
		if n > learnDirFiles {
			readDirs[d] = true
		}
	}
	var readable []string
	for d := range readDirs {
		readable = append(readable, d)
	}
	for f := range readFiles {
		readable = append(readable, f)
	}
	if proc {
		readable = append(readable, "/proc")
	}
	writes := minimal(keys(writable), nil)
	readable = minimal(readable, writes) // a writable grant reads too

	var nets []string
	seenNet := map[string]bool{}
	for _, r := range base.NetAllow {
		if !seenNet[r.Text] {
			seenNet[r.Text] = true
			nets = append(nets, r.Text)
		}
	}
	for _, d := range res.Denials {
		if d.Address == "" || (d.Syscall != "connect" && !strings.HasPrefix(d.Syscall, "send")) {
			continue
		}
		rule := netRuleOf(d.Address)
		if rule == "" {
			continue
		}
		obs["connect"] = append(obs["connect"], d.Address)
		if !seenNet[rule] {
			seenNet[rule] = true
			nets = append(nets, rule)
		}
	}
	pol := map[string]any{"fs_readable": readable}
	if len(writes) > 0 {
		pol["fs_writable"] = writes
	}
	if len(nets) > 0 {
		pol["net_allow"] = nets
	}
	return obs, pol
}

// netRuleOf is the net_allow rule of a refused destination ("tcp 10.1.2.3:80 (why)").
func netRuleOf(detail string) string {
	proto, rest, ok := strings.Cut(detail, " ")
	if !ok {
		return ""
	}
	dest, _, _ := strings.Cut(rest, " ")
	switch proto {
	case "tcp":
		return dest
	case "udp":
		return "udp://" + dest
	}
	return ""
}

// minimal drops duplicates and every path inside another (or inside one of also).
func minimal(paths, also []string) []string {
	sort.Strings(paths)
	var out []string
	for i, p := range paths {
		if i > 0 && p == paths[i-1] {
			continue
		}
		inside := false
		for _, q := range append(append([]string{}, paths...), also...) {
			if q != p && policy.Within(p, q) {
				inside = true
				break
			}
		}
		for _, q := range also {
			if q == p {
				inside = true
			}
		}
		if !inside {
			out = append(out, p)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// elfInterp is the program interpreter an ELF file names (the kernel opens it at exec).
func elfInterp(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				return strings.TrimRight(string(b), "\x00")
			}
		}
	}
	return ""
}

// profileTOML is a learned policy as a profile (core/profile: fs_readable and
// fs_writable under [filesystem], net_allow under [network]).
func profileTOML(pol map[string]any) string {
	text, err := profile.Format(pol, nil, "learned by sandtrap learn mode")
	if err != nil {
		return "# BUG(engine): the learned policy cannot be written as a profile: " + err.Error() + "\n"
	}
	return text
}

// learnRequest is the "learn" op: a run request, answered with a LearnResult.
func (s *Sandbox) learnRequest(m map[string]any) (*LearnResult, error) {
	var probs policy.Problems
	req := parseRun(m, "", "learn", &probs)
	if len(probs) > 0 {
		return nil, requestError(probs)
	}
	return s.Learn(req)
}

func init() {
	RegisterOp("learn", func(s *Sandbox, b []byte) ([]byte, string) {
		m, err := DecodeMap(b, "request")
		if err != nil {
			return ErrorResponse(err), KindInvalidRequest
		}
		res, err := s.learnRequest(m)
		if err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(res), CallKind(res.Result.Error)
	})
}
