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
    "mount": 165, "umount2": 166, "pivot_root": 155, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "unshare": 272, "setns": 308, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
    "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "ioperm": 173, "iopl": 172, "quotactl": 179, "acct": 163,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "memfd_create": 319, "execveat": 322, "clone": 56, "clone3": 435, "personality": 135,
    "fsopen": 430, "open_tree": 428, "move_mount": 429, "pidfd_getfd": 438, "kcmp": 312,
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
            out = "OK " + " ".join(l.split()[1] for l in f if l.startswith("CapEff"))
    else:
        out = "unknown action " + a
    print(out, flush=True)


if __name__ == "__main__":
    main()
