/* sandtrap-init — the zygote of a sandbox and pid 1 of each of its runs.
 *
 * Freestanding (no libc, a few KiB). The engine's launcher (launch.c) starts one
 * zygote per sandbox inside the sandbox's user and mount namespaces, with its
 * view of the filesystem laid out, its rlimits, no_new_privs and its capabilities
 * reduced to what pid 1 needs. The zygote then applies what must come last —
 * RLIMIT_AS and the seccomp filter — once, and serves run requests on its control
 * socket (the protocol is ../wire.h). For each run it clones pid 1 of a new pid
 * namespace (and IPC namespace, and mount namespace when the run gets a /proc of
 * its own): the filter lets only the zygote and pid 1 do that, because their
 * calls carry a secret cookie in a register the kernel ignores. Pid 1 mounts the
 * run's /proc, enters the sandbox's Landlock ruleset (so every run is a domain of
 * its own: runs cannot signal or trace each other), drops every capability,
 * starts the target as pid 2 (which keeps normal signal semantics), reaps every
 * orphan, and reports the target's status and resource use on the run's status
 * pipe. When pid 1 exits, the kernel kills whatever is left of the run. The
 * filter is inherited, never re-attached: loading a filter costs about 3 us per
 * BPF instruction here.
 *
 *   argv: sandtrap-init
 *   fds:  ST_FD_CONFIG, ST_FD_CONTROL, ST_FD_RULESET (wire.h)
 */
#include <linux/filter.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/signal.h>
#include <linux/wait.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/socket.h>
#include <linux/time.h>
#include <linux/uio.h>
#include <linux/mount.h>
#include <linux/stat.h>
#include <asm/unistd.h>

#include "../wire.h"

#if defined(__x86_64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
}
__asm__(".text\n.globl _start\n_start:\n mov %rsp, %rdi\n and $-16, %rsp\n call init_main\n hlt\n");
#elif defined(__aarch64__)
static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
	return x0;
}
__asm__(".text\n.globl _start\n_start:\n mov x0, sp\n bl init_main\n");
#else
#error "sandtrap-init: unsupported architecture"
#endif

#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2

/* uapi <linux/landlock.h> layouts (packed path rule) */
struct ll_path_beneath {
	unsigned long long allowed_access;
	int parent_fd;
} __attribute__((packed));
struct ll_net_port {
	unsigned long long allowed_access;
	unsigned long long port;
};

/* minimal socket ABI (uapi headers do not carry these userspace structs) */
struct st_msghdr {
	void *name;
	int namelen;
	struct iovec *iov;
	unsigned long iovlen;
	void *control;
	unsigned long controllen;
	int flags;
};
struct st_cmsghdr {
	unsigned long len;
	int level;
	int type;
};
#define ST_SOL_SOCKET 1
#define ST_SCM_RIGHTS 1
#define ST_MSG_CMSG_CLOEXEC 0x40000000
#define ST_MSG_CTRUNC 0x8
#define ST_MSG_NOSIGNAL 0x4000
#define CMSG_SPACE_FDS(n) ((sizeof(struct st_cmsghdr) + (n) * sizeof(int) + 7) & ~7UL)

struct k_sigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	unsigned long mask;
};

struct k_rusage {
	struct { long sec, usec; } utime, stime;
	long maxrss, ixrss, idrss, isrss, minflt, majflt, nswap, inblock, oublock,
	    msgsnd, msgrcv, nsignals, nvcsw, nivcsw;
};

#define MAX_PTRS (256 << 10)

static unsigned char cfgbuf[sizeof(struct st_config) + ST_MAX_BPF * 8 + sizeof(struct st_landlock_table) +
			    ST_MAX_RULES * sizeof(struct st_landlock_rule) + ST_MAX_COW];
static struct st_landlock_table *lltable; /* with ST_CF_LANDLOCK_TABLE */
static struct st_cow *cow;                /* with ST_CF_COW */
static struct st_cow_rule *cow_rules;
static char *cow_str;
static long cow_upper = -1; /* pid 1: the upper layer's directory (a tmpfs of its own), for the engine */
static unsigned char reqbuf[ST_MAX_REQ];
static char *ptrs[MAX_PTRS];
static unsigned long long cookie;
static unsigned long long cflags;
static unsigned int cfg_set_ids, cfg_uid, cfg_gid;
/* tests only: the step whose call fails with EPERM (st_config.test_fail) */
static unsigned int test_fail;
#define TRY(step, call) (test_fail == (step) ? -1L /* EPERM */ : (long)(call))

static void report(int fd, unsigned int kind, unsigned int value,
		   unsigned long long a, unsigned long long b, unsigned long long c)
{
	struct st_status s;
	s.kind = kind;
	s.value = value;
	s.a = a;
	s.b = b;
	s.c = c;
	sys3(__NR_write, fd, &s, sizeof s);
}

/* a step of pid 1 failed: say which (and its errno), and end the run */
static void step_failed(int status_fd, unsigned int step, long err)
{
	report(status_fd, ST_STATUS_INIT, step, (unsigned long long)-err, 0, 0);
	sys1(__NR_exit_group, 127);
}

static long set_signal(int sig, void *handler)
{
	struct k_sigaction sa;
	unsigned char *p = (unsigned char *)&sa;
	unsigned long i;
	for (i = 0; i < sizeof sa; i++)
		p[i] = 0;
	sa.handler = handler;
	return TRY(ST_STEP_SIGCHLD, sys4(__NR_rt_sigaction, sig, &sa, 0, 8));
}

/* The run's own /proc (its pid namespace), over the view's, read-only (kernel
 * state is never writable). The new mount API's calls carry the cookie in their
 * unused sixth argument: the filter refuses them to everything else. */
static long mount_proc(void)
{
	long fs, mnt, r;
	unsigned long attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY;
	fs = TRY(ST_STEP_PROC, sys6(__NR_fsopen, (long)"proc", FSOPEN_CLOEXEC, 0, 0, 0, (long)cookie));
	if (fs < 0)
		return fs;
	r = sys6(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0, (long)cookie);
	if (r < 0)
		return r;
	mnt = sys6(__NR_fsmount, fs, FSMOUNT_CLOEXEC, (long)attr, 0, 0, (long)cookie);
	if (mnt < 0)
		return mnt;
	r = sys6(__NR_move_mount, mnt, (long)"", -100 /* AT_FDCWD */, (long)"/proc",
		 MOVE_MOUNT_F_EMPTY_PATH, (long)cookie);
	sys1(__NR_close, mnt);
	sys1(__NR_close, fs);
	return r;
}

/* num_cpus: the engine's rewrite of /proc/cpuinfo (the run's CPUs alone) over
 * the run's own, read-only: a clone of that very inode (open_tree and move_mount
 * carry the cookie, as the proc mount's calls). */
static long mount_cpuinfo(const struct st_config *c)
{
	struct statx sx;
	long t, r;
	t = sys6(__NR_open_tree, -100 /* AT_FDCWD */, (long)c->cpuinfo_path,
		 OPEN_TREE_CLONE | 02000000 /* OPEN_TREE_CLOEXEC */ | 0x100 /* AT_SYMLINK_NOFOLLOW */, 0, 0, (long)cookie);
	if (t < 0)
		return t;
	r = sys5(__NR_statx, t, "", 0x1000 | 0x100 /* AT_EMPTY_PATH|AT_SYMLINK_NOFOLLOW */, STATX_INO, &sx);
	if (r == 0 && (sx.stx_ino != c->cpuinfo_ino || sx.stx_dev_major != c->cpuinfo_dev_major ||
		       sx.stx_dev_minor != c->cpuinfo_dev_minor))
		r = -116; /* ESTALE */
	if (r == 0)
		r = sys6(__NR_move_mount, t, (long)"", -100, (long)"/proc/cpuinfo", MOVE_MOUNT_F_EMPTY_PATH, (long)cookie);
	sys1(__NR_close, t);
	return r;
}

static long fsconfig_str(long fs, const char *key, const char *value)
{
	return sys6(__NR_fsconfig, fs, FSCONFIG_SET_STRING, (long)key, (long)value, 0, (long)cookie);
}

/* decimal digits of n into buf (24 bytes) */
static void decimal(char *buf, unsigned long long n)
{
	char tmp[24];
	int i = 0, j;
	do {
		tmp[i++] = (char)('0' + n % 10);
		n /= 10;
	} while (n);
	for (j = 0; j < i; j++)
		buf[j] = tmp[i - 1 - j];
	buf[i] = 0;
}

/* A filesystem of the run's own (type, with up to two options) on path; the
 * calls carry the cookie, as the proc mount's. */
static long mount_own(const char *type, const char *k1, const char *v1, const char *k2, const char *v2,
		      unsigned long attr, const char *path)
{
	long fs, mnt, r;
	fs = TRY(ST_STEP_DEV, sys6(__NR_fsopen, (long)type, FSOPEN_CLOEXEC, 0, 0, 0, (long)cookie));
	if (fs < 0)
		return fs;
	if ((k1 && (r = fsconfig_str(fs, k1, v1)) < 0) || (k2 && (r = fsconfig_str(fs, k2, v2)) < 0) ||
	    (r = sys6(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0, (long)cookie)) < 0) {
		sys1(__NR_close, fs);
		return r;
	}
	mnt = sys6(__NR_fsmount, fs, FSMOUNT_CLOEXEC, (long)attr, 0, 0, (long)cookie);
	sys1(__NR_close, fs);
	if (mnt < 0)
		return mnt;
	r = sys6(__NR_move_mount, mnt, (long)"", -100 /* AT_FDCWD */, (long)path, MOVE_MOUNT_F_EMPTY_PATH, (long)cookie);
	sys1(__NR_close, mnt);
	return r;
}

/* A chroot's /dev of the run's own: a devpts instance on /dev/pts (every devpts
 * mount is a new instance: no pty of another run or of the host is there; its
 * ptmx usable by all, /dev/ptmx links to it) and a tmpfs on /dev/shm. */
static long mount_dev(const struct st_config *c)
{
	char size[24];
	long r = mount_own("devpts", "ptmxmode", "0666", "mode", "0620",
			   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev/pts");
	if (r < 0)
		return r;
	decimal(size, c->shm_size);
	return mount_own("tmpfs", "size", size, "mode", "1777",
			 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "/dev/shm");
}

/* The copy-on-write workdir (struct st_cow), made ahead: a tmpfs of the run's
 * own holding upper/ and work/, an overlay of the workdir and upper/, detached
 * (cow_mnt) until attach_cow puts it over the workdir. Every layer is given by
 * descriptor (no option string to escape). Keeps upper/ open in cow_upper for
 * the engine, which reads the run's changes there after it (the tmpfs lives as
 * long as a descriptor of it does). */
static long cow_mnt = -1;

static long make_cow(void)
{
	unsigned long attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	char size[24];
	long fs, mnt, lower, work, ofs, omnt, r;
	struct statx sx;
	unsigned long long n = cow->size;
	int i = 0, j;

	lower = sys3(__NR_openat, -100, cow_str, 010000000 /* O_PATH */ | 0200000 /* O_DIRECTORY */ | 02000000);
	if (lower < 0)
		return lower;
	if (cow->flags & ST_COW_STORAGE) {
		/* on disk (fs_storage): a directory of the run's own under it */
		static const char hex[] = "0123456789abcdef";
		unsigned char rnd[8];
		char name[] = "layer-0000000000000000";
		if ((r = sys3(__NR_getrandom, rnd, sizeof rnd, 0)) != (long)sizeof rnd)
			return r < 0 ? r : -5;
		for (j = 0; j < 8; j++) {
			name[6 + 2 * j] = hex[rnd[j] >> 4];
			name[7 + 2 * j] = hex[rnd[j] & 15];
		}
		long storage = sys3(__NR_openat, -100, cow_str + cow->storage, 010000000 | 0200000 | 02000000);
		if (storage < 0)
			return storage;
		if ((r = sys3(__NR_mkdirat, storage, name, 0700)) < 0)
			return r;
		mnt = sys3(__NR_openat, storage, name, 010000000 | 0200000 | 0400000 /* O_NOFOLLOW */ | 02000000);
		sys1(__NR_close, storage);
		if (mnt < 0)
			return mnt;
		goto layers;
	}
	fs = TRY(ST_STEP_COW, sys6(__NR_fsopen, (long)"tmpfs", FSOPEN_CLOEXEC, 0, 0, 0, (long)cookie));
	if (fs < 0)
		return fs;
	if (n) {
		char tmp[24];
		while (n) {
			tmp[i++] = (char)('0' + n % 10);
			n /= 10;
		}
		for (j = 0; j < i; j++)
			size[j] = tmp[i - 1 - j];
		size[i] = 0;
		if ((r = fsconfig_str(fs, "size", size)) < 0)
			return r;
	}
	if ((r = fsconfig_str(fs, "mode", "0700")) < 0)
		return r;
	if ((r = sys6(__NR_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0, (long)cookie)) < 0)
		return r;
	mnt = sys6(__NR_fsmount, fs, FSMOUNT_CLOEXEC, (long)attr, 0, 0, (long)cookie);
	if (mnt < 0)
		return mnt;
	sys1(__NR_close, fs);
layers:
	if ((r = sys3(__NR_mkdirat, mnt, "upper", 0755)) < 0 || (r = sys3(__NR_mkdirat, mnt, "work", 0700)) < 0)
		return r;
	cow_upper = sys3(__NR_openat, mnt, "upper", 0200000 /* O_DIRECTORY */ | 0400000 /* O_NOFOLLOW */ | 02000000);
	if (cow_upper < 0)
		return cow_upper;
	work = sys3(__NR_openat, mnt, "work", 010000000 | 0200000 | 02000000);
	if (work < 0)
		return work;
	/* the merged root shows upper/'s mode and owner: the workdir's */
	r = sys5(__NR_statx, lower, "", 0x1000 /* AT_EMPTY_PATH */, STATX_MODE | STATX_UID | STATX_GID, &sx);
	if (r < 0)
		return r;
	sys3(__NR_fchown, cow_upper, sx.stx_uid, sx.stx_gid); /* an owner the namespace does not map stays ours */
	if ((r = sys2(__NR_fchmod, cow_upper, sx.stx_mode & 01777)) < 0)
		return r;
	ofs = sys6(__NR_fsopen, (long)"overlay", FSOPEN_CLOEXEC, 0, 0, 0, (long)cookie);
	if (ofs < 0)
		return ofs;
	if ((r = sys6(__NR_fsconfig, ofs, FSCONFIG_SET_FD, (long)"lowerdir+", 0, lower, (long)cookie)) < 0 ||
	    (r = sys6(__NR_fsconfig, ofs, FSCONFIG_SET_FD, (long)"upperdir", 0, cow_upper, (long)cookie)) < 0 ||
	    (r = sys6(__NR_fsconfig, ofs, FSCONFIG_SET_FD, (long)"workdir", 0, work, (long)cookie)) < 0)
		return r;
	if (cow->flags & ST_COW_USERXATTR) {
		if ((r = sys6(__NR_fsconfig, ofs, FSCONFIG_SET_FLAG, (long)"userxattr", 0, 0, (long)cookie)) < 0)
			return r;
	} else if ((r = fsconfig_str(ofs, "redirect_dir", "off")) < 0 || (r = fsconfig_str(ofs, "metacopy", "off")) < 0 ||
		   (r = fsconfig_str(ofs, "index", "off")) < 0) {
		return r;
	}
	if ((r = sys6(__NR_fsconfig, ofs, FSCONFIG_CMD_CREATE, 0, 0, 0, (long)cookie)) < 0)
		return r;
	omnt = sys6(__NR_fsmount, ofs, FSMOUNT_CLOEXEC, (long)attr, 0, 0, (long)cookie);
	if (omnt < 0)
		return omnt;
	cow_mnt = omnt;
	sys1(__NR_close, ofs);
	sys1(__NR_close, work);
	sys1(__NR_close, lower);
	/* only now: closing the tmpfs's mount fd unmounts it (its anonymous
	 * namespace dissolves), which the overlay's creation needs mounted */
	sys1(__NR_close, mnt);
	return 0;
}

/* Once the run's request arrived: the overlay made ahead (detached) goes over
 * the workdir. Nothing of the workdir was looked up through it before: what
 * the run before committed shows. */
static long attach_cow(void)
{
	long r;
	if ((cow->flags & ST_COW_STORAGE) && (r = make_cow()) < 0)
		return r;
	r = sys6(__NR_move_mount, cow_mnt, (long)"", -100, (long)cow_str, MOVE_MOUNT_F_EMPTY_PATH, (long)cookie);
	sys1(__NR_close, cow_mnt);
	cow_mnt = -1;
	if (r < 0)
		return r;
	{
		/* a working directory inside the workdir is the lower's, under the
		 * overlay now: enter it again by its path (through the overlay) */
		static char cwdbuf[4096];
		if (sys2(__NR_getcwd, cwdbuf, sizeof cwdbuf) > 0)
			sys1(__NR_chdir, cwdbuf);
	}
	return 0;
}

/* Opens name (relative, "" for dir itself) beneath dir without following any
 * symlink or "..": O_PATH, or -errno (openat2 is refused by the filter: one
 * component at a time). */
static long open_beneath(long dir, char *name)
{
	long fd = sys3(__NR_openat, dir, ".", 010000000 | 02000000), next;
	char *p = name, *q;
	while (fd >= 0 && *p) {
		char save;
		for (q = p; *q && *q != '/'; q++)
			;
		save = *q;
		*q = 0;
		if ((q - p == 2 && p[0] == '.' && p[1] == '.') || q == p) {
			*q = save;
			sys1(__NR_close, fd);
			return -22;
		}
		next = sys3(__NR_openat, fd, p, 010000000 | 0400000 /* O_NOFOLLOW */ | 02000000 | (save ? 0200000 : 0));
		*q = save;
		sys1(__NR_close, fd);
		fd = next;
		p = save ? q + 1 : q;
	}
	return fd;
}

/* The run's own ruleset: the table, and a rule for its /proc. Returns its fd or -errno. */
static long own_ruleset(void)
{
	struct st_landlock_rule *rules = (struct st_landlock_rule *)(lltable + 1);
	unsigned long long attr[3];
	long fd, r, proc;
	unsigned int i;

	attr[0] = lltable->handled_fs;
	attr[1] = lltable->handled_net;
	attr[2] = lltable->scoped;
	fd = sys3(__NR_landlock_create_ruleset, attr, lltable->attr_size, 0);
	if (fd < 0)
		return fd;
	for (i = 0; i < lltable->npaths + lltable->nports; i++) {
		if (i < lltable->npaths) {
			struct ll_path_beneath pb;
			pb.allowed_access = rules[i].rights;
			pb.parent_fd = (int)rules[i].fd;
			r = sys4(__NR_landlock_add_rule, fd, LL_RULE_PATH_BENEATH, &pb, 0);
		} else {
			struct ll_net_port np;
			np.allowed_access = rules[i].rights;
			np.port = rules[i].port;
			r = sys4(__NR_landlock_add_rule, fd, LL_RULE_NET_PORT, &np, 0);
		}
		if (r < 0)
			return r;
	}
	if (cow) {
		/* the workdir's rules, on the overlay's inodes */
		long base = sys3(__NR_openat, -100, cow_str, 010000000 | 0200000 | 02000000);
		if (base < 0)
			return base;
		for (i = 0; i < cow->nrules; i++) {
			struct ll_path_beneath pb;
			struct statx sx;
			long rf = open_beneath(base, cow_str + cow_rules[i].name);
			if (rf == -2 /* ENOENT */ || rf == -40 /* ELOOP */ || rf == -20 /* ENOTDIR */)
				continue; /* gone, or a symlink, since the engine listed it: it allows nothing */
			if (rf < 0)
				return rf;
			r = sys5(__NR_statx, rf, "", 0x1000 | 0x100 /* AT_EMPTY_PATH|AT_SYMLINK_NOFOLLOW */, STATX_TYPE, &sx);
			if (r == 0 && (sx.stx_mode & 0170000) == 0120000) {
				sys1(__NR_close, rf);
				continue;
			}
			pb.allowed_access = cow_rules[i].rights;
			pb.parent_fd = (int)rf;
			r = sys4(__NR_landlock_add_rule, fd, LL_RULE_PATH_BENEATH, &pb, 0);
			sys1(__NR_close, rf);
			if (r < 0)
				return r;
		}
		sys1(__NR_close, base);
	}
	if (cflags & ST_CF_DEV) {
		/* listing /dev; the run's ptys; its /dev/shm */
		static const char *const paths[3] = {"/dev", "/dev/pts", "/dev/shm"};
		unsigned long long rights[3];
		rights[0] = lltable->dev_rights, rights[1] = lltable->pts_rights, rights[2] = lltable->shm_rights;
		for (i = 0; i < 3; i++) {
			struct ll_path_beneath pb;
			long d = sys3(__NR_openat, -100, paths[i], 010000000 /* O_PATH */ | 0400000 /* O_NOFOLLOW */ | 02000000);
			if (d < 0)
				return d;
			pb.allowed_access = rights[i];
			pb.parent_fd = (int)d;
			r = sys4(__NR_landlock_add_rule, fd, LL_RULE_PATH_BENEATH, &pb, 0);
			sys1(__NR_close, d);
			if (r < 0)
				return r;
		}
	}
	if (!(cflags & ST_CF_PROC))
		return fd;
	proc = sys3(__NR_openat, -100 /* AT_FDCWD */, "/proc", 010000000 /* O_PATH */ | 02000000 /* O_CLOEXEC */);
	if (proc < 0)
		return proc;
	{
		struct ll_path_beneath pb;
		pb.allowed_access = lltable->proc_rights;
		pb.parent_fd = (int)proc;
		r = sys4(__NR_landlock_add_rule, fd, LL_RULE_PATH_BENEATH, &pb, 0);
	}
	sys1(__NR_close, proc);
	return r < 0 ? r : fd;
}

/* What pid 1 does before it knows its run (done ahead, off the request path): on
 * failure, the step and errno, reported once the run's status fd arrives. */
static unsigned int prep_step;
static long prep_err;

static void confine_self(void);

static void prepare(void)
{
	long r;

	if ((r = TRY(ST_STEP_PDEATHSIG, sys2(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL))) < 0) {
		prep_step = ST_STEP_PDEATHSIG, prep_err = r;
		return;
	}
	if ((r = set_signal(SIGCHLD, SIG_DFL)) < 0) {
		prep_step = ST_STEP_SIGCHLD, prep_err = r;
		return;
	}
	sys1(__NR_close, ST_FD_CONTROL);
	if ((r = TRY(ST_STEP_SETSID, sys1(__NR_setsid, 0))) < 0) {
		prep_step = ST_STEP_SETSID, prep_err = r;
		return;
	}
	if (cflags & ST_CF_PROC) {
		r = mount_proc();
		if (r >= 0 && (cflags & ST_CF_CPUINFO))
			r = mount_cpuinfo((const struct st_config *)cfgbuf);
		if (r < 0) {
			prep_step = ST_STEP_PROC, prep_err = r;
			return;
		}
	}
	if ((cflags & ST_CF_DEV) && (r = mount_dev((const struct st_config *)cfgbuf)) < 0) {
		prep_step = ST_STEP_DEV, prep_err = r;
		return;
	}
	if (cow && (cow->flags & ST_COW_STORAGE)) {
		/* on disk: made once the request arrived (attach_cow), so that no
		 * pid 1 made ahead leaves a layer behind */
	} else if (cow) {
		r = make_cow();
		if (r < 0) {
			prep_step = ST_STEP_COW, prep_err = r;
			return;
		}
	} else {
		confine_self();
	}
}

/* The rest of what pid 1 does before its target: the Landlock domain, the
 * run's user, the capabilities dropped. Ahead of the request (prepare), except
 * with a copy-on-write workdir: its overlay goes over the workdir once the
 * request arrived, and the rules inside the workdir are made on it then (an
 * overlay looked up ahead would keep what it found of the workdir as it was:
 * a file the run before committed would show its old content). */
static void confine_self(void)
{
	long r;
	int i;

	if (cflags & ST_CF_LANDLOCK) {
		/* a domain of its own: the run's processes reach no other run's */
		long rs = ST_FD_RULESET;
		if (lltable) {
			rs = own_ruleset();
			if (rs < 0) {
				prep_step = ST_STEP_LANDLOCK, prep_err = rs;
				return;
			}
		}
		r = TRY(ST_STEP_LANDLOCK, sys2(__NR_landlock_restrict_self, rs, 0));
		if (r < 0) {
			prep_step = ST_STEP_LANDLOCK, prep_err = r;
			return;
		}
	}
	if (cfg_set_ids) {
		if ((r = TRY(ST_STEP_IDS, sys2(__NR_setgroups, 0, 0))) < 0 || (r = sys3(__NR_setresgid, cfg_gid, cfg_gid, cfg_gid)) < 0 ||
		    (r = sys3(__NR_setresuid, cfg_uid, cfg_uid, cfg_uid)) < 0) {
			prep_step = ST_STEP_IDS, prep_err = r;
			return;
		}
	}
	if (cflags & ST_CF_CAPS) {
		/* the zygote's last capabilities (namespaces, the proc mount) end here */
		struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct data[2];
		for (i = 0; i < 64; i++) {
			r = sys2(__NR_prctl, PR_CAPBSET_READ, i);
			if (r == -22 /* EINVAL: past the last capability */)
				break;
			if (r == 0)
				continue; /* not in the bounding set */
			r = TRY(ST_STEP_CAPS, sys2(__NR_prctl, PR_CAPBSET_DROP, i));
			if (r < 0) {
				prep_step = ST_STEP_CAPS, prep_err = r;
				return;
			}
		}
		data[0].effective = data[0].permitted = data[0].inheritable = 0;
		data[1].effective = data[1].permitted = data[1].inheritable = 0;
		r = TRY(ST_STEP_CAPS, sys2(__NR_capset, &hdr, data));
		if (r < 0) {
			prep_step = ST_STEP_CAPS, prep_err = r;
			return;
		}
	}
}

/* Sends one byte with fd as SCM_RIGHTS on sock; 0 or -errno. */
static long send_fd(int sock, int fd)
{
	struct iovec iov;
	struct st_msghdr mh;
	unsigned char ctl[CMSG_SPACE_FDS(1)];
	struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
	char byte = 'U';
	unsigned long i;
	long r;

	iov.iov_base = &byte;
	iov.iov_len = 1;
	for (i = 0; i < sizeof mh; i++)
		((unsigned char *)&mh)[i] = 0;
	mh.iov = &iov;
	mh.iovlen = 1;
	cm->len = sizeof(struct st_cmsghdr) + sizeof(int);
	cm->level = ST_SOL_SOCKET;
	cm->type = ST_SCM_RIGHTS;
	*(int *)(ctl + sizeof(struct st_cmsghdr)) = fd;
	mh.control = ctl;
	mh.controllen = CMSG_SPACE_FDS(1);
	r = sys6(__NR_sendmsg, sock, (long)&mh, ST_MSG_NOSIGNAL, 0, 0, (long)cookie);
	return r < 0 ? r : 0;
}

/* set by the target's vfork child when its execve failed */
static volatile int exec_failed;
static int gate_fd = -1; /* with ST_RQ_GATE: the target waits on it before execve */
/* the target's extra fds (st_request.nextra), kept close-on-exec by pid 1 and placed
 * on 3, 4, … by the target's vfork child; that child's own copy of the status fd */
static int extra_fds[ST_MAX_FDS], extra_moved[ST_MAX_FDS];
static unsigned int n_extra;
static int child_status;

/* pid 1 of one run, once its request arrived. fds: stdin, stdout, stderr, status;
 * never returns. */
static void run_child(struct st_request *rq, int *fds, char *path, char *cwd,
		      char **argv, char **envp)
{
	int status_fd = fds[3], i;
	long pid, r;
	int st;

	if (prep_step)
		step_failed(status_fd, prep_step, prep_err);
	if (cow) {
		if ((r = attach_cow()) < 0)
			step_failed(status_fd, ST_STEP_COW, r);
		confine_self();
		if (prep_step)
			step_failed(status_fd, prep_step, prep_err);
		/* the upper layer, to the engine (before the target can run) */
		r = send_fd(fds[4], (int)cow_upper);
		if (r < 0)
			step_failed(status_fd, ST_STEP_COW, r);
		sys1(__NR_close, cow_upper);
		sys1(__NR_close, fds[4]);
	}
	if (rq->cpu_secs) {
		struct rlimit rl;
		rl.rlim_cur = rq->cpu_secs;
		rl.rlim_max = rq->cpu_secs + 1;
		r = sys2(__NR_setrlimit, RLIMIT_CPU, &rl);
		if (r < 0)
			step_failed(status_fd, ST_STEP_RLIMIT, r);
	}
	if (rq->nofile) {
		struct rlimit rl;
		rl.rlim_cur = rl.rlim_max = rq->nofile;
		r = sys2(__NR_setrlimit, RLIMIT_NOFILE, &rl);
		if (r < 0)
			step_failed(status_fd, ST_STEP_RLIMIT, r);
	}
	if (cwd[0]) {
		r = sys1(__NR_chdir, cwd);
		if (r < 0)
			step_failed(status_fd, ST_STEP_CWD, r);
	}
	for (i = 0; i < 3; i++) {
		r = sys2(__NR_dup2, fds[i], i);
		if (r < 0)
			step_failed(status_fd, ST_STEP_STDIO, r);
	}
	if (status_fd != 3) {
		r = sys3(__NR_dup3, status_fd, 3, 02000000 /* O_CLOEXEC */);
		if (r < 0)
			step_failed(status_fd, ST_STEP_STDIO, r);
		status_fd = 3;
	} else if ((r = sys3(__NR_fcntl, 3, 2 /* F_SETFD */, 1)) < 0) {
		step_failed(status_fd, ST_STEP_STDIO, r);
	}
	if (rq->flags & ST_RQ_GATE) {
		/* the gate on 4, close-on-exec (the target never sees it) */
		r = sys3(__NR_dup3, fds[cow ? 5 : 4], 4, 02000000 /* O_CLOEXEC */);
		if (r < 0)
			step_failed(status_fd, ST_STEP_STDIO, r);
		gate_fd = 4;
	}
	{
		/* everything else closed: the extras (ascending, each > 4) stay, close-on-exec */
		unsigned int lo = gate_fd >= 0 ? 5 : 4, k;
		n_extra = rq->nextra;
		for (k = 0; k < n_extra; k++) {
			unsigned int fd = (unsigned int)fds[4 + (cow ? 1 : 0) + (gate_fd >= 0 ? 1 : 0) + k];
			extra_fds[k] = (int)fd;
			if (fd < lo || (r = sys3(__NR_fcntl, fd, 2 /* F_SETFD */, 1)) < 0)
				step_failed(status_fd, ST_STEP_STDIO, fd < lo ? -22 : r);
			if (fd > lo && (r = sys3(__NR_close_range, lo, fd - 1, 0)) < 0)
				step_failed(status_fd, ST_STEP_STDIO, r);
			lo = fd + 1;
		}
		r = sys3(__NR_close_range, lo, ~0U, 0);
		if (r < 0)
			step_failed(status_fd, ST_STEP_STDIO, r);
	}

	pid = sys5(__NR_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		if (gate_fd >= 0) {
			/* parked: the engine knows our pid now; wait for its byte (EOF: end) */
			char b;
			report(status_fd, ST_STATUS_PARKED, 0, 0, 0, 0);
			do
				r = sys3(__NR_read, gate_fd, &b, 1);
			while (r == -4 /* EINTR */);
			if (r != 1) {
				exec_failed = 1;
				sys1(__NR_exit_group, 127);
			}
			sys1(__NR_close, gate_fd);
		}
		/* (this child shares pid 1's memory: it writes only what pid 1 no longer reads) */
		child_status = status_fd;
		if (n_extra) {
			/* out of the way of 3 .. 3+n-1 first, then onto them (inherited) */
			unsigned int k;
			child_status = (int)sys3(__NR_fcntl, status_fd, 1030 /* F_DUPFD_CLOEXEC */, 3 + n_extra);
			for (k = 0; k < n_extra; k++)
				extra_moved[k] = (int)sys3(__NR_fcntl, extra_fds[k], 1030 /* F_DUPFD_CLOEXEC */, 3 + n_extra);
			for (k = 0; k < n_extra; k++) {
				if (child_status < 0 || extra_moved[k] < 0 || sys2(__NR_dup2, extra_moved[k], 3 + k) < 0) {
					exec_failed = 1;
					report(child_status >= 0 ? child_status : status_fd, ST_STATUS_EXEC, 24 /* EMFILE */, 0, 0, 0);
					sys1(__NR_exit_group, 127);
				}
			}
		}
		r = sys3(__NR_execve, path, argv, envp);
		exec_failed = 1; /* the child shares our memory until it execs or exits */
		report(child_status, ST_STATUS_EXEC, (unsigned int)-r, 0, 0, 0);
		sys1(__NR_exit_group, 127);
	}
	if (pid < 0)
		step_failed(status_fd, ST_STEP_FORK, pid);
	/* vfork: we run again once the target exec'd (or failed to) */
	if (!exec_failed)
		report(status_fd, ST_STATUS_STARTED, (unsigned int)pid, 0, 0, 0);
	for (;;) {
		st = 0;
		r = sys4(__NR_wait4, -1, &st, __WALL, 0);
		if (r == pid)
			break;
		if (r < 0 && r != -4 /* EINTR */)
			break;
	}
	{
		struct k_rusage ru;
		sys2(__NR_getrusage, -1 /* RUSAGE_CHILDREN */, &ru);
		report(status_fd, ST_STATUS_USAGE, 0, (unsigned long long)(ru.utime.sec * 1000000 + ru.utime.usec),
		       (unsigned long long)(ru.stime.sec * 1000000 + ru.stime.usec), (unsigned long long)ru.maxrss);
	}
	report(status_fd, ST_STATUS_EXIT, (unsigned int)st, 0, 0, 0);
	sys1(__NR_exit_group, 0);
}

static void close_fds(int *fds, int n)
{
	int i;
	for (i = 0; i < n; i++)
		sys1(__NR_close, fds[i]);
}

/* One struct st_reply (err: -errno of step) with fd (>= 0) as SCM_RIGHTS. An
 * answer that cannot be sent ends the zygote: the engine then sees its socket
 * close (it never waits for a reply that will not come). */
static void answer(int pid, long err, unsigned int step, int fd)
{
	struct st_reply rp;
	struct iovec iov;
	struct st_msghdr mh;
	unsigned char ctl[CMSG_SPACE_FDS(1)];
	struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
	unsigned long i;

	rp.pid = pid;
	rp.err = (int)err;
	rp.step = err ? step : 0;
	rp.pad = 0;
	iov.iov_base = &rp;
	iov.iov_len = sizeof rp;
	for (i = 0; i < sizeof mh; i++)
		((unsigned char *)&mh)[i] = 0;
	mh.iov = &iov;
	mh.iovlen = 1;
	if (fd >= 0) {
		cm->len = sizeof(struct st_cmsghdr) + sizeof(int);
		cm->level = ST_SOL_SOCKET;
		cm->type = ST_SCM_RIGHTS;
		*(int *)(ctl + sizeof(struct st_cmsghdr)) = fd;
		mh.control = ctl;
		mh.controllen = CMSG_SPACE_FDS(1);
	}
	/* the cookie: a supervised sendmsg would wait on the engine this answers */
	if (sys6(__NR_sendmsg, ST_FD_CONTROL, (long)&mh, ST_MSG_NOSIGNAL, 0, 0, (long)cookie) < 0)
		sys1(__NR_exit_group, 124);
}

/* The zygote could not confine itself: say which step failed and why, and end. */
static void zygote_failed(unsigned int step, long err)
{
	answer(-1, err, step, -1);
	sys1(__NR_exit_group, 120);
}

/* Receives one request (into reqbuf) and its fds; returns its length, 0 at EOF
 * or -errno; *ctrunc when fds were cut. */
static long recv_request(int sock, int *fds, int *nfds, int *ctrunc)
{
	struct iovec iov;
	struct st_msghdr mh;
	unsigned char ctl[CMSG_SPACE_FDS(ST_MAX_FDS)];
	unsigned long i;
	long n;

	iov.iov_base = reqbuf;
	iov.iov_len = sizeof reqbuf;
	for (i = 0; i < sizeof mh; i++)
		((unsigned char *)&mh)[i] = 0;
	mh.iov = &iov;
	mh.iovlen = 1;
	mh.control = ctl;
	mh.controllen = sizeof ctl;
	*nfds = 0;
	n = sys3(__NR_recvmsg, sock, &mh, ST_MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return n;
	if (mh.controllen >= sizeof(struct st_cmsghdr)) {
		struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
		if (cm->level == ST_SOL_SOCKET && cm->type == ST_SCM_RIGHTS) {
			*nfds = (int)((cm->len - sizeof(struct st_cmsghdr)) / sizeof(int));
			if (*nfds > ST_MAX_FDS)
				*nfds = ST_MAX_FDS;
			for (i = 0; i < (unsigned long)*nfds; i++)
				fds[i] = ((int *)(ctl + sizeof(struct st_cmsghdr)))[i];
		}
	}
	*ctrunc = (mh.flags & ST_MSG_CTRUNC) != 0;
	return n;
}

/* Sends len bytes of reqbuf and fds on sock; returns 0 or -errno. */
static long send_request(int sock, long len, int *fds, int nfds)
{
	struct iovec iov;
	struct st_msghdr mh;
	unsigned char ctl[CMSG_SPACE_FDS(ST_MAX_FDS)];
	struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
	unsigned long i;
	long r;

	iov.iov_base = reqbuf;
	iov.iov_len = (unsigned long)len;
	for (i = 0; i < sizeof mh; i++)
		((unsigned char *)&mh)[i] = 0;
	mh.iov = &iov;
	mh.iovlen = 1;
	cm->len = sizeof(struct st_cmsghdr) + (unsigned long)nfds * sizeof(int);
	cm->level = ST_SOL_SOCKET;
	cm->type = ST_SCM_RIGHTS;
	for (i = 0; i < (unsigned long)nfds; i++)
		((int *)(ctl + sizeof(struct st_cmsghdr)))[i] = fds[i];
	mh.control = ctl;
	mh.controllen = CMSG_SPACE_FDS(nfds);
	r = sys6(__NR_sendmsg, sock, (long)&mh, ST_MSG_NOSIGNAL, 0, 0, (long)cookie);
	return r < 0 ? r : 0;
}

/* Parses one request into ptrs[]; returns 0 or -errno. */
static int parse(long n, struct st_request **rqp, char **path, char **cwd, char ***argv, char ***envp)
{
	struct st_request *rq = (struct st_request *)reqbuf;
	char *p = (char *)reqbuf + sizeof *rq, *end = (char *)reqbuf + n;
	unsigned long need, i;

	if (n < (long)sizeof *rq || rq->magic != ST_REQ_MAGIC)
		return -22;
	need = 2 + (unsigned long)rq->argc + rq->envc;
	if (rq->argc == 0 || need + 2 > MAX_PTRS || end[-1] != 0)
		return -7; /* E2BIG */
	for (i = 0; i < need; i++) {
		if (p >= end)
			return -22;
		ptrs[i < 2 ? i : i + (i >= 2 + rq->argc ? 1 : 0)] = p;
		while (p < end && *p)
			p++;
		p++;
	}
	ptrs[2 + rq->argc] = 0;
	ptrs[need + 1] = 0;
	*rqp = rq;
	*path = ptrs[0];
	*cwd = ptrs[1];
	*argv = ptrs + 2;
	*envp = ptrs + 3 + rq->argc;
	return 0;
}

/* The next run's pid 1, made ahead (its namespaces, /proc, Landlock domain and the
 * dropping of capabilities cost more than the rest of a spawn): it waits on a
 * socket for its request, which the zygote forwards. */
static long spare_pid = -1;
static int spare_pidfd = -1, spare_sock = -1;

/* the fds of a run request, in order: stdin, stdout, stderr, status, then the upper
 * layer's socket (with a workdir), the gate (ST_RQ_GATE) and the extras */
static int run_fds(const struct st_request *rq)
{
	return 4 + (cow ? 1 : 0) + ((rq->flags & ST_RQ_GATE) ? 1 : 0) + (int)rq->nextra;
}

static void spare_main(int sock)
{
	int fds[ST_MAX_FDS], nfds, ctrunc = 0, err;
	struct st_request *rq;
	char *path, *cwd, **argv, **envp;
	long n;

	prepare();
	n = recv_request(sock, fds, &nfds, &ctrunc);
	if (n <= 0)
		sys1(__NR_exit_group, 0); /* the zygote is gone, or made another */
	sys1(__NR_close, sock);
	err = parse(n, &rq, &path, &cwd, &argv, &envp);
	if (err || nfds != run_fds(rq) || ctrunc)
		sys1(__NR_exit_group, 125); /* the zygote checked it: not reached */
	run_child(rq, fds, path, cwd, argv, envp);
}

static void drop_spare(void)
{
	if (spare_pid < 0)
		return;
	sys1(__NR_close, spare_sock);
	sys1(__NR_close, spare_pidfd);
	spare_pid = -1;
	spare_sock = spare_pidfd = -1;
}

static long make_spare(void)
{
	int sv[2], pidfd = -1;
	long flags = CLONE_PIDFD | SIGCHLD, r;

	if (spare_pid >= 0)
		return 0;
	r = TRY(ST_STEP_SPARE, sys4(__NR_socketpair, 1 /* AF_UNIX */, 5 /* SOCK_SEQPACKET */ | 02000000 /* SOCK_CLOEXEC */, 0, sv));
	if (r < 0)
		return r;
	if (cflags & ST_CF_NEWPID)
		flags |= CLONE_NEWPID;
	if (cflags & ST_CF_NEWIPC)
		flags |= CLONE_NEWIPC;
	if (cflags & (ST_CF_PROC | ST_CF_COW | ST_CF_DEV))
		flags |= CLONE_NEWNS;
#if defined(__x86_64__)
	r = sys5(__NR_clone, flags, 0, &pidfd, 0, cookie); /* flags, stack, ptid, ctid, tls */
#else
	r = sys5(__NR_clone, flags, 0, &pidfd, cookie, 0); /* flags, stack, ptid, tls, ctid */
#endif
	if (r == 0) {
		sys1(__NR_close, sv[0]);
		spare_main(sv[1]);
	}
	sys1(__NR_close, sv[1]);
	if (r < 0) {
		sys1(__NR_close, sv[0]);
		return r;
	}
	spare_pid = r;
	spare_pidfd = pidfd;
	spare_sock = sv[0];
	return 0;
}

void init_main(long *sp)
{
	struct st_config *c = (struct st_config *)cfgbuf;
	long n, listener = -1;
	(void)sp;

	n = sys4(__NR_pread64, ST_FD_CONFIG, cfgbuf, sizeof cfgbuf, 0);
	if (n < 0)
		zygote_failed(ST_STEP_CONFIG, n);
	if (n < (long)sizeof *c || c->magic != ST_CONFIG_MAGIC || c->bpf_len > ST_MAX_BPF ||
	    (long)(sizeof *c + c->bpf_len * 8) > n)
		zygote_failed(ST_STEP_CONFIG, -22 /* EINVAL */);
	test_fail = c->test_fail;
	if (c->flags & ST_CF_LANDLOCK_TABLE) {
		lltable = (struct st_landlock_table *)(cfgbuf + sizeof *c + c->bpf_len * 8);
		if ((long)(sizeof *c + c->bpf_len * 8 + sizeof *lltable) > n ||
		    lltable->npaths + lltable->nports > ST_MAX_RULES ||
		    (long)(sizeof *c + c->bpf_len * 8 + sizeof *lltable +
			   (lltable->npaths + lltable->nports) * sizeof(struct st_landlock_rule)) > n)
			zygote_failed(ST_STEP_CONFIG, -22 /* EINVAL */);
	}
	if (c->flags & ST_CF_COW) {
		long off = (long)(sizeof *c + c->bpf_len * 8);
		if (lltable)
			off += (long)(sizeof *lltable + (lltable->npaths + lltable->nports) * sizeof(struct st_landlock_rule));
		cow = (struct st_cow *)(cfgbuf + off);
		if (off + (long)sizeof *cow > n || off + (long)(sizeof *cow + cow->nrules * sizeof(struct st_cow_rule) + cow->strlen) != n ||
		    cow->strlen == 0 || (cow->nrules && !lltable))
			zygote_failed(ST_STEP_CONFIG, -22);
		cow_rules = (struct st_cow_rule *)(cow + 1);
		cow_str = (char *)(cow_rules + cow->nrules);
		if (cow_str[cow->strlen - 1] != 0)
			zygote_failed(ST_STEP_CONFIG, -22);
		for (n = 0; n < (long)cow->nrules; n++)
			if (cow_rules[n].name >= cow->strlen)
				zygote_failed(ST_STEP_CONFIG, -22);
	}
	sys1(__NR_close, ST_FD_CONFIG);
	cookie = c->cookie;
	cflags = c->flags;
	cfg_set_ids = (c->flags & ST_CF_SET_IDS) != 0;
	cfg_uid = c->uid;
	cfg_gid = c->gid;
	if (c->flags & ST_CF_RLIMIT_AS) {
		struct rlimit rl;
		rl.rlim_cur = rl.rlim_max = c->as_limit;
		if ((n = TRY(ST_STEP_RLIMIT_AS, sys2(__NR_setrlimit, RLIMIT_AS, &rl))) < 0)
			zygote_failed(ST_STEP_RLIMIT_AS, n);
	}
	/* no transparent huge pages (no_huge_pages): a flag of this process's memory,
	 * which fork copies and execve keeps (the launcher, which shares the host's
	 * memory until its execve, cannot set it) */
	if ((c->flags & ST_CF_NO_THP) && (n = TRY(ST_STEP_THP, sys2(__NR_prctl, 41 /* PR_SET_THP_DISABLE */, 1))) < 0)
		zygote_failed(ST_STEP_THP, n);
	/* nobody may read the cookie out of this process */
	if ((n = TRY(ST_STEP_DUMPABLE, sys2(__NR_prctl, PR_SET_DUMPABLE, 0))) < 0)
		zygote_failed(ST_STEP_DUMPABLE, n);
	if (c->bpf_len) {
		struct sock_fprog prog;
		prog.len = (unsigned short)c->bpf_len;
		prog.filter = (struct sock_filter *)(cfgbuf + sizeof *c);
		unsigned long fl = 0;
		if (c->flags & ST_CF_LISTENER)
			fl |= SECCOMP_FILTER_FLAG_NEW_LISTENER;
		if (c->flags & ST_CF_KILLABLE)
			fl |= 1UL << 5; /* SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (Linux 5.19) */
		listener = TRY(ST_STEP_SECCOMP, sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, fl, &prog));
		if (listener < 0)
			zygote_failed(ST_STEP_SECCOMP, listener);
		if (!(c->flags & ST_CF_LISTENER))
			listener = -1;
	}
	/* children are reaped by the kernel; the engine watches them through pidfds */
	if ((n = set_signal(SIGCHLD, SIG_IGN)) < 0)
		zygote_failed(ST_STEP_SIGCHLD, n);
	/* confined: say so, handing the engine the supervisor's end of the filter */
	answer(0, 0, 0, (int)listener);
	if (listener >= 0)
		sys1(__NR_close, listener);

	make_spare(); /* a failure is retried at the first request, and reported then */
	for (;;) {
		int fds[ST_MAX_FDS], nfds = 0, ctrunc = 0, err, attempt;
		unsigned int step = ST_STEP_REQUEST;
		struct st_request *rq;
		char *path, *cwd, **argv, **envp;

		n = recv_request(ST_FD_CONTROL, fds, &nfds, &ctrunc);
		if (n == -4)
			continue;
		if (n <= 0)
			sys1(__NR_exit_group, 0); /* the engine closed the sandbox */
		err = parse(n, &rq, &path, &cwd, &argv, &envp);
		if (err == 0 && (nfds != run_fds(rq) || ctrunc))
			err = -22;
		for (attempt = 0; err == 0; attempt++) {
			step = ST_STEP_SPARE;
			if ((err = (int)make_spare()) != 0)
				break;
			if ((err = (int)send_request(spare_sock, n, fds, nfds)) == 0)
				break;
			drop_spare(); /* it died waiting: make another, once */
			if (err != -32 /* EPIPE */ || attempt > 0)
				break;
			err = 0;
		}
		close_fds(fds, nfds);
		if (err) {
			answer(-1, err, step, -1);
			continue;
		}
		answer((int)spare_pid, 0, 0, spare_pidfd);
		drop_spare();
		make_spare();
	}
}
