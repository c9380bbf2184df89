// Package supervise is the seccomp user-notification supervisor of a sandbox.
//
// The sandbox's seccomp filter answers SECCOMP_RET_USER_NOTIF for the calls Traps
// lists (nothing else pays a round trip); the zygote loads it with
// SECCOMP_FILTER_FLAG_NEW_LISTENER and hands the listener fd to the engine, which
// calls Start. The supervisor receives each trapped call, reads what it needs from
// the calling thread, checks it against the Config and answers: an errno, a value
// (for a call it performed on the child's behalf) or, only where no racing thread
// can change the outcome, "continue" (the kernel runs the call). Denials records what
// was refused.
//
// # Handlers
//
// Refusals are EACCES unless stated; otherwise the answer is the kernel's own (the
// result of the call performed, or the errno the kernel gives for the child's
// arguments: EBADF, EFAULT, ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, EINVAL, …).
//
//   - flock(fd, op) with LOCK_SH/LOCK_EX (LOCK_UN is not trapped): EACCES when the
//     file is on a read-only mount (fstatfs ST_RDONLY); otherwise the lock is taken
//     on the supervisor's duplicate of the fd (pidfd_getfd: the same open file
//     description, so the lock is the child's) and its result answered
//     (EWOULDBLOCK with LOCK_NB). A blocking lock is tried without blocking; when it
//     would block, the call is handed to a goroutine that retries with a backoff of
//     at most 10 ms while the notification is valid.
//   - fcntl(fd, F_SETLK|F_SETLKW|F_OFD_SETLK|F_OFD_SETLKW, struct flock *): the
//     struct is copied once. OFD locks (owned by the open file description) are
//     performed on the duplicate with the copy: EACCES for a lock on a read-only
//     mount, the kernel's result otherwise (EAGAIN on conflict; F_OFD_SETLKW waits as
//     flock does). POSIX record locks are owned by the process and cannot be taken on
//     its behalf: on a read-only mount a lock gets EACCES and an unlock is answered 0
//     here (no lock can exist there; continuing it would let another thread turn the
//     struct into a lock before the kernel re-reads it); elsewhere the call continues,
//     and the process is audited 2, 20 and 200 ms later (posixaudit.go): a POSIX lock
//     it then holds on a file open through read-only mounts only kills it.
//   - fcntl(fd, F_SETLEASE, type): EACCES on a read-only mount, else continued (a
//     lease cannot be taken on the child's behalf: its break signal would go to the
//     supervisor). F_UNLCK continues.
//   - listen(fd, backlog), trapped only with ListenNeedsBind: EACCES for an AF_INET or
//     AF_INET6 socket whose port is 0 (listen would autobind an ephemeral port no
//     Landlock bind rule saw); otherwise listen is performed on the duplicate, the
//     very socket that was checked, and its result answered.
//   - inotify_add_watch(fd, path, mask): the path is copied once (at most PATH_MAX,
//     NUL-terminated) and resolved as the calling thread would, in its root
//     (/proc/<tid>/root, RESOLVE_IN_ROOT) and, when relative, from its cwd (the path
//     /proc/<tid>/cwd names, checked to lead to that very directory in that root),
//     never through a magic link (ELOOP: /proc/self/… would be the supervisor's), with
//     a final symlink followed by the supervisor (unless IN_DONT_FOLLOW) so that the
//     file it ends at is judged with the directory it is in. The pinned inode is
//     inside the policy when it, or a directory reached from it by opening ".."
//     (crossing mounts, up to the root of the thread's mount namespace), has the
//     (st_dev, st_ino) of an Allowed path — the inodes Landlock attaches those rules
//     to — else EACCES. IN_ONLYDIR on a non-directory is ENOTDIR. The watch is then
//     added by the supervisor on the child's inotify instance (its duplicate, checked
//     to be one: else EINVAL) through /proc/self/fd/<pinned>, and the watch
//     descriptor answered.
//   - Determinism (random_seed, time_start, deterministic_dirs: getrandom, opens of
//     /dev/urandom and /dev/random, the realtime clocks, getdents64, and the vDSO
//     and AT_RANDOM of each new image) is answered by determinism.go, whose
//     comment says how; it decides nothing about access.
//
// Anything the supervisor cannot read or decide (process_vm_readv or pidfd_getfd
// refused, /proc of the thread unreadable, a cwd that cannot be named in its root)
// is a refusal, recorded in Denials with the reason; never "continue".
//
// # Threat model
//
// Every process of the sandbox is assumed hostile: many threads, shared memory, fds
// shared between processes, signals at any time, death at any time, pids recycled
// as fast as it can fork.
//
// What a racing or malicious child cannot do:
//
//   - Change a decision by rewriting memory after the check. Pointer arguments (the
//     inotify path, struct flock) are copied once; the decision and any call made on
//     the child's behalf use the copy. A call is continued only when the decision
//     rests on registers alone (the flock operation, the fcntl command, the lease
//     type) or, for POSIX locks and leases, on the fd's file (see below). Tested with
//     a second thread flipping the buffer during the call (a path between inside and
//     outside, l_type between F_UNLCK and F_RDLCK): a naive check-then-continue
//     handler loses those races in the same tests.
//   - Change the object after the check by re-pointing the fd number (dup2 from
//     another thread): flock, OFD locks, listen and inotify act on the supervisor's
//     duplicate of the file that was checked. Tested by swapping a bound and an
//     unbound socket under listen.
//   - Make the supervisor act for another process (pid reuse). Every handle on the
//     caller — pidfd, /proc/<tid>/root and cwd, the memory read — is taken before
//     SECCOMP_IOCTL_NOTIF_ID_VALID; a notification still valid then means the thread
//     was alive throughout, so the handles were its. Cached pidfds name a struct pid,
//     never a number: one is either dead (pidfd_getfd: ESRCH, reopened) or the current
//     holder of that thread id.
//   - Keep a lock the call did not get. A lock taken for a call that is no longer
//     valid — the child was killed, or a signal interrupted the call, which will be
//     restarted — is released, also when the answer cannot be delivered.
//   - Reach outside the policy with inotify through "..", absolute or relative
//     symlinks, bind mounts, the cwd, magic links (/proc/self/cwd, /proc/self/root, …),
//     or a path longer than PATH_MAX.
//   - Gain anything by killing the supervisor or outliving it. When the listener is
//     closed (Close, the supervisor's death, a loop error) the kernel answers ENOSYS to
//     every waiting and later trapped call: no lock, no listen, no watch — fail
//     closed. (The engine kills the sandbox with its host.)
//   - Stall another sandbox: each has its own supervisor. Handlers run in the
//     sandbox's loop making non-blocking calls only; a waiting lock moves to a
//     goroutine of its own, so it does not hold up the sandbox's other calls.
//
// What it can still do (known gaps):
//
//   - POSIX record locks and leases are checked, then continued: another thread can
//     dup2 a read-only fd over that number between the check and the kernel's call,
//     and lock (or lease) a read-only file. POSIX locks belong to the process and
//     leases signal their owner, so neither can be taken on the child's behalf. A
//     POSIX lock won that way lasts until the audit kills the process (≤200 ms); a
//     lease (only with F_SETLEASE re-allowed: the filter refuses it by default) is
//     not audited.
//   - Blocking flock and F_OFD_SETLKW are emulated by polling (≤10 ms): waiters are
//     not served in order, a waiter can starve under contention, and a lock may be
//     taken up to 10 ms after it is released. A lock taken for a call that then proves
//     interrupted is released as a whole: for an OFD range lock this also drops a lock
//     the same open file description already held on that range (the kernel would
//     keep it). A flock conversion behaves as the kernel's (the old lock is dropped
//     first).
//   - The inotify watch is added with the supervisor's credentials, so the kernel's
//     read-permission check on the watched inode is the supervisor's (as root: any
//     inode inside Allowed, whatever its mode). The policy check holds regardless.
//     Paths through magic links are refused even where the kernel would allow them.
//   - "Read-only" is the mount's flag: this is the policy's read-only grant only when
//     the sandbox's view mounts what it may only read read-only.
//   - A slow filesystem (NFS, FUSE) under an inotify path or a lock slows that
//     sandbox's trapped calls, which are handled one at a time.
//   - listen is performed by the supervisor: an LSM hook on listen (none in Landlock
//     ABI ≤ 7) would see the supervisor, not the sandbox.
//   - The supervisor needs ptrace-attach rights over the sandbox's processes
//     (pidfd_getfd, process_vm_readv, /proc/<tid>/root): root has them; an
//     unprivileged host has them over processes of a user namespace it owns, or that
//     are dumpable and run as its uid. Without them every trapped call is refused
//     (EACCES, with the reason in Denials). Calls from non-leader threads need
//     PIDFD_THREAD (Linux 6.9); before it they are refused.
//   - The filter should not use SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: with it a
//     signal (alarm() around flock) could no longer interrupt a waiting lock.
//
// # Growing
//
// Handlers are a table by system call (handlers, in supervise.go): a handler gets
// the call (arguments, the child's fds, bounded memory reads, path resolution in the
// child's root) and returns its reply; denials are recorded in one place (answer).
// Handlers for connect/sendto by destination, execve, open or a policy callback are
// more entries; Trap describes the filter rule each needs.
package supervise
