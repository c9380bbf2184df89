"""The escape corpus (escapes.json): how an entry is run in the sandbox and, for the
proof that the attack is real, under plain ``exec()``.

An entry: ``name``; ``code`` (a string, or a list run one after the other in one
session); ``error`` (the exact exception class name the last exec must end in) and
``contains`` (a substring of its message); optionally ``vfs`` (``{path: text}``: the session's filesystem is a VirtualFS holding
those files; plain exec runs in a temporary directory holding them, paths relative),
``grants`` (modules: a name, or ``{"module": name, "recursive": bool,
"include": [...], "exclude": [...], "name": ...}``),
``classes`` (``{"ref": "module:qualname", "include": [...], "constructable": bool}``),
``inject`` (names bound by ``namespace=`` to ``"module:callable"`` results),
``modules`` (per-exec modules ``{name: {attr: "module:qualname" or "...()"}}``, given to
the first exec only with ``modules_first_only``), ``session`` (``{"echo": true}``),
``policy`` (Policy keyword arguments), ``levels`` (the isolation levels it applies to,
when not all: objects given by ``inject``/``modules`` cannot cross to a worker),
``min_python`` (the plain-exec attack needs this Python: what it reaches is newer), and
``plain``: an expression that must be true in the namespace the code leaves when run by
plain ``exec()`` with real builtins (the grants imported, the classes and injected
objects bound by name) — the attack works when nothing stands in its way.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY_KEYS = {
    "name",
    "code",
    "error",
    "contains",
    "grants",
    "policy",
    "plain",
    "classes",
    "inject",
    "modules",
    "modules_first_only",
    "session",
    "levels",
    "min_python",
    "vfs",
}


def load() -> list:
    with open(os.path.join(HERE, "escapes.json")) as f:
        return json.load(f)


def resolve(ref: str):
    call = ref.endswith("()")
    modname, _, qual = (ref[:-2] if call else ref).partition(":")
    obj = importlib.import_module(modname)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj() if call else obj


def codes(entry) -> list:
    c = entry["code"]
    return list(c) if isinstance(c, list) else [c]


def policy_for(entry, Policy):
    policy = Policy(timeout=10, **entry.get("policy", {}))
    for mod in entry.get("grants", []):
        if isinstance(mod, dict):  # {"module": name, "recursive": bool, "include": [...], "exclude": [...]}
            kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in mod.items() if k != "module"}
            policy.module(importlib.import_module(mod["module"]), name=kw.pop("name", mod["module"]), **kw)
            continue
        policy.module(importlib.import_module(mod), name=mod)
    for c in entry.get("classes", []):
        kw = {"constructable": c.get("constructable", True)}
        if "include" in c:
            kw["include"] = tuple(c["include"])
            kw["exclude"] = tuple(c.get("exclude", ()))
        policy.cls(resolve(c["ref"]), **kw)
    return policy


def exec_modules(entry, i: int):
    mods = entry.get("modules")
    if not mods or (i > 0 and entry.get("modules_first_only")):
        return None
    return {name: {k: resolve(v) for k, v in attrs.items()} for name, attrs in mods.items()}


def vfs_for(entry):
    """The entry's VirtualFS (None without ``vfs``)."""
    if "vfs" not in entry:
        return None
    from sandtrap_guest.vfs import VirtualFS

    fs = VirtualFS()
    for path, text in entry["vfs"].items():
        fs.write(path, text)
    return fs


def run_sandbox(entry, GuestSession, Policy):
    """The last exec's result, at the in-process level."""
    sess = GuestSession(
        policy_for(entry, Policy), echo=entry.get("session", {}).get("echo", False), filesystem=vfs_for(entry)
    )
    namespace = {k: resolve(v) for k, v in entry.get("inject", {}).items()} or None
    r = None
    for i, code in enumerate(codes(entry)):
        r = sess.exec(code, namespace=namespace if i == 0 else None, modules=exec_modules(entry, i))
    return r


def run_plain_isolated(entries) -> dict:
    """``run_plain`` of every entry, each in its own fork of one helper process (an
    attack that works changes that process: a host class decorated, a registry
    filled); name -> (plain holds, what went wrong)."""
    import subprocess

    helper = (
        "import json, os, sys, traceback\n"
        f"sys.path.insert(0, {HERE!r}); sys.path.insert(0, {os.path.dirname(HERE)!r})\n"
        "import corpus\n"
        "out = {}\n"
        "for e in json.loads(sys.stdin.read()):\n"
        "    r, w = os.pipe()\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        os.close(r)\n"
        "        try:\n"
        "            res = [corpus.run_plain(e), '']\n"
        "        except BaseException as ex:\n"
        "            res = [False, f'{type(ex).__name__}: {ex}']\n"
        "        os.write(w, json.dumps(res).encode())\n"
        "        os._exit(0)\n"
        "    os.close(w)\n"
        "    data = b''\n"
        "    while True:\n"
        "        chunk = os.read(r, 65536)\n"
        "        if not chunk:\n"
        "            break\n"
        "        data += chunk\n"
        "    os.close(r)\n"
        "    os.waitpid(pid, 0)\n"
        "    out[e['name']] = json.loads(data) if data else [False, 'the child died']\n"
        "print(json.dumps(out))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", helper], input=json.dumps(entries), capture_output=True, text=True, timeout=600
    )
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return {k: tuple(v) for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}


def run_plain(entry) -> bool:
    """Run the attack with plain exec() and real builtins; True when ``plain`` holds."""
    ns = {"__builtins__": builtins, "__name__": "__main__"}  # as the sandbox's namespace has
    for c in entry.get("classes", []):
        cls = resolve(c["ref"])
        ns[cls.__name__] = cls
    for k, v in entry.get("inject", {}).items():
        ns[k] = resolve(v)
    echo = entry.get("session", {}).get("echo", False)
    todo = codes(entry)
    for i, code in enumerate(todo):
        mods = exec_modules(entry, i) or {}
        saved = {n: sys.modules.get(n) for n in mods}
        for n, attrs in mods.items():
            m = types.ModuleType(n)
            m.__dict__.update(attrs)
            sys.modules[n] = m
        try:
            tree = ast.parse(code)
            if echo and tree.body and isinstance(tree.body[-1], ast.Expr):
                # the REPL echo: repr() of the last expression, called from C
                ns["__plain_echo__"] = repr
                last = tree.body[-1]
                last.value = ast.Call(func=ast.Name("__plain_echo__", ast.Load()), args=[last.value], keywords=[])
                ast.fix_missing_locations(tree)
            try:
                exec(compile(tree, "<plain>", "exec"), ns)
            except Exception:  # as in the sandbox, an earlier exec's fault is its result
                if i == len(todo) - 1:
                    raise
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m
    try:
        return bool(eval(entry["plain"], ns))
    finally:
        try:
            importlib.import_module("escape_helpers").reset()
        except ImportError:
            pass
