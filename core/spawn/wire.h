/* wire.h — the protocol between the engine (spawn.go, through cgo) and
 * sandtrap-init (init/init.c, freestanding). The one definition of every byte
 * that crosses: both sides include this header, neither writes offsets by hand.
 *
 * A zygote starts with these descriptors:
 *   ST_FD_CONFIG   the configuration: struct st_config, then bpf_len struct
 *                  sock_filter entries (the seccomp filter)
 *   ST_FD_CONTROL  a SOCK_SEQPACKET socket to the engine
 *   ST_FD_RULESET  (when ST_CF_LANDLOCK) the sandbox's Landlock ruleset, which
 *                  pid 1 of every run enters: each run is a domain of its own
 *   (with ST_CF_LANDLOCK_TABLE) the O_PATH fds the table's path rules name
 *
 * Once confined, the zygote sends one struct st_reply {pid 0, err 0} — with the
 * seccomp listener as SCM_RIGHTS when ST_CF_LISTENER — and then serves run
 * requests (it keeps the next run's pid 1 made ahead, in its namespaces, and
 * forwards it each request as it came): each is a struct st_request, then NUL-terminated strings (path, cwd
 * ("" = keep), argv[argc], envp[envc]), with SCM_RIGHTS fds (stdin, stdout,
 * stderr, status, with ST_RQ_GATE the gate, then nextra more). The answer is a struct st_reply: the pid of the run's pid 1
 * (in the engine's pid namespace) with its pidfd as SCM_RIGHTS, or err = -errno.
 *
 * Pid 1 of a run writes struct st_status records to its status fd. */
#ifndef SANDTRAP_WIRE_H
#define SANDTRAP_WIRE_H

#include <linux/types.h>

#define ST_FD_CONFIG 3
#define ST_FD_CONTROL 4
#define ST_FD_RULESET 5
#define ST_FD_INIT 6 /* the launcher: sandtrap-init's image (close-on-exec), exec'd from it */

#define ST_CONFIG_MAGIC 0x33304e49545453ULL /* "STTIN03" little-endian */
#define ST_REQ_MAGIC 0x51525453u           /* "STRQ" */
#define ST_MAX_BPF 4096                    /* sock_filter entries */
#define ST_MAX_REQ (4 << 20)               /* bytes of one run request */
#define ST_MAX_FDS 16                      /* fds of one run request */

/* st_config.flags */
#define ST_CF_RLIMIT_AS (1u << 0) /* set RLIMIT_AS to as_cur/as_max before the filter */
#define ST_CF_NEWPID (1u << 1)    /* each run in a pid namespace of its own */
#define ST_CF_NEWIPC (1u << 2)    /* each run in an IPC namespace of its own */
#define ST_CF_PROC (1u << 3)      /* each run in a mount namespace of its own with a proc of its pid namespace on /proc (read-only) */
#define ST_CF_LANDLOCK (1u << 4)  /* ST_FD_RULESET holds the ruleset every run enters */
#define ST_CF_LISTENER (1u << 5)  /* load the filter with SECCOMP_FILTER_FLAG_NEW_LISTENER and hand the fd to the engine */
#define ST_CF_LANDLOCK_TABLE (1u << 7) /* pid 1 builds its own ruleset: the table below, plus its /proc */
#define ST_CF_CAPS (1u << 8)           /* the zygote holds capabilities, which pid 1 drops */
#define ST_CF_SET_IDS (1u << 9)        /* pid 1 becomes uid/gid (root hosts without a user namespace of their own) */
#define ST_CF_NO_THP (1u << 12)        /* PR_SET_THP_DISABLE (on the zygote's own memory: every process of it inherits it through fork and execve) */
#define ST_CF_KILLABLE (1u << 10)      /* with ST_CF_LISTENER: SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (a call the engine received is not interrupted by a signal that does not kill) */
#define ST_CF_CPUINFO (1u << 13)       /* with ST_CF_PROC: pid 1 binds cpuinfo_path (that very inode) over its /proc/cpuinfo (num_cpus) */
#define ST_CF_DEV (1u << 14)           /* each run in a mount namespace of its own with a devpts of its own on /dev/pts (ptmxmode 0666: the chroot's /dev/ptmx links to pts/ptmx) and a tmpfs of its own on /dev/shm (shm_size bytes); with ST_CF_LANDLOCK_TABLE, rules on /dev, /dev/pts and /dev/shm (dev_rights, pts_rights, shm_rights) */
#define ST_CF_COW (1u << 11)           /* with ST_CF_LANDLOCK_TABLE or alone: each run in a mount namespace of its own where the workdir is an overlay (struct st_cow below); its request carries a 5th fd, a socket on which pid 1 sends the upper layer's directory */

#define ST_MAX_RULES 1024
#define ST_MAX_CPUINFO_PATH 256

struct st_config {
	__u64 magic;
	__u64 flags;
	__u64 as_limit; /* with ST_CF_RLIMIT_AS: RLIMIT_AS (soft and hard) */
	__u64 cookie;   /* lets pid 1's clone and its proc mount through the filter */
	__u64 bpf_len;  /* sock_filter entries that follow */
	__u32 uid, gid; /* with ST_CF_SET_IDS */
	__u32 test_fail; /* tests only (core/kernel's test hook): the ST_STEP_* that fails with EPERM; 0: none */
	__u32 pad;
	/* with ST_CF_CPUINFO: the file laid over each run's /proc/cpuinfo, and its
	 * inode (a file put in its place is refused: ESTALE) */
	__u64 cpuinfo_ino;
	__u32 cpuinfo_dev_major, cpuinfo_dev_minor;
	char cpuinfo_path[ST_MAX_CPUINFO_PATH];
	__u64 shm_size; /* with ST_CF_DEV: bytes of each run's /dev/shm */
};

/* With ST_CF_LANDLOCK_TABLE, after the filter: a ruleset as data (the engine's
 * core/landlock Table), from which pid 1 builds its run's own ruleset — a rule
 * for the run's /proc can only be made once that proc exists. */
struct st_landlock_table {
	__u64 handled_fs, handled_net, scoped; /* struct landlock_ruleset_attr */
	__u64 attr_size;                       /* bytes of it the kernel's ABI reads */
	__u64 proc_rights;                     /* the rule for the run's /proc */
	__u64 dev_rights, pts_rights, shm_rights; /* with ST_CF_DEV: the rules for /dev, the run's /dev/pts and /dev/shm */
	__u32 npaths, nports;                  /* struct st_landlock_rule entries that follow: paths, then ports */
};

struct st_landlock_rule {
	__u64 rights;
	__u64 port; /* network rules */
	__u32 fd;   /* path rules: an O_PATH fd the zygote holds */
	__u32 pad;
};

/* With ST_CF_COW, after the Landlock table (or after the filter without one):
 * the copy-on-write workdir. Pid 1 mounts a tmpfs (size bytes, 0: tmpfs's
 * default), makes upper/ and work/ in it, mounts an overlay of the workdir
 * (lower) and upper/ over the workdir, then adds nrules Landlock rules on the
 * overlay (paths relative to the workdir, "" for the workdir itself: rules on
 * the host's inodes do not reach the overlay's). Then strlen bytes of strings:
 * the workdir's path at offset 0, each rule's name at its offset, NUL-terminated.
 * With ST_COW_STORAGE, upper/ and work/ are made on disk instead of in a tmpfs,
 * once the request arrived: in a directory layer-<16 hex digits> pid 1 makes
 * under fs_storage (its path in the strings at offset storage; the view makes
 * it writable at the mount, the overlay taking only mounts of its own
 * namespace; no Landlock rule grants it to the target). */
struct st_cow {
	__u64 size;
	__u32 flags; /* ST_COW_* */
	__u32 nrules;
	__u32 strlen;
	__u32 storage; /* with ST_COW_STORAGE: the offset of fs_storage's path in the strings */
};
#define ST_COW_USERXATTR (1u << 0) /* the overlay's xattrs in user.overlay.* (a user namespace's) */
#define ST_COW_STORAGE (1u << 1)   /* upper/ and work/ on disk, under fs_storage */

struct st_cow_rule {
	__u64 rights;
	__u32 name; /* offset in the strings */
	__u32 pad;
};
#define ST_MAX_COW (64 << 10) /* bytes of the st_cow section */

struct st_request {
	__u32 magic;
	__u32 argc, envc;
	__u32 cpu_secs; /* RLIMIT_CPU of the run, 0 = none */
	__u32 nofile;   /* RLIMIT_NOFILE of the run, 0 = as the zygote's */
	__u32 flags;    /* ST_RQ_* */
	__u32 nextra;   /* fds after status (and the gate) that the target gets on 3, 4, … */
};

/* st_request.flags */
#define ST_RQ_GATE (1u << 0) /* a fifth fd, the gate: the target is made (its pid known, an
				ST_STATUS_PARKED record written) and waits before its execve
				until one byte can be read from the gate; end of file instead
				ends it without exec */

struct st_reply {
	__s32 pid;
	__s32 err;  /* -errno, or 0 */
	__u32 step; /* with err: the ST_STEP_* of the zygote (or of pid 1 made ahead) that failed */
	__u32 pad;
};

/* st_status.kind */
#define ST_STATUS_EXEC 'E'  /* value: errno of the target's execve */
#define ST_STATUS_EXIT 'X'  /* value: the target's wait status */
#define ST_STATUS_USAGE 'R' /* a: user µs, b: system µs, c: max RSS KiB (every reaped process) */
#define ST_STATUS_INIT 'I'  /* value: the step below that failed; a: its errno */
#define ST_STATUS_STARTED 'S' /* the target exec'd (written once its execve succeeded; value: its pid in the run) */
#define ST_STATUS_PARKED 'P'  /* with ST_RQ_GATE: the target exists and waits on its gate */

/* Steps of sandtrap-init that can fail: the zygote's (in a struct st_reply) and
 * pid 1's (in an ST_STATUS_INIT record). Every privileged call is one of them. */
#define ST_STEP_CONFIG 'G'   /* zygote: reading its configuration */
#define ST_STEP_RLIMIT_AS 'A' /* zygote: RLIMIT_AS */
#define ST_STEP_DUMPABLE 'N' /* zygote: PR_SET_DUMPABLE 0 */
#define ST_STEP_THP 'H'      /* zygote: PR_SET_THP_DISABLE */
#define ST_STEP_SECCOMP 'B'  /* zygote: loading the filter */
#define ST_STEP_SIGCHLD 'Q'  /* zygote, pid 1: the SIGCHLD disposition */
#define ST_STEP_SPARE 'W'    /* zygote: making the next run's pid 1 (socketpair, clone of its namespaces) */
#define ST_STEP_REQUEST 'R'  /* zygote: a malformed run request */
#define ST_STEP_PROC 'M'     /* mounting the run's /proc */
#define ST_STEP_LANDLOCK 'L' /* entering the Landlock ruleset */
#define ST_STEP_CAPS 'P'     /* dropping capabilities */
#define ST_STEP_CWD 'D'      /* entering the working directory */
#define ST_STEP_FORK 'F'     /* starting the target */
#define ST_STEP_RLIMIT 'C'   /* RLIMIT_CPU */
#define ST_STEP_STDIO 'S'    /* placing stdio */
#define ST_STEP_IDS 'U'      /* switching user */
#define ST_STEP_PDEATHSIG 'K' /* dying with the zygote */
#define ST_STEP_SETSID 'O'   /* a session of its own */
#define ST_STEP_DEV 'T'      /* mounting the run's /dev/pts and /dev/shm (a chroot's) */
#define ST_STEP_COW 'V'      /* mounting the copy-on-write workdir (tmpfs, overlay) and handing its upper layer over */

struct st_status {
	__u32 kind;
	__u32 value;
	__u64 a, b, c;
};

#endif
