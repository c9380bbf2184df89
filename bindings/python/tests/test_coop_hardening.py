"""Issue 11 (and issue 10's cooperative items) at the worker levels: process creation
at "kernel", the timeout's slack, geometric loops, cancel() on an idle sandbox, and
namespaces that must round-trip."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from pathlib import Path

import coop_bypass
import pytest

from sandtrap._coop import IsolatedFS, Policy, sandbox
from sandtrap_guest import StTimeout

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "core/guest/python/tests"))  # escape_helpers
WORKERS = ["process", "kernel"]
GRACE = 0.5  # the engine kills a worker this long after its timeout (docs/protocol.md)
PROBE = (
    "import subprocess, coop_bypass\n"
    "def run():\n"
    "    try:\n"
    "        return subprocess.run(['/usr/bin/id'], capture_output=True).returncode\n"
    "    except OSError as e:\n"
    "        return e.errno\n"
    "run_id = run()\n"
    "fork = coop_bypass.fork()\n"
    "execv = coop_bypass.execv()\n"
)


def spawn_policy(**kw):
    p = Policy(timeout=20, **kw)
    p.module(subprocess)
    p.module(coop_bypass)
    return p


def test_kernel_refuses_process_creation_by_default(tmp_path):
    with sandbox(spawn_policy(), isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(PROBE)
    assert r.error is None, r.traceback
    assert r.namespace["run_id"] == errno.EPERM
    assert r.namespace["fork"] == errno.EPERM
    assert r.namespace["execv"] == errno.EPERM
    sub = r.isolation["subprocess"]
    assert sub["allowed"] is False and sub["enforced_by"], sub


def test_kernel_allows_process_creation_when_the_policy_says_so(tmp_path):
    with sandbox(spawn_policy(allow_subprocess=True), isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(PROBE.replace("execv = coop_bypass.execv()\n", ""))
    assert r.error is None, r.traceback
    assert r.namespace["run_id"] == 0 and r.namespace["fork"] == "forked"
    assert r.isolation["subprocess"] == {"allowed": True, "why": "allow_subprocess=True"}


def test_process_level_refuses_nothing_and_says_so(tmp_path):
    with sandbox(spawn_policy(), isolation="process", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(PROBE.replace("execv = coop_bypass.execv()\n", ""))
    assert r.error is None and r.namespace["run_id"] == 0
    assert r.isolation["subprocess"]["allowed"] is True
    assert "process" in r.isolation["subprocess"]["why"]


def test_the_engines_layer_is_what_refuses(tmp_path):
    # session_open {"spawn": false}: the engine adds the denial to the fork's own
    # seccomp layer, which the fork installs before it serves
    with sandbox(spawn_policy(), isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("x = 1")
    assert any("seccomp layer" in b for b in r.isolation["subprocess"]["enforced_by"]), r.isolation["subprocess"]


@pytest.mark.parametrize("level", WORKERS)
def test_a_c_call_is_killed_at_the_timeout_plus_a_small_slack(level, tmp_path):
    policy = Policy(timeout=0.5)
    policy.module(time)
    with sandbox(policy, isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        sb.exec("x = 1")
        start = time.monotonic()
        r = sb.exec("import time\ntime.sleep(60)")
        took = time.monotonic() - start
    assert isinstance(r.error, StTimeout), r.error
    assert 0.5 <= took < 0.5 + GRACE + 0.5, took


@pytest.mark.parametrize("level", WORKERS)
def test_a_geometric_loop_is_stopped_by_the_timeout(level, tmp_path):
    with sandbox(Policy(timeout=0.5), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        sb.exec("x = 1")
        start = time.monotonic()
        r = sb.exec("x = 'a'\nfor i in range(31):\n    x = x + x\n")
        took = time.monotonic() - start
    assert isinstance(r.error, StTimeout), r.error
    assert took < 0.5 + GRACE + 0.5, took


@pytest.mark.parametrize("level", WORKERS)
def test_a_geometric_loop_is_stopped_by_the_memory_limit(level, tmp_path):
    with sandbox(Policy(timeout=30, memory_limit=100), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec("x = 'a'\nfor i in range(34):\n    x = x + x\n")
    assert isinstance(r.error, MemoryError), r.error
    if "grew by" in str(r.error):
        assert int(str(r.error).split("grew by ")[1].split()[0]) < 400 << 20, r.error


@pytest.mark.parametrize("level", ["none", *WORKERS])
def test_cancel_on_an_idle_sandbox_keeps_the_worker_and_the_namespace(level, tmp_path):
    with sandbox(Policy(timeout=10), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        assert sb.exec("x = 41").error is None
        sb.cancel()
        sb.cancel()
        r = sb.exec("y = x + 1")
    assert r.error is None, r.error
    assert r.namespace == {"x": 41, "y": 42} and not getattr(r, "restarted", False)


@pytest.mark.parametrize("level", WORKERS)
def test_any_namespace_round_trips(level, tmp_path):
    with sandbox(Policy(timeout=10), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(
            "d = {1: 'a', (1, 2): 'b', None: 3, 2.5: 4, b'k': 5, False: 6}\ns = chr(0xd800) + 'x'\n"
            "print(s)\nbig = 2 ** 100\n"
        )
        assert r.error is None, r.error
        assert r.namespace["d"] == {1: "a", "(1, 2)": "b", None: 3, 2.5: 4, b"k": 5, False: 6}
        assert r.namespace["s"] == "\ufffdx" and r.stdout == "\ufffdx\n"
        assert r.namespace["big"]["__st_placeholder__"] == "int"
        r = sb.exec("e = len(d)")  # and every later exec still works
        assert r.error is None and r.namespace["e"] == 6


@pytest.mark.parametrize("level", WORKERS)
def test_a_namespace_exponentially_larger_than_its_graph_is_bounded(level, tmp_path):
    with sandbox(Policy(timeout=None), isolation=level, filesystem=IsolatedFS(tmp_path)) as sb:
        start = time.monotonic()
        r = sb.exec("t = ()\nfor i in range(100):\n    t = (t, t)\nw = [1, 2]\nshared = [w, w]\n")
        took = time.monotonic() - start
        assert r.error is None, r.error
        # a walk of the 2**100 paths would never end; a linear one takes well under a
        # second here, and a loaded machine gets the rest of the minute
        assert took < 60, took
        assert r.namespace["shared"] == [[1, 2], [1, 2]]  # small sharing is kept
        assert "__st_placeholder__" in str(r.namespace["t"])[:100000] or "too" in str(r.namespace["t"])[-2000:]


def test_class_grants_are_readable_by_the_kernel_worker(tmp_path):
    import escape_helpers

    policy = Policy(timeout=10)
    policy.cls(escape_helpers.Counter, include=("value",))
    with sandbox(policy, isolation="kernel", filesystem=IsolatedFS(tmp_path)) as sb:
        r = sb.exec(
            "v = Counter(3).value\ntry:\n    Counter(3)._secret\nexcept AttributeError as e:\n    msg = str(e)\n"
        )
    assert r.error is None, r.traceback
    assert r.namespace["v"] == 3 and "_secret" in r.namespace["msg"]
