package main

import (
	"fmt"
	"os"

	"github.com/sandtrap/sandtrap/core/profile"
	"github.com/spf13/cobra"
)

func newProfileCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "profile",
		Short: "list, show and check saved profiles",
		Long: `Profiles are TOML files of a policy, saved as
$XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml (~/.config/sandtrap/profiles by
default) and used with sandtrap run --profile NAME, or anywhere with
--profile-file PATH. docs/cli.md lists every section and key.`,
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "list the saved profiles",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			names, err := profile.List()
			if err != nil {
				return fail(ExitSandbox, "%v", err)
			}
			for _, n := range names {
				fmt.Println(n)
			}
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show NAME|PATH",
		Short: "check a profile and print it (with --json: its policy)",
		Long: `Check a profile, by name or by path (a PATH has a '/' or ends in .toml), and print
its file; with --json, the policy it makes (the protocol's keys) and its program.
Every problem of the file is reported at once, with its line (exit 125).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeProfiles,
		RunE: func(c *cobra.Command, args []string) error {
			p, err := profile.LoadAny(args[0])
			if err != nil {
				return fail(ExitSandbox, "%v", err)
			}
			if j, _ := c.Flags().GetBool("json"); j {
				return printJSON(os.Stdout, map[string]any{"name": p.Name, "path": p.Path, "policy": p.Policy, "argv": p.Argv()})
			}
			b, err := os.ReadFile(p.Path)
			if err != nil {
				return fail(ExitSandbox, "%v", err)
			}
			fmt.Printf("# %s\n%s", p.Path, b)
			return nil
		},
	}
	show.Flags().Bool("json", false, "print the profile's policy as JSON")
	path := &cobra.Command{
		Use:   "path [NAME]",
		Short: "print the directory of saved profiles, or the file of NAME",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				fmt.Println(profile.Dir())
				return nil
			}
			p, err := profile.Path(args[0])
			if err != nil {
				return fail(ExitSandbox, "%v", err)
			}
			fmt.Println(p)
			return nil
		},
	}
	c.AddCommand(list, show, path)
	return c
}
