"""Attacks run *inside* a sandbox by the shared test vectors.

Usage: python3 attack.py ACTION [ARGS...]

Each action tries one thing and prints exactly one line: "OK" (plus data) when it
worked, or the errno name (EPERM, EACCES, ...) when the kernel refused it. The test
vectors assert on that line, so every refusal is checked by its exact errno.
Standard library only; raw syscalls go through ctypes.
"""

import ctypes
import errno
import mmap
import os
import signal
import socket
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# x86_64 syscall numbers
NR = {
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "sethostname": 170,
    "setdomainname": 171,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "unshare": 272,
    "setns": 308,
    "perf_event_open": 298,
    "bpf": 321,
    "userfaultfd": 323,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "open_by_handle_at": 304,
    "name_to_handle_at": 303,
    "ioperm": 173,
    "iopl": 172,
    "quotactl": 179,
    "acct": 163,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "memfd_create": 319,
    "execveat": 322,
    "clone": 56,
    "clone3": 435,
    "personality": 135,
    "fsopen": 430,
    "open_tree": 428,
    "move_mount": 429,
    "pidfd_getfd": 438,
    "kcmp": 312,
}


def err_name(e):
    return errno.errorcode.get(e, str(e))


def sys_call(name, *args):
    """Raw syscall; prints OK or the errno name."""
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ret = libc.syscall(NR[name], *cargs)
    if ret == -1:
        return err_name(ctypes.get_errno())
    if name in ("clone",) and ret == 0:
        os._exit(0)  # the impossible child
    return "OK"


def oserr(fn):
    try:
        out = fn()
        return "OK" + ("" if out is None else " " + str(out))
    except OSError as e:
        return err_name(e.errno)


def read(path):
    with open(path) as f:
        return f.read().strip()


def write(path):
    with open(path, "w") as f:
        f.write("X")


def connect(port, host="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, int(port)))
    data = s.recv(100).decode()
    s.close()
    return data


def bind(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port)))
    s.close()


def abstract(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0" + name)
    return s.recv(100).decode()


def abstract_pair(name):
    # socketpair is always allowed; connecting anywhere is not the point
    a, b = socket.socketpair()
    a.sendall(b"x")
    return b.recv(1).decode()


def memfd_exec():
    fd = libc.syscall(NR["memfd_create"], b"x", 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "memfd_create")
    os.write(fd, open("/bin/true", "rb").read())
    os.execv("/proc/self/fd/%d" % fd, ["true"])


def int80():
    # i386 getpid through int 0x80: a foreign syscall ABI, killed by the filter
    code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])  # mov eax,20; int 0x80; ret
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
    return fn()


def tiocsti():
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSTI, b"x")


def tiocsti_highbits():
    # the kernel truncates the command to 32 bits: the filter must too
    r = libc.syscall(16, 0, ctypes.c_ulong(0x100000000 | 0x5412), ctypes.c_char_p(b"x"))
    return r if r != -1 else (_ for _ in ()).throw(OSError(ctypes.get_errno(), "ioctl"))


def fork_bomb(n):
    pids = []
    for _ in range(int(n)):
        try:
            pids.append(os.fork())
        except OSError as e:
            return "%s after %d" % (err_name(e.errno), len(pids))
        if pids[-1] == 0:
            time.sleep(5)
            os._exit(0)
    return "forked %d" % len(pids)


def mem_hog(mb):
    blocks = []
    for _ in range(int(mb)):
        blocks.append(bytearray(1 << 20))
    return "allocated %d MiB" % len(blocks)


def fd_exhaust():
    fds = []
    try:
        while True:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        return "%s after %d" % (err_name(e.errno), len(fds))


def disk_fill(path, mb):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of dying
    chunk = b"x" * (1 << 20)
    n = 0
    with open(path, "wb", buffering=0) as f:
        try:
            for _ in range(int(mb)):
                f.write(chunk)
                n += 1
        except OSError as e:
            return "%s after %d MiB" % (err_name(e.errno), n)
    return "wrote %d MiB" % n


# -- issue 10: fd-based metadata, set-id files, IPC, network, /proc, limits, xattrs --
#
# The actions in MORE return what follows "OK" (guard() turns an OSError into its errno
# name); those in RAW_LINE return their whole line (a verdict such as "EACCES no race").

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
IPC_CREAT = 0o1000
NR.update(
    {
        "open": 2,
        "creat": 85,
        "mkdir": 83,
        "mknod": 133,
        "openat": 257,
        "mkdirat": 258,
        "mknodat": 259,
        "fchownat": 260,
        "linkat": 265,
        "openat2": 437,
        "fchmodat2": 452,
        "setxattrat": 463,
        "getxattrat": 464,
        "listxattrat": 465,
        "removexattrat": 466,
        "file_getattr": 468,
        "file_setattr": 469,
        "inotify_init1": 294,
        "inotify_add_watch": 254,
        "fallocate": 285,
        "sendmmsg": 307,
        "listen": 50,
        "shmget": 29,
        "shmat": 30,
        "shmdt": 67,
        "semget": 64,
        "msgget": 68,
        "msgsnd": 69,
        "mq_open": 240,
    }
)


def raw(name, *args):
    """Raw syscall returning its value; raises OSError with the errno."""
    cargs = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ret = libc.syscall(NR[name], *cargs)
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret


def guard(fn, *args):
    try:
        out = fn(*args)
        return "OK" + ("" if out is None else " " + str(out))
    except OSError as e:
        return err_name(e.errno)


def on_fd(path, fn, flags=os.O_RDONLY):
    fd = os.open(path, flags)
    try:
        return fn(fd)
    finally:
        os.close(fd)


# class 1: changing or locking what a read-only grant exposes (the fd is O_RDONLY)


def fchmod(path, mode):
    on_fd(path, lambda fd: os.fchmod(fd, int(mode, 8)))


def fchown_group(path):
    on_fd(path, lambda fd: os.fchown(fd, -1, os.getgid()))


def futimens(path):
    on_fd(path, lambda fd: os.utime(fd, (0, 0)))


def fsetxattr(path, name, value):
    on_fd(path, lambda fd: os.setxattr(fd, name, value.encode()))


def fsetxattr_caps(path):
    # a valid VFS_CAP_REVISION_2 blob, effective, permitting CAP_SETUID
    blob = struct.pack("<IIIII", 0x02000000 | 1, 1 << 7, 0, 0, 0)
    on_fd(path, lambda fd: os.setxattr(fd, "security.capability", blob))


def fsetxattr_acl(path):
    # system.posix_acl_access: user::rw- group::r-- other::rw- (a world-writable file)
    ent = lambda tag, perm: struct.pack("<HHI", tag, perm, 0xFFFFFFFF)
    blob = struct.pack("<I", 2) + ent(0x01, 6) + ent(0x04, 4) + ent(0x20, 6)
    on_fd(path, lambda fd: os.setxattr(fd, "system.posix_acl_access", blob))


def fremovexattr(path, name):
    on_fd(path, lambda fd: os.removexattr(fd, name))


CHATTR = {"i": 0x10, "a": 0x20, "d": 0x40, "A": 0x80}


def chattr(path, flag):
    import array
    import fcntl

    def go(fd):
        buf = array.array("i", [0])
        fcntl.ioctl(fd, 0x80086601, buf, True)  # FS_IOC_GETFLAGS
        buf[0] |= CHATTR[flag]
        fcntl.ioctl(fd, 0x40086602, buf, True)  # FS_IOC_SETFLAGS

    on_fd(path, go)


def fsxattr_ioctl(path):
    import fcntl

    def go(fd):
        buf = bytearray(28)
        fcntl.ioctl(fd, 0x801C581F, buf, True)  # FS_IOC_FSGETXATTR
        struct.pack_into("<I", buf, 0, struct.unpack_from("<I", buf)[0] | 0x80)  # FS_XFLAG_NODUMP
        fcntl.ioctl(fd, 0x401C5820, bytes(buf))  # FS_IOC_FSSETXATTR

    on_fd(path, go)


def flock(path):
    import fcntl

    on_fd(path, lambda fd: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB))


def setlease(path):
    import fcntl

    on_fd(path, lambda fd: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK))


def flock_struct(kind):
    return struct.pack("hhqqi4x", kind, 0, 0, 0, 0)  # l_type, SEEK_SET, start 0, len 0 (all), pid 0


def setlk(path, cmd):
    import fcntl

    c = {
        "setlk": fcntl.F_SETLK,
        "setlkw": fcntl.F_SETLKW,
        "ofd_setlk": fcntl.F_OFD_SETLK,
        "ofd_setlkw": fcntl.F_OFD_SETLKW,
    }[cmd]
    on_fd(path, lambda fd: fcntl.fcntl(fd, c, flock_struct(fcntl.F_RDLCK)))


def opath_fchownat(path):
    on_fd(path, lambda fd: raw("fchownat", fd, b"", -1, os.getgid(), AT_EMPTY_PATH), os.O_PATH)


def opath_fchmodat2(path, mode):
    on_fd(path, lambda fd: raw("fchmodat2", fd, b"", int(mode, 8), AT_EMPTY_PATH), os.O_PATH)


def open_trunc(path):
    os.close(os.open(path, os.O_RDONLY | os.O_TRUNC))


# class 2: set-uid and set-gid files in the writable tree


def create_mode(how, path, mode):
    """Create path with the given mode through one system call; prints the mode it got."""
    import stat

    os.umask(0o022)
    m, p = int(mode, 8), path.encode()
    wr = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    if how == "open":
        os.close(raw("open", p, wr, m))
    elif how == "openat":
        os.close(raw("openat", AT_FDCWD, p, wr, m))
    elif how == "creat":
        os.close(raw("creat", p, m))
    elif how == "mknod":
        raw("mknod", p, stat.S_IFREG | m, 0)
    elif how == "mknodat":
        raw("mknodat", AT_FDCWD, p, stat.S_IFREG | m, 0)
    elif how == "mkdir":
        raw("mkdir", p, m)
    elif how == "mkdirat":
        raw("mkdirat", AT_FDCWD, p, m)
    elif how == "tmpfile":  # O_TMPFILE is not O_CREAT; linkat gives it a name
        fd = raw("openat", AT_FDCWD, os.path.dirname(path).encode(), os.O_TMPFILE | os.O_WRONLY, m)
        raw("linkat", fd, b"", AT_FDCWD, p, AT_EMPTY_PATH)
        os.close(fd)
    elif how == "openat2":
        how_s = ctypes.create_string_buffer(struct.pack("QQQ", wr, m, 0), 24)
        os.close(raw("openat2", AT_FDCWD, p, how_s, 24))
    else:
        return "unknown way " + how
    return oct(os.stat(path).st_mode & 0o7777)


# class 3: SysV and POSIX IPC (keys are decimal; the POSIX queue of key K is "sandtrap-K")


def shmget(key):
    raw("shmget", int(key), 0, 0)


def msgget(key):
    raw("msgget", int(key), 0)


def semget(key):
    raw("semget", int(key), 0, 0)


def mq_open(key):
    os.close(raw("mq_open", ("sandtrap-%d" % int(key)).encode(), os.O_RDONLY, 0, 0))


def touch_shm(key, size):
    shmid = raw("shmget", key, size, IPC_CREAT | 0o600)
    addr = raw("shmat", shmid, 0, 0)
    ctypes.memset(ctypes.c_void_p(addr), 1, size)
    raw("shmdt", ctypes.c_void_p(addr))


def ipc_leak(key, mb):
    """Leave a touched shm segment, a message queue with a message, a semaphore set (and,
    if the kernel lets it, a POSIX queue) behind, all under key (no IPC_RMID, no unlink)."""
    k = int(key)
    touch_shm(k, int(mb) << 20)
    q = raw("msgget", k, IPC_CREAT | 0o600)
    msg = ctypes.create_string_buffer(struct.pack("q", 1) + b"LEAK")
    raw("msgsnd", q, msg, 4, 0)
    raw("semget", k, 1, IPC_CREAT | 0o600)
    try:  # Landlock refuses to open it, but the kernel creates the queue first
        os.close(raw("mq_open", ("sandtrap-%d" % k).encode(), os.O_CREAT | os.O_RDWR, 0o600, 0))
    except OSError:
        pass
    return "left shm,msg,sem"


def ipc_hold(key, secs):
    """ipc_leak of 1 MiB, then stay alive (a concurrent run looks for it)."""
    ipc_leak(key, 1)
    print("HELD", flush=True)
    time.sleep(float(secs))


def shm_hog(key, mb, chunk):
    """mb MiB of SysV shm in chunk-MiB segments (keys key, key+1, ...), each attached,
    touched and detached: the address space never holds more than one chunk."""
    done, i = 0, 0
    while done < int(mb):
        touch_shm(int(key) + i, int(chunk) << 20)
        done += int(chunk)
        i += 1
    return "touched %d MiB" % done


# class 4: every way of opening a TCP connection or a listening socket


class SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint16),
        ("port", ctypes.c_uint16),
        ("addr", ctypes.c_uint8 * 4),
        ("zero", ctypes.c_uint8 * 8),
    ]


class SockaddrIn6(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint16),
        ("port", ctypes.c_uint16),
        ("flow", ctypes.c_uint32),
        ("addr", ctypes.c_uint8 * 16),
        ("scope", ctypes.c_uint32),
    ]


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", Msghdr), ("len", ctypes.c_uint)]


def sendmmsg_to(sock, data, port, v6):
    if v6:
        sa = SockaddrIn6(
            socket.AF_INET6,
            socket.htons(port),
            0,
            (ctypes.c_uint8 * 16)(*socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.1")),
            0,
        )
    else:
        sa = SockaddrIn(socket.AF_INET, socket.htons(port), (ctypes.c_uint8 * 4)(127, 0, 0, 1))
    buf = ctypes.create_string_buffer(data, len(data))
    iov = Iovec(ctypes.cast(buf, ctypes.c_void_p), len(data))
    mm = Mmsghdr(
        Msghdr(ctypes.cast(ctypes.pointer(sa), ctypes.c_void_p), ctypes.sizeof(sa), ctypes.pointer(iov), 1, None, 0, 0),
        0,
    )
    raw("sendmmsg", sock.fileno(), ctypes.byref(mm), 1, socket.MSG_FASTOPEN)
    return mm.len


def fastopen(port, via, fam="4"):
    """Data to a TCP port through MSG_FASTOPEN (no connect() call)."""
    port, v6, data = int(port), fam == "6", b"FASTOPEN"
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    addr = ("::ffff:127.0.0.1", port) if v6 else ("127.0.0.1", port)
    if via == "sendto":
        n = s.sendto(data, socket.MSG_FASTOPEN, addr)
    elif via == "sendmsg":
        n = s.sendmsg([data], [], socket.MSG_FASTOPEN, addr)
    else:
        n = sendmmsg_to(s, data, port, v6)
    time.sleep(0.3)  # the listener records it before the run ends
    s.close()
    return "sent %d" % n


def listen_unbound(fam):
    s = socket.socket(socket.AF_INET6 if fam == "6" else socket.AF_INET, socket.SOCK_STREAM)
    s.listen(1)  # autobinds a port no bind() rule saw
    return "listening on %d" % s.getsockname()[1]


def bind_listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port)))
    s.listen(1)
    return "listening on %d" % s.getsockname()[1]


def bind_zero_listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return "listening on %d" % s.getsockname()[1]


def tfo_connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, 30, 1)  # TCP_FASTOPEN_CONNECT
    s.connect(("127.0.0.1", int(port)))
    s.send(b"TFO")
    time.sleep(0.3)
    return "sent"


# class 5: /proc


def proc_pids():
    return ",".join(str(p) for p in sorted(int(e) for e in os.listdir("/proc") if e.isdigit()))


def stat_path(path):
    os.stat(path)


def open_ro(path):
    os.close(os.open(path, os.O_RDONLY))


def open_wo(path):
    os.close(os.open(path, os.O_WRONLY))  # opened for writing; nothing is written


def proc_fd_write(pid):
    """Write FORGED into every fd of pid through /proc/pid/fd/N."""
    wrote, errs = 0, set()
    for fd in os.listdir("/proc/%s/fd" % pid):
        try:
            f = os.open("/proc/%s/fd/%s" % (pid, fd), os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            errs.add(err_name(e.errno))
            continue
        try:
            os.write(f, b"FORGED\n")
            wrote += 1
        except OSError as e:
            errs.add(err_name(e.errno))
        finally:
            os.close(f)
    if wrote:
        return "OK wrote %d" % wrote
    return ",".join(sorted(errs)) or "no fds"


def read_dev(path):
    return "read %d" % on_fd(path, lambda fd: len(os.read(fd, 512)))


# class 8: limits


def fallocate(path, mb, mode):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    fl = {"keep": 1, "plain": 0}[mode]  # FALLOC_FL_KEEP_SIZE
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        raw("fallocate", fd, fl, 0, int(mb) << 20)
        return "allocated %d MiB" % ((os.fstat(fd).st_blocks * 512) >> 20)
    finally:
        os.close(fd)


def cpu_chain(n, secs):
    """n processes one after the other, each burning secs of CPU."""
    for _ in range(int(n)):
        pid = os.fork()
        if pid == 0:
            end = time.process_time() + float(secs)
            while time.process_time() < end:
                pass
            os._exit(0)
        os.waitpid(pid, 0)
    return "ran %s" % n


def outq(s):
    import fcntl
    import termios

    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]  # SIOCOUTQ


def fill(s):
    s.setblocking(False)
    chunk = b"x" * 65536
    while True:
        try:
            s.send(chunk)
        except (BlockingIOError, InterruptedError):
            return


def queued(socks, limit_mb):
    total = sum(outq(s) for s in socks)
    if total <= int(limit_mb) << 20:
        return "OK within %s MiB" % limit_mb
    return "EXCEEDED %d MiB queued" % (total >> 20)


def tcp_fill(port, n, limit_mb):
    """Queue send buffers to a listener that never reads, over n connections."""
    socks = []
    for _ in range(int(n)):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.connect(("127.0.0.1", int(port)))
        fill(s)
        socks.append(s)
    time.sleep(0.2)
    for s in socks:
        fill(s)
    return queued(socks, limit_mb)


def unix_fill(n, limit_mb):
    """The same with socketpairs (always allowed), nobody reading the other end."""
    pairs = [socket.socketpair() for _ in range(int(n))]
    for a, _ in pairs:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        fill(a)
    return queued([a for a, _ in pairs], limit_mb)


def inotify_hold(secs):
    """inotify instances until the kernel refuses; report, then hold them."""
    fds = []
    err = "none"
    try:
        while len(fds) < 100000:
            fds.append(raw("inotify_init1", 0))
    except OSError as e:
        err = err_name(e.errno)
    print("HELD %d %s" % (len(fds), err), flush=True)
    time.sleep(float(secs))


def fork_hold(n, secs, tag=""):
    """Fork up to n children that sleep secs; hold them as long (tag: any marker, ignored)."""
    kids, err = 0, ""
    for _ in range(int(n)):
        try:
            pid = os.fork()
        except OSError as e:
            err = " " + err_name(e.errno)
            break
        if pid == 0:
            time.sleep(float(secs))
            os._exit(0)
        kids += 1
    time.sleep(float(secs))
    return "forked %d%s" % (kids, err)


# per-user kernel budgets a run shares with the host user (the host probes them while
# a run holds them: core/engine/attack_test.go)


class Siginfo(ctypes.Structure):
    _fields_ = [("signo", ctypes.c_int), ("errno", ctypes.c_int), ("code", ctypes.c_int), ("pad", ctypes.c_byte * 116)]


def sigqueue_one():
    sig = signal.SIGRTMIN
    signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
    si = Siginfo(sig, 0, -1)  # SI_QUEUE
    if libc.syscall(129, os.getpid(), sig, ctypes.byref(si)) != 0:  # rt_sigqueueinfo
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def sigqueue_hold(secs):
    """Queue real-time signals to itself (blocked) until the kernel refuses; hold them."""
    n, err = 0, "none"
    try:
        while n < 10000000:
            sigqueue_one()
            n += 1
    except OSError as e:
        err = err_name(e.errno)
    print("HELD %d %s" % (n, err), flush=True)
    time.sleep(float(secs))


def mq_hold(tag, secs):
    """POSIX queues sandtrap-TAG-0, -1, ... until the kernel refuses (each charges the
    user's RLIMIT_MSGQUEUE when it is created, even if Landlock then refuses the open)."""
    n, err = 0, "none"
    while n < 1000:
        try:
            os.close(
                raw("mq_open", ("sandtrap-%s-%d" % (tag, n)).encode(), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, 0)
            )
        except OSError as e:
            if e.errno != errno.EACCES:
                err = err_name(e.errno)
                break
        n += 1
    print("HELD %d %s" % (n, err), flush=True)
    time.sleep(float(secs))


def mq_probe(tag):
    name = ("sandtrap-%s-probe" % tag).encode()
    os.close(raw("mq_open", name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, 0))
    libc.syscall(241, name)  # mq_unlink


def inotify_watch_hold(secs, *roots):
    """inotify watches on every inode under roots, over as many instances as it takes,
    until the kernel refuses (the user's max_user_watches); hold them."""
    paths = []
    for r in roots:
        for d, _dirs, files in os.walk(r):
            paths.append(d)
            paths.extend(os.path.join(d, f) for f in files)
    add = libc.syscall
    n, err, fds = 0, "none", []
    enc = [p.encode() for p in paths]
    while err == "none" and len(fds) < 64:
        try:
            fds.append(raw("inotify_init1", 0))
        except OSError as e:
            err = err_name(e.errno)
            break
        for p in enc:
            if add(NR["inotify_add_watch"], fds[-1], p, 0x100) < 0:
                e = ctypes.get_errno()
                if e == errno.ENOSPC:
                    err = "ENOSPC"
                    break
            else:
                n += 1
    print("HELD %d %s" % (n, err), flush=True)
    time.sleep(float(secs))


# class 9: reads outside the policy, and the xattr/attr calls libseccomp may not know


class XattrArgs(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


def getxattr(path, name, follow="1"):
    return os.getxattr(path, name, follow_symlinks=follow == "1").decode()


def listxattr(path, follow="1"):
    return ",".join(sorted(os.listxattr(path, follow_symlinks=follow == "1")))


def fgetxattr(path, name):
    return on_fd(path, lambda fd: os.getxattr(fd, name)).decode()


def getxattrat(path, name, empty=""):
    buf = ctypes.create_string_buffer(256)
    args = XattrArgs(ctypes.addressof(buf), 256, 0)
    if empty:  # an O_PATH fd of path, AT_EMPTY_PATH
        n = on_fd(
            path,
            lambda fd: raw(
                "getxattrat", fd, b"", AT_EMPTY_PATH, name.encode(), ctypes.byref(args), ctypes.sizeof(args)
            ),
            os.O_PATH,
        )
    else:
        n = raw("getxattrat", AT_FDCWD, path.encode(), 0, name.encode(), ctypes.byref(args), ctypes.sizeof(args))
    return buf.raw[:n].decode()


def listxattrat(path):
    buf = ctypes.create_string_buffer(1024)
    n = raw("listxattrat", AT_FDCWD, path.encode(), 0, buf, 1024)
    return ",".join(sorted(x.decode() for x in buf.raw[:n].split(b"\0") if x))


def setxattrat(path, name, value):
    v = ctypes.create_string_buffer(value.encode(), len(value))
    args = XattrArgs(ctypes.addressof(v), len(value), 0)
    raw("setxattrat", AT_FDCWD, path.encode(), 0, name.encode(), ctypes.byref(args), ctypes.sizeof(args))


def removexattrat(path, name):
    raw("removexattrat", AT_FDCWD, path.encode(), 0, name.encode())


def file_setattr(path):
    """chattr +d by path (file_getattr/file_setattr, Linux 6.17)."""
    attr = ctypes.create_string_buffer(24)
    raw("file_getattr", AT_FDCWD, path.encode(), attr, 24, 0)
    ctypes.c_uint64.from_buffer(attr).value |= 0x80  # FS_XFLAG_NODUMP
    raw("file_setattr", AT_FDCWD, path.encode(), attr, 24, 0)


IN_ALL_EVENTS = 0xFFF


def inotify_watch(path):
    ifd = raw("inotify_init1", 0)
    raw("inotify_add_watch", ifd, path.encode(), IN_ALL_EVENTS)


def inotify_event(d):
    import select

    ifd = raw("inotify_init1", 0)
    raw("inotify_add_watch", ifd, d.encode(), 0x100)  # IN_CREATE
    open(os.path.join(d, "ino_new"), "w").close()
    if not select.select([ifd], [], [], 2)[0]:
        return "no event"
    data = os.read(ifd, 4096)
    _wd, _mask, _cookie, ln = struct.unpack_from("iIII", data)
    return "event " + data[16 : 16 + ln].rstrip(b"\0").decode()


# races against a supervisor that checks an argument and then lets the call go on


def flipper(a, b):
    """A thread that keeps swapping: calls a() then b() until stopped."""
    import threading

    stop = threading.Event()

    def loop():
        while not stop.is_set():
            a()
            b()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return lambda: (stop.set(), t.join())


RACE_S = 1.5


def race_ofd_lock(ro, rw):
    """F_OFD_SETLK on an fd number that another thread keeps pointing at a file of the
    writable tree and at a read-only one (dup2): a lock must never land on the latter."""
    import fcntl

    lk = flock_struct(fcntl.F_RDLCK)
    r0, w0 = os.open(ro, os.O_RDONLY), os.open(rw, os.O_RDONLY)
    try:
        fcntl.fcntl(r0, fcntl.F_OFD_SETLK, lk)
        return "ESCAPED directly"
    except OSError as e:
        direct = err_name(e.errno)
    n = os.dup(w0)
    stop = flipper(lambda: os.dup2(r0, n), lambda: os.dup2(w0, n))
    end = time.monotonic() + RACE_S
    while time.monotonic() < end:
        try:
            fcntl.fcntl(n, fcntl.F_OFD_SETLK, lk)
        except OSError:
            pass
    stop()
    probe = os.open(ro, os.O_RDONLY)
    got = fcntl.fcntl(probe, fcntl.F_OFD_GETLK, flock_struct(fcntl.F_WRLCK))
    if struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK:
        return "RACED"
    return direct + " no race"


def race_inotify(allowed, outside):
    """inotify_add_watch on a path buffer another thread keeps rewriting."""
    ifd = raw("inotify_init1", 0)
    try:
        raw("inotify_add_watch", ifd, outside.encode(), IN_ALL_EVENTS)
        return "ESCAPED directly"
    except OSError as e:
        direct = err_name(e.errno)
    wd_ok = raw("inotify_add_watch", ifd, allowed.encode(), IN_ALL_EVENTS)
    size = max(len(allowed), len(outside)) + 1
    a = ctypes.create_string_buffer(allowed.encode(), size)
    o = ctypes.create_string_buffer(outside.encode(), size)
    buf = ctypes.create_string_buffer(allowed.encode(), size)
    stop = flipper(lambda: ctypes.memmove(buf, o, size), lambda: ctypes.memmove(buf, a, size))
    end, raced = time.monotonic() + RACE_S, False
    while time.monotonic() < end and not raced:
        wd = libc.syscall(NR["inotify_add_watch"], ifd, buf, IN_ALL_EVENTS)
        raced = wd >= 0 and wd != wd_ok  # the same inode always gets the same wd
    stop()
    return "RACED" if raced else direct + " no race"


def race_listen(port):
    """listen() on an fd number that another thread keeps pointing at a socket bound to
    an allowed port and at an unbound one: the unbound one must never listen."""
    b = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    b.bind(("127.0.0.1", int(port)))
    u = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        u.listen(1)
        return "ESCAPED directly"
    except OSError as e:
        direct = err_name(e.errno)
    n = os.dup(b.fileno())
    stop = flipper(lambda: os.dup2(u.fileno(), n), lambda: os.dup2(b.fileno(), n))
    end = time.monotonic() + RACE_S
    while time.monotonic() < end and u.getsockname()[1] == 0:
        libc.syscall(NR["listen"], n, 1)
    stop()
    return "RACED" if u.getsockname()[1] != 0 else direct + " no race"


def abstract_listen(name, secs):
    """An abstract unix socket (a concurrent run tries to reach it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\0" + name)
    s.listen(4)
    s.settimeout(float(secs))
    print("LISTENING", flush=True)
    try:
        c, _ = s.accept()
        c.sendall(b"HELLO")
        c.close()
        return "accepted"
    except TimeoutError:
        return "nobody came"


def connect_to(host, port):
    """TCP to host:port (an IPv6 address goes on an IPv6 socket); the greeting."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, int(port)))
    data = s.recv(100).decode()
    s.close()
    return data


def udp_send(via, host, port):
    """One datagram to host:port through sendto, sendmsg, sendmmsg or connect+send."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    addr = (host, int(port))
    if via == "sendto":
        s.sendto(b"U", addr)
    elif via == "sendmsg":
        s.sendmsg([b"U"], [], 0, addr)
    elif via == "connect":
        s.connect(addr)
        s.send(b"U")
    elif via == "sendmmsg":
        if fam != socket.AF_INET:
            raise OSError(errno.EINVAL, "sendmmsg: IPv4 only here")
        sa = SockaddrIn(socket.AF_INET, socket.htons(int(port)), (ctypes.c_uint8 * 4)(*socket.inet_aton(host)))
        buf = ctypes.create_string_buffer(b"U", 1)
        iov = Iovec(ctypes.cast(buf, ctypes.c_void_p), 1)
        mm = Mmsghdr(
            Msghdr(
                ctypes.cast(ctypes.pointer(sa), ctypes.c_void_p), ctypes.sizeof(sa), ctypes.pointer(iov), 1, None, 0, 0
            ),
            0,
        )
        raw("sendmmsg", s.fileno(), ctypes.byref(mm), 1, 0)
    s.close()


def source_route(fam):
    """An IPv4 loose source route (or an IPv6 routing header) on a socket."""
    if fam == "6":
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        # type 4 (segment routing) header, one segment ::1
        hdr = bytes([0, 2, 4, 0, 0, 0, 0, 0]) + socket.inet_pton(socket.AF_INET6, "::1")
        s.setsockopt(socket.IPPROTO_IPV6, 57, hdr)  # IPV6_RTHDR
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # NOP, LSRR len 7 ptr 4 via 127.0.0.2
        s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([1, 0x83, 7, 4, 127, 0, 0, 2]))
    s.close()


MORE = {
    "connect_to": connect_to,
    "udp_send": udp_send,
    "source_route": source_route,
    "fchmod": fchmod,
    "fchown_group": fchown_group,
    "futimens": futimens,
    "fsetxattr": fsetxattr,
    "fsetxattr_caps": fsetxattr_caps,
    "fsetxattr_acl": fsetxattr_acl,
    "fremovexattr": fremovexattr,
    "chattr": chattr,
    "fsxattr_ioctl": fsxattr_ioctl,
    "flock": flock,
    "setlease": setlease,
    "setlk": lambda p: setlk(p, "setlk"),
    "setlkw": lambda p: setlk(p, "setlkw"),
    "ofd_setlk": lambda p: setlk(p, "ofd_setlk"),
    "ofd_setlkw": lambda p: setlk(p, "ofd_setlkw"),
    "opath_fchownat": opath_fchownat,
    "opath_fchmodat2": opath_fchmodat2,
    "open_trunc": open_trunc,
    "create_mode": create_mode,
    "shmget": shmget,
    "msgget": msgget,
    "semget": semget,
    "mq_open": mq_open,
    "ipc_leak": ipc_leak,
    "ipc_hold": ipc_hold,
    "shm_hog": shm_hog,
    "fastopen": fastopen,
    "listen_unbound": listen_unbound,
    "bind_listen": bind_listen,
    "bind_zero_listen": bind_zero_listen,
    "tfo_connect": tfo_connect,
    "proc_pids": proc_pids,
    "stat": stat_path,
    "open_ro": open_ro,
    "open_wo": open_wo,
    "read_dev": read_dev,
    "fallocate": fallocate,
    "cpu_chain": cpu_chain,
    "inotify_hold": inotify_hold,
    "fork_hold": fork_hold,
    "getxattr": getxattr,
    "lgetxattr": lambda p, n: getxattr(p, n, "0"),
    "listxattr": listxattr,
    "llistxattr": lambda p: listxattr(p, "0"),
    "fgetxattr": fgetxattr,
    "getxattrat": getxattrat,
    "opath_getxattrat": lambda p, n: getxattrat(p, n, "empty"),
    "listxattrat": listxattrat,
    "setxattrat": setxattrat,
    "removexattrat": removexattrat,
    "file_setattr": file_setattr,
    "inotify_watch": inotify_watch,
    "inotify_event": inotify_event,
    "abstract_listen": abstract_listen,
    "sigqueue_hold": sigqueue_hold,
    "sigqueue_probe": sigqueue_one,
    "mq_hold": mq_hold,
    "mq_probe": mq_probe,
    "inotify_watch_hold": inotify_watch_hold,
}
# actions that print their own line (not "OK ..." / errno)
RAW_LINE = {
    "proc_fd_write": proc_fd_write,
    "tcp_fill": tcp_fill,
    "unix_fill": unix_fill,
    "race_ofd_lock": race_ofd_lock,
    "race_inotify": race_inotify,
    "race_listen": race_listen,
}


def main():
    a = sys.argv[1]
    args = sys.argv[2:]
    if a == "read":
        out = oserr(lambda: read(args[0]))
    elif a == "write":
        out = oserr(lambda: write(args[0]))
    elif a == "symlink_read":
        link = os.path.join(args[1], "link")
        out = oserr(lambda: (os.symlink(args[0], link), read(link))[1])
    elif a == "hardlink":
        out = oserr(lambda: os.link(args[0], os.path.join(args[1], "hard")))
    elif a == "rename":
        out = oserr(lambda: os.rename(args[0], args[1]))
    elif a == "chmod":
        out = oserr(lambda: os.chmod(args[0], 0o777))
    elif a == "chown":
        out = oserr(lambda: os.chown(args[0], 0, 0))
    elif a == "utime":
        out = oserr(lambda: os.utime(args[0], (0, 0)))
    elif a == "setxattr":
        out = oserr(lambda: os.setxattr(args[0], "user.x", b"1"))
    elif a == "listdir":
        out = oserr(lambda: sorted(os.listdir(args[0])))
    elif a == "connect":
        out = oserr(lambda: connect(args[0]))
    elif a == "bind":
        out = oserr(lambda: bind(args[0]))
    elif a == "udp":
        out = oserr(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
    elif a == "udp6":
        out = oserr(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close())
    elif a == "raw":
        out = oserr(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
    elif a == "packet":
        out = oserr(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW).close())
    elif a == "netlink":
        out = oserr(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close())
    elif a == "sctp":
        out = oserr(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132).close())
    elif a == "unix_socket":
        out = oserr(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
    elif a == "abstract":
        out = oserr(lambda: abstract(args[0]))
    elif a == "socketpair":
        out = oserr(lambda: abstract_pair(None))
    elif a == "kill":
        out = oserr(lambda: os.kill(int(args[0]), signal.SIGTERM))
    elif a == "ptrace":
        out = sys_call("ptrace", 16, int(args[0]), 0, 0)  # PTRACE_ATTACH
    elif a == "mount":
        out = sys_call("mount", ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/tmp"), ctypes.c_char_p(b"tmpfs"), 0, 0)
    elif a == "unshare":
        out = sys_call("unshare", 0x10000000)  # CLONE_NEWUSER
    elif a == "unshare_net":
        out = sys_call("unshare", 0x40000000)
    elif a == "clone_newuser":
        out = sys_call("clone", 0x10000000 | 17, 0, 0, 0, 0)
    elif a == "clone3":
        out = sys_call("clone3", 0, 0)
    elif a == "bpf":
        out = sys_call("bpf", 0, 0, 0)
    elif a == "io_uring":
        params = ctypes.create_string_buffer(120)
        out = sys_call("io_uring_setup", 4, params)
    elif a == "memfd_create":
        out = sys_call("memfd_create", ctypes.c_char_p(b"x"), 0)
    elif a == "memfd_exec":
        out = oserr(memfd_exec)
    elif a == "execveat":
        out = sys_call("execveat", -100, ctypes.c_char_p(b"/bin/true"), 0, 0, 0)
    elif a == "personality":
        out = sys_call("personality", 0x0040000)  # ADDR_NO_RANDOMIZE
    elif a == "tiocsti":
        out = oserr(tiocsti)
    elif a == "tiocsti_highbits":
        out = oserr(tiocsti_highbits)
    elif a == "syscall":
        out = sys_call(args[0], *[0] * 5)
    elif a == "int80":
        out = "returned %s" % int80()
    elif a == "fork_bomb":
        out = fork_bomb(args[0])
    elif a == "mem_hog":
        out = oserr(lambda: mem_hog(args[0]))
    elif a == "fd_exhaust":
        out = fd_exhaust()
    elif a == "disk_fill":
        out = disk_fill(args[0], args[1])
    elif a == "env":
        out = "OK " + ",".join(sorted(os.environ))
    elif a == "uid":
        out = "OK %d %d" % (os.getuid(), os.geteuid())
    elif a == "caps":
        with open("/proc/self/status") as f:
            out = "OK " + " ".join(line.split()[1] for line in f if line.startswith("CapEff"))
    elif a in MORE:
        out = guard(MORE[a], *args)
    elif a in RAW_LINE:
        try:
            out = RAW_LINE[a](*args)
        except OSError as e:
            out = err_name(e.errno)
    else:
        out = "unknown action " + a
    print(out, flush=True)


if __name__ == "__main__":
    main()
