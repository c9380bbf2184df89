/* launch.c — see launch.h. Everything the child runs is a raw syscall on memory
 * the parent prepared: no malloc, no locks, no libc state, no Go. */
#define _GNU_SOURCE
#include "launch.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/securebits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
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

static int write_file(const char *path, const char *s)
{
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
	long n;
	if (fd < 0)
		return -1;
	n = syscall(SYS_write, fd, s, strlen(s));
	syscall(SYS_close, fd);
	return n == (long)strlen(s) ? 0 : -1;
}

/* The view: mount operations in the sandbox's new mount namespace. */
static int view(struct st_launch *l)
{
	int slots[ST_MAX_SLOTS];
	int i;

	for (i = 0; i < ST_MAX_SLOTS; i++)
		slots[i] = -1;
	for (i = 0; i < l->n_mount_ops; i++) {
		const struct st_mount_op *op = &l->mount_ops[i];
		struct mount_attr attr;
		long r = -1;

		l->err_op = i;
		if (op->slot >= ST_MAX_SLOTS) {
			errno = EINVAL;
			return -1;
		}
		switch (op->kind) {
		case ST_MOUNT_PRIVATE:
			r = syscall(SYS_mount, NULL, op->path, NULL, MS_REC | MS_PRIVATE, NULL);
			break;
		case ST_MOUNT_CLONE:
			r = syscall(SYS_open_tree, AT_FDCWD, op->path,
				    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (op->recursive ? AT_RECURSIVE : 0) |
					    (op->ino ? AT_SYMLINK_NOFOLLOW : 0));
			if (r >= 0 && op->ino) {
				struct stat st;
				if (syscall(SYS_fstat, (int)r, &st) < 0 || (uint64_t)st.st_dev != op->dev ||
				    (uint64_t)st.st_ino != op->ino) {
					syscall(SYS_close, (int)r);
					errno = ESTALE;
					r = -1;
				}
			}
			if (r >= 0)
				slots[op->slot] = (int)r;
			break;
		case ST_MOUNT_SETATTR:
			memset(&attr, 0, sizeof attr);
			attr.attr_set = op->attr_set;
			attr.attr_clr = op->attr_clr;
			if (op->slot >= 0)
				r = syscall(SYS_mount_setattr, slots[op->slot], "",
					    AT_EMPTY_PATH | (op->recursive ? AT_RECURSIVE : 0), &attr, sizeof attr);
			else
				r = syscall(SYS_mount_setattr, AT_FDCWD, op->path,
					    op->recursive ? AT_RECURSIVE : 0, &attr, sizeof attr);
			break;
		case ST_MOUNT_MOVE:
			r = syscall(SYS_move_mount, slots[op->slot], "", AT_FDCWD, op->path, MOVE_MOUNT_F_EMPTY_PATH);
			syscall(SYS_close, slots[op->slot]);
			slots[op->slot] = -1;
			break;
		case ST_MOUNT_TMPFS: {
			int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC), mnt;
			if (fs < 0)
				return -1;
			char mode[8] = "0555";
			if (op->mode) {
				mode[1] = (char)('0' + ((op->mode >> 6) & 7));
				mode[2] = (char)('0' + ((op->mode >> 3) & 7));
				mode[3] = (char)('0' + (op->mode & 7));
				if (op->mode & 01000) {
					mode[0] = '1';
				}
			}
			if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", mode, 0) < 0 ||
			    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
				return -1;
			mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, (unsigned int)op->attr_set);
			syscall(SYS_close, fs);
			if (mnt < 0)
				return -1;
			r = syscall(SYS_move_mount, mnt, "", AT_FDCWD, op->path, MOVE_MOUNT_F_EMPTY_PATH);
			syscall(SYS_close, mnt);
			break;
		}
		case ST_MOUNT_FILE:
			r = syscall(SYS_openat, AT_FDCWD, op->path, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, op->mode);
			if (r >= 0)
				r = syscall(SYS_close, r);
			break;
		case ST_MOUNT_DIR:
			r = syscall(SYS_mkdirat, AT_FDCWD, op->path, op->mode);
			break;
		case ST_MOUNT_SYMLINK:
			r = syscall(SYS_symlinkat, op->target, AT_FDCWD, op->path);
			break;
		case ST_MOUNT_PIVOT:
			/* pivot_root(".", "."): the old root stacks under the new one at /,
			 * and is detached at once (with every host mount under it) */
			if (syscall(SYS_chdir, op->path) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
			    syscall(SYS_umount2, ".", MNT_DETACH) < 0)
				return -1;
			r = syscall(SYS_chdir, "/");
			break;
		default:
			errno = EINVAL;
		}
		if (r < 0)
			return -1;
	}
	l->err_op = -1;
	return 0;
}

static int child(void *arg)
{
	struct st_launch *l = arg;
	int i;

	/* Default dispositions for every signal the host may have caught or ignored
	 * (SIGPIPE especially); the mask stays full until execve. */
	for (i = 1; i < 65; i++) {
		struct k_sigaction sa;
		if (i == SIGKILL || i == SIGSTOP)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.handler = SIG_DFL;
		syscall(SYS_rt_sigaction, i, &sa, NULL, 8);
	}
	/* Own session: no controlling terminal, own process group. */
	if (syscall(SYS_setsid) < 0)
		return fail(l, ST_STAGE_SETSID);
	/* The sandbox's cgroups (every run forked later is born inside). */
	for (i = 0; i < l->n_cgroup_fds; i++) {
		if (syscall(SYS_write, l->cgroup_fds[i], "0", 1) != 1)
			return fail(l, ST_STAGE_CGROUP);
	}
	/* No supplementary groups (root hosts). This child shares the host's memory:
	 * it changes no uid or gid, which would make that memory non-dumpable. */
	if (l->drop_groups && syscall(SYS_setgroups, 0, NULL) < 0)
		return fail(l, ST_STAGE_IDS);
	/* Its share of the host user's per-user budgets (pending signals, POSIX
	 * message queue bytes): a user namespace made now counts its processes' use
	 * against these, whatever the host user's other processes hold. */
	for (i = 0; i < l->n_shares; i++) {
		if (syscall(SYS_setrlimit, l->share_resource[i], &l->share_value[i]) < 0)
			return fail(l, ST_STAGE_SHARES);
	}
	/* The sandbox's user namespace (our uid and gid mapped to themselves: no
	 * capability in it reaches anything the host owns) and mount namespace. */
	if (l->new_userns) {
		/* (no maps: a confined host cannot write them; the namespace still gives
		 * the zygote the capabilities to make each run's namespaces) */
		if (syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS) < 0 ||
		    (l->uid_map && (write_file("/proc/self/setgroups", "deny") < 0 ||
				    write_file("/proc/self/uid_map", l->uid_map) < 0 ||
				    write_file("/proc/self/gid_map", l->gid_map) < 0)))
			return fail(l, ST_STAGE_USERNS);
		for (i = 0; i < l->n_sysctls; i++) {
			if (write_file(l->sysctl_path[i], l->sysctl_value[i]) < 0)
				return fail(l, ST_STAGE_SYSCTL);
		}
	} else if (l->new_mountns && syscall(SYS_unshare, CLONE_NEWNS) < 0) {
		return fail(l, ST_STAGE_USERNS);
	}
	/* The sandbox's hostname, in a UTS namespace every run shares (owned by the
	 * sandbox's user namespace, or the host's on a root host: the target, without
	 * capabilities, cannot change it). */
	if (l->hostname && (syscall(SYS_unshare, CLONE_NEWUTS) < 0 ||
			    syscall(SYS_sethostname, l->hostname, strlen(l->hostname)) < 0))
		return fail(l, ST_STAGE_UTS);
	if (l->n_mount_ops > 0) {
		if (view(l) < 0)
			return fail(l, ST_STAGE_VIEW);
		/* the old working directory is a dentry of the mounts beneath the view */
		if (l->cwd && syscall(SYS_chdir, l->cwd) < 0 && syscall(SYS_chdir, "/") < 0)
			return fail(l, ST_STAGE_VIEW);
	}
	/* Resource limits (RLIMIT_AS is left to sandtrap-init). After the user
	 * namespace: it records the creator's RLIMIT_NPROC as the limit for the host
	 * user's every process, while the one set here counts the sandbox's alone. */
	for (i = 0; i < l->n_rlimits; i++) {
		if (syscall(SYS_setrlimit, l->rl_resource[i], &l->rl_value[i]) < 0)
			return fail(l, ST_STAGE_RLIMIT);
	}
	/* Capabilities: lock securebits (root gains nothing from exec), shrink the
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
		if (syscall(SYS_prctl, PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
			return fail(l, ST_STAGE_CAPS);
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
	/* no_new_privs: required by Landlock and seccomp without CAP_SYS_ADMIN. */
	if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail(l, ST_STAGE_NO_NEW_PRIVS);
	/* Process knobs of the policy: the personality and the affinity are the
	 * task's (this child shares the host's memory, not its task), survive fork and
	 * execve, so every process of the sandbox has them. The target's filter
	 * refuses it the personality flags and sched_setaffinity. */
	if (l->set_personality && syscall(SYS_personality, l->personality) < 0)
		return fail(l, ST_STAGE_PROCESS);
	if (l->cpu_mask && syscall(SYS_sched_setaffinity, 0, l->cpu_mask_len, l->cpu_mask) < 0)
		return fail(l, ST_STAGE_PROCESS);
	/* Die with the thread that started us (host death kills the sandbox). Set after
	 * every change of credentials, which clears it. */
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		return fail(l, ST_STAGE_PDEATHSIG);
	/* Descriptors: stdio, then the numbers of wire.h, and sandtrap-init's image on
	 * 6 (close-on-exec). Every source is >= 10. Everything else is closed. */
	for (i = 0; i < 3; i++) {
		if (syscall(SYS_dup2, l->stdio[i], i) < 0)
			return fail(l, ST_STAGE_STDIO);
	}
	if (syscall(SYS_dup2, l->config_fd, ST_FD_CONFIG) < 0 || syscall(SYS_dup2, l->control_fd, ST_FD_CONTROL) < 0 ||
	    syscall(SYS_dup3, l->init_fd, ST_FD_INIT, O_CLOEXEC) < 0)
		return fail(l, ST_STAGE_STDIO);
	if (l->ruleset_fd >= 0 ? syscall(SYS_dup2, l->ruleset_fd, ST_FD_RULESET) < 0 : (syscall(SYS_close, ST_FD_RULESET), 0))
		return fail(l, ST_STAGE_STDIO);
	{
		unsigned int lo = ST_FD_INIT + 1;
		for (i = 0; i < l->n_keep_fds; i++) {
			unsigned int fd = (unsigned int)l->keep_fds[i];
			if (fd < lo) {
				errno = EINVAL;
				return fail(l, ST_STAGE_CLOSE_FDS);
			}
			if (fd > lo && syscall(SYS_close_range, lo, fd - 1, 0) < 0)
				return fail(l, ST_STAGE_CLOSE_FDS);
			if (syscall(SYS_fcntl, fd, F_SETFD, 0) < 0)
				return fail(l, ST_STAGE_CLOSE_FDS);
			lo = fd + 1;
		}
		if (syscall(SYS_close_range, lo, ~0U, 0) < 0)
			return fail(l, ST_STAGE_CLOSE_FDS);
	}
	/* Unblock signals and become sandtrap-init. */
	{
		unsigned long empty = 0;
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, 8);
	}
	syscall(SYS_execveat, ST_FD_INIT, "", l->init_argv, l->envp, AT_EMPTY_PATH);
	return fail(l, ST_STAGE_EXEC);
}

int st_launch(struct st_launch *l)
{
	sigset_t all, old;
	char *stack;
	int pid, status;

	l->pid = -1;
	l->pidfd = -1;
	l->err_stage = ST_STAGE_NONE;
	l->err_errno = 0;
	l->err_op = -1;

	stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		l->err_stage = ST_STAGE_CLONE;
		l->err_errno = errno;
		return -1;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid = clone(child, stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, l, &l->pidfd);
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
