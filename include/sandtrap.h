/*
 * sandtrap.h — the C interface of libsandtrap.so.
 *
 * sandtrap runs commands (and Python code) confined by Landlock, seccomp, a pid
 * namespace and resource limits. This header is the specification of the C ABI;
 * docs/protocol.md documents every msgpack key of requests and responses.
 *
 * Conventions (libgit2 / SQLite style):
 *  - Objects are opaque handles; each has a _free function that accepts NULL.
 *  - Functions return int status codes: SANDTRAP_OK (0) or a stable negative
 *    SANDTRAP_E_* code. Where a function takes `sandtrap_error **err`, a failure
 *    stores an error there: its status, kind, message and, for a validation
 *    failure, every problem as a (field, message) pair (see "Errors"; free it with
 *    sandtrap_error_free). Pass NULL to ignore it.
 *  - Numbers have the type of what they count: sizes and counts are unsigned
 *    integers, durations are uint64_t milliseconds (setters named _ms), booleans
 *    are int (0 false, anything else true).
 *  - Buffers and strings returned by the library are freed only by
 *    sandtrap_buffer_free / sandtrap_string_free.
 *  - Every function may be called from many threads at once. A sandbox handle may
 *    serve many concurrent sandtrap_sandbox_exec calls.
 *  - After fork(2) in a process that loaded the library, the child must not call
 *    into it: every function then returns SANDTRAP_E_FORKED_CHILD without running.
 *  - The library never writes to stdio and ignores SIGPIPE (a host that had SIGPIPE
 *    at its default disposition sees EPIPE instead of dying on a broken pipe).
 */
#ifndef SANDTRAP_H
#define SANDTRAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header's ABI; compare with sandtrap_abi_version().
 * 2: errors are sandtrap_error handles with every problem (field, message), not
 *    strings (sandtrap_sandbox_builder_build, sandtrap_sandbox_new,
 *    sandtrap_confine); durations are integer milliseconds (..._timeout_ms,
 *    ..._max_cpu_time_ms replace ..._timeout and ..._max_cpu_time, which took a
 *    double; sandtrap_run_options version 2 has timeout_ms); every numeric setter
 *    passes its integer to the engine exactly.
 * 1: the first release. */
#define SANDTRAP_ABI_VERSION 2

/* Status codes. Stable: new codes may be added, values never change. */
#define SANDTRAP_OK 0
#define SANDTRAP_E_INVALID_ARGUMENT (-1)      /* NULL handle, bad pointer/length */
#define SANDTRAP_E_INVALID_REQUEST (-2)       /* malformed msgpack, unknown keys, bad values */
#define SANDTRAP_E_INVALID_POLICY (-3)        /* policy fails validation (every problem listed) */
#define SANDTRAP_E_ISOLATION_UNAVAILABLE (-4) /* a requested protection cannot be applied */
#define SANDTRAP_E_NOT_FOUND (-5)             /* program not found */
#define SANDTRAP_E_SPAWN_FAILED (-6)          /* the child could not be started */
#define SANDTRAP_E_FORKED_CHILD (-7)          /* called in a child forked from the host */
#define SANDTRAP_E_CLOSED (-8)                /* handle already closed */
#define SANDTRAP_E_INTERNAL (-99)             /* a bug: please report */

typedef struct sandtrap_sandbox_builder sandtrap_sandbox_builder;
typedef struct sandtrap_sandbox sandtrap_sandbox;

/* The ABI version of the loaded library (SANDTRAP_ABI_VERSION it was built with). */
int sandtrap_abi_version(void);

/* The library version, e.g. "0.1.0". Static storage: do not free. */
const char *sandtrap_version(void);

/* A short static name for a status code ("ok", "invalid_policy", …). */
const char *sandtrap_status_name(int status);

/* Free strings and buffers returned by the library. NULL is a no-op. */
void sandtrap_string_free(char *s);
void sandtrap_buffer_free(uint8_t *buf);

/* What this kernel and process can enforce, as a msgpack map (docs/protocol.md,
 * "probe"): Landlock ABI, seccomp, namespaces, cgroups, root. */
int sandtrap_probe(uint8_t **out, size_t *out_len);

/* Profiles: TOML policies in the seed API's sections (docs/cli.md, "Profiles";
 * docs/protocol.md, "profiles"). req is a msgpack map, either {"load": NAME_OR_PATH}
 * (a saved profile, $XDG_CONFIG_HOME/sandtrap/profiles/NAME.toml, or a file: a
 * PATH has a '/' or ends in .toml) or {"dict": SECTIONS, "source": TEXT} (a profile
 * given as a map of sections of keys; source names it in problems). *out is a
 * msgpack map: {"name", "path", "profile" (the sections as read), "policy" (the
 * policy map, for sandtrap_sandbox_new), "argv" ([program] exec and args, or nil)};
 * or {"error": {"kind", "message", "problems": [{"file", "line", "key", "field",
 * "message"}]}} with SANDTRAP_E_INVALID_POLICY (every problem of the profile),
 * SANDTRAP_E_NOT_FOUND (no such profile or file) or SANDTRAP_E_INVALID_REQUEST.
 * Free *out with sandtrap_buffer_free. */
int sandtrap_profile(const uint8_t *req, size_t req_len, uint8_t **out, size_t *out_len);

/* ---- Errors -----------------------------------------------------------------
 * What a failed call that takes `sandtrap_error **err` reports. A validation
 * failure (SANDTRAP_E_INVALID_POLICY, SANDTRAP_E_INVALID_REQUEST) lists every
 * problem at once, each the field it is about (a policy key of docs/protocol.md,
 * "" when it is about the input as a whole) and a message that does not repeat the
 * field: the same list as the "problems" of a msgpack response's "error". The
 * message of the error itself is for people ("invalid policy (2 problems): ...").
 *
 *   sandtrap_error *err = NULL;
 *   if (sandtrap_sandbox_builder_build(b, &sb, &err) != SANDTRAP_OK) {
 *       size_t i, n = sandtrap_error_problem_count(err);
 *       for (i = 0; i < n; i++)
 *           fprintf(stderr, "%s: %s\n", sandtrap_error_problem_field(err, i),
 *                   sandtrap_error_problem_message(err, i));
 *       sandtrap_error_free(err);
 *   }
 *
 * Accessors accept NULL (then 0 or NULL). Strings stay valid until
 * sandtrap_error_free, which accepts NULL. */
typedef struct sandtrap_error sandtrap_error;
/* The status the call returned (SANDTRAP_OK for NULL). */
int sandtrap_error_status(const sandtrap_error *e);
/* The status's stable name ("invalid_policy", …), and a message for people. */
const char *sandtrap_error_kind(const sandtrap_error *e);
const char *sandtrap_error_message(const sandtrap_error *e);
/* The problems of a validation failure (0 for other failures), and problem i's
 * field and message (NULL when i is out of range). */
size_t sandtrap_error_problem_count(const sandtrap_error *e);
const char *sandtrap_error_problem_field(const sandtrap_error *e, size_t i);
const char *sandtrap_error_problem_message(const sandtrap_error *e, size_t i);
void sandtrap_error_free(sandtrap_error *e);

/* ---- Building a policy ------------------------------------------------------
 * A builder collects fields; sandtrap_sandbox_builder_build validates them all at
 * once and returns a sandbox. There is one setter per policy field of
 * docs/protocol.md (uid and gid share sandtrap_sandbox_builder_ids). Setters only
 * record: they fail only with SANDTRAP_E_INVALID_ARGUMENT (a NULL builder or
 * string) or SANDTRAP_E_FORKED_CHILD; every value is judged at build time. Setters
 * of list fields (paths, targets, ports, syscall names) append; env sets one
 * variable; the others set the field, a later call replacing the value. Leave a
 * setter uncalled for "not set": not granted, no limit. */
sandtrap_sandbox_builder *sandtrap_sandbox_builder_new(void);
void sandtrap_sandbox_builder_free(sandtrap_sandbox_builder *b);

/* BEGIN generated by core/policy/gen from core/policy/schema.go (go generate ./core/policy); do not edit */
/* The Landlock protections that allow_degraded_protection and disable name
 * (docs/sandbox-reference.md, "Protections"), with the Landlock ABI each needs. */
#define SANDTRAP_PROTECTION_FS "fs" /* ABI 1 */
#define SANDTRAP_PROTECTION_FS_REFER "fs_refer" /* ABI 2 */
#define SANDTRAP_PROTECTION_FS_TRUNCATE "fs_truncate" /* ABI 3 */
#define SANDTRAP_PROTECTION_NET_TCP "net_tcp" /* ABI 4 */
#define SANDTRAP_PROTECTION_FS_IOCTL_DEV "fs_ioctl_dev" /* ABI 5 */
#define SANDTRAP_PROTECTION_ABSTRACT_UNIX_SOCKET_SCOPE "abstract_unix_socket_scope" /* ABI 6 */
#define SANDTRAP_PROTECTION_SIGNAL_SCOPE "signal_scope" /* ABI 6 */
/* Paths (files or directories) readable and executable; they must exist (a
 * relative path resolves against the working directory when the sandbox is
 * built). */
int sandtrap_sandbox_builder_fs_readable(sandtrap_sandbox_builder *b, const char *path);
/* Paths readable, writable, executable, creatable, removable; they must exist
 * (relative: as fs_readable). */
int sandtrap_sandbox_builder_fs_writable(sandtrap_sandbox_builder *b, const char *path);
/* Paths inside allowed trees that stay denied (see docs/security.md). */
int sandtrap_sandbox_builder_fs_denied(sandtrap_sandbox_builder *b, const char *path);
/* Where sockets may connect and send, one rule per call: "443", ":443",
 * "api.example.com:443", "10.0.0.0/8:22,443", "[::1]:8080",
 * "udp://1.1.1.1:53", "icmp://8.8.8.8", "*". Host names are resolved when the
 * sandbox is built. */
int sandtrap_sandbox_builder_net_allow(sandtrap_sandbox_builder *b, const char *target);
/* Where sockets may not connect or send (everything else may); not together
 * with net_allow. */
int sandtrap_sandbox_builder_net_deny(sandtrap_sandbox_builder *b, const char *target);
/* TCP bind: one port. */
int sandtrap_sandbox_builder_net_allow_bind(sandtrap_sandbox_builder *b, uint16_t port);
/* TCP bind: a port or a range, "8000-8005". */
int sandtrap_sandbox_builder_net_allow_bind_str(sandtrap_sandbox_builder *b, const char *ports);
/* UDP to any host and port. */
int sandtrap_sandbox_builder_net_allow_udp(sandtrap_sandbox_builder *b, int allow);
/* Allow socket(AF_UNIX) (pathname sockets; abstract ones stay scoped). */
int sandtrap_sandbox_builder_net_allow_unix(sandtrap_sandbox_builder *b, int allow);
/* Binds of the net_allow_bind ports (virtual) land on real ports of the
 * sandbox's own: the same when free and unprivileged, else ephemeral (ports
 * op); getsockname answers the virtual port, a connect to a loopback virtual
 * port reaches the real one. */
int sandtrap_sandbox_builder_port_remap(sandtrap_sandbox_builder *b, int remap);
/* Bytes of memory for the whole process tree: memory cgroup, else RLIMIT_AS
 * per process. */
int sandtrap_sandbox_builder_max_memory(sandtrap_sandbox_builder *b, uint64_t bytes);
/* Tasks (processes and threads) in the sandbox at once: pids cgroup, else
 * RLIMIT_NPROC (non-root); 0: no limit. Unset, the default 64 applies where
 * the kernel can enforce it and is reported degraded where it cannot (a value
 * given fails closed there). */
int sandtrap_sandbox_builder_max_processes(sandtrap_sandbox_builder *b, uint32_t n);
/* RLIMIT_NOFILE per process. */
int sandtrap_sandbox_builder_max_open_files(sandtrap_sandbox_builder *b, uint32_t n);
/* RLIMIT_FSIZE: the largest file the run may write, in bytes. */
int sandtrap_sandbox_builder_max_disk(sandtrap_sandbox_builder *b, uint64_t bytes);
/* Percent of one CPU, throttled (cpu cgroup): 50, 200. */
int sandtrap_sandbox_builder_max_cpu(sandtrap_sandbox_builder *b, uint32_t percent);
/* CPU time for the whole process tree, in milliseconds, then it is killed. */
int sandtrap_sandbox_builder_max_cpu_time_ms(sandtrap_sandbox_builder *b, uint64_t ms);
/* Default wall-clock timeout of a run, in milliseconds. */
int sandtrap_sandbox_builder_timeout_ms(sandtrap_sandbox_builder *b, uint64_t ms);
/* Bytes kept of each of stdout and stderr (default 16 MiB); the rest is
 * drained and dropped. */
int sandtrap_sandbox_builder_max_output(sandtrap_sandbox_builder *b, uint64_t bytes);
/* Sets one variable for the program. */
int sandtrap_sandbox_builder_env(sandtrap_sandbox_builder *b, const char *name, const char *value);
/* Start from an empty environment (PATH set to the system default). */
int sandtrap_sandbox_builder_clean_env(sandtrap_sandbox_builder *b, int clean);
/* Working directory (absolute). */
int sandtrap_sandbox_builder_cwd(sandtrap_sandbox_builder *b, const char *path);
/* Run the program as uid/gid (the host must be root). */
int sandtrap_sandbox_builder_ids(sandtrap_sandbox_builder *b, uint32_t uid, uint32_t gid);
/* Syscall names removed from the deny list. */
int sandtrap_sandbox_builder_extra_allow_syscall(sandtrap_sandbox_builder *b, const char *name);
/* Syscall names answered with EPERM. */
int sandtrap_sandbox_builder_extra_deny_syscall(sandtrap_sandbox_builder *b, const char *name);
/* The sandbox's hostname (uname -n), in a UTS namespace of its own: 1-64
 * letters, digits, - and .. */
int sandtrap_sandbox_builder_name(sandtrap_sandbox_builder *b, const char *hostname);
/* A directory seen copy-on-write: each run's writes under it land in a layer
 * of the run's own (a tmpfs, sized max_disk), listed as the result's changes,
 * then committed or discarded (on_exit, on_error); relative: as fs_readable. */
int sandtrap_sandbox_builder_workdir(sandtrap_sandbox_builder *b, const char *path);
/* With workdir: a directory where each run's copy-on-write layer is kept on
 * disk instead of in a tmpfs, as layer-<16 hex digits>/upper (the run's
 * changes, in overlayfs's upper-layer format) and layer-…/work; removed when
 * the run's changes are committed or aborted, left there when they are kept
 * past the sandbox's close; not with max_disk (its quota is the tmpfs's size);
 * relative: as fs_readable. */
int sandtrap_sandbox_builder_fs_storage(sandtrap_sandbox_builder *b, const char *path);
/* With workdir: "commit", "abort" or "keep" for a successful run's changes. */
int sandtrap_sandbox_builder_on_exit(sandtrap_sandbox_builder *b, const char *action);
/* With workdir: "commit", "abort" or "keep" for a failed run's changes. */
int sandtrap_sandbox_builder_on_error(sandtrap_sandbox_builder *b, const char *action);
/* A directory of the host that is the run's root (with its own mounts:
 * fs_mount, a minimal /dev with a /dev/pts and a /dev/shm of the run's own (a
 * tmpfs of max_disk bytes, else 64 MiB), the run's /proc); every other path of
 * the policy (fs_readable, fs_writable, fs_denied, cwd) is then a path inside
 * it; relative: as fs_readable. */
int sandtrap_sandbox_builder_chroot(sandtrap_sandbox_builder *b, const char *path);
/* With chroot: mounts the host path at a path inside the chroot, readable and
 * writable (a grant). */
int sandtrap_sandbox_builder_fs_mount(sandtrap_sandbox_builder *b, const char *inside, const char *host);
/* With chroot: mounts the host path at a path inside the chroot, read-only
 * (EROFS). */
int sandtrap_sandbox_builder_fs_mount_ro(sandtrap_sandbox_builder *b, const char *inside, const char *host);
/* No address-space layout randomization in the run
 * (personality(ADDR_NO_RANDOMIZE), set by the engine for every process of it;
 * the program may clear it, not set others). */
int sandtrap_sandbox_builder_no_randomize_memory(sandtrap_sandbox_builder *b, int on);
/* Getrandom, reads of /dev/urandom and /dev/random, and each exec'd program's
 * AT_RANDOM bytes come from an AES-256-CTR stream keyed by this integer (0 to
 * 2^62): one stream per process, named by its pid in the run's pid namespace
 * (see docs/security.md, "Determinism"). */
int sandtrap_sandbox_builder_random_seed(sandtrap_sandbox_builder *b, uint64_t seed);
/* The run's wall clock starts at this instant: ISO-8601
 * ("2000-01-01T00:00:00Z") or Unix seconds ("946684800"). */
int sandtrap_sandbox_builder_time_start(sandtrap_sandbox_builder *b, const char *instant);
/* Directory listings (getdents64) in byte order of the names, the same on
 * every run. */
int sandtrap_sandbox_builder_deterministic_dirs(sandtrap_sandbox_builder *b, int on);
/* No transparent huge pages for the run's memory (PR_SET_THP_DISABLE). */
int sandtrap_sandbox_builder_no_huge_pages(sandtrap_sandbox_builder *b, int on);
/* False lets the run dump core (refused when the host's core_pattern pipes
 * cores to a program, or writes them outside fs_writable); true or unset: no
 * core dumps. */
int sandtrap_sandbox_builder_no_coredump(sandtrap_sandbox_builder *b, int on);
/* No syscall supervisor: Landlock and a deny-only seccomp filter alone; what
 * the supervisor would judge is refused (file locks, inotify_add_watch), and
 * the fields that need it are refused (net_allow by host or address, net_deny,
 * port_remap, http_allow, handlers). */
int sandtrap_sandbox_builder_no_supervisor(sandtrap_sandbox_builder *b, int on);
/* One CPU the run may use. */
int sandtrap_sandbox_builder_cpu_core(sandtrap_sandbox_builder *b, unsigned int cpu);
/* The number of CPUs the run sees and may use: the first N of those it may use
 * (cpu_cores, or the host's), in its affinity, /sys/devices/system/cpu/online
 * and /proc/cpuinfo; no more than it may use. */
int sandtrap_sandbox_builder_num_cpus(sandtrap_sandbox_builder *b, uint32_t n);
/* One GPU the run may open (/dev/nvidiaN). */
int sandtrap_sandbox_builder_gpu_device(sandtrap_sandbox_builder *b, unsigned int index);
/* GPUs the run may open: "all", an index or a range, "0-1". */
int sandtrap_sandbox_builder_gpu_devices_str(sandtrap_sandbox_builder *b, const char *spec);
/* Run even when a requested protection is unavailable (every one); results say
 * what was not applied. */
int sandtrap_sandbox_builder_allow_degraded(sandtrap_sandbox_builder *b, int allow);
/* Let one Landlock protection (a SANDTRAP_PROTECTION_* name) be left out where
 * the kernel lacks it; the others stay required. */
int sandtrap_sandbox_builder_allow_degraded_protection(sandtrap_sandbox_builder *b, const char *protection);
/* Never apply one Landlock protection (a SANDTRAP_PROTECTION_* name), even
 * where the kernel has it. */
int sandtrap_sandbox_builder_disable(sandtrap_sandbox_builder *b, const char *protection);
/* An HTTP request the proxy lets through, one rule per call: "METHOD
 * host/path" with * wildcards ("POST api.openai.com/v1/chat/completions"). TCP
 * connects to the HTTP ports go to the engine's proxy. */
int sandtrap_sandbox_builder_http_allow(sandtrap_sandbox_builder *b, const char *rule);
/* An HTTP request the proxy refuses (checked before the allow rules), in the
 * same grammar ("DELETE api.example.com": every path). */
int sandtrap_sandbox_builder_http_deny(sandtrap_sandbox_builder *b, const char *rule);
/* A TCP port whose connects go to the HTTP proxy (default 80 and 443). */
int sandtrap_sandbox_builder_http_port(sandtrap_sandbox_builder *b, uint16_t port);
/* HTTP proxy ports: a port or a range, "8000-8005". */
int sandtrap_sandbox_builder_http_ports_str(sandtrap_sandbox_builder *b, const char *ports);
/* HTTPS interception: the proxy terminates the sandbox's TLS with certificates
 * of a CA of its own (ephemeral, ECDSA P-256, its key only in the engine's
 * memory; or http_ca), checks every request's method, host and path, and sends
 * it on over TLS verified against the host's trust store; adds 443 to the
 * http_ports. */
int sandtrap_sandbox_builder_http_intercept(sandtrap_sandbox_builder *b, int on);
/* The interception CA's certificate (PEM file) instead of an ephemeral one;
 * with http_key; implies http_intercept. */
int sandtrap_sandbox_builder_http_ca(sandtrap_sandbox_builder *b, const char *path);
/* That CA's private key (PEM file: PKCS#8, EC or RSA), read when the sandbox
 * is built. */
int sandtrap_sandbox_builder_http_key(sandtrap_sandbox_builder *b, const char *path);
/* A trust bundle the run sees with the interception CA appended (the host file
 * is not changed). */
int sandtrap_sandbox_builder_http_inject_ca(sandtrap_sandbox_builder *b, const char *path);
/* A path where the engine writes the interception CA's certificate (PEM) when
 * the sandbox is built (for NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE and
 * runtimes with their own lists). */
int sandtrap_sandbox_builder_http_ca_out(sandtrap_sandbox_builder *b, const char *path);
/* A secret the proxy adds to requests: source "env:VARIABLE" or "file:/path". */
int sandtrap_sandbox_builder_credential(sandtrap_sandbox_builder *b, const char *name, const char *source);
/* A header the proxy adds: "METHOD host/path SCHEME CREDENTIAL" (SCHEME
 * bearer, basic or header:NAME). */
int sandtrap_sandbox_builder_http_auth(sandtrap_sandbox_builder *b, const char *rule);
/* Let http_auth add credentials to plain-HTTP requests too (anyone on the path
 * can read them; the isolation report warns). */
int sandtrap_sandbox_builder_http_auth_plain(sandtrap_sandbox_builder *b, int on);
/* END generated */

/* Validate and compile. On failure *out is NULL and *err (if err is not NULL) is
 * the error, listing every problem. The builder stays usable and must still be
 * freed. */
int sandtrap_sandbox_builder_build(const sandtrap_sandbox_builder *b, sandtrap_sandbox **out, sandtrap_error **err);

/* The same from one msgpack policy map (keys as in docs/protocol.md). */
int sandtrap_sandbox_new(const uint8_t *policy, size_t len, sandtrap_sandbox **out, sandtrap_error **err);

/* Free a sandbox. Runs in flight on other threads finish first. NULL is a no-op. */
void sandtrap_sandbox_free(sandtrap_sandbox *sb);

/* The sandbox's id, used to name it as a pipeline stage in another request. */
uint64_t sandtrap_sandbox_id(const sandtrap_sandbox *sb);

/* ---- Operations --------------------------------------------------------------
 * One msgpack request map in, one msgpack response map out (docs/protocol.md):
 * {"op": "run", "argv": [...], ...}, {"op": "pipeline", ...}, {"op": "isolation"}.
 * *resp is set whenever the return value is not SANDTRAP_E_INVALID_ARGUMENT or
 * SANDTRAP_E_FORKED_CHILD, even on failure: the response's "error" says why.
 * A run whose program fails, times out, is cancelled or hits a limit returns
 * SANDTRAP_OK: its fate is in the response. Blocks until the operation ends. */
int sandtrap_sandbox_exec(sandtrap_sandbox *sb, const uint8_t *req, size_t req_len,
                          uint8_t **resp, size_t *resp_len);

/* Kill every operation of sb started with request key "tag" == tag (every one when
 * tag is NULL). Their exec calls return with "cancelled". Returns how many were
 * cancelled (>= 0) or a negative status. */
int sandtrap_sandbox_cancel(sandtrap_sandbox *sb, const char *tag);

/* ---- Running a command without msgpack ------------------------------------
 * A typed form of the commonest operation, {"op": "run"}: run a command, then read
 * its exit code, stdout and stderr through accessors of an opaque result. msgpack
 * (sandtrap_sandbox_exec) stays the full protocol: per-run env and cwd, pipelines,
 * sessions, the isolation and usage reports.
 *
 *   const char *argv[] = {"echo", "hi", NULL};
 *   sandtrap_result *r = NULL;
 *   int rc = sandtrap_sandbox_run(sb, argv, NULL, &r);
 *   if (rc == SANDTRAP_OK) {
 *       size_t n;
 *       const uint8_t *out = sandtrap_result_stdout(r, &n);
 *       printf("exit %d: %.*s", sandtrap_result_exit_code(r), (int)n, (const char *)out);
 *   } else {
 *       printf("%s: %s\n", sandtrap_status_name(rc), sandtrap_result_error_message(r));
 *   }
 *   sandtrap_result_free(r);
 */
typedef struct sandtrap_result sandtrap_result;

/* Options of one run. Initialise with SANDTRAP_RUN_OPTIONS_INIT or
 * sandtrap_run_options_init, then set the fields you need: later versions of the
 * library only ever append fields, selected by `version`. */
typedef struct sandtrap_run_options {
	unsigned int version;      /* SANDTRAP_RUN_OPTIONS_VERSION */
	const uint8_t *stdin_data; /* the program's stdin (NULL with stdin_len 0: empty) */
	size_t stdin_len;
	uint64_t timeout_ms;       /* wall-clock milliseconds; 0: the policy's timeout */
	const char *tag;           /* NULL, or a name for sandtrap_sandbox_cancel */
	uint64_t max_output;       /* bytes kept of each of stdout and stderr; 0: the policy's */
} sandtrap_run_options;

/* 2 (ABI 2): timeout_ms replaced version 1's double timeout (seconds). */
#define SANDTRAP_RUN_OPTIONS_VERSION 2
#define SANDTRAP_RUN_OPTIONS_INIT {SANDTRAP_RUN_OPTIONS_VERSION, NULL, 0, 0, NULL, 0}

/* Fill *opts with the defaults of `version` (SANDTRAP_RUN_OPTIONS_VERSION).
 * SANDTRAP_E_INVALID_ARGUMENT for NULL or an unknown version. */
int sandtrap_run_options_init(sandtrap_run_options *opts, unsigned int version);

/* Run argv (NULL-terminated; argv[0] is looked up on the run's PATH) in sb with
 * opts (NULL: the defaults) and block until the run ends. The status is the one
 * sandtrap_sandbox_exec returns for the same {"op": "run"} request:
 *  - SANDTRAP_OK: the program ran, whatever its fate. It may have failed, been
 *    killed by a signal, timed out, been cancelled or hit a limit: read the result.
 *  - SANDTRAP_E_NOT_FOUND, _SPAWN_FAILED, _ISOLATION_UNAVAILABLE, _CLOSED,
 *    _INTERNAL: it did not run; the result's error kind and message say why.
 *  - SANDTRAP_E_INVALID_ARGUMENT (sb, argv or out NULL, argv empty or argv[0] "",
 *    an unknown opts->version, stdin_data NULL with stdin_len > 0, timeout_ms
 *    above 10^10 (the policy's bound of 10^7 seconds), max_output above INT64_MAX)
 *    and SANDTRAP_E_FORKED_CHILD: *out is
 *    set to NULL and nothing ran.
 * In every other case *out holds a result; free it with sandtrap_result_free. */
int sandtrap_sandbox_run(sandtrap_sandbox *sb, const char *const *argv,
                         const sandtrap_run_options *opts, sandtrap_result **out);

/* Free a result. NULL is a no-op; safe in a forked child. */
void sandtrap_result_free(sandtrap_result *r);

/* Accessors. Each accepts NULL (and then returns 0, -1 or NULL as noted). They
 * never enter the engine, so they are cheap and safe in a forked child. */
/* 1 when the program exited with status 0 and the run has no error, else 0. */
int sandtrap_result_success(const sandtrap_result *r);
/* The exit status (0-255), or -1 when the program did not exit: killed by a
 * signal (see sandtrap_result_signal), or never started. */
int sandtrap_result_exit_code(const sandtrap_result *r);
/* The signal that ended the program (e.g. 9 after a timeout), or 0. */
int sandtrap_result_signal(const sandtrap_result *r);
/* 1 when the run was ended by its timeout / cancelled (sandtrap_sandbox_cancel). */
int sandtrap_result_timed_out(const sandtrap_result *r);
int sandtrap_result_cancelled(const sandtrap_result *r);
/* What the program wrote, as bytes (they need not be text). The pointer stays
 * valid until sandtrap_result_free; the len bytes are followed by a NUL byte, so
 * text without NULs can be used as a C string. Never NULL; *len (when len is not
 * NULL) is set to the length, 0 for a NULL result. */
const uint8_t *sandtrap_result_stdout(const sandtrap_result *r, size_t *len);
const uint8_t *sandtrap_result_stderr(const sandtrap_result *r, size_t *len);
/* 1 when output beyond max_output was dropped. */
int sandtrap_result_stdout_truncated(const sandtrap_result *r);
int sandtrap_result_stderr_truncated(const sandtrap_result *r);
/* Why the engine stopped or could not start the run: a stable kind ("timeout",
 * "cancelled", "cpu_time_limit", "memory_limit", "not_found", "spawn_failed",
 * "isolation_unavailable", "closed", "internal"; docs/protocol.md) and a message
 * for people. NULL when there was no error (a program that merely exited non-zero
 * has none). Valid until sandtrap_result_free. */
const char *sandtrap_result_error_kind(const sandtrap_result *r);
const char *sandtrap_result_error_message(const sandtrap_result *r);
/* Why the run ended, the response's "reason": "exited" (see exit_code), "signaled"
 * (see signal), "killed" (its owner killed it), "timeout", "cancelled",
 * "memory_limit", "cpu_time_limit", or the kind that kept it from starting
 * ("not_found", "spawn_failed", "isolation_unavailable", "closed", "internal").
 * Never NULL for a result (NULL for NULL). Valid until sandtrap_result_free. */
const char *sandtrap_result_reason(const sandtrap_result *r);

/* One thing the run was refused (the response's "denials", docs/protocol.md): a
 * distinct (syscall, path or address, errno) with how many times. Owned by the
 * result; later versions only ever append fields. */
typedef struct sandtrap_denial {
	const char *syscall;    /* "connect", "flock", ... */
	const char *path;       /* the file, for calls about files; NULL otherwise */
	const char *address;    /* the destination ("10.0.0.1:443"), for sockets; NULL otherwise */
	const char *reason;     /* why the supervisor could not decide (then refused), or NULL */
	const char *errno_name; /* "EACCES" */
	int errno_nr;           /* 13 */
	uint64_t count;
	const char *source;     /* "supervisor" (what reports denials: the response's denials_sources) */
} sandtrap_denial;

/* The number of distinct denials kept (at most 256, in the order first seen), entry
 * i of them (NULL when i is out of range), and how many further denials were dropped
 * beyond the cap. Valid until sandtrap_result_free. */
size_t sandtrap_result_denials_count(const sandtrap_result *r);
const sandtrap_denial *sandtrap_result_denial(const sandtrap_result *r, size_t i);
uint64_t sandtrap_result_denials_dropped(const sandtrap_result *r);

/* Confine the calling process for good with sb's policy: Landlock on every thread
 * (files, network, scoping) and, when with_seccomp is non-zero, the seccomp filter.
 * Refuses (SANDTRAP_E_ISOLATION_UNAVAILABLE) rather than risking the host, e.g. when
 * /proc/self/task is unreadable. Calling it again stacks a further restriction.
 * Everything sandtrap started before it holds none of the new confinement (and,
 * once Landlock scopes signals, could no longer be killed), so confine first stops
 * it: runs in flight end as cancelled, sessions end (their next frame says
 * "confined"), zygotes and templates are replaced by confined ones on next use. */
int sandtrap_confine(const sandtrap_sandbox *sb, int with_seccomp, sandtrap_error **err);

#ifdef __cplusplus
}
#endif

#endif /* SANDTRAP_H */
