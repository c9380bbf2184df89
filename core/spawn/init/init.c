/* sandtrap-init — the zygote of a sandbox and pid 1 of each of its runs.
 *
 * Freestanding (no libc, a few KiB). The engine's launcher starts one zygote per
 * sandbox with every confinement step that survives execve already applied
 * (rlimits, capabilities, no_new_privs, Landlock). The zygote then applies the
 * steps that must come last — RLIMIT_AS and the seccomp filter — once, and serves
 * run requests on its control socket: for each, it clones a child into a new pid
 * namespace (the filter lets only the zygote do that: the clone carries a secret
 * cookie), and that child — pid 1 of the run — joins the run's cgroups, drops the
 * zygote's last capabilities, starts the target as pid 2 (so the target keeps
 * normal signal semantics), reaps every orphan, and reports the target's status
 * and resource use on the run's status pipe. When pid 1 exits, the kernel kills
 * whatever is left of the run. The filter is inherited, never re-attached: loading
 * a filter costs about 3 us per BPF instruction here.
 *
 *   argv: sandtrap-init
 *   fd 3: configuration (struct config, then the BPF program)
 *   fd 4: control socket (SOCK_SEQPACKET) to the engine
 */
#include <linux/filter.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/signal.h>
#include <linux/wait.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/securebits.h>
#include <linux/socket.h>
#include <linux/time.h>
#include <linux/uio.h>
#include <asm/unistd.h>

#define CONFIG_FD 3
#define CONTROL_FD 4
#define MAGIC 0x31304e49545453ULL /* "STTIN01" little-endian */
#define REQ_MAGIC 0x51525453u    /* "STRQ" */
#define MAX_BPF 4096
#define MAX_REQ (4 << 20)
#define MAX_PTRS (256 << 10)
#define MAX_FDS 16

#define CF_RLIMIT_AS 1
#define CF_NEWPID 2
#define CF_NEWUSER 4

struct config {
	unsigned long long magic;
	unsigned long long flags;
	unsigned long long as_cur, as_max;
	unsigned long long cookie;  /* lets the zygote's clone through the filter */
	unsigned long long bpf_len; /* sock_filter entries */
};

/* One run request: header, then NUL-terminated strings: path, cwd ("" = keep),
 * argv[argc], envp[envc]. fds (SCM_RIGHTS): stdin, stdout, stderr, status, then
 * the cgroup.procs files to join. */
struct request {
	unsigned int magic;
	unsigned int argc, envc, ncgroups;
	unsigned int uid, gid, set_ids, cpu_secs; /* cpu_secs: RLIMIT_CPU of the run, 0 = none */
	unsigned int nproc, pad; /* nproc: RLIMIT_NPROC of the run (counted in its user namespace), 0 = none */
};

/* The zygote's answer: the child's pid (and its pidfd as SCM_RIGHTS) or -errno. */
struct reply {
	int pid;
	int err;
};

/* Status records on a run's status pipe. */
struct status {
	unsigned int kind; /* 'E' exec failed, 'X' target ended, 'R' usage, 'I' init step failed */
	unsigned int value;
	unsigned long long a, b, c;
};

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

static unsigned char cfgbuf[sizeof(struct config) + MAX_BPF * 8];
static unsigned char reqbuf[MAX_REQ];
static char *ptrs[MAX_PTRS];
static unsigned long long cookie;
static unsigned long long cflags;

static void report(int fd, unsigned int kind, unsigned int value,
		   unsigned long long a, unsigned long long b, unsigned long long c)
{
	struct status s;
	s.kind = kind;
	s.value = value;
	s.a = a;
	s.b = b;
	s.c = c;
	sys3(__NR_write, fd, &s, sizeof s);
}

static void set_signal(int sig, void *handler)
{
	struct k_sigaction sa;
	unsigned char *p = (unsigned char *)&sa;
	unsigned long i;
	for (i = 0; i < sizeof sa; i++)
		p[i] = 0;
	sa.handler = handler;
	sys4(__NR_rt_sigaction, sig, &sa, 0, 8);
}

/* pid 1 of one run. fds: stdin, stdout, stderr, status, cgroups...; never returns. */
static void run_child(struct request *rq, int *fds, int nfds, char *path, char *cwd,
		      char **argv, char **envp)
{
	int status_fd = fds[3], i;
	long pid, r;
	int st;

	sys2(__NR_prctl, PR_SET_PDEATHSIG, SIGKILL);
	set_signal(SIGCHLD, SIG_DFL);
	sys1(__NR_close, CONTROL_FD);
	sys1(__NR_setsid, 0);
	if (rq->cpu_secs) {
		struct rlimit rl;
		rl.rlim_cur = rq->cpu_secs;
		rl.rlim_max = rq->cpu_secs + 1;
		sys2(__NR_setrlimit, RLIMIT_CPU, &rl);
	}
	if (rq->nproc) {
		struct rlimit rl;
		rl.rlim_cur = rl.rlim_max = rq->nproc;
		sys2(__NR_setrlimit, RLIMIT_NPROC, &rl);
	}
	for (i = 0; i < (int)rq->ncgroups && 4 + i < nfds; i++) {
		if (sys3(__NR_write, fds[4 + i], "0", 1) != 1)
			goto init_failed_cgroup;
	}
	if (rq->set_ids) {
		if (sys2(__NR_setgroups, 0, 0) < 0 ||
		    sys3(__NR_setresgid, rq->gid, rq->gid, rq->gid) < 0 ||
		    sys3(__NR_setresuid, rq->uid, rq->uid, rq->uid) < 0) {
			report(status_fd, 'I', 'U', 0, 0, 0);
			sys1(__NR_exit_group, 127);
		}
	}
	{
		/* the zygote's last capabilities (pid namespaces, identity) end here */
		struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
		struct __user_cap_data_struct data[2];
		for (i = 0; i < 64; i++)
			if (sys2(__NR_prctl, PR_CAPBSET_DROP, i) < 0 && i > 40)
				break;
		data[0].effective = data[0].permitted = data[0].inheritable = 0;
		data[1].effective = data[1].permitted = data[1].inheritable = 0;
		if (sys2(__NR_capset, &hdr, data) < 0) {
			report(status_fd, 'I', 'P', 0, 0, 0);
			sys1(__NR_exit_group, 127);
		}
	}
	if (cwd[0] && sys1(__NR_chdir, cwd) < 0) {
		report(status_fd, 'I', 'D', 0, 0, 0);
		sys1(__NR_exit_group, 127);
	}
	for (i = 0; i < 3; i++)
		sys2(__NR_dup2, fds[i], i);
	if (status_fd != 3) {
		sys3(__NR_dup3, status_fd, 3, 02000000 /* O_CLOEXEC */);
		status_fd = 3;
	} else {
		sys3(__NR_fcntl, 3, 2 /* F_SETFD */, 1);
	}
	sys3(__NR_close_range, 4, ~0U, 0);

	pid = sys5(__NR_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		r = sys3(__NR_execve, path, argv, envp);
		report(status_fd, 'E', (unsigned int)-r, 0, 0, 0);
		sys1(__NR_exit_group, 127);
	}
	if (pid < 0) {
		report(status_fd, 'I', 'F', (unsigned long long)-pid, 0, 0);
		sys1(__NR_exit_group, 127);
	}
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
		report(status_fd, 'R', 0, (unsigned long long)(ru.utime.sec * 1000000 + ru.utime.usec),
		       (unsigned long long)(ru.stime.sec * 1000000 + ru.stime.usec), (unsigned long long)ru.maxrss);
	}
	report(status_fd, 'X', (unsigned int)st, 0, 0, 0);
	sys1(__NR_exit_group, 0);
init_failed_cgroup:
	report(status_fd, 'I', 'G', 0, 0, 0);
	sys1(__NR_exit_group, 127);
}

static void close_fds(int *fds, int n)
{
	int i;
	for (i = 0; i < n; i++)
		sys1(__NR_close, fds[i]);
}

static void answer(int pid, int err, int pidfd)
{
	struct reply rp;
	struct iovec iov;
	struct st_msghdr mh;
	unsigned char ctl[CMSG_SPACE_FDS(1)];
	struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
	unsigned long i;

	rp.pid = pid;
	rp.err = err;
	iov.iov_base = &rp;
	iov.iov_len = sizeof rp;
	for (i = 0; i < sizeof mh; i++)
		((unsigned char *)&mh)[i] = 0;
	mh.iov = &iov;
	mh.iovlen = 1;
	if (pidfd >= 0) {
		cm->len = sizeof(struct st_cmsghdr) + sizeof(int);
		cm->level = ST_SOL_SOCKET;
		cm->type = ST_SCM_RIGHTS;
		*(int *)(ctl + sizeof(struct st_cmsghdr)) = pidfd;
		mh.control = ctl;
		mh.controllen = CMSG_SPACE_FDS(1);
	}
	sys3(__NR_sendmsg, CONTROL_FD, &mh, 0x4000 /* MSG_NOSIGNAL */);
}

/* Parses one request into ptrs[]; returns 0 or -errno. */
static int parse(long n, struct request **rqp, char **path, char **cwd, char ***argv, char ***envp)
{
	struct request *rq = (struct request *)reqbuf;
	char *p = (char *)reqbuf + sizeof *rq, *end = (char *)reqbuf + n;
	unsigned long need, i;

	if (n < (long)sizeof *rq || rq->magic != REQ_MAGIC)
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

void init_main(long *sp)
{
	struct config *c = (struct config *)cfgbuf;
	long n, r;
	(void)sp;

	n = sys4(__NR_pread64, CONFIG_FD, cfgbuf, sizeof cfgbuf, 0);
	if (n < (long)sizeof *c || c->magic != MAGIC || c->bpf_len > MAX_BPF ||
	    (long)(sizeof *c + c->bpf_len * 8) > n)
		sys1(__NR_exit_group, 120);
	sys1(__NR_close, CONFIG_FD);
	cookie = c->cookie;
	cflags = c->flags;
	if (c->flags & CF_RLIMIT_AS) {
		struct rlimit rl;
		rl.rlim_cur = c->as_cur;
		rl.rlim_max = c->as_max;
		if (sys2(__NR_setrlimit, RLIMIT_AS, &rl) < 0)
			sys1(__NR_exit_group, 121);
	}
	/* nobody may read the cookie out of this process */
	sys2(__NR_prctl, PR_SET_DUMPABLE, 0);
	if (c->bpf_len) {
		struct sock_fprog prog;
		prog.len = (unsigned short)c->bpf_len;
		prog.filter = (struct sock_filter *)(cfgbuf + sizeof *c);
		if (sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
			sys1(__NR_exit_group, 122);
	}
	/* children are reaped by the kernel; the engine watches them through pidfds */
	set_signal(SIGCHLD, SIG_IGN);

	for (;;) {
		struct iovec iov;
		struct st_msghdr mh;
		unsigned char ctl[CMSG_SPACE_FDS(MAX_FDS)];
		int fds[MAX_FDS], nfds = 0, pidfd = -1, err;
		struct request *rq;
		char *path, *cwd, **argv, **envp;
		unsigned long i;
		long flags;

		iov.iov_base = reqbuf;
		iov.iov_len = sizeof reqbuf;
		for (i = 0; i < sizeof mh; i++)
			((unsigned char *)&mh)[i] = 0;
		mh.iov = &iov;
		mh.iovlen = 1;
		mh.control = ctl;
		mh.controllen = sizeof ctl;
		n = sys3(__NR_recvmsg, CONTROL_FD, &mh, ST_MSG_CMSG_CLOEXEC);
		if (n == -4)
			continue;
		if (n <= 0)
			sys1(__NR_exit_group, 0); /* the engine closed the sandbox */
		if (mh.controllen >= sizeof(struct st_cmsghdr)) {
			struct st_cmsghdr *cm = (struct st_cmsghdr *)ctl;
			if (cm->level == ST_SOL_SOCKET && cm->type == ST_SCM_RIGHTS) {
				nfds = (int)((cm->len - sizeof(struct st_cmsghdr)) / sizeof(int));
				if (nfds > MAX_FDS)
					nfds = MAX_FDS;
				for (i = 0; i < (unsigned long)nfds; i++)
					fds[i] = ((int *)(ctl + sizeof(struct st_cmsghdr)))[i];
			}
		}
		err = parse(n, &rq, &path, &cwd, &argv, &envp);
		if (err == 0 && (nfds < 4 || (mh.flags & 0x8 /* MSG_CTRUNC */) || (int)rq->ncgroups > nfds - 4))
			err = -22;
		if (err) {
			close_fds(fds, nfds);
			answer(-1, err, -1);
			continue;
		}
		flags = CLONE_PIDFD | SIGCHLD;
		if (cflags & CF_NEWPID)
			flags |= CLONE_NEWPID;
		if (cflags & CF_NEWUSER)
			flags |= CLONE_NEWUSER;
#if defined(__x86_64__)
		r = sys5(__NR_clone, flags, 0, &pidfd, 0, cookie); /* flags, stack, ptid, ctid, tls */
#else
		r = sys5(__NR_clone, flags, 0, &pidfd, cookie, 0); /* flags, stack, ptid, tls, ctid */
#endif
		if (r == 0)
			run_child(rq, fds, nfds, path, cwd, argv, envp);
		close_fds(fds, nfds);
		if (r < 0) {
			answer(-1, (int)r, -1);
			continue;
		}
		answer((int)r, 0, pidfd);
		sys1(__NR_close, pidfd);
	}
}
