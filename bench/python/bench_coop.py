"""Cooperative Python sandbox benchmark, all in one run:

1. a warm ``exec("x = 1")`` at each isolation level,
2. a cold kernel sandbox (construct + first exec),
3. a CPU-bound loop under tick counting against plain CPython ``exec``,
against a plain ``subprocess.run(["/bin/true"])`` spawn measured in the same run.

    python3 bench/python/bench_coop.py [N] [--pypi-python VENV/bin/python]

With ``--pypi-python``, the same three are also measured with the ``sandtrap``
package from PyPI installed in that venv (``pip install 'sandtrap[kernel]==0.5.1'``;
without the extra its "kernel" level fails closed): pypi_sandtrap_coop.py runs
under that interpreter and reports JSON, and each of its numbers is printed under
the matching one of ours, as a ratio to the spawn baseline measured here.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import sandtrap
from sandtrap._coop import IsolatedFS, Policy, sandbox

ARGS = sys.argv[1:]
PYPI_PYTHON = None
for _i, _a in enumerate(ARGS):
    if _a == "--pypi-python" and _i + 1 < len(ARGS):
        PYPI_PYTHON = ARGS[_i + 1]
        del ARGS[_i : _i + 2]
        break
    if _a.startswith("--pypi-python="):
        PYPI_PYTHON = _a.split("=", 1)[1]
        del ARGS[_i]
        break
N = int(ARGS[0]) if ARGS else 200


def median(fn, n):
    xs = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs)


spawn = median(lambda: subprocess.run(["/bin/true"]), N)
print(f"baseline: subprocess.run(['/bin/true'])       {spawn * 1e3:8.3f} ms")


def run_pypi(python):
    """The PyPI package's numbers, from pypi_sandtrap_coop.py run under *python*."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pypi_sandtrap_coop.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        p = subprocess.run([python, script, str(N)], capture_output=True, text=True, env=env, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"not installable: {type(exc).__name__}: {exc}"}
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"failed (exit {p.returncode}): {tail}"}
    if "error" in out:
        out["error"] = f"not installable: {out['error']}"
    return out


pypi = run_pypi(PYPI_PYTHON) if PYPI_PYTHON else None
if pypi is not None:
    if "error" in pypi:
        print(f"PyPI sandtrap via {PYPI_PYTHON}: {pypi['error']}")
        pypi = None
    else:
        PV = f"PyPI sandtrap {pypi['version']}"
        mine = os.path.dirname(os.path.realpath(sandtrap.__file__))
        theirs = os.path.dirname(os.path.realpath(pypi["module"]))
        print(
            f"{PV} from {theirs} ({PYPI_PYTHON}); levels: {', '.join(pypi['levels'])}; "
            f"spawn in its process {pypi['spawn_s'] * 1e3:.3f} ms"
            + ("  WARNING: that is our own package" if mine == theirs else "")
        )


def pypi_line(label, entry, width=44):
    """One PyPI number under ours: *entry* is {"s", ...}, {"error"} or None (no such level)."""
    head = f"  {PV} {label} ".ljust(width)
    if entry is None:
        return f"{head}n/a (the package has no such level)"
    if "error" in entry:
        return f"{head}unavailable: {entry['error']}"
    t = entry["s"]
    note = f"  [{entry['isolation']}]" if entry.get("isolation") else ""
    return f"{head}{t * 1e3:8.3f} ms  ({t / spawn:.2f}x the spawn){note}"


root = tempfile.mkdtemp()
for level in ("none", "process", "kernel"):
    sb = sandbox(Policy(timeout=10), isolation=level, filesystem=IsolatedFS(root))
    sb.exec("x = 1")
    warm = median(lambda: sb.exec("x = 1"), N)
    sb.close()
    print(f"warm exec('x = 1') at {level:8}              {warm * 1e3:8.3f} ms  ({warm / spawn:.2f}x the spawn)")
    if pypi is not None:
        print(pypi_line(f"at {level}", pypi["warm"].get(level)))


closes = []


def cold():
    # a fresh directory per sandbox, as an agent framework gives each task; the
    # sandbox's close is timed apart (the target is construct + first exec)
    d = tempfile.mkdtemp()
    t = time.perf_counter()
    sb = sandbox(Policy(timeout=10), isolation="kernel", filesystem=IsolatedFS(d))
    sb.exec("x = 1")
    took = time.perf_counter() - t
    t = time.perf_counter()
    sb.close()
    closes.append(time.perf_counter() - t)
    os.rmdir(d)  # hundreds of them left in /tmp would slow (and, past 1024, break) broad grants of /
    return took


def median_of(fn, n):
    return statistics.median(fn() for _ in range(n))


c = median_of(cold, max(5, N // 10))
print(f"cold kernel sandbox (construct + first exec) {c * 1e3:8.3f} ms  ({c / spawn:.1f}x the spawn; target <= 10x)")
print(f"  its close                                    {statistics.median(closes) * 1e3:8.3f} ms")


def spaced():
    time.sleep(0.1)  # sandboxes made now and then, not back to back (not timed)
    return cold()


cs = median_of(spaced, max(5, N // 20))
print(f"  the same, 100 ms apart                       {cs * 1e3:8.3f} ms  ({cs / spawn:.1f}x the spawn)")
_fresh = iter(range(1, 1 << 30))


def first_of_config():
    # a configuration no sandbox of this process used yet: the engine starts its template
    sb = sandbox(Policy(timeout=10 + next(_fresh) * 1e-6), isolation="kernel", filesystem=IsolatedFS(root))
    sb.exec("x = 1")
    sb.close()


f = median(first_of_config, 3)
print(
    f"  first sandbox of a new configuration         {f * 1e3:8.3f} ms  ({f / spawn:.1f}x the spawn; "
    "starts the configuration's template)"
)
if pypi is not None:
    pc = pypi.get("cold")
    if pc is None:
        print(f"  {PV} cold: n/a (the package has no isolation level)")
    elif "error" in pc:
        print(pypi_line(f"cold {pc['level']}", pc, 45))
    else:
        print(
            f"  {PV} cold {pc['level']} ".ljust(45) + f"{pc['s'] * 1e3:8.3f} ms  ({pc['s'] / spawn:.1f}x the spawn; "
            "construct + enter + first exec + shutdown)"
        )

LOOP = "s = 0\nfor i in range(1_000_000):\n    s += i * 2 % 7\n"
plain = min(median(lambda: exec(LOOP, {}), 3) for _ in range(3))
sb = sandbox(Policy(timeout=60), isolation="none")
guarded = min(median(lambda: sb.exec(LOOP), 3) for _ in range(3))
print(
    f"CPU-bound loop: plain exec {plain * 1e3:.1f} ms, sandboxed {guarded * 1e3:.1f} ms "
    f"({guarded / plain:.2f}x; target <= 1.5x)"
)
if pypi is not None:
    pl = pypi["loop"]
    if "error" in pl:
        print(f"  {PV} CPU-bound loop: unavailable: {pl['error']}")
    else:
        print(
            f"  {PV} CPU-bound loop: plain exec {pl['plain_s'] * 1e3:.1f} ms, "
            f"sandboxed {pl['sandboxed_s'] * 1e3:.1f} ms "
            f"({pl['sandboxed_s'] / pl['plain_s']:.2f}x; {pl['ticks']} ticks; "
            f"{pl['sandboxed_s'] / guarded:.2f}x ours sandboxed)"
        )
