/* launch.h — the confined-spawn primitive (internal to core/spawn).
 *
 * st_launch() starts one child with clone(CLONE_VM|CLONE_VFORK): the child shares
 * the host's memory until it calls execve, so it runs only async-signal-safe raw
 * syscalls on data the parent prepared. It applies every confinement step that
 * survives execve — in the order of enum st_stage — and exec's sandtrap-init
 * (init/init.c) as the sandbox's zygote. The calling thread is suspended until the
 * child has either exec'd (success) or _exit'ed (then err_stage, err_errno and,
 * for the view, err_op say why). */
#ifndef SANDTRAP_LAUNCH_H
#define SANDTRAP_LAUNCH_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#define ST_MAX_RLIMITS 8
#define ST_MAX_CGROUP_FDS 8
#define ST_MAX_SYSCTLS 8
#define ST_MAX_SLOTS 64

/* Steps of the child, in order; err_stage names the one that failed. */
enum st_stage {
	ST_STAGE_NONE = 0,
	ST_STAGE_CLONE,
	ST_STAGE_SETSID,
	ST_STAGE_CGROUP,
	ST_STAGE_IDS,      /* setgroups (root hosts) */
	ST_STAGE_SHARES,   /* the rlimits bounding its share of the host user's budgets */
	ST_STAGE_USERNS,   /* unshare(CLONE_NEWUSER|CLONE_NEWNS) and the id maps */
	ST_STAGE_SYSCTL,   /* limits of the new user namespace */
	ST_STAGE_UTS,      /* unshare(CLONE_NEWUTS) and sethostname */
	ST_STAGE_VIEW,     /* the mount operations (err_op: which) */
	ST_STAGE_RLIMIT,
	ST_STAGE_CAPS,
	ST_STAGE_NO_NEW_PRIVS,
	ST_STAGE_PROCESS,  /* personality, the CPU affinity */
	ST_STAGE_PDEATHSIG,
	ST_STAGE_STDIO,
	ST_STAGE_CLOSE_FDS,
	ST_STAGE_EXEC,
};

/* One mount operation of the view (core/fsview plans them). */
enum st_mount_kind {
	ST_MOUNT_PRIVATE = 1, /* propagation of every mount under path: private */
	ST_MOUNT_CLONE,       /* open_tree(path, OPEN_TREE_CLONE [|AT_RECURSIVE]) into slot */
	ST_MOUNT_SETATTR,     /* mount_setattr(slot, or path when slot < 0) */
	ST_MOUNT_MOVE,        /* move_mount(slot) onto path */
	ST_MOUNT_TMPFS,       /* an empty tmpfs with attr_set over path (mode: its root's, 0: 0555) */
	ST_MOUNT_FILE,        /* create path (mode), an empty file: a device's mount point */
	ST_MOUNT_SYMLINK,     /* create path, a symlink to target */
	ST_MOUNT_PIVOT,       /* path (a mount point) becomes / (pivot_root), the old root detached */
	ST_MOUNT_DIR,         /* create path (mode), an empty directory: a mount point of each run's */
};

struct st_mount_op {
	int kind;
	const char *path;
	int slot;
	int recursive;
	uint64_t attr_set, attr_clr; /* MOUNT_ATTR_* */
	/* ST_MOUNT_CLONE with ino != 0: path is that very file (st_dev, st_ino), not
	 * a symlink nor a file put in its place (ESTALE) */
	uint64_t dev, ino;
	unsigned int mode;
	const char *target;
};

struct st_launch {
	char *const *envp;
	int stdio[3]; /* fds to place on 0, 1, 2 (each >= 10) */

	int cgroup_fds[ST_MAX_CGROUP_FDS]; /* open cgroup.procs files: the child writes "0" */
	int n_cgroup_fds;
	int rl_resource[ST_MAX_RLIMITS];
	struct rlimit rl_value[ST_MAX_RLIMITS];
	int n_rlimits;
	/* set before the user namespace is made, which records them as the most of
	 * the host user's per-user budget its processes may take (RLIMIT_SIGPENDING,
	 * RLIMIT_MSGQUEUE); and kept by the sandbox's processes */
	int share_resource[ST_MAX_RLIMITS];
	struct rlimit share_value[ST_MAX_RLIMITS];
	int n_shares;

	/* identity: root hosts drop supplementary groups */
	int drop_groups;

	/* the sandbox's user and mount namespaces: unshared, then the ids mapped
	 * ("id id 1" lines the parent wrote; NULL: unmapped); or (root) a mount
	 * namespace alone; then the view's mount operations */
	int new_userns;
	int new_mountns;
	const char *uid_map, *gid_map;
	const char *sysctl_path[ST_MAX_SYSCTLS]; /* /proc/sys/user/... of the new namespace */
	const char *sysctl_value[ST_MAX_SYSCTLS];
	int n_sysctls;
	const char *hostname; /* non-NULL: a UTS namespace of its own with this name */
	const struct st_mount_op *mount_ops;
	int n_mount_ops;
	const char *cwd; /* re-entered after the view (the host's working directory), through its mounts */

	/* process knobs every process of the sandbox inherits (through fork and execve);
	 * attributes of the task, not of its memory (which the child shares with the
	 * host until it execs: PR_SET_THP_DISABLE is sandtrap-init's, ST_CF_NO_THP) */
	unsigned long personality; /* set when set_personality */
	int set_personality;
	const unsigned long *cpu_mask; /* NULL: the affinity is left as it is */
	size_t cpu_mask_len;           /* bytes */

	uint64_t keep_caps; /* kept (ambient) for pid 1 of each run; all others dropped */
	int drop_caps;

	/* sandtrap-init, exec'd from a sealed memfd; fds >= 10 placed on the numbers of
	 * wire.h (config 3, control 4, ruleset 5 — -1: none) */
	int init_fd;
	int config_fd;
	int control_fd;
	int ruleset_fd;
	char *const *init_argv;
	const int *keep_fds; /* also kept, at their numbers (ascending, each >= 10) */
	int n_keep_fds;

	/* results */
	int pid;
	int pidfd;
	int err_stage;
	int err_errno;
	int err_op;
};

/* Returns 0 when the child exec'd; -1 otherwise (err_* set; a child that failed
 * after clone has already been reaped). */
int st_launch(struct st_launch *l);

#endif
