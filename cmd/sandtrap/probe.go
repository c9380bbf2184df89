package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/sandtrap/sandtrap/core/kernel"
	"github.com/spf13/cobra"
)

func newProbeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "probe",
		Short: "show what this machine's kernel can enforce",
		Long: `Show the protections this kernel offers a sandbox: the Landlock ABI, seccomp,
pid and user namespaces, the cgroup controllers this user may create, and whether
sandtrap runs as root. A protection a policy asks for and the kernel lacks fails
the run (exit 125) unless allow_degraded is set.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			f := kernel.Probe()
			m := map[string]any{
				"landlock_abi": f.LandlockABI, "seccomp": f.Seccomp, "root": f.Root,
				"pid_namespace": f.PidNS, "user_namespace": f.UserNS, "mount_api": f.MountAPI, "cgroup": nil,
			}
			var cs []string
			if f.Cgroup != nil {
				for k := range f.Cgroup.Dirs {
					cs = append(cs, k)
				}
				sort.Strings(cs)
				m["cgroup"] = map[string]any{"version": f.Cgroup.Version, "controllers": cs}
			}
			if len(f.Disabled) > 0 {
				m["test_disabled"] = f.Disabled
			}
			if j, _ := c.Flags().GetBool("json"); j {
				return printJSON(os.Stdout, m)
			}
			yes := func(b bool) string {
				if b {
					return "yes"
				}
				return "no"
			}
			ll := "absent"
			if f.LandlockABI > 0 {
				ll = fmt.Sprintf("ABI %d", f.LandlockABI)
			}
			cg := "none"
			if f.Cgroup != nil {
				cg = fmt.Sprintf("v%d %v", f.Cgroup.Version, cs)
			}
			fmt.Printf("landlock:        %s\nseccomp:         %s\npid namespace:   %s\nuser namespace:  %s\nmount API:       %s\ncgroups:         %s\nroot:            %s\n",
				ll, yes(f.Seccomp), yes(f.PidNS), yes(f.UserNS), yes(f.MountAPI), cg, yes(f.Root))
			return nil
		},
	}
	c.Flags().Bool("json", false, "print the probe as JSON")
	return c
}
