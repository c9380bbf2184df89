// Command sandtrap runs programs in a sandtrap sandbox from the command line, keeps
// policies in TOML profiles, lists and stops the runs it started, and serves the
// sandbox to agents as an MCP server. It uses the engine's Go API (core/engine), the
// same façade the C ABI converts to, so a policy means the same here as in Python,
// Node and C. docs/cli.md is its manual (generated with the policy schema).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// Exit codes of sandtrap itself (the program's own exit code passes through);
// they follow env(1), timeout(1) and docker run.
const (
	ExitTimeout  = 124 // the run overran its timeout and was killed
	ExitSandbox  = 125 // sandtrap failed: bad flags, policy or profile, isolation unavailable, internal error
	ExitCannot   = 126 // the program was found but could not be executed
	ExitNotFound = 127 // the program was not found
	// a program killed by signal N exits 128+N, as in a shell
)

// exitError carries an exit code out of a command; msg (if any) is printed first.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, a ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, a...)}
}

func main() {
	root := newRoot()
	err := root.Execute()
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, "sandtrap: "+ee.msg)
		}
		os.Exit(ee.code)
	}
	// cobra's own errors (unknown flag, bad value): a usage error
	fmt.Fprintln(os.Stderr, "sandtrap: "+err.Error())
	fmt.Fprintln(os.Stderr, "Run 'sandtrap --help' for usage.")
	os.Exit(ExitSandbox)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "sandtrap",
		Short: "run programs in a kernel-enforced sandbox (Landlock, seccomp, namespaces, limits)",
		Long: `sandtrap runs a program under a sandbox policy: which paths it may read and
write, where it may connect, how much memory, how many processes and how much time
it may use, and which system calls it may make. Everything not granted is refused
by the kernel (Landlock, seccomp, namespaces, cgroups or rlimits), before the
program's first instruction; nothing the program starts outlives the run.

A policy comes from flags (sandtrap run --help lists one for every field), from a
TOML profile (--profile NAME, --profile-file PATH), or both: flags win.

EXIT STATUS
  sandtrap run exits with the program's exit code, or:
    124  the run overran its timeout (-t) and was killed
    125  sandtrap itself failed: bad flags, policy or profile, isolation unavailable
    126  the program was found but could not be executed
    127  the program was not found
    128+N  the program was killed by signal N (137: SIGKILL, e.g. a memory limit)

FILES
  $XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml   saved profiles (~/.config by default)
  $XDG_RUNTIME_DIR/sandtrap/runs/NAME.json       live runs (else /tmp/sandtrap-$UID)

See docs/cli.md for every command and the profile schema.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.AddCommand(newRunCmd(), newProbeCmd(), newPsCmd(), newInspectCmd(), newKillCmd(), newProfileCmd(), newMCPCmd())
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fail(ExitSandbox, "%v\nRun '%s --help' for usage.", err, c.CommandPath())
	})
	return root
}
