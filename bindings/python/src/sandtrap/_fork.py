"""COW-fork map-reduce: ``Sandbox(init_fn=, work_fn=).fork(n)`` and ``reduce``.

The template is ``python3 -m sandtrap_guest.template``, started by the engine as a
session under the mapper's own policy (plus read access to the engine's guest
runtime): the host is never forked. ``init_fn`` runs once in it; each clone is an
``os.fork()`` of the template inside the sandbox, so it shares the template's
memory copy-on-write and holds exactly its confinement and limits.

Functions cross by reference ("module:qualname", imported in the template — which
must be able to read the module's file) or as Python source strings.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import msgpack

from . import _native
from ._errors import IsolationUnavailable, PolicyError, SandtrapError

Fn = Callable[..., Any] | str | None

@dataclass
class CloneResult:
    """One clone's outcome."""

    id: int
    stdout: bytes
    stderr: bytes
    exit_code: int | None
    signal: int | None
    timed_out: bool = False
    stdout_truncated: bool = False

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _module_root(mod: Any) -> str | None:
    """The sys.path entry a module was imported from."""
    f = getattr(mod, "__file__", None)
    if not f:
        return None
    root = os.path.dirname(os.path.realpath(f))
    if os.path.basename(f) == "__init__.py":
        root = os.path.dirname(root)
    for _ in range(mod.__name__.count(".")):
        root = os.path.dirname(root)
    return root


def describe_fn(what: str, fn: Fn, readable: list[str], probs: list[str]) -> dict[str, Any]:
    """Check a function for crossing by reference; returns its frame fields."""
    if fn is None:
        return {}
    if isinstance(fn, str):
        try:
            compile(fn, f"<{what}>", "exec")
        except SyntaxError as e:
            probs.append(f"{what}: the source does not compile: {e}")
        return {f"{what.split('_')[0]}_src": fn}
    if not callable(fn) or not inspect.isfunction(fn):
        probs.append(f"{what}: want a module-level function or Python source, got {type(fn).__name__}")
        return {}
    qual = fn.__qualname__
    if "<lambda>" in qual or "<locals>" in qual:
        probs.append(f"{what}: {qual} is a lambda or a closure; the template imports functions by "
                     "name: define it at module level, or pass its source as a string")
        return {}
    mod = sys.modules.get(fn.__module__)
    obj: Any = mod
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn:
        probs.append(f"{what}: {fn.__module__}.{qual} is not reachable by that name")
        return {}
    main = fn.__module__ == "__main__"
    root = os.path.dirname(os.path.realpath(mod.__file__)) if main and getattr(mod, "__file__", None) else _module_root(mod)
    if root is None:
        probs.append(f"{what}: module {fn.__module__} has no file to import in the template")
        return {}
    path = os.path.realpath(mod.__file__)
    if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in readable):
        probs.append(f"{what}: its module file {path} is not under fs_readable (the template must import it)")
    out = {f"{what.split('_')[0]}_ref": f"{'__mp_main__' if main else fn.__module__}:{qual}", "sys_path": [root]}
    if main:
        out["main_path"] = path
    return out


def _python(readable: list[str]) -> str:
    """An interpreter the template can execute under the policy."""
    def ok(p: str) -> bool:
        return any(p.startswith(r.rstrip("/") + "/") for r in readable)
    for cand in (sys.executable, "/usr/bin/python3"):
        real = os.path.realpath(cand)
        if cand and os.path.exists(real) and ok(real):
            return cand
    raise PolicyError("fork: no Python interpreter is readable under fs_readable (add /usr, or the "
                      f"prefix of {sys.executable})", [])


class Clones:
    """The clones of one ``fork``: iterate to get them as they finish (progress);
    ``results()`` waits for all and returns them in clone order."""

    def __init__(self, policy: dict[str, Any], n: int, init: dict, work: dict, timeout: float | None,
                 parallel: int | None, max_output: int | None) -> None:
        readable = [os.path.realpath(p) for p in policy.get("fs_readable", [])] + \
                   [os.path.realpath(p) for p in policy.get("fs_writable", [])]
        guest = _native.guest_dir()
        if not guest:
            raise IsolationUnavailable(f"the engine has no guest runtime: {_native.probe().get('guest_dir_error')}")
        pol = dict(policy)
        pol["fs_readable"] = list(policy.get("fs_readable", [])) + [guest]
        env = dict(policy.get("env") or {})
        env["PYTHONPATH"] = guest
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        pol["env"] = env
        pol.pop("timeout", None)
        self.n = n
        self._done: dict[int, CloneResult] = {}
        self._pending: deque[CloneResult] = deque()
        self._finished = False
        self._timeout = timeout
        rc, self._handle, msg = _native.sandbox_new(_native.pack(pol))
        if rc != _native.OK:
            raise _native.status_error(rc, None, msg)
        try:
            python = _python(readable)
            resp = self._req({"op": "session_open", "argv": [python, "-m", "sandtrap_guest.template"]})
            self._session = resp["session"]
            frame: dict[str, Any] = {"op": "init", "sys_path": init.get("sys_path", []) + work.get("sys_path", [])}
            for d in (init, work):
                frame.update({k: v for k, v in d.items() if k != "sys_path"})
            reply = self._exchange(frame, 3600)
            if reply.get("op") != "ready":
                raise SandtrapError(f"init_fn failed in the template: {reply.get('message')}\n{reply.get('traceback', '')}")
            # the template keeps its forkers and clones within the process limit
            reply = self._exchange({"op": "fork", "n": n, "parallel": parallel, "timeout": timeout,
                                    "max_output": max_output, "max_processes": policy.get("max_processes")}, 60)
            if reply.get("op") != "forking":
                raise SandtrapError(f"fork failed: {reply.get('message')}")
        except BaseException:
            self.close()
            raise

    def _req(self, req: dict) -> dict:
        rc, resp = _native.sandbox_exec(self._handle, _native.pack(req))
        if rc != _native.OK:
            raise _native.status_error(rc, resp)
        return resp or {}

    def _exchange(self, frame: dict, timeout: float) -> dict:
        resp = self._req({"op": "session_send", "session": self._session, "frame": _native.pack(frame),
                          "timeout": timeout})
        if resp.get("ended"):
            res = resp.get("result") or {}
            raise SandtrapError(f"the fork template ended: {resp.get('reason')}; stderr: "
                                f"{(res.get('stderr') or b'')[-2000:].decode('utf-8', 'replace')}")
        return msgpack.unpackb(resp["frame"], raw=False)

    def _pull(self) -> None:
        reply = self._exchange({"op": "next"}, (self._timeout or 3600) + 60)
        if reply.get("op") != "clones":
            raise SandtrapError(f"fork template: {reply.get('message')}")
        for it in reply["items"]:
            c = CloneResult(it["id"], it["stdout"], it["stderr"], it["exit_code"], it["signal"],
                            it["timed_out"], it["stdout_truncated"])
            self._done[c.id] = c
            self._pending.append(c)
        if reply["done"]:
            self._finished = True
            self.close()

    def __iter__(self) -> Iterator[CloneResult]:
        """Clones in the order they finish."""
        while True:
            while self._pending:
                yield self._pending.popleft()
            if self._finished:
                return
            self._pull()

    def results(self) -> list[CloneResult]:
        """Every clone, in clone order (waits for the rest)."""
        for _ in self:
            pass
        return [self._done[i] for i in sorted(self._done)]

    def __len__(self) -> int:
        return self.n

    def close(self) -> None:
        if getattr(self, "_handle", 0):
            h, self._handle = self._handle, 0
            _native.sandbox_free(h)  # kills the template and every clone still running

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
