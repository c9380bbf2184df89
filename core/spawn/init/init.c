/* sandtrap-init — pid 1 of every sandbox's pid namespace.
 *
 * Freestanding (no libc): it is exec'd for every run, so it must cost almost
 * nothing to start. The engine's launcher has already applied every confinement
 * step that survives execve (cgroup, rlimits, identity, capabilities,
 * no_new_privs, Landlock); init applies the two that must come last — RLIMIT_AS and
 * the seccomp filter — then starts the target as pid 2, so the target keeps normal
 * signal semantics (a pid 1 ignores its own signals), reaps orphans, and reports
 * the target's fate on a status fd. When init exits, the kernel kills everything
 * left in the namespace.
 *
 *   argv: sandtrap-init TARGET_PATH ARGV0 ARGV1 ...
 *   fd 3: configuration (read with pread: shared by concurrent runs)
 *   fd 4: status pipe to the engine
 */
#include <linux/filter.h>
#include <linux/resource.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/signal.h>
#include <linux/wait.h>
#include <asm/unistd.h>

#define CONFIG_FD 3
#define STATUS_FD 4
#define MAGIC 0x31304e49545453ULL /* "STTIN01" little-endian */
#define MAX_BPF 4096

struct config {
	unsigned long long magic;
	unsigned long long flags; /* 1: RLIMIT_AS */
	unsigned long long as_cur, as_max;
	unsigned long long bpf_len; /* sock_filter entries */
};

struct status {
	unsigned int kind;  /* 'E': exec failed (value = errno); 'X': target ended (value = wait status) */
	unsigned int value;
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

static unsigned char buf[sizeof(struct config) + MAX_BPF * 8];

static void report(unsigned int kind, unsigned int value)
{
	struct status s;
	s.kind = kind;
	s.value = value;
	sys3(__NR_write, STATUS_FD, &s, sizeof s);
}

static void die(unsigned int what, long err)
{
	report(what, (unsigned int)-err);
	sys1(__NR_exit_group, 127);
}

void init_main(long *sp)
{
	long argc = sp[0];
	char **argv = (char **)(sp + 1);
	char **envp = argv + argc + 1;
	struct config *c = (struct config *)buf;
	long n, pid, r;
	int st;

	if (argc < 3)
		sys1(__NR_exit_group, 127);
	n = sys4(__NR_pread64, CONFIG_FD, buf, sizeof buf, 0);
	if (n < (long)sizeof *c || c->magic != MAGIC || c->bpf_len > MAX_BPF ||
	    (long)(sizeof *c + c->bpf_len * 8) > n)
		die('C', -22 /* EINVAL */);
	sys1(__NR_close, CONFIG_FD);
	/* the status fd must not reach the target */
	sys3(__NR_fcntl, STATUS_FD, 2 /* F_SETFD */, 1 /* FD_CLOEXEC */);

	if (c->flags & 1) {
		struct rlimit rl;
		rl.rlim_cur = c->as_cur;
		rl.rlim_max = c->as_max;
		r = sys2(__NR_setrlimit, RLIMIT_AS, &rl);
		if (r < 0)
			die('A', r);
	}
	if (c->bpf_len) {
		struct sock_fprog prog;
		prog.len = (unsigned short)c->bpf_len;
		prog.filter = (struct sock_filter *)(buf + sizeof *c);
		r = sys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
		if (r < 0)
			die('S', r);
	}

	pid = sys5(__NR_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0);
	if (pid == 0) {
		r = sys3(__NR_execve, argv[1], argv + 2, envp);
		report('E', (unsigned int)-r);
		sys1(__NR_exit_group, 127);
	}
	if (pid < 0)
		die('F', pid);
	/* Reap every process of the namespace until the target is gone. */
	for (;;) {
		st = 0;
		r = sys4(__NR_wait4, -1, &st, __WALL, 0);
		if (r == pid) {
			report('X', (unsigned int)st);
			break;
		}
		if (r < 0 && r != -4 /* EINTR */)
			break;
	}
	/* Leaving kills the rest of the namespace. */
	sys1(__NR_exit_group, 0);
}
