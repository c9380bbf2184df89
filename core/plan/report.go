package plan

import (
	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/landlock"
)

// Isolation is what took effect for a run, protection by protection.
type Isolation struct {
	Landlock *landlock.Report `msgpack:"landlock"` // nil: not applied
	// Protections: each Landlock protection (policy.Protections) and what became
	// of it: enforced, degraded, disabled or not_needed
	Protections    map[string]string  `msgpack:"protections"`
	Seccomp        *SeccompReport     `msgpack:"seccomp"` // nil: not applied
	NoNewPrivs     bool               `msgpack:"no_new_privs"`
	Capabilities   string             `msgpack:"capabilities"` // "dropped" | "none held"
	PidNamespace   bool               `msgpack:"pid_namespace"`
	UserNamespace  bool               `msgpack:"user_namespace"`    // the sandbox's own (root hosts too)
	MountNamespace bool               `msgpack:"mount_namespace"`   // the sandbox's own, with View
	IPCNamespace   bool               `msgpack:"ipc_namespace"`     // each run's own
	View           []fsview.Mount     `msgpack:"view,omitempty"`    // how the view presents each path (everything else: read-only)
	Workdir        string             `msgpack:"workdir,omitempty"` // the copy-on-write workdir (absolute): each run's writes under it land in a tmpfs of its own
	Spawn          string             `msgpack:"spawn,omitempty"`   // template forks: "allowed" or "refused" (new processes and programs)
	Net            *NetReport         `msgpack:"net"`
	Hostname       string             `msgpack:"hostname,omitempty"` // the sandbox's own (name), in a UTS namespace of its own
	GPU            *GPUReport         `msgpack:"gpu,omitempty"`      // gpu_devices (place.go)
	TreeKill       string             `msgpack:"tree_kill"`          // pid_namespace | cgroup | process_group
	Cgroup         string             `msgpack:"cgroup"`             // "" | cgroup_v1 | cgroup_v2
	UID            *uint32            `msgpack:"uid,omitempty"`
	GID            *uint32            `msgpack:"gid,omitempty"`
	Limits         map[string]Limit   `msgpack:"limits"`
	Process        ProcessReport      `msgpack:"process"`
	Determinism    *DeterminismReport `msgpack:"determinism,omitempty"` // random_seed, time_start, deterministic_dirs (determinism.go)
	Degraded       []string           `msgpack:"degraded"`              // asked for, weaker than asked
	NotApplied     []string           `msgpack:"not_applied,omitempty"` // hardening this kernel lacks
	Disabled       []string           `msgpack:"test_disabled,omitempty"`
}

// SeccompReport describes the loaded filter.
type SeccompReport struct {
	Enforced    bool     `msgpack:"enforced"`
	Action      string   `msgpack:"action"`
	Denied      []string `msgpack:"denied"`
	Supervised  []string `msgpack:"supervised,omitempty"` // handed to the supervisor (core/supervise)
	Layer       []string `msgpack:"layer,omitempty"`      // a template fork's own layer: refused there too
	Unreviewed  string   `msgpack:"unreviewed"`           // syscalls newer than this version: ENOSYS
	ForeignArch string   `msgpack:"foreign_arch"`
	InetSockets bool     `msgpack:"inet_sockets"`
	UDP         bool     `msgpack:"udp"`
	ICMP        bool     `msgpack:"icmp"`
	UnixSockets bool     `msgpack:"unix_sockets"`
	// NoSupervisor: no_supervisor: nothing is handed on; Refused lists the calls a
	// supervisor would have judged, which the filter refuses instead (EPERM)
	NoSupervisor bool     `msgpack:"no_supervisor,omitempty"`
	Refused      []string `msgpack:"refused,omitempty"`
}

// ProcessReport is what every process of the run inherits of the policy's process
// knobs (knobs.go).
type ProcessReport struct {
	ASLR      bool     `msgpack:"aslr"`                // address-space layout randomization (off: no_randomize_memory)
	HugePages bool     `msgpack:"huge_pages"`          // transparent huge pages (off: no_huge_pages)
	CoreDumps string   `msgpack:"core_dumps"`          // "off", or the core_pattern they are written by
	CPUCores  []int    `msgpack:"cpu_cores,omitempty"` // the CPUs the run may use (cpu_cores)
	CPUVia    string   `msgpack:"cpu_via,omitempty"`   // "sched_setaffinity" (then refused to the program) or "cpuset_cgroup_v1|2" (and the affinity)
	NumCPUs   int      `msgpack:"num_cpus,omitempty"`  // num_cpus: the CPUs the run sees
	CPUFiles  []string `msgpack:"cpu_files,omitempty"` // the files of the view that show them (else the host's)
}

// Limit is one resource limit and the mechanism enforcing it.
type Limit struct {
	Value   int64   `msgpack:"value,omitempty"`
	Seconds float64 `msgpack:"seconds,omitempty"`
	Via     string  `msgpack:"via"`
	Note    string  `msgpack:"note,omitempty"`
}
