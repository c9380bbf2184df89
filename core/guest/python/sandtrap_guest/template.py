"""The COW-fork template of the process sandbox: ``python3 -m sandtrap_guest.template``.

The engine runs it as a session under the mapper's policy (Landlock, seccomp, pid
namespace, limits); ``init`` runs once here, then every clone is an ``os.fork()`` of
this process — inside the sandbox, sharing the template's memory copy-on-write and
holding exactly its confinement — with ``CLONE_ID`` set and its own stdout and
stderr pipes. Frames (length-prefixed msgpack, see worker.py):

    host → {"op": "init", "init_src"|"init_ref", "work_src"|"work_ref", "sys_path": [str],
            "main_path": str (the host's __main__ file, loaded as __mp_main__)}
         ← {"op": "ready"} | {"op": "error", "message", "traceback"}
    host → {"op": "fork", "n": int, "parallel": int, "timeout": float|None, "max_output": int}
         ← {"op": "forking"}
    host → {"op": "next"}   (repeat until done)
         ← {"op": "clones", "items": [{id, stdout, stderr, exit_code, signal, timed_out,
             stdout_truncated}], "done": bool}

``*_ref`` is "module:qualname" (imported here); ``*_src`` is Python source run in the
template's globals (``work_src`` sees ``CLONE_ID``). Work functions take the clone id.
"""
import importlib
import importlib.util
import os
import selectors
import signal
import sys
import time
import traceback

from . import mp
from .worker import _read, _write


def _load_main(path):
    """The host's __main__ as __mp_main__ (its ``if __name__ == "__main__"`` code does not run)."""
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = mod
    spec.loader.exec_module(mod)


def _resolve(ref):
    mod, _, qual = ref.partition(":")
    if mod == "__mp_main__" and "__mp_main__" not in sys.modules:
        raise ImportError("the host's __main__ is not importable here")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class Clone:
    __slots__ = ("id", "pid", "out", "err", "bufs", "trunc", "start", "timed_out", "open")

    def __init__(self, cid, pid, out, err):
        self.id, self.pid, self.out, self.err = cid, pid, out, err
        self.bufs = {out: bytearray(), err: bytearray()}
        self.trunc = False
        self.start = time.monotonic()
        self.timed_out = False
        self.open = 2  # pipes not yet at EOF (fd numbers are reused: count, do not look up)


def _child(cid, out_w, err_w, work, g):
    os.environ["CLONE_ID"] = str(cid)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    code = 0
    try:
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        if callable(work):
            work(cid)
        else:
            exec(work, dict(g, CLONE_ID=cid))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on the clone's stderr
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(code)


class Forker:
    def __init__(self, work, g, n, parallel, timeout, max_output):
        self.work, self.g, self.n = work, g, n
        self.parallel = max(1, parallel)
        self.timeout = timeout
        self.max_output = max_output
        self.next_id = 0
        self.running = {}  # fd -> Clone
        self.live = 0
        self.done = []
        self.sel = selectors.DefaultSelector()

    def _spawn(self):
        cid = self.next_id
        self.next_id += 1
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(err_r)
            _child(cid, out_w, err_w, self.work, self.g)
        os.close(out_w)
        os.close(err_w)
        c = Clone(cid, pid, out_r, err_r)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            self.running[fd] = c
            self.sel.register(fd, selectors.EVENT_READ)
        self.live += 1

    def _finish(self, c):
        _, status = os.waitpid(c.pid, 0)
        item = {"id": c.id, "stdout": bytes(c.bufs[c.out]), "stderr": bytes(c.bufs[c.err]),
                "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "timed_out": c.timed_out, "stdout_truncated": c.trunc}
        self.done.append(item)
        self.live -= 1

    def step(self, linger=0.02, batch=256):
        """Run until at least one clone finished (or everything is done), then keep
        collecting for up to ``linger`` seconds so that one frame carries many clones."""
        first = None
        while (self.live or self.next_id < self.n) and len(self.done) < batch and (
                not self.done or time.monotonic() - first < linger):
            while self.live < self.parallel and self.next_id < self.n:
                self._spawn()
            wait = None
            if first is not None:
                wait = max(0.0, first + linger - time.monotonic())
            if self.timeout:
                now = time.monotonic()
                starts = {c.start for c in self.running.values() if not c.timed_out}
                if starts:
                    left = max(0.0, min(starts) + self.timeout - now)
                    wait = left if wait is None else min(wait, left)
            for key, _ in self.sel.select(wait):
                fd = key.fd
                c = self.running[fd]
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    buf = c.bufs[fd]
                    room = self.max_output - len(buf)
                    if room > 0:
                        buf += data[:room]
                    if len(data) > room:
                        c.trunc = True
                    continue
                self.sel.unregister(fd)
                os.close(fd)
                del self.running[fd]
                c.open -= 1
                if c.open == 0:
                    self._finish(c)
                    if first is None:
                        first = time.monotonic()
            if self.timeout:
                now = time.monotonic()
                for c in set(self.running.values()):
                    if not c.timed_out and now - c.start > self.timeout:
                        c.timed_out = True
                        os.kill(c.pid, signal.SIGKILL)
        items, self.done = self.done, []
        return items, not self.live and self.next_id >= self.n


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # init's prints must not corrupt the frame stream
    work, g, forker = None, {"__name__": "__sandtrap_template__"}, None
    while True:
        msg = _read(inp)
        if msg is None:
            return 0
        op = msg.get("op")
        try:
            if op == "init":
                sys.path[:0] = [p for p in msg.get("sys_path") or [] if p not in sys.path]
                if msg.get("main_path"):
                    _load_main(msg["main_path"])
                if msg.get("init_ref"):
                    _resolve(msg["init_ref"])()
                elif msg.get("init_src"):
                    exec(compile(msg["init_src"], "<init>", "exec"), g)
                work = _resolve(msg["work_ref"]) if msg.get("work_ref") else compile(msg.get("work_src") or "", "<work>", "exec")
                _write(out, {"op": "ready"})
            elif op == "fork" and work is not None:
                forker = Forker(work, g, int(msg["n"]), int(msg.get("parallel") or 4 * (os.cpu_count() or 1)), msg.get("timeout"),
                                int(msg.get("max_output") or (16 << 20)))
                _write(out, {"op": "forking"})
            elif op == "next" and forker is not None:
                items, done = forker.step()
                _write(out, {"op": "clones", "items": items, "done": done})
            else:
                _write(out, {"op": "error", "message": f"unexpected frame {op!r}"})
        except Exception as e:  # noqa: BLE001 - reported to the host
            _write(out, {"op": "error", "message": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


if __name__ == "__main__":
    sys.exit(main())
