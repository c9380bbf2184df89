"""Host-side fixtures of the shared vectors that need system calls Node (and Go's
standard library) lack: SysV/POSIX IPC objects, extended attributes, device nodes.
The Go, Python and Node harnesses all call this script, so the fixtures are the same
in every binding (tests/vectors/README.md). Standard library only.

Usage: python3 host_fixtures.py COMMAND [ARGS...]

  ipc-key                 print a base key K such that no shm, msg or sem object
                          with a key in K..K+63 and no POSIX queue sandtrap-K exists
  ipc-create K            create, with key K and mode 0600: a 4 KiB shm segment holding
                          "HOSTSHM", a message queue holding "HOSTMSG", a semaphore set,
                          and the POSIX queue /sandtrap-K
  ipc-sweep K N           remove every shm, msg and sem object with a key in K..K+N-1 and
                          the POSIX queue /sandtrap-K; print what was there as JSON
  xattrs TMP              set user.sandtrap on TMP/outside/secret.txt ("XATTRSECRET"),
                          TMP/work/public.txt ("XATTRPUBLIC"), TMP/bin/attack.py ("XATTRRO")
  mq-unlink TAG N         unlink the POSIX queues sandtrap-TAG-0 .. sandtrap-TAG-(N-1)
  rootdev                 print the block device node holding "/" (empty if none)
  mknod PATH MAJOR MINOR  make a character device node, mode 0666 (needs root)
"""

import ctypes
import errno
import json
import os
import random
import stat
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "shmget": 29,
    "shmat": 30,
    "shmdt": 67,
    "shmctl": 31,
    "semget": 64,
    "semctl": 66,
    "msgget": 68,
    "msgsnd": 69,
    "msgctl": 71,
    "mq_open": 240,
    "mq_unlink": 241,
}
IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0
SPAN = 64


def sc(name, *args):
    ret = libc.syscall(NR[name], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if ret == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ret


def mq_name(k):
    return ("sandtrap-%d" % k).encode()


def find(k):
    """Objects with key k (and the POSIX queue of k): [(kind, id)]."""
    out = []
    for kind, call in (
        ("shm", lambda: sc("shmget", k, 0, 0)),
        ("msg", lambda: sc("msgget", k, 0)),
        ("sem", lambda: sc("semget", k, 0, 0)),
    ):
        try:
            out.append((kind, call()))
        except OSError as e:
            if e.errno != errno.ENOENT:
                out.append((kind, -1))  # there, but not ours to see
    return out


def mq_exists(k):
    try:
        os.close(sc("mq_open", mq_name(k), os.O_RDONLY, 0, 0))
        return True
    except OSError as e:
        return e.errno != errno.ENOENT


def ipc_key():
    for _ in range(1000):
        k = 0x5A000000 + random.randrange(0, 0xFF0000 // SPAN) * SPAN
        if not any(find(k + i) for i in range(SPAN)) and not mq_exists(k):
            return k
    raise SystemExit("no free SysV key range")


def ipc_create(k):
    shm = sc("shmget", k, 4096, IPC_CREAT | IPC_EXCL | 0o600)
    addr = sc("shmat", shm, 0, 0)
    ctypes.memmove(ctypes.c_void_p(addr), b"HOSTSHM", 7)
    sc("shmdt", ctypes.c_void_p(addr))
    q = sc("msgget", k, IPC_CREAT | IPC_EXCL | 0o600)
    msg = ctypes.create_string_buffer(struct.pack("q", 1) + b"HOSTMSG")
    sc("msgsnd", q, msg, 7, 0)
    sc("semget", k, 1, IPC_CREAT | IPC_EXCL | 0o600)
    os.close(sc("mq_open", mq_name(k), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, 0))


def ipc_sweep(k, n):
    found = []
    for key in range(k, k + n):
        for kind, ident in find(key):
            found.append("%s %d" % (kind, key))
            if ident < 0:
                continue
            try:
                if kind == "shm":
                    sc("shmctl", ident, IPC_RMID, 0)
                elif kind == "msg":
                    sc("msgctl", ident, IPC_RMID, 0)
                else:
                    sc("semctl", ident, 0, IPC_RMID, 0)
            except OSError:
                pass
    if mq_exists(k):
        found.append("mq sandtrap-%d" % k)
        try:
            sc("mq_unlink", mq_name(k))
        except OSError:
            pass
    return found


def rootdev():
    dev = os.stat("/").st_dev
    try:
        with open("/sys/dev/block/%d:%d/uevent" % (os.major(dev), os.minor(dev))) as f:
            for line in f:
                if line.startswith("DEVNAME="):
                    p = "/dev/" + line.strip().split("=", 1)[1]
                    if stat.S_ISBLK(os.stat(p).st_mode):
                        return p
    except OSError:
        pass
    return ""


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "ipc-key":
        print(ipc_key())
    elif cmd == "ipc-create":
        ipc_create(int(args[0]))
        print("OK")
    elif cmd == "ipc-sweep":
        print(json.dumps(ipc_sweep(int(args[0]), int(args[1]))))
    elif cmd == "xattrs":
        t = args[0]
        for rel, val in (
            ("outside/secret.txt", b"XATTRSECRET"),
            ("work/public.txt", b"XATTRPUBLIC"),
            ("bin/attack.py", b"XATTRRO"),
        ):
            os.setxattr(os.path.join(t, rel), "user.sandtrap", val)
        print("OK")
    elif cmd == "mq-unlink":
        for i in range(int(args[1])):
            libc.syscall(NR["mq_unlink"], ("sandtrap-%s-%d" % (args[0], i)).encode())
        print("OK")
    elif cmd == "rootdev":
        print(rootdev())
    elif cmd == "mknod":
        os.mknod(args[0], 0o666 | stat.S_IFCHR, os.makedev(int(args[1]), int(args[2])))
        os.chmod(args[0], 0o666)
        print("OK")
    else:
        raise SystemExit("unknown command " + cmd)


if __name__ == "__main__":
    main()
