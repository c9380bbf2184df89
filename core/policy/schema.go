package policy

import "strings"

//go:generate go run ./gen

// The policy field schema: the one list of policy fields. Everything else that
// names the fields is generated from it by core/policy/gen (`go generate
// ./core/policy`; a test fails when a generated file is out of date): the C
// header's builder setters and their definitions (capi/builder_gen.c), the table
// of docs/protocol.md, the Python binding's table and its typed keyword arguments,
// the Node binding's table and its TypeScript types. The Go decoder (Decode) reads
// this table directly.
//
// A field that the API we follow has and sandtrap does not is listed too, with
// Unsupported saying why: every binding refuses it the same way.

// Kind is how a field's value is read, checked and converted.
type Kind string

const (
	KindPaths    Kind = "paths"   // a list of paths (relative ones: against the builder's working directory)
	KindPath     Kind = "path"    // one path (absolute, except workdir's, which resolves like fs_*)
	KindTargets  Kind = "targets" // network rules: 443, "host:443", "10.0.0.0/8", "udp://…", "*" (net.go)
	KindPorts    Kind = "ports"   // ports and ranges: 8080, "8000-8005"
	KindBool     Kind = "bool"
	KindSize     Kind = "size"        // bytes: an integer or "256M" (binary suffixes)
	KindCount    Kind = "count"       // a positive integer
	KindSeconds  Kind = "seconds"     // a positive number of seconds
	KindID       Kind = "id"          // a uid or gid
	KindEnv      Kind = "env"         // a map of variable names to values
	KindNames    Kind = "names"       // syscall names
	KindHost     Kind = "hostname"    // a host name: 1-64 characters, letters, digits, '-' and '.'
	KindHTTP     Kind = "http_rules"  // HTTP rules: "METHOD host/path" with * wildcards (http.go)
	KindCPUs     Kind = "cpus"        // CPU numbers and ranges: 0, "2-3"
	KindOptBool  Kind = "optbool"     // true, false, or absent (a default that is neither)
	KindBranch   Kind = "branch"      // what becomes of a copy-on-write workdir's changes: "commit", "abort" or "keep"
	KindHTTPAuth Kind = "http_auth"   // credential rules: "METHOD host/path SCHEME CREDENTIAL" (http.go)
	KindSeed     Kind = "seed"        // an integer from 0 to 2^62
	KindTime     Kind = "time"        // an instant: an ISO-8601 string ("2000-01-01T00:00:00Z") or Unix seconds
	KindGPUs     Kind = "gpus"        // "all", or GPU indices and ranges: 0, "1-2"
	KindProt     Kind = "protections" // Landlock protections by name (protection.go): "signal_scope"
	KindDegrade  Kind = "degrade"     // true, false, or a list of protection names
	KindMounts   Kind = "mounts"      // a map of paths inside a chroot to host paths (relative host paths: as KindPaths)
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{KindPaths, KindPath, KindTargets, KindPorts, KindBool, KindSize, KindCount,
	KindSeconds, KindID, KindEnv, KindNames, KindHost, KindHTTP, KindCPUs, KindOptBool, KindBranch, KindHTTPAuth, KindSeed, KindTime, KindGPUs, KindProt, KindDegrade, KindMounts}

// List reports whether values of the kind are lists (a C setter appends to them).
func (k Kind) List() bool {
	switch k {
	case KindPaths, KindTargets, KindPorts, KindNames, KindHTTP, KindCPUs, KindHTTPAuth, KindGPUs, KindProt:
		return true
	}
	return false
}

// CKind is how a C builder setter passes its value to the engine.
type CKind string

const (
	CString CKind = "string" // const char *: a string (appended to a list field)
	CU64    CKind = "u64"    // an unsigned integer: bytes, a count, a port
	CBool   CKind = "bool"   // int: 0 false, anything else true
	CMillis CKind = "ms"     // uint64_t milliseconds, for a field in seconds
	CEnv    CKind = "env"    // (const char *name, const char *value)
	CIDs    CKind = "ids"    // (uint32_t uid, uint32_t gid): sets uid and gid together
	CMount  CKind = "mount"  // (const char *inside, const char *host): one entry of a map of mounts
)

// CSetter is one sandtrap_sandbox_builder_<Name> function of include/sandtrap.h.
type CSetter struct {
	Name   string // after sandtrap_sandbox_builder_
	Params string // its C parameters after the builder
	Kind   CKind
	Doc    string // its comment in the header (the field's Doc when empty)
}

// Field is one policy field.
type Field struct {
	Key     string // the msgpack key (docs/protocol.md)
	Default string // as documented: "[]", "none", "16 MiB"…
	// Value is the default as a value: what a binding's attribute of an unset field
	// reads (nil: None/null, false, an int64, a string, []any{}, map[string]any{}).
	// Giving it must mean what leaving the field out means (schema_test.go).
	Value  any
	Doc    string // one line, for every generated document; {key} names another field
	Python string // the Python keyword, when it is not Key
	// Section is the profile (TOML) section the field is written in, one of Sections;
	// "" for a runtime argument that no profile holds (name, policy_fn, handlers).
	Section string
	// Flag is the long option of `sandtrap run` when it is not Key with dashes
	// (fs_readable: "read"); Short its one-letter option, if any.
	Flag, Short string
	Node        string // the Node option name, when it is not Key in camelCase
	C           []CSetter
	// Unsupported, for a field sandtrap does not support yet: why, and what to use
	// instead. {key} names another field (each binding writes its own name for it).
	Unsupported string

	bind binding // how Decode reads it (supported fields)
}

// Sections are the sections of a profile (TOML), in the order of docs/cli.md: the
// seed API's grouping of its fields.
var Sections = []string{"config", "determinism", "program", "filesystem", "network", "http", "syscalls", "limits"}

// FlagName is the field's long option of `sandtrap run` (without the dashes).
func (f *Field) FlagName() string {
	if f.Flag != "" {
		return f.Flag
	}
	return strings.ReplaceAll(f.Key, "_", "-")
}

// Kind is how the field's value is read ("" for an unsupported field).
func (f *Field) Kind() Kind { return f.bind.kind }

// Supported reports whether sandtrap implements the field.
func (f *Field) Supported() bool { return f.Unsupported == "" }

// PythonName is the field's keyword argument in the Python binding.
func (f *Field) PythonName() string {
	if f.Python != "" {
		return f.Python
	}
	return f.Key
}

// NodeName is the field's option name in the Node binding.
func (f *Field) NodeName() string {
	if f.Node != "" {
		return f.Node
	}
	return CamelCase(f.Key)
}

// CamelCase turns a snake_case key into camelCase ("max_cpu_time" -> "maxCpuTime").
func CamelCase(s string) string {
	out := make([]byte, 0, len(s))
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' && i > 0:
			up = true
		case up && c >= 'a' && c <= 'z':
			out = append(out, c-'a'+'A')
			up = false
		default:
			out = append(out, c)
			up = false
		}
	}
	return string(out)
}

// binding reads one field of a policy map into a Policy.
type binding struct {
	kind Kind
	read func(r reader, key string, p *Policy)
}

// kindReader is a Kind with its typed reader; into binds it to a Policy field of
// the same Go type, so that a kind and its destination cannot disagree.
type kindReader[T any] struct {
	kind Kind
	read func(reader, string) T
}

func (k kindReader[T]) into(dst func(*Policy) *T) binding {
	return binding{kind: k.kind, read: func(r reader, key string, p *Policy) { *dst(p) = k.read(r, key) }}
}

var (
	paths     = kindReader[[]string]{KindPaths, reader.paths}
	path      = kindReader[string]{KindPath, reader.path}
	netRules  = kindReader[[]NetRule]{KindTargets, reader.netRules}
	ports     = kindReader[[]uint16]{KindPorts, reader.ports}
	boolean   = kindReader[bool]{KindBool, reader.boolean}
	size      = kindReader[int64]{KindSize, reader.size}
	count     = kindReader[int64]{KindCount, reader.count}
	seconds   = kindReader[float64]{KindSeconds, reader.seconds}
	id        = kindReader[*uint32]{KindID, reader.id}
	env       = kindReader[map[string]string]{KindEnv, reader.env}
	sysnames  = kindReader[[]string]{KindNames, reader.names}
	hostname  = kindReader[string]{KindHost, reader.hostname}
	httpRules = kindReader[[]HTTPRule]{KindHTTP, reader.httpRules}
	cpus      = kindReader[[]int]{KindCPUs, reader.cpus}
	optBool   = kindReader[*bool]{KindOptBool, reader.optBoolean}
	dirPath   = kindReader[string]{KindPath, reader.dirPath}
	branch    = kindReader[string]{KindBranch, reader.branch}
	httpAuth  = kindReader[[]HTTPAuth]{KindHTTPAuth, reader.httpAuth}
	seed      = kindReader[*uint64]{KindSeed, reader.seed}
	instant   = kindReader[*float64]{KindTime, reader.instant}
	gpus      = kindReader[*GPUs]{KindGPUs, reader.gpus}
	prots     = kindReader[[]string]{KindProt, reader.protections}
	mounts    = kindReader[map[string]string]{KindMounts, reader.mounts}
	limit0    = kindReader[int64]{KindCount, reader.limitOrNone}
)

// degrade binds allow_degraded: a boolean, or the protections it names.
var degrade = binding{kind: KindDegrade, read: func(r reader, key string, p *Policy) {
	p.AllowDegraded, p.DegradedProtections = r.degrade(key)
}}

// Default values (Field.Value).
var (
	none      any = nil
	emptyList     = []any{}
	emptyMap      = map[string]any{}
)

func str(name, param, doc string) CSetter { return CSetter{name, "const char *" + param, CString, doc} }

// Schema is every policy field, in the order of docs/protocol.md.
var Schema = []Field{
	{Key: "fs_readable", Value: emptyList, Section: "filesystem", Flag: "read", Short: "r", Default: "[]", Doc: "paths (files or directories) readable and executable; they must exist (a relative path resolves against the working directory when the sandbox is built)",
		C: []CSetter{str("fs_readable", "path", "")}, bind: paths.into(func(p *Policy) *[]string { return &p.FSReadable })},
	{Key: "fs_writable", Value: emptyList, Section: "filesystem", Flag: "write", Short: "w", Default: "[]", Doc: "paths readable, writable, executable, creatable, removable; they must exist (relative: as {fs_readable})",
		C: []CSetter{str("fs_writable", "path", "")}, bind: paths.into(func(p *Policy) *[]string { return &p.FSWritable })},
	{Key: "fs_denied", Value: emptyList, Section: "filesystem", Flag: "deny", Default: "[]", Doc: "paths inside allowed trees that stay denied (see docs/security.md)",
		C: []CSetter{str("fs_denied", "path", "")}, bind: paths.into(func(p *Policy) *[]string { return &p.FSDenied })},
	{Key: "net_allow", Value: emptyList, Section: "network", Default: "[]", Doc: "where sockets may connect and send: `443`, `\":443\"`, `\"api.example.com:443\"`, `\"10.0.0.0/8:22,443\"`, `\"[::1]:8080\"`, `\"udp://1.1.1.1:53\"`, `\"icmp://8.8.8.8\"`, `\"*\"` (host names resolved at build)",
		C:    []CSetter{str("net_allow", "target", "Where sockets may connect and send, one rule per call: \"443\", \":443\", \"api.example.com:443\", \"10.0.0.0/8:22,443\", \"[::1]:8080\", \"udp://1.1.1.1:53\", \"icmp://8.8.8.8\", \"*\". Host names are resolved when the sandbox is built.")},
		bind: netRules.into(func(p *Policy) *[]NetRule { return &p.NetAllow })},
	{Key: "net_deny", Value: emptyList, Section: "network", Default: "[]", Doc: "or where they may not (everything else may), in the same grammar; not with an allow list",
		C:    []CSetter{str("net_deny", "target", "Where sockets may not connect or send (everything else may); not together with net_allow.")},
		bind: netRules.into(func(p *Policy) *[]NetRule { return &p.NetDeny })},
	{Key: "net_allow_bind", Value: emptyList, Section: "network", Default: "[]", Doc: "TCP ports that may be bound: `8080`, `\"8000-8005\"`",
		C: []CSetter{{"net_allow_bind", "uint16_t port", CU64, "TCP bind: one port."},
			str("net_allow_bind_str", "ports", "TCP bind: a port or a range, \"8000-8005\".")},
		bind: ports.into(func(p *Policy) *[]uint16 { return &p.NetAllowBind })},
	{Key: "net_allow_udp", Value: false, Section: "network", Default: "false", Doc: "UDP to any host and port",
		C: []CSetter{{"net_allow_udp", "int allow", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.NetAllowUDP })},
	{Key: "net_allow_unix", Value: false, Section: "network", Default: "false", Doc: "allow `socket(AF_UNIX)` (pathname sockets; abstract ones stay scoped)",
		C: []CSetter{{"net_allow_unix", "int allow", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.NetAllowUnix })},
	{Key: "port_remap", Value: false, Section: "network", Default: "false", Doc: "binds of the {net_allow_bind} ports (virtual) land on real ports of the sandbox's own: the same when free and unprivileged, else ephemeral (`ports` op); getsockname answers the virtual port, a connect to a loopback virtual port reaches the real one",
		C: []CSetter{{"port_remap", "int remap", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.PortRemap })},
	{Key: "max_memory", Value: none, Section: "limits", Flag: "memory", Short: "m", Default: "none", Doc: "bytes for the whole process tree (`\"256M\"`): memory cgroup, else RLIMIT_AS per process",
		C: []CSetter{{"max_memory", "uint64_t bytes", CU64, "Bytes of memory for the whole process tree: memory cgroup, else RLIMIT_AS per process."}}, bind: size.into(func(p *Policy) *int64 { return &p.MaxMemory })},
	{Key: "max_processes", Value: int64(DefaultMaxProcesses), Section: "limits", Flag: "processes", Short: "P", Default: "64", Doc: "tasks (processes and threads) in the sandbox at once: pids cgroup, else RLIMIT_NPROC (non-root); `0`: no limit. Unset, the default 64 applies where the kernel can enforce it and is reported degraded where it cannot (a value given fails closed there)",
		C: []CSetter{{"max_processes", "uint32_t n", CU64, ""}}, bind: limit0.into(func(p *Policy) *int64 { return &p.MaxProcesses })},
	{Key: "max_open_files", Value: none, Section: "limits", Flag: "open-files", Default: "none", Doc: "RLIMIT_NOFILE per process",
		C: []CSetter{{"max_open_files", "uint32_t n", CU64, ""}}, bind: count.into(func(p *Policy) *int64 { return &p.MaxOpenFiles })},
	{Key: "max_disk", Value: none, Section: "limits", Flag: "disk", Default: "none", Doc: "RLIMIT_FSIZE: the largest file the run may write (`\"1G\"`)",
		C: []CSetter{{"max_disk", "uint64_t bytes", CU64, "RLIMIT_FSIZE: the largest file the run may write, in bytes."}}, bind: size.into(func(p *Policy) *int64 { return &p.MaxDisk })},
	{Key: "max_cpu", Value: none, Section: "limits", Flag: "cpu", Default: "none", Doc: "percent of one CPU, throttled (cpu cgroup): 50, 200",
		C: []CSetter{{"max_cpu", "uint32_t percent", CU64, ""}}, bind: count.into(func(p *Policy) *int64 { return &p.MaxCPU })},
	{Key: "max_cpu_time", Value: none, Section: "limits", Flag: "cpu-time", Default: "none", Doc: "CPU seconds for the whole process tree, then it is killed",
		C:    []CSetter{{"max_cpu_time_ms", "uint64_t ms", CMillis, "CPU time for the whole process tree, in milliseconds, then it is killed."}},
		bind: seconds.into(func(p *Policy) *float64 { return &p.MaxCPUTime })},
	{Key: "timeout", Value: none, Section: "limits", Flag: "timeout", Short: "t", Default: "none", Doc: "default wall-clock seconds of a run",
		C:    []CSetter{{"timeout_ms", "uint64_t ms", CMillis, "Default wall-clock timeout of a run, in milliseconds."}},
		bind: seconds.into(func(p *Policy) *float64 { return &p.Timeout })},
	{Key: "max_output", Value: int64(DefaultMaxOutput), Section: "limits", Default: "16 MiB", Doc: "bytes kept of each of stdout and stderr; the rest is drained and dropped",
		C: []CSetter{{"max_output", "uint64_t bytes", CU64, "Bytes kept of each of stdout and stderr (default 16 MiB); the rest is drained and dropped."}}, bind: size.into(func(p *Policy) *int64 { return &p.MaxOutput })},
	{Key: "env", Value: emptyMap, Section: "program", Flag: "env", Short: "e", Default: "{}", Doc: "variables set for the program",
		C: []CSetter{{"env", "const char *name, const char *value", CEnv, "Sets one variable for the program."}}, bind: env.into(func(p *Policy) *map[string]string { return &p.Env })},
	{Key: "clean_env", Value: false, Section: "program", Default: "false", Doc: "start from an empty environment (PATH set to the system default)",
		C: []CSetter{{"clean_env", "int clean", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.CleanEnv })},
	{Key: "cwd", Value: none, Section: "program", Default: "inherited", Doc: "working directory (absolute)",
		C: []CSetter{str("cwd", "path", "")}, bind: path.into(func(p *Policy) *string { return &p.Cwd })},
	{Key: "uid", Value: none, Section: "program", Default: "none", Doc: "run the program as this user (the host must be root; give {gid} too)",
		C:    []CSetter{{"ids", "uint32_t uid, uint32_t gid", CIDs, "Run the program as uid/gid (the host must be root)."}},
		bind: id.into(func(p *Policy) **uint32 { return &p.UID })},
	{Key: "gid", Value: none, Section: "program", Default: "none", Doc: "run the program as this group (with {uid})",
		C: []CSetter{{"ids", "uint32_t uid, uint32_t gid", CIDs, ""}}, bind: id.into(func(p *Policy) **uint32 { return &p.GID })},
	{Key: "extra_allow_syscalls", Value: emptyList, Section: "syscalls", Flag: "allow-syscall", Default: "[]", Doc: "syscall names removed from the deny list",
		C: []CSetter{str("extra_allow_syscall", "name", "")}, bind: sysnames.into(func(p *Policy) *[]string { return &p.ExtraAllowSyscalls })},
	{Key: "extra_deny_syscalls", Value: emptyList, Section: "syscalls", Flag: "deny-syscall", Default: "[]", Doc: "syscall names answered with EPERM",
		C: []CSetter{str("extra_deny_syscall", "name", "")}, bind: sysnames.into(func(p *Policy) *[]string { return &p.ExtraDenySyscalls })},
	{Key: "name", Value: none, Section: "program", Flag: "hostname", Default: "none", Doc: "the sandbox's hostname (`uname -n`), in a UTS namespace of its own: 1-64 letters, digits, `-` and `.`",
		C: []CSetter{str("name", "hostname", "")}, bind: hostname.into(func(p *Policy) *string { return &p.Name })},
	{Key: "workdir", Value: none, Section: "filesystem", Default: "none", Doc: "a directory seen copy-on-write: each run's writes under it land in a layer of the run's own (a tmpfs, sized {max_disk}), listed as the result's `changes`, then committed or discarded ({on_exit}, {on_error}); relative: as {fs_readable}",
		C: []CSetter{str("workdir", "path", "")}, bind: dirPath.into(func(p *Policy) *string { return &p.Workdir })},
	{Key: "fs_storage", Value: none, Section: "config", Default: "none (a tmpfs per run)", Doc: "with {workdir}: a directory where each run's copy-on-write layer is kept on disk instead of in a tmpfs, as `layer-<16 hex digits>/upper` (the run's changes, in overlayfs's upper-layer format) and `layer-…/work`; removed when the run's changes are committed or aborted, left there when they are kept past the sandbox's close; not with {max_disk} (its quota is the tmpfs's size); relative: as {fs_readable}",
		C: []CSetter{str("fs_storage", "path", "")}, bind: dirPath.into(func(p *Policy) *string { return &p.FSStorage })},
	{Key: "on_exit", Value: BranchCommit, Section: "filesystem", Default: "\"commit\"", Doc: "with {workdir}: what becomes of a successful run's changes: `\"commit\"` (applied to the workdir, file by file), `\"abort\"` (discarded) or `\"keep\"` (held for the `commit`/`abort` ops)",
		C: []CSetter{str("on_exit", "action", "With workdir: \"commit\", \"abort\" or \"keep\" for a successful run's changes.")}, bind: branch.into(func(p *Policy) *string { return &p.OnExit })},
	{Key: "on_error", Value: BranchAbort, Section: "filesystem", Default: "\"abort\"", Doc: "with {workdir}: the same for a run that failed (non-zero exit, signal, timeout, any error)",
		C: []CSetter{str("on_error", "action", "With workdir: \"commit\", \"abort\" or \"keep\" for a failed run's changes.")}, bind: branch.into(func(p *Policy) *string { return &p.OnError })},
	{Key: "chroot", Value: none, Section: "filesystem", Default: "none", Doc: "a directory of the host that is the run's root (with its own mounts: {fs_mount}, a minimal /dev with a /dev/pts and a /dev/shm of the run's own (a tmpfs of {max_disk} bytes, else 64 MiB), the run's /proc); every other path of the policy ({fs_readable}, {fs_writable}, {fs_denied}, {cwd}) is then a path inside it; relative: as {fs_readable}",
		C: []CSetter{str("chroot", "path", "")}, bind: dirPath.into(func(p *Policy) *string { return &p.Chroot })},
	{Key: "fs_mount", Value: emptyMap, Section: "filesystem", Default: "{}", Doc: "with {chroot}: host directories (or files) mounted at paths of the chroot, readable and writable (a mount is a grant), as a map of the path inside to the host path; the mount point must exist in the chroot",
		C: []CSetter{{"fs_mount", "const char *inside, const char *host", CMount, "With chroot: mounts the host path at a path inside the chroot, readable and writable (a grant)."}}, bind: mounts.into(func(p *Policy) *map[string]string { return &p.FSMount })},
	{Key: "fs_mount_ro", Value: emptyMap, Section: "filesystem", Default: "{}", Doc: "with {chroot}: the same, read-only: the mount itself is read-only (writes fail with EROFS whatever {fs_writable} says)",
		C: []CSetter{{"fs_mount_ro", "const char *inside, const char *host", CMount, "With chroot: mounts the host path at a path inside the chroot, read-only (EROFS)."}}, bind: mounts.into(func(p *Policy) *map[string]string { return &p.FSMountRO })},
	{Key: "no_randomize_memory", Value: false, Section: "determinism", Default: "false", Doc: "no address-space layout randomization in the run (`personality(ADDR_NO_RANDOMIZE)`, set by the engine for every process of it; the program may clear it, not set others)",
		C: []CSetter{{"no_randomize_memory", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.NoRandomizeMemory })},
	{Key: "random_seed", Value: none, Section: "determinism", Default: "none", Doc: "`getrandom`, reads of `/dev/urandom` and `/dev/random`, and each exec'd program's `AT_RANDOM` bytes come from an AES-256-CTR stream keyed by this integer (0 to 2^62): one stream per process, named by its pid in the run's pid namespace (see docs/security.md, \"Determinism\")",
		C: []CSetter{{"random_seed", "uint64_t seed", CU64, ""}}, bind: seed.into(func(p *Policy) **uint64 { return &p.RandomSeed })},
	{Key: "time_start", Value: none, Section: "determinism", Default: "none", Doc: "the run's wall clock (`CLOCK_REALTIME`, `gettimeofday`, `time`, also through the vDSO) starts at this instant and advances: an ISO-8601 string (`\"2000-01-01T00:00:00Z\"`; no zone: UTC) or Unix seconds",
		C: []CSetter{str("time_start", "instant", "The run's wall clock starts at this instant: ISO-8601 (\"2000-01-01T00:00:00Z\") or Unix seconds (\"946684800\").")}, bind: instant.into(func(p *Policy) **float64 { return &p.TimeStart })},
	{Key: "deterministic_dirs", Value: false, Section: "determinism", Default: "false", Doc: "directory listings (`getdents64`) in byte order of the names, the same on every run",
		C: []CSetter{{"deterministic_dirs", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.DeterministicDirs })},
	{Key: "no_huge_pages", Value: false, Section: "program", Default: "false", Doc: "no transparent huge pages for the run's memory (`PR_SET_THP_DISABLE`)",
		C: []CSetter{{"no_huge_pages", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.NoHugePages })},
	{Key: "no_coredump", Value: none, Section: "program", Default: "none (core dumps off)", Doc: "`false` lets the run dump core (refused when the host's `core_pattern` pipes cores to a program, or writes them outside {fs_writable}); `true` or unset: no core dumps",
		C: []CSetter{{"no_coredump", "int on", CBool, ""}}, bind: optBool.into(func(p *Policy) **bool { return &p.NoCoredump })},
	{Key: "no_supervisor", Value: false, Section: "program", Default: "false", Doc: "no syscall supervisor: Landlock and a deny-only seccomp filter alone; what the supervisor would judge is refused (file locks, `inotify_add_watch`), and the fields that need it are refused ({net_allow} by host or address, {net_deny}, {port_remap}, {http_allow}, handlers)",
		C: []CSetter{{"no_supervisor", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.NoSupervisor })},
	{Key: "cpu_cores", Value: emptyList, Section: "limits", Default: "[]", Doc: "the CPUs the run may use (numbers and ranges: `0`, `\"2-3\"`); the run cannot widen it",
		C: []CSetter{{"cpu_core", "unsigned int cpu", CU64, "One CPU the run may use."}}, bind: cpus.into(func(p *Policy) *[]int { return &p.CPUCores })},
	{Key: "num_cpus", Value: none, Section: "limits", Default: "none", Doc: "the number of CPUs the run sees and may use: the first N of those it may use ({cpu_cores}, or the host's), in its affinity, `/sys/devices/system/cpu/online` and `/proc/cpuinfo`; no more than it may use",
		C: []CSetter{{"num_cpus", "uint32_t n", CU64, ""}}, bind: count.into(func(p *Policy) *int64 { return &p.NumCPUs })},
	{Key: "gpu_devices", Value: none, Section: "limits", Default: "none", Doc: "the NVIDIA GPUs the run may open, `\"all\"` or indices (`[0, \"2-3\"]`): `/dev/nvidiaN` of those and the driver's control nodes, read-write; every other `/dev/nvidia*` node is denied (Landlock), even inside a granted tree",
		C: []CSetter{{"gpu_device", "unsigned int index", CU64, "One GPU the run may open (/dev/nvidiaN)."},
			str("gpu_devices_str", "spec", "GPUs the run may open: \"all\", an index or a range, \"0-1\".")},
		bind: gpus.into(func(p *Policy) **GPUs { return &p.GPUDevices })},
	{Key: "allow_degraded", Value: false, Section: "config", Default: "false", Doc: "run even when a requested protection is unavailable: `true` for every one, or a list of the Landlock protections that may be left out (`[\"signal_scope\"]`: the others stay required); results say what was not applied",
		C: []CSetter{{"allow_degraded", "int allow", CBool, "Run even when a requested protection is unavailable (every one); results say what was not applied."},
			str("allow_degraded_protection", "protection", "Let one Landlock protection (a SANDTRAP_PROTECTION_* name) be left out where the kernel lacks it; the others stay required.")},
		bind: degrade},
	{Key: "disable", Value: emptyList, Section: "config", Default: "[]", Doc: "Landlock protections never applied, even where the kernel has them (`[\"fs_ioctl_dev\"]`); the report lists them as disabled",
		C:    []CSetter{str("disable", "protection", "Never apply one Landlock protection (a SANDTRAP_PROTECTION_* name), even where the kernel has it.")},
		bind: prots.into(func(p *Policy) *[]string { return &p.Disable })},

	{Key: "http_allow", Value: emptyList, Section: "http", Default: "[]", Doc: "HTTP requests the engine's proxy lets through, `\"METHOD host/path\"` with `*` wildcards (`\"POST api.openai.com/v1/chat/completions\"`); connects to the {http_ports} go to it; with an allow list, nothing else passes",
		C:    []CSetter{str("http_allow", "rule", "An HTTP request the proxy lets through, one rule per call: \"METHOD host/path\" with * wildcards (\"POST api.openai.com/v1/chat/completions\"). TCP connects to the HTTP ports go to the engine's proxy.")},
		bind: httpRules.into(func(p *Policy) *[]HTTPRule { return &p.HTTPAllow })},
	{Key: "http_deny", Value: emptyList, Section: "http", Default: "[]", Doc: "HTTP requests it refuses (checked before {http_allow}), in the same grammar (`\"* api.example.com/admin/*\"`)",
		C:    []CSetter{str("http_deny", "rule", "An HTTP request the proxy refuses (checked before the allow rules), in the same grammar (\"DELETE api.example.com\": every path).")},
		bind: httpRules.into(func(p *Policy) *[]HTTPRule { return &p.HTTPDeny })},
	{Key: "http_ports", Value: emptyList, Section: "http", Default: "[80, 443]", Doc: "TCP ports whose connects go to the proxy when HTTP rules are given (plain HTTP and TLS told apart by the first byte)",
		C: []CSetter{{"http_port", "uint16_t port", CU64, "A TCP port whose connects go to the HTTP proxy (default 80 and 443)."},
			str("http_ports_str", "ports", "HTTP proxy ports: a port or a range, \"8000-8005\".")},
		bind: ports.into(func(p *Policy) *[]uint16 { return &p.HTTPPorts })},

	{Key: "http_intercept", Value: false, Section: "http", Default: "false", Doc: "HTTPS interception: the proxy terminates the sandbox's TLS with certificates of a CA of its own (ephemeral, ECDSA P-256, its key only in the engine's memory; or {http_ca}), checks every request's method, host and path, and sends it on over TLS verified against the host's trust store; adds 443 to the {http_ports}",
		C: []CSetter{{"http_intercept", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.HTTPIntercept })},
	{Key: "http_ca", Value: none, Section: "http", Default: "none", Doc: "the interception CA's certificate (PEM file) instead of an ephemeral one; with {http_key}; implies {http_intercept}",
		C: []CSetter{str("http_ca", "path", "")}, bind: path.into(func(p *Policy) *string { return &p.HTTPCA })},
	{Key: "http_key", Value: none, Section: "http", Default: "none", Doc: "that CA's private key (PEM file: PKCS#8, EC or RSA), read when the sandbox is built",
		C: []CSetter{str("http_key", "path", "")}, bind: path.into(func(p *Policy) *string { return &p.HTTPKey })},
	{Key: "http_inject_ca", Value: emptyList, Section: "http", Default: "[]", Doc: "trust bundles (PEM files) the run sees with the interception CA appended (`\"/etc/ssl/certs/ca-certificates.crt\"`): a file of the sandbox's own laid over each in its view; the host's files are never changed",
		C: []CSetter{str("http_inject_ca", "path", "A trust bundle the run sees with the interception CA appended (the host file is not changed).")}, bind: paths.into(func(p *Policy) *[]string { return &p.HTTPInjectCA })},
	{Key: "http_ca_out", Value: none, Section: "http", Default: "none", Doc: "a path where the engine writes the interception CA's certificate (PEM) when the sandbox is built (for NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE and runtimes with their own lists)",
		C: []CSetter{str("http_ca_out", "path", "")}, bind: path.into(func(p *Policy) *string { return &p.HTTPCAOut })},
	{Key: "credentials", Value: emptyMap, Section: "http", Flag: "credential", Default: "{}", Doc: "secrets the proxy adds to requests, by name: \"env:VARIABLE\" (from {env}, where the bindings pass their current environment, else the engine's; the variable is removed from the run's environment) or \"file:/path\", read when the sandbox is built; never in the sandbox's environment, memory or files",
		C: []CSetter{{"credential", "const char *name, const char *source", CEnv, "A secret the proxy adds to requests: source \"env:VARIABLE\" or \"file:/path\"."}}, bind: env.into(func(p *Policy) *map[string]string { return &p.Credentials })},
	{Key: "http_auth", Value: emptyList, Section: "http", Default: "[]", Doc: "headers the proxy adds after the rule check: `\"POST api.openai.com/* bearer openai\"` (scheme `bearer`, `basic` with a `user:password` value, or `header:NAME`); the first rule that matches; over HTTPS to a verified upstream only (interception) unless {http_auth_plain}",
		C: []CSetter{str("http_auth", "rule", "A header the proxy adds: \"METHOD host/path SCHEME CREDENTIAL\" (SCHEME bearer, basic or header:NAME).")}, bind: httpAuth.into(func(p *Policy) *[]HTTPAuth { return &p.HTTPAuth })},
	{Key: "http_auth_plain", Value: false, Section: "http", Default: "false", Doc: "let {http_auth} add credentials to plain-HTTP requests too (anyone on the path can read them; the isolation report warns)",
		C: []CSetter{{"http_auth_plain", "int on", CBool, ""}}, bind: boolean.into(func(p *Policy) *bool { return &p.HTTPAuthPlain })},

	// Not supported yet (the seed API's full constructor).
	{Key: "policy_fn", Unsupported: "a host callable, not a policy value: bindings take it as Sandbox(policy_fn=...); over the C ABI send the run_handlers op"},
	{Key: "handlers", Unsupported: "handlers are given per run: run_with_handlers, or the run_handlers op"},
}

var byKey = func() map[string]*Field {
	m := make(map[string]*Field, len(Schema))
	for i := range Schema {
		m[Schema[i].Key] = &Schema[i]
	}
	return m
}()

// Lookup returns the field with msgpack key k, or nil.
func Lookup(k string) *Field { return byKey[k] }

// Fields lists the keys of every supported field, in schema order.
var Fields = func() []string {
	var out []string
	for i := range Schema {
		if Schema[i].Supported() {
			out = append(out, Schema[i].Key)
		}
	}
	return out
}()

// DocFor is the field's Doc with each {key} written by name.
func (f *Field) DocFor(name func(*Field) string) string { return expandRefs(f.Doc, name) }

// UnsupportedMessage is the problem reported for an unsupported field, with each
// {key} of the reason written by name (a binding's name for that field).
func (f *Field) UnsupportedMessage(name func(*Field) string) string {
	return "not supported by sandtrap yet: " + expandRefs(f.Unsupported, name)
}

// expandRefs replaces each {key} in s by name(Lookup(key)); an unknown key stays.
func expandRefs(s string, name func(*Field) string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '{' {
			if j := indexByte(s[i:], '}'); j > 0 {
				if f := Lookup(s[i+1 : i+j]); f != nil {
					out = append(out, name(f)...)
					i += j
					continue
				}
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// UnknownMessage is the problem reported for a field name that is not in the
// schema: "unknown field", with the nearest name of names when one is close.
func UnknownMessage(given string, names []string) string {
	if s := Suggest(given, names); s != "" {
		return "unknown field; did you mean " + s + "?"
	}
	return "unknown field"
}

// Suggest returns the name of names nearest to given (case-insensitive, ignoring
// underscores) when it is at most 1 + len/3 edits away (len: the name's, so
// normalised), the first in names on a tie; "" when none is that close. The
// Python binding sends unknown names to the engine; the Node binding implements
// the same rule for its own names (lib/options.js).
func Suggest(given string, names []string) string {
	norm := func(s string) string {
		out := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c == '_' {
				continue
			}
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			out = append(out, c)
		}
		return string(out)
	}
	g := norm(given)
	best, bestD := "", -1
	for _, n := range names {
		nn := norm(n)
		if d := editDistance(g, nn); d <= 1+len(nn)/3 && (bestD < 0 || d < bestD) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
