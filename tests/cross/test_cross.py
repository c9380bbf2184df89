"""One behaviour in every binding: the same scenarios through Python and through Node
(scenarios.mjs), compared field by field after the naming conventions are undone
(camelCase -> snake_case, Buffer/bytes -> text). Every difference is listed.

Run after ``make test-python`` and ``make test-node`` (``make test-cross``). Values
that measure time (``duration``, ``usage``'s numbers) are compared by key only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

import sandtrap
from sandtrap import Policy, Sandbox, WorkerError, sandbox

HERE = Path(__file__).resolve().parent
SYS = [p for p in ("/usr", "/lib", "/lib64", "/bin", "/etc") if os.path.isdir(p) and not os.path.islink(p)]
REDUCER_PYTHON = "/usr/bin/python3"
NODE = shutil.which("node")


def scenarios_python(cfg: dict) -> dict:
    out: dict = {}

    def scenario(name, fn):
        try:
            out[name] = fn()
        except sandtrap.SandtrapError as e:
            out[name] = {"raised": e.kind, "message": e.message}

    sb = Sandbox(fs_readable=SYS)
    scenario("run", lambda: sb.run(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    scenario("missing program", lambda: sb.run(["no-such-program-xyz"]))
    scenario("pipeline", lambda: (sb.cmd(["printf", "a\\nb\\n"]) | sb.cmd(["wc", "-l"])).run())
    scenario("pipeline with a missing stage", lambda: (sb.cmd(["no-such-program-xyz"]) | sb.cmd(["cat"])).run())
    scenario("timeout", lambda: sb.run(["sleep", "5"], timeout=0.3))
    os.environ["SANDTRAP_CROSS_VAR"] = "set after load"

    def environment():
        with Sandbox(fs_readable=SYS) as e:
            return e.run(["sh", "-c", 'echo "$SANDTRAP_CROSS_VAR"'])

    scenario("environment", environment)

    def limits():
        with Sandbox(
            fs_readable=SYS, max_memory="256M", max_processes=10, max_open_files=64, max_disk="1M", max_cpu_time=5
        ) as lim:
            return lim.isolation()

    scenario("limits", limits)
    for level in ("process", "kernel"):

        def coop(level=level):
            policy = Policy(timeout=10)

            @policy.fn
            def add(a, b):
                return a + b

            class HostFailure(Exception):
                pass

            @policy.fn
            def fail():
                raise HostFailure("from the host")

            with sandbox(policy, isolation=level, filesystem=cfg["root"]) as py:
                code = (
                    "x = add(2, 3)\nprint('x is', x)\ntry:\n    fail()\nexcept Exception as e:\n    m = str(e)\n"
                    "with open('f.txt', 'w') as f:\n    f.write('hi')\n"
                )
                return {"first": py.exec(code), "second": py.exec("y = x + 1\n1/0")}

        scenario(f"coop {level}", coop)

    def fork_and_reduce():
        work = (
            "import sys\nprint(base + CLONE_ID)\nif CLONE_ID == 2:\n    print('x' * 200)\n"
            "if CLONE_ID == 3:\n    sys.exit(5)"
        )
        with (
            Sandbox(fs_readable=SYS, max_output=100, init_fn="base = 40", work_fn=work) as mapper,
            Sandbox(fs_readable=SYS) as reducer,
        ):
            clones = mapper.fork(4)
            res = clones.results()
            reduced = reducer.reduce(
                [REDUCER_PYTHON, "-c", "import sys; print(sum(int(l) for l in sys.stdin if len(l) < 10))"], res
            )
            return {"clones": res, "isolation": clones.isolation, "reduced": reduced}

    scenario("fork and reduce", fork_and_reduce)
    sb.close()
    return out


def snake(k: str) -> str:
    return re.sub(r"[A-Z]", lambda m: "_" + m.group(0).lower(), k)


def plain(v):
    """Python results as the JSON the Node script prints (bytes as text, exceptions as
    the wire's {type, module, message})."""
    if isinstance(v, sandtrap.ExecResult):
        d = {f.name: getattr(v, f.name) for f in fields(v) if f.name != "error_message"}
        e = v.error
        d["error"] = (
            None
            if e is None
            else {
                "type": e.type_name if isinstance(e, WorkerError) else type(e).__name__,
                "module": "builtins" if isinstance(e, WorkerError) else type(e).__module__,
                "message": v.error_message,
                "traceback": getattr(e, "__sandtrap_traceback__", None),
                # a builtin exception's scalar arguments cross the wire (KeyError('k'))
                **({"args": list(e.args)} if type(e).__module__ == "builtins" and e.args else {}),
            }
        )
        return plain(d)
    if isinstance(v, sandtrap.CloneResult):
        return plain({**{f.name: getattr(v, f.name) for f in fields(v)}, "success": v.success})
    if is_dataclass(v):
        return plain({f.name: getattr(v, f.name) for f in fields(v)})
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


VOLATILE = {"duration", "wall_s", "cpu_user_s", "cpu_sys_s", "cpu_tree_s", "peak_memory", "spawn_us"}


def norm(v, key=""):
    if isinstance(v, dict):
        return {snake(k): norm(x, snake(k)) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    if key in VOLATILE:
        return "<measured>"
    return v


def diff(a, b, where="", out=None):
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{where}.{k}: only in Node ({b[k]!r:.120})")
            elif k not in b:
                out.append(f"{where}.{k}: only in Python ({a[k]!r:.120})")
            else:
                diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: Python {a!r:.200} != Node {b!r:.200}")
    return out


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_python_and_node_agree_field_by_field(tmp_path):
    if not (HERE.parents[1] / "bindings/node/build/Release/sandtrap.node").exists() and not os.environ.get(
        "SANDTRAP_ADDON"
    ):
        pytest.fail("the Node addon is not built: run `make test-node` first (make test-cross does)")
    cfg = {"root": os.path.realpath(tmp_path), "python": sys.executable, "sys": SYS, "reducer_python": REDUCER_PYTHON}
    py = norm(plain(scenarios_python(cfg)))
    p = subprocess.run(
        [NODE, str(HERE / "scenarios.mjs"), json.dumps(cfg)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "SANDTRAP_CROSS_VAR"},
    )
    assert p.returncode == 0, p.stderr
    node = norm(json.loads(p.stdout))
    assert sorted(py) == sorted(node), "the two scenario lists differ"
    problems = diff(py, node)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems)
    # and the scenarios say what they should (not merely the same in both)
    assert py["run"]["exit_code"] == 3 and py["run"]["stdout"] == "out\n"
    assert py["missing program"]["error"]["kind"] == "not_found"
    assert py["pipeline"]["stdout"].strip() == "2"
    assert py["pipeline with a missing stage"]["failed_stage"] == 0
    assert py["timeout"]["timed_out"] and py["timeout"]["error"]["kind"] == "timeout"
    assert py["environment"]["stdout"] == "set after load\n"
    assert py["limits"]["limits"]["max_processes"]["value"] == 10
    for level in ("process", "kernel"):
        c = py[f"coop {level}"]
        assert {k: c["first"]["namespace"][k] for k in ("x", "m")} == {"x": 5, "m": "HostFailure: from the host"}
        assert c["first"]["stdout"] == "x is 5\n" and c["first"]["isolation"]["level"] == level
        assert c["second"]["error"]["type"] == "ZeroDivisionError"
    f = py["fork and reduce"]
    assert [c["exit_code"] for c in f["clones"]] == [0, 0, 0, 5]
    assert f["clones"][2]["stdout_truncated"] and len(f["clones"][2]["stdout"]) == 100
    # clone 2's truncated output has no newline: "43" joins its last line (dropped)
    assert f["reduced"]["stdout"] == str(40 + 41 + 42) + "\n", f["reduced"]
