package main

import (
	"fmt"
	"strings"

	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/profile"
)

// The field reference (docs/sandbox-reference.md, whole) and the CLI's options and
// profile schema (docs/cli.md, between markers; its commands are written by hand
// and checked against the command tree by cmd/sandtrap's tests).
func init() {
	outputs = append(outputs,
		output{Path: "docs/sandbox-reference.md", render: reference},
		output{Path: "docs/cli.md", Begin: "<!-- BEGIN options: " + note + " -->", End: "<!-- END generated options -->", render: cliOptions},
		output{Path: "docs/cli.md", Begin: "<!-- BEGIN profile schema: " + note + " -->", End: "<!-- END generated profile schema -->", render: profileSchema},
	)
}

// typeWord is a kind as the reference names its type.
var typeWord = map[policy.Kind]string{
	policy.KindPaths: "list of absolute paths", policy.KindPath: "absolute path", policy.KindTargets: "list of network rules",
	policy.KindPorts: "list of ports and ranges", policy.KindBool: "boolean", policy.KindSize: "size (bytes, or \"256M\")",
	policy.KindCount: "positive integer", policy.KindSeconds: "seconds (number)", policy.KindID: "uid/gid (integer)",
	policy.KindEnv: "table of NAME = value", policy.KindNames: "list of syscall names",
	policy.KindHost: "host name (1-64 letters, digits, `-`, `.`)", policy.KindCPUs: "list of CPU numbers and ranges",
	policy.KindOptBool: "boolean, or unset", policy.KindBranch: "`\"commit\"`, `\"abort\"` or `\"keep\"`", policy.KindHTTP: "list of HTTP rules (`\"METHOD host/path\"`)", policy.KindHTTPAuth: "list of credential rules (`\"METHOD host/path SCHEME NAME\"`)",
	policy.KindSeed: "integer (0 to 2^62)", policy.KindTime: "instant (ISO-8601 string, TOML date-time, or Unix seconds)",
	policy.KindGPUs: "`\"all\"`, or a list of GPU indices and ranges",
	policy.KindProt: "list of protections", policy.KindDegrade: "boolean, or list of protections",
	policy.KindMounts: "table of \"/inside\" = \"/host/path\"",
}

// optionArg is how `sandtrap run` takes a kind's value.
var optionArg = map[policy.Kind]string{
	policy.KindPaths: "PATH (repeat)", policy.KindPath: "PATH", policy.KindTargets: "RULE (repeat)",
	policy.KindPorts: "PORTS (repeat, or a,b,c-d)", policy.KindBool: "", policy.KindSize: "SIZE",
	policy.KindCount: "N", policy.KindSeconds: "SECONDS", policy.KindID: "ID",
	policy.KindEnv: "NAME=VALUE (repeat)", policy.KindNames: "NAMES (repeat, or a,b)",
	policy.KindHost: "NAME", policy.KindCPUs: "CPUS (repeat, or a,b,c-d)", policy.KindOptBool: "", policy.KindHTTP: "RULE (repeat)", policy.KindHTTPAuth: "RULE (repeat)", policy.KindBranch: "commit|abort|keep",
	policy.KindSeed: "SEED", policy.KindTime: "INSTANT",
	policy.KindGPUs: "all|GPUS (repeat, or a,b,c-d)",
	policy.KindProt: "PROTECTIONS (repeat, or a,b)", policy.KindDegrade: "[=PROTECTIONS]",
	policy.KindMounts: "INSIDE=HOST (repeat)",
}

func option(f *policy.Field) string {
	s := "`--" + f.FlagName()
	if a := optionArg[f.Kind()]; a != "" {
		s += " " + a
	}
	s += "`"
	if f.Short != "" {
		s = "`-" + f.Short + "`, " + s
	}
	return s
}

func optionRef(f *policy.Field) string {
	if !f.Supported() {
		return "`" + f.Key + "`"
	}
	return "`--" + f.FlagName() + "`"
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func sectionFields(sec string) []*policy.Field {
	var out []*policy.Field
	for i := range policy.Schema {
		if policy.Schema[i].Section == sec {
			out = append(out, &policy.Schema[i])
		}
	}
	return out
}

func reference() string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!-- %s -->\n", note)
	b.WriteString(`# Sandbox reference

Every policy field of a sandtrap sandbox: its type, default and behaviour, and its
name in each front door — the TOML key of a profile (and its section), the option
of ` + "`sandtrap run`" + `, the Python keyword of ` + "`Sandbox(...)`" + `, the Node option of
` + "`new Sandbox({...})`" + ` and the msgpack key of the C ABI (docs/protocol.md). The TOML key
is the msgpack key in every case; a Python or Node name that differs from it is
marked **bold**. Every field is optional; an omitted one grants nothing (paths,
network) or sets no limit, except where its default says otherwise
(` + "`max_processes`" + `: 64). A Python ` + "`Sandbox`" + ` reads each field as an attribute
(` + "`sb.max_processes`" + `), the default when it was not given; a Node ` + "`Sandbox`" + `
has the same as read-only getters.

Profiles are described in docs/cli.md ("Profiles"). A field that sandtrap does
not support yet is refused by name everywhere, with the reason listed below.
`)
	for _, sec := range policy.Sections {
		fields := sectionFields(sec)
		var sup []*policy.Field
		for _, f := range fields {
			if f.Supported() {
				sup = append(sup, f)
			}
		}
		fmt.Fprintf(&b, "\n## [%s]\n\n", sec)
		if sec == "program" {
			b.WriteString("Besides the fields below, a profile's `[program]` may hold `exec` (the program, a string) and `args` (its arguments, a list of strings): what `sandtrap run --profile NAME` runs when no program is given.\n\n")
		}
		if len(sup) > 0 {
			b.WriteString("| TOML key | type | default | behaviour | `sandtrap run` | Python | Node |\n|---|---|---|---|---|---|---|\n")
			for _, f := range sup {
				py, node := "`"+f.PythonName()+"`", "`"+f.NodeName()+"`"
				if f.PythonName() != f.Key {
					py = "**" + py + "**"
				}
				if f.NodeName() != f.Key {
					node = "**" + node + "**"
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", f.Key, typeWord[f.Kind()], f.Default,
					cell(f.DocFor(quoted)), cell(option(f)), py, node)
			}
		}
		var uns []*policy.Field
		for _, f := range fields {
			if !f.Supported() {
				uns = append(uns, f)
			}
		}
		if len(uns) > 0 {
			if len(sup) > 0 {
				b.WriteString("\n")
			}
			b.WriteString("Not supported yet (refused by name):\n\n| TOML key | Python | Node | why |\n|---|---|---|---|\n")
			for _, f := range uns {
				fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | %s |\n", f.Key, f.PythonName(), f.NodeName(), cell(expand(f, quoted)))
			}
		}
	}
	b.WriteString("\n## Protections\n\nThe Landlock protections `allow_degraded` and `disable` name (Python `sandtrap.Protection`, Node `Protection`, C `SANDTRAP_PROTECTION_*`). Each one a sandbox needs is required: on a kernel whose Landlock ABI is lower the sandbox is refused (`isolation_unavailable`, naming it) unless `allow_degraded` is true or names it; `disable` leaves it out on any kernel. The isolation report's `protections` says, for each, `enforced`, `degraded`, `disabled` or `not_needed`.\n\n| name | Landlock ABI | what it enforces |\n|---|---|---|\n")
	for _, pr := range policy.Protections {
		fmt.Fprintf(&b, "| `%s` | %d | %s |\n", pr.Name, pr.MinABI, cell(pr.Doc))
	}
	var rt []*policy.Field
	for i := range policy.Schema {
		if policy.Schema[i].Section == "" {
			rt = append(rt, &policy.Schema[i])
		}
	}
	if len(rt) > 0 {
		b.WriteString("\n## Not profile keys\n\nArguments of a sandbox or a run rather than policy values; a profile refuses them.\n\n| name | Python | Node | note |\n|---|---|---|---|\n")
		for _, f := range rt {
			note := f.Doc
			if !f.Supported() {
				note = expand(f, quoted)
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | %s |\n", f.Key, f.PythonName(), f.NodeName(), cell(note))
		}
	}
	return b.String()
}

func cliOptions() string {
	var b strings.Builder
	b.WriteString("| option | field | meaning |\n|---|---|---|\n")
	for _, f := range supported() {
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", cell(option(f)), f.Key, cell(f.DocFor(optionRef)))
	}
	return b.String()
}

func profileSchema() string {
	var b strings.Builder
	for _, sec := range policy.Sections {
		fmt.Fprintf(&b, "\n`[%s]`\n\n| key | type | example |\n|---|---|---|\n", sec)
		if sec == "program" {
			b.WriteString("| `exec` | string: the program | `exec = \"python3\"` |\n| `args` | list of strings: its arguments | `args = [\"-c\", \"print(1)\"]` |\n")
		}
		for _, f := range sectionFields(sec) {
			if f.Supported() {
				fmt.Fprintf(&b, "| `%s` | %s | `%s = %s` |\n", f.Key, typeWord[f.Kind()], f.Key, cell(profile.Example(f.Kind())))
			} else {
				fmt.Fprintf(&b, "| `%s` | not supported yet: %s | |\n", f.Key, cell(expand(f, quoted)))
			}
		}
	}
	return b.String()
}
