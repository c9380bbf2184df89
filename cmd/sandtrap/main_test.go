package main

import (
	"os"
	"strings"
	"testing"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/spf13/cobra"
)

// docs/cli.md describes every command of the tree (its options and the profile
// schema are generated from the policy schema); a new command without its section
// fails here.
func TestEveryCommandIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if s.Hidden || s.Name() == "help" || s.Name() == "completion" {
				continue
			}
			if !strings.Contains(string(doc), "    "+s.CommandPath()+" ") && !strings.Contains(string(doc), "    "+s.CommandPath()+"\n") {
				t.Errorf("docs/cli.md has no synopsis line for %q", s.CommandPath())
			}
			walk(s)
		}
	}
	walk(newRoot())
}

// Every supported field has its option on run and mcp, and none collides with the
// commands' own options.
func TestEveryFieldHasAnOption(t *testing.T) {
	for _, c := range []*cobra.Command{newRunCmd(), newMCPCmd()} {
		for i := range policy.Schema {
			f := &policy.Schema[i]
			if !f.Supported() {
				continue
			}
			fl := c.Flags().Lookup(f.FlagName())
			if fl == nil || fl.Shorthand != f.Short {
				t.Errorf("%s: %s has no option --%s (-%s)", c.Name(), f.Key, f.FlagName(), f.Short)
			}
		}
	}
}
