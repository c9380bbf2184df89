package session

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/guest"
)

// Grant is a path the engine made readable for the Python runtime it runs, and why.
type Grant struct {
	Path string `msgpack:"path"`
	Why  string `msgpack:"why"`
}

// interpreter is the Python to run: the one the binding named (absolute, or a name
// looked up in this process's PATH), else the engine's pick.
func interpreter(name string) (string, error) {
	if name == "" {
		return pickPython()
	}
	if !strings.Contains(name, "/") {
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			if p := filepath.Join(dir, name); executable(p) {
				return p, nil
			}
		}
		return "", fmt.Errorf("interpreter %q: not found in PATH", name)
	}
	if !filepath.IsAbs(name) {
		return "", fmt.Errorf("interpreter %q: want an absolute path or a name to look up in PATH", name)
	}
	if !executable(name) {
		return "", fmt.Errorf("interpreter %s: not an executable file", name)
	}
	return name, nil
}

// pickPython is the first python3 on PATH that is a program (a pyenv shim or other
// wrapper script is skipped: it needs what the sandbox does not grant), else the
// system's.
func pickPython() (string, error) {
	var cands []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir != "" {
			cands = append(cands, filepath.Join(dir, "python3"))
		}
	}
	cands = append(cands, "/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
	for _, c := range cands {
		if filepath.IsAbs(c) && executable(c) && !script(c) {
			return c, nil
		}
	}
	return "", fmt.Errorf("no python3 program found on PATH or in /usr/bin (scripts such as pyenv shims are skipped): name the interpreter")
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

func script(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return true
	}
	defer f.Close()
	b := make([]byte, 2)
	n, _ := f.Read(b)
	return n == 2 && string(b) == "#!"
}

// runtimePaths are what an interpreter needs to read to start: its virtual
// environment (the directory holding pyvenv.cfg beside or above it), the prefix of
// the interpreter a venv is made from (pyvenv.cfg's home and executable), and its
// own prefix (the directory above its bin/, when that holds lib/python3*). A
// candidate prefix without the standard library is not granted: the interpreter
// file alone is.
func runtimePaths(interp string) []Grant {
	if g, ok := runtimeCache.Load(interp); ok {
		if grants, ok := g.([]Grant); ok {
			return grants
		}
	}
	g := findRuntime(interp)
	runtimeCache.Store(interp, g)
	return g
}

// runtimeCache: runtimePaths by interpreter (a process's interpreters do not move).
var runtimeCache sync.Map

func findRuntime(interp string) []Grant {
	var out []Grant
	add := func(p, why string) {
		if p == "" || p == "/" {
			return
		}
		for _, g := range out {
			if g.Path == p {
				return
			}
		}
		out = append(out, Grant{Path: p, Why: why})
	}
	prefixOf := func(exe string) string {
		real, err := filepath.EvalSymlinks(exe)
		if err != nil {
			return ""
		}
		bin := filepath.Dir(real)
		if filepath.Base(bin) != "bin" {
			return ""
		}
		p := filepath.Dir(bin)
		for _, lib := range []string{"lib", "lib64"} {
			if m, _ := filepath.Glob(filepath.Join(p, lib, "python3*", "os.py")); len(m) > 0 {
				return p
			}
		}
		return ""
	}
	dir := filepath.Dir(interp)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		cfg := filepath.Join(d, "pyvenv.cfg")
		if _, err := os.Stat(cfg); err != nil {
			continue
		}
		add(d, "the interpreter's virtual environment ("+cfg+")")
		for k, v := range venvConfig(cfg) {
			switch k {
			case "home":
				for _, name := range []string{"python3", "python"} {
					if p := prefixOf(filepath.Join(v, name)); p != "" {
						add(p, "the prefix of the interpreter the virtual environment is made from")
						break
					}
				}
			case "executable":
				add(prefixOf(v), "the prefix of the interpreter the virtual environment is made from")
			}
		}
		break
	}
	if p := prefixOf(interp); p != "" {
		add(p, "the interpreter's prefix")
	} else if real, err := filepath.EvalSymlinks(interp); err == nil {
		add(real, "the interpreter")
	}
	return out
}

func venvConfig(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// guestDir is the embedded guest runtime's directory (put it on PYTHONPATH).
func guestDir() (string, error) {
	d, err := guest.Dir()
	if err != nil {
		return "", &engine.Error{Kind: engine.KindIsolation, Message: "the engine has no guest runtime: " + err.Error()}
	}
	return d, nil
}

// compiled: interpreters whose bytecode of the guest runtime was written.
var (
	compileMu sync.Mutex
	compiled  = map[string]bool{}
)

// compileGuest byte-compiles the guest runtime for interp once per process: workers
// and templates cannot write there under Landlock, and without bytecode every
// template start recompiles it (and every fork carries the bigger heap). It runs
// the interpreter's compileall in a sandbox that may write only that directory. A
// failure only costs speed: it is not reported.
func compileGuest(interp, dir string, paths []Grant) {
	compileMu.Lock()
	defer compileMu.Unlock()
	if compiled[interp] {
		return
	}
	compiled[interp] = true
	readable := []any{"/usr", "/lib"}
	for _, g := range paths {
		readable = append(readable, g.Path)
	}
	sb, err := engine.NewFromMap(map[string]any{
		"fs_readable": readable, "fs_writable": []any{dir}, "clean_env": true, "allow_degraded": true,
		"env": map[string]any{"PYTHONNOUSERSITE": "1"}, "timeout": 120.0, "max_processes": int64(0), // (no cgroup for a compile)
	})
	if err != nil {
		return
	}
	defer sb.Close()
	sb.Run(&engine.RunRequest{Argv: []string{interp, "-I", "-m", "compileall", "-q", filepath.Join(dir, "sandtrap_guest")},
		StdinFD: -1, StdoutFD: -1})
}

// readablePaths keeps the existing paths of ps, once each, sorted (the engine
// resolves them).
func readablePaths(ps []string) []any {
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	l := make([]any, len(out))
	for i, p := range out {
		l[i] = p
	}
	return l
}
