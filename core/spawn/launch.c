/* launch.c — see launch.h. Everything the child runs is a raw syscall on memory
 * the parent prepared: no malloc, no locks, no libc state, no Go. */
#define _GNU_SOURCE
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

#define STACK_SIZE (64 * 1024)

/* kernel's sigaction layout for rt_sigaction */
struct k_sigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	unsigned long mask;
};

static int fail(struct st_launch *l, int stage)
{
	l->err_stage = stage;
	l->err_errno = errno;
	syscall(SYS_exit_group, 127);
	return 127; /* not reached */
}

static int child(void *arg)
{
	struct st_launch *l = arg;
	int i;

	/* 1. Default dispositions for every signal the host may have caught or
	 * ignored (SIGPIPE especially); the mask stays full until execve. */
	for (i = 1; i < 65; i++) {
		struct k_sigaction sa;
		if (i == SIGKILL || i == SIGSTOP)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.handler = SIG_DFL;
		syscall(SYS_rt_sigaction, i, &sa, NULL, 8);
	}
	/* 2. Die with the thread that started us (host death kills the run). */
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return fail(l, ST_STAGE_PDEATHSIG);
	/* 3. Own session: no controlling terminal, own process group. */
	if (syscall(SYS_setsid) < 0)
		return fail(l, ST_STAGE_SETSID);
	/* 4. Join the sandbox's cgroups (every run forked later is born inside). */
	for (i = 0; i < l->n_cgroup_fds; i++) {
		if (syscall(SYS_write, l->cgroup_fds[i], "0", 1) != 1)
			return fail(l, ST_STAGE_CGROUP);
	}
	/* 5. Resource limits (RLIMIT_AS is left to sandtrap-init). */
	for (i = 0; i < l->n_rlimits; i++) {
		if (syscall(SYS_setrlimit, l->rl_resource[i], &l->rl_value[i]) < 0)
			return fail(l, ST_STAGE_RLIMIT);
	}
	/* 6. Working directory (resolved before Landlock so the rules decide what it may do). */
	if (l->cwd && syscall(SYS_chdir, l->cwd) < 0)
		return fail(l, ST_STAGE_CHDIR);
	/* 7. Capabilities: lock securebits (root gains nothing from exec), shrink the
	 * bounding set to keep_caps, then hold only keep_caps — raised into the ambient
	 * set, the only way they survive execve without file capabilities. */
	if (l->drop_caps) {
		struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct data[2];
		unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
				     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED;
		int cap;
		if (!l->keep_caps)
			bits |= SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
		syscall(SYS_prctl, PR_SET_SECUREBITS, bits, 0, 0, 0);
		for (cap = 0; cap < 64; cap++) {
			if (l->keep_caps & (1ULL << cap))
				continue;
			if (syscall(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
				if (errno == EINVAL)
					break;
				return fail(l, ST_STAGE_CAPS);
			}
		}
		if (syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
			return fail(l, ST_STAGE_CAPS);
		memset(data, 0, sizeof data);
		data[0].effective = data[0].permitted = data[0].inheritable = (uint32_t)l->keep_caps;
		data[1].effective = data[1].permitted = data[1].inheritable = (uint32_t)(l->keep_caps >> 32);
		if (syscall(SYS_capset, &hdr, data) < 0)
			return fail(l, ST_STAGE_CAPS);
		for (cap = 0; cap < 64; cap++) {
			if ((l->keep_caps & (1ULL << cap)) &&
			    syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
				return fail(l, ST_STAGE_CAPS);
		}
	}
	/* 8. no_new_privs: required by Landlock and seccomp without CAP_SYS_ADMIN. */
	if (l->no_new_privs && syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail(l, ST_STAGE_NO_NEW_PRIVS);
	/* 9. Landlock domain for this process only (no TSYNC: the host keeps its rights). */
	if (l->landlock_fd >= 0) {
		if (syscall(SYS_landlock_restrict_self, l->landlock_fd, l->landlock_flags) < 0)
			return fail(l, ST_STAGE_LANDLOCK);
	}
	/* 10. Descriptors: stdio, then init's config (3), control socket (4) and its image
	 * (5, close-on-exec). Every source is >= 10. Everything else is closed. */
	for (i = 0; i < 3; i++) {
		if (syscall(SYS_dup2, l->stdio[i], i) < 0)
			return fail(l, ST_STAGE_STDIO);
	}
	if (syscall(SYS_dup2, l->config_fd, 3) < 0 || syscall(SYS_dup2, l->control_fd, 4) < 0 ||
	    syscall(SYS_dup3, l->init_fd, 5, O_CLOEXEC) < 0)
		return fail(l, ST_STAGE_STDIO);
	if (syscall(SYS_close_range, 6, ~0U, 0) < 0)
		return fail(l, ST_STAGE_CLOSE_FDS);
	/* 11. Unblock signals and become sandtrap-init. */
	{
		unsigned long empty = 0;
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, 8);
	}
	syscall(SYS_execveat, 5, "", l->init_argv, l->envp, AT_EMPTY_PATH);
	return fail(l, ST_STAGE_EXEC);
}

int st_launch(struct st_launch *l)
{
	sigset_t all, old;
	char *stack;
	int flags, pid, status;

	l->pid = -1;
	l->pidfd = -1;
	l->err_stage = ST_STAGE_NONE;
	l->err_errno = 0;

	stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		l->err_stage = ST_STAGE_CLONE;
		l->err_errno = errno;
		return -1;
	}
	flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;
	if (l->new_pid_ns)
		flags |= CLONE_NEWPID;
	if (l->new_user_ns)
		flags |= CLONE_NEWUSER;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = clone(child, stack + STACK_SIZE, flags, l, &l->pidfd);
	if (pid < 0) {
		l->err_stage = ST_STAGE_CLONE;
		l->err_errno = errno;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(stack, STACK_SIZE);
	if (pid < 0)
		return -1;
	l->pid = pid;
	if (l->err_stage != ST_STAGE_NONE) {
		/* the child wrote its failure and exited before execve */
		while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
			;
		if (l->pidfd >= 0)
			close(l->pidfd);
		l->pidfd = -1;
		l->pid = -1;
		return -1;
	}
	return 0;
}
