/* launch.h — the confined-spawn primitive (internal to core/spawn).
 *
 * st_launch() starts one child with clone(CLONE_VM|CLONE_VFORK): the child shares
 * the host's memory until it calls execve, so it runs only async-signal-safe raw
 * syscalls on data the parent prepared, and it applies every confinement step
 * that survives execve before exec'ing sandtrap-init (init/init.c) as a zygote. The parent thread is suspended until the child has either
 * exec'd (success) or _exit'ed (then err_stage/err_errno say why). */
#ifndef SANDTRAP_LAUNCH_H
#define SANDTRAP_LAUNCH_H

#include <stdint.h>
#include <sys/resource.h>

#define ST_MAX_RLIMITS 8
#define ST_MAX_CGROUP_FDS 8

enum st_stage {
	ST_STAGE_NONE = 0,
	ST_STAGE_CLONE,
	ST_STAGE_SIGNALS,
	ST_STAGE_SETSID,
	ST_STAGE_PDEATHSIG,
	ST_STAGE_CGROUP,
	ST_STAGE_RLIMIT,
	ST_STAGE_IDS,
	ST_STAGE_CHDIR,
	ST_STAGE_STDIO,
	ST_STAGE_CAPS,
	ST_STAGE_NO_NEW_PRIVS,
	ST_STAGE_LANDLOCK,
	ST_STAGE_CLOSE_FDS,
	ST_STAGE_EXEC,
};

struct st_launch {
	/* what to run: the target's path and argv travel in init_argv */
	char *const *envp;
	const char *cwd; /* NULL: inherit */
	int stdio[3];    /* fds to place on 0, 1, 2 (each >= 3) */

	/* confinement */
	int new_pid_ns;  /* CLONE_NEWPID */
	int new_user_ns; /* CLONE_NEWUSER (non-root: needed for the pid ns) */
	int cgroup_fds[ST_MAX_CGROUP_FDS]; /* open cgroup.procs files: child writes "0" */
	int n_cgroup_fds;
	int rl_resource[ST_MAX_RLIMITS];
	struct rlimit rl_value[ST_MAX_RLIMITS];
	int n_rlimits;
	int drop_caps;
	uint64_t keep_caps; /* capabilities kept (the zygote's: pid namespaces, identity) */
	int no_new_privs;
	int landlock_fd; /* -1: none */
	uint32_t landlock_flags;
	/* sandtrap-init, exec'd from a sealed memfd as the sandbox's zygote; it applies
	 * RLIMIT_AS and seccomp (read from config_fd) and serves runs on control_fd.
	 * All three fds are >= 10 so that placing them on 3, 4, 5 clobbers nothing. */
	int init_fd;
	int config_fd;
	int control_fd;
	char *const *init_argv; /* sandtrap-init TARGET ARGV... */

	/* results */
	int pid;
	int pidfd;
	int err_stage;
	int err_errno;
};

/* Returns 0 when the child exec'd; -1 otherwise (err_stage/err_errno set; a child
 * that failed after clone has already been reaped). */
int st_launch(struct st_launch *l);

#endif
