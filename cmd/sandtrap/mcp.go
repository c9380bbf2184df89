package main

import "github.com/spf13/cobra"

func newMCPCmd() *cobra.Command { return &cobra.Command{Use: "mcp"} }
