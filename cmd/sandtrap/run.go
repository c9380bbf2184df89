package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/profile"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// Version is set by the Makefile (-X main.Version=...).
var Version = "dev"

func version() string { return Version }

// flagRef writes a field as its `sandtrap run` option (docs, help).
func flagRef(f *policy.Field) string {
	if !f.Supported() {
		return f.Key
	}
	return "--" + f.FlagName()
}

// addPolicyFlags adds an option for every supported field of the schema.
func addPolicyFlags(fs *pflag.FlagSet) {
	for i := range policy.Schema {
		f := &policy.Schema[i]
		if !f.Supported() {
			continue
		}
		name, short := f.FlagName(), f.Short
		usage := f.DocFor(flagRef)
		switch f.Kind() {
		case policy.KindPaths:
			fs.StringArrayP(name, short, nil, usage+" (repeatable; relative paths are made absolute)")
		case policy.KindTargets, policy.KindHTTP, policy.KindHTTPAuth:
			fs.StringArrayP(name, short, nil, usage+" (repeatable)")
		case policy.KindPorts, policy.KindNames, policy.KindCPUs, policy.KindGPUs, policy.KindProt:
			fs.StringArrayP(name, short, nil, usage+" (repeatable, or comma-separated)")
		case policy.KindDegrade: // --allow-degraded alone: every protection; =a,b: those
			fs.StringP(name, short, "", usage+" (alone: every protection; =signal_scope,fs_truncate: those)")
			fs.Lookup(name).NoOptDefVal = "true"
		case policy.KindEnv:
			fs.StringArrayP(name, short, nil, usage+": NAME=VALUE, or NAME to pass this shell's value (repeatable)")
		case policy.KindMounts:
			fs.StringArrayP(name, short, nil, usage+": INSIDE=HOST (repeatable; a relative host path is made absolute)")
		case policy.KindPath, policy.KindHost, policy.KindBranch:
			fs.StringP(name, short, "", usage)
		case policy.KindTime:
			fs.StringP(name, short, "", usage+": 2000-01-01T00:00:00Z, or Unix seconds")
		case policy.KindSeed:
			fs.Uint64P(name, short, 0, usage)
		case policy.KindSize:
			fs.StringP(name, short, "", usage+": bytes or 64K, 256M, 1.5G")
		case policy.KindBool:
			fs.BoolP(name, short, false, usage)
		case policy.KindOptBool: // unset is neither: the option gives true, or =false
			fs.BoolP(name, short, false, usage+" (--"+name+"=false for false)")
		case policy.KindCount:
			fs.Int64P(name, short, 0, usage)
		case policy.KindSeconds:
			fs.Float64P(name, short, 0, usage+" (seconds, fractions allowed)")
		case policy.KindID:
			fs.Uint32P(name, short, 0, usage)
		default:
			panic("BUG(cli): no option for kind " + string(f.Kind()))
		}
	}
}

// flagPolicy is the policy the options that were given make, and the list fields
// among them (added to a profile's lists rather than replacing them).
func flagPolicy(fs *pflag.FlagSet) (map[string]any, error) {
	out := map[string]any{}
	for i := range policy.Schema {
		f := &policy.Schema[i]
		if !f.Supported() || !fs.Changed(f.FlagName()) {
			continue
		}
		name := f.FlagName()
		switch f.Kind() {
		case policy.KindDegrade:
			v, _ := fs.GetString(name)
			switch v {
			case "true", "false":
				out[f.Key] = v == "true"
			default:
				var l []any
				for _, p := range strings.Split(v, ",") {
					l = append(l, strings.TrimSpace(p))
				}
				out[f.Key] = l
			}
		case policy.KindPaths, policy.KindTargets, policy.KindPorts, policy.KindNames, policy.KindCPUs, policy.KindGPUs, policy.KindHTTP, policy.KindHTTPAuth, policy.KindProt:
			vals, _ := fs.GetStringArray(name)
			var l []any
			for _, v := range vals {
				parts := []string{v}
				if f.Kind() == policy.KindPorts || f.Kind() == policy.KindNames || f.Kind() == policy.KindCPUs || f.Kind() == policy.KindGPUs || f.Kind() == policy.KindProt {
					parts = strings.Split(v, ",")
				}
				for _, p := range parts {
					if f.Kind() == policy.KindPaths && p != "" && !filepath.IsAbs(p) {
						if abs, err := filepath.Abs(p); err == nil {
							p = abs
						}
					}
					l = append(l, strings.TrimSpace(p))
				}
			}
			out[f.Key] = l
		case policy.KindEnv:
			vals, _ := fs.GetStringArray(name)
			env := map[string]any{}
			for _, v := range vals {
				k, val, ok := strings.Cut(v, "=")
				if !ok {
					val, ok = os.LookupEnv(k)
					if !ok {
						return nil, fail(ExitSandbox, "--%s %s: this shell has no variable %s; give NAME=VALUE", name, k, k)
					}
				}
				env[k] = val
			}
			out[f.Key] = env
		case policy.KindMounts:
			vals, _ := fs.GetStringArray(name)
			m := map[string]any{}
			for _, v := range vals {
				in, host, ok := strings.Cut(v, "=")
				if !ok {
					return nil, fail(ExitSandbox, "--%s %s: give INSIDE=HOST", name, v)
				}
				if host != "" && !filepath.IsAbs(host) {
					if abs, err := filepath.Abs(host); err == nil {
						host = abs
					}
				}
				m[in] = host
			}
			out[f.Key] = m
		case policy.KindPath:
			v, _ := fs.GetString(name)
			if v != "" && !filepath.IsAbs(v) {
				if abs, err := filepath.Abs(v); err == nil {
					v = abs
				}
			}
			out[f.Key] = v
		case policy.KindSize, policy.KindHost, policy.KindBranch, policy.KindTime:
			v, _ := fs.GetString(name)
			out[f.Key] = v
		case policy.KindSeed:
			v, _ := fs.GetUint64(name)
			out[f.Key] = v
		case policy.KindBool, policy.KindOptBool:
			v, _ := fs.GetBool(name)
			out[f.Key] = v
		case policy.KindCount:
			v, _ := fs.GetInt64(name)
			out[f.Key] = v
		case policy.KindSeconds:
			v, _ := fs.GetFloat64(name)
			out[f.Key] = v
		case policy.KindID:
			v, _ := fs.GetUint32(name)
			out[f.Key] = int64(v)
		}
	}
	return out, nil
}

// merge lays the options over a profile's policy: a scalar option replaces the
// profile's value, a list option adds to the profile's list, --env adds variables
// (an option's value wins for the same name).
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		switch ov := v.(type) {
		case []any:
			if bl, ok := out[k].([]any); ok {
				out[k] = append(append([]any{}, bl...), ov...)
				continue
			}
		case map[string]any:
			if bm, ok := out[k].(map[string]any); ok {
				m := map[string]any{}
				for a, b := range bm {
					m[a] = b
				}
				for a, b := range ov {
					m[a] = b
				}
				out[k] = m
				continue
			}
		}
		out[k] = v
	}
	return out
}

// loadProfileFlags reads --profile / --profile-file (nil when neither is given).
func loadProfileFlags(fs *pflag.FlagSet) (*profile.Profile, error) {
	name, _ := fs.GetString("profile")
	file, _ := fs.GetString("profile-file")
	switch {
	case name != "" && file != "":
		return nil, fail(ExitSandbox, "give --profile or --profile-file, not both")
	case name != "":
		p, err := profile.Load(name)
		if err != nil {
			return nil, fail(ExitSandbox, "%v", err)
		}
		return p, nil
	case file != "":
		p, err := profile.LoadFile(file)
		if err != nil {
			return nil, fail(ExitSandbox, "%v", err)
		}
		return p, nil
	}
	return nil, nil
}

func addProfileFlags(fs *pflag.FlagSet) {
	fs.String("profile", "", "the policy of a saved profile, $XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml (options add to it or override it)")
	fs.String("profile-file", "", "the policy of a profile file (TOML)")
}

func newRunCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "run [options] [--] PROGRAM [ARG...]",
		Short: "run a program in a sandbox",
		Long: `Run PROGRAM with ARGs in a sandbox whose policy the options (and a profile) give.
Nothing is readable, writable or reachable unless granted: grant what the program
needs with -r (read and execute), -w (read and write), --net-allow (connect),
--net-allow-bind (listen). The program's stdin, stdout and stderr are this
command's; with -i it gets a terminal of its own instead. The exit status is the
program's (see EXIT STATUS in sandtrap --help for sandtrap's own codes).

Options given as well as a profile: a single value (-m, -t, --cwd…) replaces the
profile's, a list (-r, -w, --net-allow…) adds to the profile's list, --env adds
variables. Without PROGRAM the profile's [program] exec and args are run.

Examples:
  sandtrap run -r /usr -r /lib -r /bin -w /tmp/work -m 512M -P 32 -t 60 -- python3 job.py
  sandtrap run --profile python -- python3 -c 'print(1)'
  sandtrap run --name build -r / -w "$PWD" -- make        # then: sandtrap ps, sandtrap kill build
  sandtrap run -i -r / -- /bin/sh                          # an interactive shell on a pty
  sandtrap run --json -r /usr -- /usr/bin/id               # the result and isolation report
  sandtrap run --learn -w /tmp/out -- ./build.sh > build.toml  # then: sandtrap run --profile-file build.toml`,
		Args: cobra.ArbitraryArgs,
		RunE: runMain,
	}
	fs := c.Flags()
	fs.SetInterspersed(false) // PROGRAM's own options are its own
	addPolicyFlags(fs)
	addProfileFlags(fs)
	fs.BoolP("interactive", "i", false, "give the program a pseudo-terminal of its own, connected to this one")
	fs.String("name", "", "a name for the run, for sandtrap ps / inspect / kill (default: run-PID)")
	fs.Bool("json", false, "capture the output and print the result as JSON: exit code, stdout, stderr, error, usage and the isolation report")
	fs.Bool("learn", false, "learn mode: run the program permissively but recorded (a read-only view of /; writes only where -w grants, the network only where --net-allow allows: every other attempt is refused and recorded) and print the smallest policy it needed as a profile (TOML) on stdout; the program's stdout and stderr go to stderr")
	fs.Bool("dry-run", false, "run with --workdir seen copy-on-write, list what the program would change there (A/M/D path, on stderr; in the result with --json) and discard it: the workdir is left as it was")
	c.MarkFlagsMutuallyExclusive("interactive", "json")
	c.MarkFlagsMutuallyExclusive("interactive", "learn")
	c.MarkFlagsMutuallyExclusive("learn", "dry-run")
	c.MarkFlagsMutuallyExclusive("profile", "profile-file")
	_ = c.RegisterFlagCompletionFunc("profile", completeProfiles)
	return c
}

func completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	names, _ := profile.List()
	return names, cobra.ShellCompDirectiveNoFileComp
}

// buildPolicy is the run's policy map: the profile's, then the options.
func buildPolicy(fs *pflag.FlagSet) (map[string]any, *profile.Profile, error) {
	prof, err := loadProfileFlags(fs)
	if err != nil {
		return nil, nil, err
	}
	over, err := flagPolicy(fs)
	if err != nil {
		return nil, nil, err
	}
	base := map[string]any{}
	if prof != nil {
		base = prof.Policy
	}
	return merge(base, over), prof, nil
}

// newSandbox builds the sandbox of a policy map; an invalid policy names every
// problem with its option.
func newSandbox(m map[string]any) (*engine.Sandbox, error) {
	sb, err := engine.NewFromMap(m)
	if err == nil {
		return sb, nil
	}
	if e, ok := err.(*engine.Error); ok && len(e.Problems) > 0 {
		lines := make([]string, len(e.Problems))
		for i, p := range e.Problems {
			name := p.Field
			if f := policy.Lookup(p.Field); f != nil {
				name = flagRef(f) + " (" + f.Key + ")"
			}
			lines[i] = name + ": " + p.Message
		}
		if len(lines) == 1 {
			return nil, fail(ExitSandbox, "invalid policy: %s", lines[0])
		}
		return nil, fail(ExitSandbox, "invalid policy (%d problems):\n- %s", len(lines), strings.Join(lines, "\n- "))
	}
	return nil, fail(ExitSandbox, "%v", err)
}

func runMain(c *cobra.Command, args []string) error {
	err := run(c, args)
	if j, _ := c.Flags().GetBool("json"); j {
		// sandtrap's own failures as JSON too: {"success": false, "error": {kind, message}}
		var ee *exitError
		if errors.As(err, &ee) && ee.msg != "" && ee.code == ExitSandbox {
			printJSON(os.Stdout, map[string]any{"success": false, "exit_code": nil,
				"error": map[string]any{"kind": "sandtrap", "message": ee.msg}})
			return &exitError{code: ee.code}
		}
	}
	return err
}

func run(c *cobra.Command, args []string) error {
	fs := c.Flags()
	dry, _ := fs.GetBool("dry-run")
	pol, prof, err := buildPolicy(fs)
	if err != nil {
		return err
	}
	if w, _ := pol["workdir"].(string); dry && w == "" {
		return fail(ExitSandbox, "--dry-run needs --workdir DIR (or a profile's workdir): the directory whose changes are listed, then discarded; nothing was run")
	}
	argv := args
	if len(argv) == 0 && prof != nil {
		argv = prof.Argv()
	}
	if len(argv) == 0 {
		return fail(ExitSandbox, "run: no program given (sandtrap run [options] -- PROGRAM [ARG...])")
	}
	interactive, _ := fs.GetBool("interactive")
	asJSON, _ := fs.GetBool("json")
	learn, _ := fs.GetBool("learn")
	name, _ := fs.GetString("name")

	sb, err := newSandbox(pol)
	if err != nil {
		return err
	}
	defer sb.Close()

	reg, err := register(name, argv, pol)
	if err != nil {
		return err
	}
	defer reg.remove()

	tag := "cli"
	req := &engine.RunRequest{Argv: argv, StdinFD: -1, StdoutFD: -1, Tag: tag, Started: reg.started}
	var term *ptyRelay
	switch {
	case interactive:
		if term, err = newPtyRelay(); err != nil {
			return fail(ExitSandbox, "-i: %v", err)
		}
		defer term.close()
		req.StdinFD, req.StdoutFD, req.StderrFD = term.slaveFDs()
	case asJSON:
		req.StdinFD = dupFD(0)
	case learn: // stdout is the profile's
		req.StdinFD, req.StdoutFD, req.StderrFD = dupFD(0), dupFD(2), dupFD(2)
		if req.StderrFD < 0 {
			req.StderrFD = 0
		}
	default:
		req.StdinFD, req.StdoutFD, req.StderrFD = dupFD(0), dupFD(1), dupFD(2)
		if req.StderrFD < 0 {
			req.StderrFD = 0
		}
	}

	// ^C, kill(1) and a hang-up end the run (the whole tree), then sandtrap exits
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var got os.Signal
	var mu sync.Mutex
	go func() {
		for s := range sigs {
			mu.Lock()
			if got == nil {
				got = s
			}
			mu.Unlock()
			sb.Cancel(tag, false)
		}
	}()

	if term != nil {
		term.start()
	}
	var res *engine.Result
	var learned map[string]any
	if learn {
		var lr *engine.LearnResult
		if lr, err = sb.Learn(req); err != nil {
			return fail(ExitSandbox, "--learn: %v", err)
		}
		res = lr.Result
		if learned, err = learnedJSON(lr, pol, argv); err != nil {
			return fail(ExitSandbox, "--learn: %v", err)
		}
		if lr.Dropped > 0 {
			fmt.Fprintf(os.Stderr, "sandtrap: --learn: %d paths were not recorded (the record is bounded): the profile may lack them\n", lr.Dropped)
		}
		if !asJSON {
			os.Stdout.WriteString(learned["profile"].(string))
		}
	} else {
		req.DryRun = dry
		res = sb.Run(req)
		if dry && !asJSON {
			for _, ch := range res.Changes {
				fmt.Fprintf(os.Stderr, "%s %s\n", ch.Kind, ch.Path)
			}
		}
	}
	if term != nil {
		term.finish()
	}
	mu.Lock()
	sig := got
	mu.Unlock()

	if asJSON && learned != nil {
		learned["result"] = resultJSON(res)
		if err := printJSON(os.Stdout, learned); err != nil {
			return fail(ExitSandbox, "%v", err)
		}
	} else if asJSON {
		if err := printJSON(os.Stdout, resultJSON(res)); err != nil {
			return fail(ExitSandbox, "%v", err)
		}
	}
	code, msg := exitCode(res)
	if sig != nil && res.Cancelled {
		code, msg = 128+int(sig.(syscall.Signal)), ""
	}
	if asJSON {
		msg = "" // it is in the JSON
	}
	return &exitError{code: code, msg: msg}
}

// learnedJSON is what run --learn found: the profile (the run's policy with the
// learned fs_readable, fs_writable and net_allow in place of its own, and the
// program), that policy, and the learning run's record (docs/cli.md, --learn).
func learnedJSON(lr *engine.LearnResult, pol map[string]any, argv []string) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range pol {
		out[k] = v
	}
	for _, k := range []string{"fs_readable", "fs_writable", "net_allow"} {
		delete(out, k)
		if v, ok := lr.Policy[k]; ok {
			out[k] = v
		}
	}
	text, err := profile.Format(out, argv, "learned by sandtrap run --learn from one run of the program (docs/security.md,\n"+
		"\"Learn mode\"): what it read, wrote and reached, nothing more; run it again with\n"+
		"sandtrap run --profile-file FILE")
	if err != nil {
		return nil, err
	}
	return map[string]any{"profile": text, "policy": out, "observed": lr.Observed, "dropped": lr.Dropped, "mode": lr.Mode}, nil
}

// exitCode is sandtrap run's exit status for a result, and what to print.
func exitCode(res *engine.Result) (int, string) {
	if res.Error != nil {
		switch res.Error.Kind {
		case engine.KindTimeout:
			return ExitTimeout, res.Error.Message
		case engine.KindNotFound:
			return ExitNotFound, res.Error.Message
		case engine.KindSpawn:
			return ExitCannot, res.Error.Message
		case engine.KindCancelled, engine.KindCPUTime, engine.KindMemory:
			if res.Signal != nil {
				return 128 + *res.Signal, res.Error.Message
			}
			return ExitSandbox, res.Error.Message
		}
		return ExitSandbox, res.Error.Message
	}
	switch {
	case res.ExitCode != nil:
		return *res.ExitCode, ""
	case res.Signal != nil:
		return 128 + *res.Signal, ""
	}
	return ExitSandbox, "the run ended without an exit status"
}

func dupFD(fd int) int {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1
	}
	return d
}

// resultJSON is a result as JSON: the protocol's keys (docs/protocol.md); stdout and
// stderr as text when they are UTF-8, else base64 under stdout_base64/stderr_base64.
func resultJSON(res *engine.Result) map[string]any {
	m, err := engine.DecodeMap(engine.Encode(res), "result")
	if err != nil {
		return map[string]any{"error": map[string]any{"kind": "internal", "message": err.Error()}}
	}
	for _, k := range []string{"stdout", "stderr"} {
		b, _ := m[k].([]byte)
		if utf8.Valid(b) {
			m[k] = string(b)
		} else {
			delete(m, k)
			m[k+"_base64"] = b
		}
	}
	return m
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ptyRelay is -i: a pseudo-terminal of the run's own (never this terminal, so a
// program cannot push input into the user's shell), relayed to this one.
type ptyRelay struct {
	ptmx, tty *os.File
	restore   func()
	done      chan struct{}
	winch     chan os.Signal
}

func newPtyRelay() (*ptyRelay, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	r := &ptyRelay{ptmx: ptmx, tty: tty, restore: func() {}, done: make(chan struct{})}
	if term.IsTerminal(0) {
		_ = pty.InheritSize(os.Stdin, ptmx)
		if old, err := term.MakeRaw(0); err == nil {
			r.restore = func() { term.Restore(0, old) }
		}
		r.winch = make(chan os.Signal, 1)
		signal.Notify(r.winch, syscall.SIGWINCH)
		go func() {
			for range r.winch {
				_ = pty.InheritSize(os.Stdin, ptmx)
			}
		}()
	}
	return r, nil
}

// slaveFDs are the terminal's fds for the run (the engine closes them once it started).
func (r *ptyRelay) slaveFDs() (int, int, int) {
	fd := int(r.tty.Fd())
	return dupFD(fd), dupFD(fd), dupFD(fd)
}

func (r *ptyRelay) start() {
	r.tty.Close() // the run holds its own copies: EOF (EIO) on the master once it is gone
	go func() { io.Copy(r.ptmx, os.Stdin) }()
	go func() {
		io.Copy(os.Stdout, r.ptmx)
		close(r.done)
	}()
}

// finish waits briefly for the output still in the terminal.
func (r *ptyRelay) finish() {
	select {
	case <-r.done:
	case <-time.After(500 * time.Millisecond):
	}
}

func (r *ptyRelay) close() {
	if r.winch != nil {
		signal.Stop(r.winch)
		close(r.winch)
	}
	r.restore()
	r.ptmx.Close()
}

// parseSignal reads "KILL", "SIGTERM", "9".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	if sig := unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(s), "SIG")); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("%q is not a signal (KILL, TERM, INT, HUP or a number)", s)
}
