package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// The run registry: one JSON file per live run started by `sandtrap run`, in
// $XDG_RUNTIME_DIR/sandtrap/runs (else /tmp/sandtrap-$UID/runs), a directory only
// its user may enter. A file whose sandtrap process is gone is stale: ps drops it.

// Run is one run's entry.
type Run struct {
	Name      string         `json:"name"`
	CLIPid    int            `json:"cli_pid"`         // the sandtrap process
	CLIStart  uint64         `json:"cli_start_ticks"` // its start time (/proc/PID/stat), so a reused pid is not it
	Pid       int            `json:"pid,omitempty"`   // the run's pid 1 (its pid namespace's init), 0 until started
	PidStart  uint64         `json:"pid_start_ticks,omitempty"`
	Argv      []string       `json:"argv"`
	Policy    map[string]any `json:"policy"`
	Started   time.Time      `json:"started"`
	StartedAt string         `json:"-"`
	path      string
}

func runDir() (string, error) {
	var dir string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		dir = filepath.Join(x, "sandtrap")
	} else {
		dir = fmt.Sprintf("/tmp/sandtrap-%d", os.Getuid())
	}
	// a directory someone else made for us (in /tmp) is not ours to trust: the base
	// (shared with the guest runtime's cache) must be ours and writable by no one
	// else, runs/ ours and closed to everyone else
	check := func(d string, mask uint32, what string) error {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&mask != 0 {
			return fmt.Errorf("%s is not a directory of uid %d %s; remove it", d, os.Getuid(), what)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := check(dir, 0o022, "that only it may write"); err != nil {
		return "", err
	}
	runs := filepath.Join(dir, "runs")
	if err := os.Mkdir(runs, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return runs, check(runs, 0o077, "that only it may enter")
}

// startTicks is a process's start time in clock ticks since boot (0: no such process).
func startTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64) // field 22, starttime
	return n
}

func validName(n string) bool {
	if n == "" || len(n) > 64 || n[0] == '.' || n[0] == '-' {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// register records a run about to start; name "" is run-PID.
func register(name string, argv []string, pol map[string]any) (*Run, error) {
	if name == "" {
		name = fmt.Sprintf("run-%d", os.Getpid())
	}
	if !validName(name) {
		return nil, fail(ExitSandbox, "--name %q: want 1-64 letters, digits, '-', '_' or '.', not starting with '.' or '-'", name)
	}
	dir, err := runDir()
	if err != nil {
		return nil, fail(ExitSandbox, "run registry: %v", err)
	}
	r := &Run{Name: name, CLIPid: os.Getpid(), CLIStart: startTicks(os.Getpid()), Argv: argv, Policy: pol,
		Started: time.Now().UTC(), path: filepath.Join(dir, name+".json")}
	for attempt := 0; ; attempt++ {
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = json.NewEncoder(f).Encode(r)
			f.Close()
			if err != nil {
				os.Remove(r.path)
				return nil, fail(ExitSandbox, "run registry: %v", err)
			}
			return r, nil
		}
		if !errors.Is(err, os.ErrExist) || attempt > 0 {
			return nil, fail(ExitSandbox, "run registry: %v", err)
		}
		if old, err := readRun(r.path); err == nil && old.alive() {
			return nil, fail(ExitSandbox, "--name %s: a run of that name is live (sandtrap pid %d); stop it with 'sandtrap kill %s' or pick another name", name, old.CLIPid, name)
		}
		os.Remove(r.path) // stale
	}
}

// started records the run's pid 1 (engine.RunRequest.Started).
func (r *Run) started(pid int) {
	r.Pid, r.PidStart = pid, startTicks(pid)
	tmp := r.path + ".tmp"
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, r.path)
	}
}

func (r *Run) remove() {
	if cur, err := readRun(r.path); err == nil && cur.CLIPid != r.CLIPid {
		return // not ours any more
	}
	os.Remove(r.path)
}

func (r *Run) alive() bool {
	return r.CLIStart != 0 && startTicks(r.CLIPid) == r.CLIStart
}

func readRun(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	r.path = path
	return &r, nil
}

// liveRuns lists the live runs, dropping stale entries.
func liveRuns() ([]*Run, error) {
	dir, err := runDir()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []*Run
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		r, err := readRun(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if !r.alive() {
			os.Remove(r.path)
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}

func findRun(name string) (*Run, error) {
	runs, err := liveRuns()
	if err != nil {
		return nil, fail(ExitSandbox, "run registry: %v", err)
	}
	for _, r := range runs {
		if r.Name == name {
			return r, nil
		}
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.Name)
	}
	hint := "no run is live"
	if len(names) > 0 {
		hint = "live: " + strings.Join(names, ", ")
	}
	return nil, fail(1, "no live run named %q (%s)", name, hint)
}

func completeRuns(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	runs, _ := liveRuns()
	var out []string
	for _, r := range runs {
		out = append(out, r.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func newPsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "ps",
		Short: "list the live runs started by sandtrap run",
		Long: `List the runs that sandtrap run started and that are still running, with their
name, the pid of their pid 1 (the init of the run's pid namespace), how long they
have run and their program.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			runs, err := liveRuns()
			if err != nil {
				return fail(ExitSandbox, "run registry: %v", err)
			}
			if j, _ := c.Flags().GetBool("json"); j {
				if runs == nil {
					runs = []*Run{}
				}
				return printJSON(os.Stdout, runs)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tPID\tUPTIME\tCOMMAND")
			for _, r := range runs {
				pid := "-"
				if r.Pid > 0 {
					pid = strconv.Itoa(r.Pid)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Name, pid, time.Since(r.Started).Round(time.Second), strings.Join(r.Argv, " "))
			}
			return w.Flush()
		},
	}
	c.Flags().Bool("json", false, "print the entries as JSON")
	return c
}

func newInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "inspect NAME",
		Short:             "show a live run: pid, program, policy, start time (JSON)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRuns,
		RunE: func(_ *cobra.Command, args []string) error {
			r, err := findRun(args[0])
			if err != nil {
				return err
			}
			return printJSON(os.Stdout, r)
		},
	}
}

func newKillCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "kill NAME...",
		Short: "stop live runs: their whole process tree",
		Long: `Stop each named run: its pid 1, the init of the run's pid namespace, gets the
signal (KILL by default), which ends every process of the run; the sandtrap run
that started it then exits (137 for KILL). A run that has no pid namespace (a
degraded sandbox) is stopped by its sandtrap process, which kills the tree the
way the sandbox can.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeRuns,
		RunE: func(c *cobra.Command, args []string) error {
			sigName, _ := c.Flags().GetString("signal")
			sig, err := parseSignal(sigName)
			if err != nil {
				return fail(ExitSandbox, "--signal: %v", err)
			}
			for _, name := range args {
				r, err := findRun(name)
				if err != nil {
					return err
				}
				if err := r.kill(sig); err != nil {
					return fail(1, "kill %s: %v", name, err)
				}
			}
			return nil
		},
	}
	c.Flags().StringP("signal", "s", "KILL", "the signal for each run's pid 1")
	return c
}

// kill signals the run's pid 1 through a pidfd, after checking that the pid is
// still that process; a run not started yet, or whose pid 1 is not the init of a
// pid namespace of its own, is cancelled by its sandtrap process (SIGTERM).
func (r *Run) kill(sig syscall.Signal) error {
	sent, ns := false, r.Pid > 0 && ownPidNS(r.Pid)
	if r.Pid > 0 {
		fd, err := unix.PidfdOpen(r.Pid, 0)
		if err == nil {
			if startTicks(r.Pid) == r.PidStart && r.PidStart != 0 {
				if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && err != unix.ESRCH {
					unix.Close(fd)
					return err
				}
				sent = true
			}
			unix.Close(fd)
		}
	}
	if !sent || !ns {
		fd, err := unix.PidfdOpen(r.CLIPid, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if startTicks(r.CLIPid) != r.CLIStart {
			return errors.New("its sandtrap process is gone")
		}
		return unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
	}
	return nil
}

// ownPidNS reports whether pid is pid 1 of a pid namespace (its NSpid ends in 1).
func ownPidNS(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}
