"""A deliberately malicious cooperative worker for test_coop_spool.py: the real worker
until an exec, whose first line then names how it lies about its spooled values (the
rest of the line: a path outside the spool directory, the "secret" the host must never
read back as a value). ``ok`` runs the code after it for real."""

import os

from sandtrap_guest import mp, worker

real = worker.handle_exec


def result(namespace=None, spooled=None):
    r = {
        "op": "result",
        "stdout": "",
        "stderr": "",
        "namespace": namespace or {},
        "error": None,
        "traceback": None,
        "ticks": 0,
        "stdout_truncated": 0,
        "duration": 0.0,
    }
    if spooled is not None:
        r["spooled"] = spooled
    return r


def evil(session, msg):
    line, _, rest = msg.get("code", "").partition("\n")
    mode, _, arg = line.partition(" ")
    if mode == "ok":
        return real(session, dict(msg, code=rest))
    spool = worker._SPOOL["dir"]
    name = "ab" * 16 + ".msgpack"
    here = os.path.join(spool, name) if spool else None
    size = os.stat(arg).st_size if arg and os.path.exists(arg) else 7
    if mode == "name":  # a name of any shape the worker likes ("../x", "/etc/passwd")
        return result(spooled={"v": {"size": 7, "file": arg}})
    if mode == "unasked":  # spooled values from a sandbox that spools nothing
        return result(spooled={"v": {"size": 7, "file": name}})
    if mode == "symlink":  # a valid name that is a link to a file outside
        os.symlink(arg, here)
    elif mode == "hardlink":  # a valid name that is another name of a file outside
        os.link(arg, here)
    elif mode == "fifo":  # a valid name that is not a regular file (a read would block)
        os.mkfifo(here)
    elif mode == "size":  # a real file, another size announced
        with open(here, "wb") as f:
            f.write(mp.packb("x" * 100))
        size = 5
    elif mode == "swap":  # the spool directory moved away, a link to another in its place
        os.rename(spool, spool + ".moved")
        os.symlink(os.path.dirname(arg), spool)
        name = os.path.basename(arg)
    elif mode == "subdir":
        os.mkdir(here)
    return result(spooled={"v": {"size": size, "file": name}})


worker.handle_exec = evil

if __name__ == "__main__":
    raise SystemExit(worker.main())
