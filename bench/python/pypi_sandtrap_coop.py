"""The bench_coop.py items, measured with the ``sandtrap`` package from PyPI.

Run by ``bench_coop.py --pypi-python VENV/bin/python`` with that venv's
interpreter, never imported: it must see the PyPI package, not ours.

    VENV/bin/python bench/python/pypi_sandtrap_coop.py N

Prints one JSON object on its last line of stdout (times in seconds):

- ``version``, ``module``: which package was measured, and from where;
- ``levels``: the isolation levels its ``sandbox()`` factory offers;
- ``warm``: level -> {"s": median of ``exec("x = 1")``, "isolation": what the
  worker reported} or {"error": ...}; a level it does not offer is absent;
- ``cold``: {"level", "s"} or {"level", "error"}, construct + enter + first
  exec + shutdown for the strongest level offered;
- ``loop``: {"plain_s", "sandboxed_s", "ticks"} for the CPU loop at "none";
- ``spawn_s``: subprocess.run(["/bin/true"]) measured in this process, for
  reference only (bench_coop.py divides by its own baseline);
- ``error``: set instead of the rest when the package cannot be used at all.

The API used (sandtrap 0.5.1): ``sandtrap.sandbox(policy, *, isolation=
"none"|"process"|"kernel", filesystem=..., allow_degraded=False)`` from
sandtrap/factory.py returns a ``Sandbox`` (in-process) or a ``ProcessSandbox``
(sandtrap/process/sandbox.py), whose ``exec()`` needs the context entered
first and whose ``shutdown()`` (``__exit__``) ends the worker; ``Policy(*,
timeout=, tick_limit=, ...)`` from sandtrap/policy.py; ``IsolatedFS(root)`` from
monkeyfs. "kernel" fails closed with ``IsolationUnavailable`` unless the
``sandtrap[kernel]`` extra (landlock, pyseccomp) is installed. Every
checkpoint counts a tick whether or not ``tick_limit`` is set
(sandtrap/gates.py, ``__st_checkpoint__``).
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
import typing

LOOP = "s = 0\nfor i in range(1_000_000):\n    s += i * 2 % 7\n"
ORDER = ("none", "process", "kernel")  # weakest to strongest


def median(fn, n):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


def offered_levels(sandbox):
    """The isolation values the factory's ``isolation`` Literal names.

    Read from the signature rather than tried: sandtrap 0.5.1's factory sends
    any value other than "none" to a process sandbox, so an unknown level
    would not fail, it would silently measure "process".
    """
    try:
        hint = typing.get_type_hints(sandbox)["isolation"]
        return [a for a in typing.get_args(hint) if isinstance(a, str)]
    except Exception:
        import inspect
        import re

        ann = inspect.signature(sandbox).parameters["isolation"].annotation
        return re.findall(r"""["']([a-z]+)["']""", str(ann))


def describe(result):
    iso = getattr(result, "isolation", None)
    return iso.summary() if iso is not None else "in-process"


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    out = {}
    try:
        import importlib.metadata

        import sandtrap
        from sandtrap import IsolatedFS, Policy, sandbox

        out["version"] = importlib.metadata.version("sandtrap")
        out["module"] = sandtrap.__file__
    except Exception as exc:  # not installed, or not the package we expect
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return

    out["spawn_s"] = median(lambda: subprocess.run(["/bin/true"]), n)
    levels = offered_levels(sandbox)
    out["levels"] = levels
    root = tempfile.mkdtemp()

    def make(level, timeout=10):
        # as bench_coop.py does for ours, at every level
        return sandbox(Policy(timeout=timeout), isolation=level, filesystem=IsolatedFS(root))

    warm = {}
    for level in ORDER:
        if level not in levels:
            continue
        try:
            sb = make(level)
            sb.__enter__()
            try:
                r = sb.exec("x = 1")
                if r.error is not None:
                    raise RuntimeError(f"exec failed: {r.error!r}")
                warm[level] = {
                    "s": median(lambda: sb.exec("x = 1"), n),
                    "isolation": describe(r),
                }
            finally:
                sb.__exit__(None, None, None)
        except Exception as exc:
            warm[level] = {"error": f"{type(exc).__name__}: {exc}"}
    out["warm"] = warm

    strongest = next((lv for lv in reversed(ORDER) if lv in levels), None)
    if strongest is not None:

        def cold():
            sb = make(strongest)
            sb.__enter__()
            try:
                r = sb.exec("x = 1")
                if r.error is not None:
                    raise RuntimeError(f"exec failed: {r.error!r}")
            finally:
                sb.__exit__(None, None, None)

        try:
            out["cold"] = {"level": strongest, "s": median(cold, max(5, n // 20))}
        except Exception as exc:
            out["cold"] = {"level": strongest, "error": f"{type(exc).__name__}: {exc}"}

    try:
        plain = min(median(lambda: exec(LOOP, {}), 3) for _ in range(3))
        sb = sandbox(Policy(timeout=60), isolation="none")
        r = sb.exec(LOOP)
        if r.error is not None:
            raise RuntimeError(f"exec failed: {r.error!r}")
        guarded = min(median(lambda: sb.exec(LOOP), 3) for _ in range(3))
        out["loop"] = {"plain_s": plain, "sandboxed_s": guarded, "ticks": r.ticks}
    except Exception as exc:
        out["loop"] = {"error": f"{type(exc).__name__}: {exc}"}

    print(json.dumps(out))


if __name__ == "__main__":  # workers re-import __main__ under forkserver
    main()
