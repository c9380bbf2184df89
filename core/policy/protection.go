package policy

// Protection is one Landlock protection by name: what it enforces and the
// Landlock ABI it needs. Every one a sandbox needs is required by default: a
// kernel whose ABI is lower fails the sandbox (isolation_unavailable naming it)
// unless allow_degraded names it (or is true), and then the isolation report
// lists it as degraded; disable turns it off even where the kernel has it.
type Protection struct {
	Name   string // the msgpack value, and (upper-cased) the Python and Node enum member
	MinABI int
	Doc    string // one line, for the generated documents
}

// Protections are the Landlock protections, in ABI order (the order of the
// generated enums and constants).
var Protections = []Protection{
	{"fs", 1, "filesystem rules: reads, writes and executes beneath the granted paths only (without it: no Landlock at all, the view and seccomp remain)"},
	{"fs_refer", 2, "renames and links between directories (LANDLOCK_ACCESS_FS_REFER) allowed within the writable trees; without it every such rename is refused (EXDEV), it weakens nothing"},
	{"fs_truncate", 3, "truncate() and O_TRUNC only on writable paths (LANDLOCK_ACCESS_FS_TRUNCATE)"},
	{"net_tcp", 4, "TCP bind and connect limited to the allowed ports by Landlock (LANDLOCK_ACCESS_NET_*_TCP), under the supervisor's checks of destinations; needed only with network rules"},
	{"fs_ioctl_dev", 5, "ioctl on device nodes refused beneath granted trees (LANDLOCK_ACCESS_FS_IOCTL_DEV)"},
	{"abstract_unix_socket_scope", 6, "abstract unix sockets outside the sandbox unreachable (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET); without it a sandbox with `net_allow_unix` reaches the host's"},
	{"signal_scope", 6, "signals to processes outside the sandbox refused (LANDLOCK_SCOPE_SIGNAL); the run's pid namespace hides them as well"},
}

// Protection names, as constants for Go callers.
const (
	ProtFS            = "fs"
	ProtFSRefer       = "fs_refer"
	ProtFSTruncate    = "fs_truncate"
	ProtNetTCP        = "net_tcp"
	ProtFSIoctlDev    = "fs_ioctl_dev"
	ProtAbstractScope = "abstract_unix_socket_scope"
	ProtSignalScope   = "signal_scope"
)

// LookupProtection returns the protection named n, or nil.
func LookupProtection(n string) *Protection {
	for i := range Protections {
		if Protections[i].Name == n {
			return &Protections[i]
		}
	}
	return nil
}

// ProtectionNames lists every protection's name, in order.
func ProtectionNames() []string {
	out := make([]string, len(Protections))
	for i, p := range Protections {
		out[i] = p.Name
	}
	return out
}

// Degradable reports whether protection n may be left out where the kernel
// lacks it: allow_degraded is true, or names it.
func (p *Policy) Degradable(n string) bool {
	if p.AllowDegraded {
		return true
	}
	for _, d := range p.DegradedProtections {
		if d == n {
			return true
		}
	}
	return false
}

// Disables reports whether disable names protection n.
func (p *Policy) Disables(n string) bool {
	for _, d := range p.Disable {
		if d == n {
			return true
		}
	}
	return false
}
