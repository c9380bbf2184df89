"""The cooperative Python sandbox at its three isolation levels.

The escape corpus of the guest runtime (core/guest/python/tests/escapes.json) runs
here through worker isolation too; kernel mode is also attacked with the Python
layer deliberately bypassed (a granted ``os`` module)."""

from __future__ import annotations

import concurrent.futures
import importlib
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from sandtrap._coop import IsolatedFS, Policy, WorkerCrashed, WorkerError, sandbox
from sandtrap_guest import StCancelled, StTimeout

LEVELS = ["none", "process", "kernel"]
GUEST_TESTS = Path(__file__).resolve().parents[3] / "core/guest/python/tests"
sys.path.insert(0, str(GUEST_TESTS))  # corpus.py and escape_helpers.py (granted by the corpus)
import corpus  # noqa: E402

CORPUS = corpus.load()


def errname(err: BaseException | None) -> str | None:
    if err is None:
        return None
    return err.type_name if isinstance(err, WorkerError) else type(err).__name__


@pytest.mark.parametrize("level", LEVELS)
def test_quick_start(level, tmp_path):
    with sandbox(Policy(timeout=5.0, tick_limit=100_000), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("total = sum(range(10))\nprint(f'total = {total}')")
    assert r.stdout == "total = 45\n"
    assert r.namespace == {"total": 45}
    assert r.error is None and r.ticks == 2
    assert r.isolation["level"] == level


@pytest.mark.parametrize("level", LEVELS)
def test_namespace_persists_and_host_functions_are_called_in_the_host(level, tmp_path):
    policy = Policy(timeout=5)
    calls = []

    @policy.fn
    def record(x):  # a closure: crosses to workers by name, runs here
        calls.append(x)
        if x == "boom":
            raise ValueError("host says no")
        return x * 2

    with sandbox(policy, isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r1 = sb.exec("def twice(v):\n    return record(v)\n")
        r2 = sb.exec("y = twice(21)\ntry:\n    record('boom')\nexcept Exception as e:\n    msg = str(e)\n")
    assert r1.error is None and r2.error is None, (r1.error, r2.error)
    assert r2.namespace["y"] == 42
    assert "host says no" in r2.namespace["msg"]
    assert calls == [21, "boom"]


@pytest.mark.parametrize("level", ["process", "kernel"])
def test_worker_values_are_data_or_placeholders(level, tmp_path):
    with sandbox(Policy(timeout=5), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("a = [1, 2.5, 'x', b'y', None, True, {'k': (1, 2)}]\nclass C: pass\nc = C()")
    assert r.namespace["a"] == [1, 2.5, "x", b"y", None, True, {"k": [1, 2]}]
    assert r.namespace["c"]["__st_placeholder__"] == "C"


def test_kernel_holds_when_the_python_layer_is_bypassed(tmp_path):
    policy = Policy(timeout=10)
    policy.module(os)
    policy.module(socket)
    (tmp_path / "inside.txt").write_text("mine")
    with sandbox(policy, isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(
            "def probe(fn):\n"
            "    try:\n"
            "        fn()\n"
            "        return 'OK'\n"
            "    except OSError as e:\n"
            "        return os.strerror(e.errno)\n"
            "import os, socket\n"
            "inside = probe(lambda: os.open('inside.txt', os.O_RDONLY))\n"
            "hostname = probe(lambda: os.open('/etc/hostname', os.O_RDONLY))\n"
            "passwd = probe(lambda: os.open('/etc/passwd', os.O_RDONLY))\n"
            "net = probe(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))\n"
            "escape = probe(lambda: os.open('../../outside', os.O_RDONLY | os.O_CREAT, 0o600))\n"
        )
    assert r.error is None, r.traceback
    ns = r.namespace
    assert ns["inside"] == "OK"
    assert ns["hostname"] == "Permission denied" and ns["passwd"] == "Permission denied"
    assert ns["net"] == "Operation not permitted"
    assert ns["escape"] == "Permission denied"
    assert r.isolation["landlock"]["abi"] >= 1 and r.isolation["seccomp"]["enforced"]


def test_a_crash_costs_the_call_and_the_next_call_gets_a_fresh_worker(tmp_path):
    policy = Policy(timeout=5)
    policy.module(os, include="*")  # include/exclude are the host's to choose
    policy.module(os, include="_exit", exclude=(), name="hard")
    with sandbox(policy, isolation="process", filesystem=IsolatedFS(tmp_path)) as sb:
        sb.exec("x = 1")
        r = sb.exec("import hard\nhard._exit(3)")
        assert isinstance(r.error, WorkerCrashed)
        r = sb.exec("y = 2")
    assert r.error is None and r.restarted and r.namespace == {"y": 2}


def test_a_runaway_worker_is_killed_at_the_timeout(tmp_path):
    policy = Policy(timeout=0.5)
    policy.module(importlib.import_module("time"))
    with sandbox(policy, isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        start = time.monotonic()
        r = sb.exec("import time\ntime.sleep(60)")  # a C call: the guest cannot interrupt it
        took = time.monotonic() - start
    assert isinstance(r.error, StTimeout), r.error
    assert took < 10


def test_kernel_fails_closed_without_landlock(tmp_path, monkeypatch):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sandtrap._coop import sandbox, Policy\n"
        "from sandtrap import IsolationUnavailable\n"
        "try:\n"
        "    sandbox(Policy(), isolation='kernel')\n"
        "    print('RAN')\n"
        "except IsolationUnavailable as e:\n"
        "    print('REFUSED', e)\n"
        "r = sandbox(Policy(), isolation='kernel', allow_degraded=True).exec('x = 1')\n"
        "print('DEGRADED', r.error, r.isolation['landlock'], r.isolation['degraded'])\n"
    )
    hook = os.environ.get("SANDTRAP_TESTHOOK_LIB")
    if not hook:
        pytest.skip(
            "needs the library built with the test hook (make test-python builds it and sets SANDTRAP_TESTHOOK_LIB)"
        )
    env = dict(os.environ, SANDTRAP_TEST_DISABLE="landlock", SANDTRAP_LIB=hook)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "REFUSED" in out.stdout and "landlock" in out.stdout, out.stdout + out.stderr
    assert "DEGRADED None None" in out.stdout, out.stdout + out.stderr


def _escape(level: str, entry: dict) -> str | None:
    policy = corpus.policy_for(entry, Policy)
    fs = corpus.vfs_for(entry)  # a VirtualFS served by this process, or none: no open(), as in-process
    with sandbox(policy, isolation=level, echo=entry.get("session", {}).get("echo", False), filesystem=fs) as sb:
        r = None
        for code in corpus.codes(entry):
            r = sb.exec(code)
    if r.error is None:
        return f"{entry['name']}: ran to completion at {level}"
    if errname(r.error) != entry["error"]:
        return f"{entry['name']}: expected {entry['error']}, got {errname(r.error)}: {r.error}"
    if entry.get("contains") and entry["contains"] not in str(r.error):
        return f"{entry['name']}: {entry['contains']!r} not in {str(r.error)!r}"
    return None


@pytest.mark.parametrize("level", ["process", "kernel"])
def test_escape_corpus_in_a_worker(level):
    entries = [e for e in CORPUS if level in e.get("levels", LEVELS)]
    assert len(entries) >= 180
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        problems = [p for p in pool.map(lambda e: _escape(level, e), entries) if p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("level", LEVELS)
def test_cancel_from_another_thread(level, tmp_path):
    import threading

    with sandbox(Policy(timeout=30), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        sb.exec("x = 1")
        threading.Timer(0.5, sb.cancel).start()
        start = time.monotonic()
        r = sb.exec("while True:\n    pass")
        assert isinstance(r.error, StCancelled), r.error
        assert time.monotonic() - start < 10
        r = sb.exec("y = 2")  # the sandbox stays usable
    assert r.error is None and r.namespace.get("y") == 2


# ---------------------------------------------------------------- templates
# Workers are forks of one pre-started template per configuration (engine
# session_open with a "template" frame). Forks must share nothing but the template's
# pristine state, and must not reach each other or the template.


def _same_config(tmp_path, n=2, timeout=10):
    import coop_bypass

    policy = Policy(timeout=timeout)
    policy.module(coop_bypass)
    fs = IsolatedFS(tmp_path)
    return [sandbox(policy, isolation="kernel", filesystem=fs) for _ in range(n)]


def test_forks_of_one_template_share_no_namespace(tmp_path):
    a, b = _same_config(tmp_path)
    with a, b:
        assert a.exec("secret = 41\nimport coop_bypass\npid = coop_bypass.getpid()").error is None
        r = b.exec(
            "import coop_bypass\npid = coop_bypass.getpid()\ntry:\n    secret\n    seen = True\n"
            "except NameError:\n    seen = False\n"
        )
        assert r.error is None, r.traceback
        assert r.namespace["seen"] is False
        ra = a.exec("x = secret + 1")
        assert ra.namespace["x"] == 42 and ra.namespace["pid"] != r.namespace["pid"]


def test_a_fork_cannot_signal_another_fork_or_the_template(tmp_path):
    import errno

    import sandtrap._native as native

    if (native.probe().get("landlock_abi") or 0) < 6:
        pytest.skip("Landlock signal scoping needs ABI 6")
    a, b = _same_config(tmp_path)
    with a, b:
        pid_a = a.exec("import coop_bypass\npid = coop_bypass.getpid()").namespace["pid"]
        r = b.exec(f"import coop_bypass as c\nsibling = c.kill({pid_a})\ntemplate = c.kill(c.getppid())\n")
        assert r.error is None, r.traceback
        assert r.namespace["sibling"] == errno.EPERM
        assert r.namespace["template"] == errno.EPERM
        assert a.exec("y = 1").error is None  # a is alive
        (c,) = _same_config(tmp_path, n=1)
        with c:
            assert c.exec("z = 1").error is None  # and the template still forks


def test_a_new_sandbox_is_a_fork_of_the_configurations_template(tmp_path):
    parents = set()
    for sb in _same_config(tmp_path, n=3):
        with sb:
            r = sb.exec("import coop_bypass as c\nppid = c.getppid()\npid = c.getpid()")
            assert r.error is None, r.traceback
            assert r.namespace["ppid"] != r.namespace["pid"]
            parents.add(r.namespace["ppid"])
    assert len(parents) == 1  # one template forked all three


def test_a_worker_holds_only_its_stdio(tmp_path):
    # a fork holds its channel (0, 1) and stderr (2): no other sandbox's channel or
    # cgroup.procs fd, not the template's channel — first fork of a template or later
    policy = Policy(timeout=10)
    policy.module(os)
    probe = (
        "import os\nfds = []\nfor f in os.listdir('/proc/self/fd'):\n    try:\n"
        "        os.fstat(int(f))\n        fds.append(int(f))\n    except OSError:\n        pass\n"
    )
    seen = []
    for _ in range(3):
        with sandbox(policy, isolation="process", filesystem=IsolatedFS(tmp_path)) as sb:
            r = sb.exec(probe)
            assert r.error is None, r.traceback
            seen.append(sorted(r.namespace["fds"]))
    assert seen == [[0, 1, 2]] * 3, seen


def test_sandboxes_with_different_roots_share_a_template_not_their_files(tmp_path):
    # one template serves every root (a fresh directory per task costs a fork, not an
    # interpreter); each fork holds its own sandbox's Landlock rules: its root only
    import errno

    import coop_bypass

    policy = Policy(timeout=10)
    policy.module(coop_bypass)
    policy.module(os)
    roots = [tmp_path / "a", tmp_path / "b"]
    for r in roots:
        r.mkdir()
        (r / "secret.txt").write_text(f"secret of {r.name}")
    probe = (
        "import os, coop_bypass\n"
        "def try_read(p):\n"
        "    try:\n"
        "        fd = os.open(p, os.O_RDONLY)\n"
        "        return os.read(fd, 100).decode()\n"
        "    except OSError as e:\n"
        "        return e.errno\n"
        "mine = try_read('secret.txt')\n"
        "theirs = try_read(OTHER + '/secret.txt')\n"
        "hostname = try_read('/etc/hostname')\n"
        "home = os.environ.get('HOME')\n"
        "ppid = coop_bypass.getppid()\n"
    )
    a = sandbox(policy, isolation="kernel", filesystem=IsolatedFS(roots[0]))
    b = sandbox(policy, isolation="kernel", filesystem=IsolatedFS(roots[1]))
    with a, b:
        ra = a.exec(probe, namespace={"OTHER": str(roots[1])})
        rb = b.exec(probe, namespace={"OTHER": str(roots[0])})
    for r, name in ((ra, "a"), (rb, "b")):
        assert r.error is None, r.traceback
        assert r.namespace["mine"] == f"secret of {name}"
        assert r.namespace["theirs"] == errno.EACCES
        assert r.namespace["hostname"] == errno.EACCES
        assert r.namespace["home"] == str(tmp_path / name)
    assert ra.namespace["ppid"] == rb.namespace["ppid"]  # one template forked both
