"""The shared attack vectors (tests/vectors/attacks.json), run through the Python API.

The file format, placeholders, fixtures and expect keys are documented in
tests/vectors/README.md; the Go and Node suites run the same list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import IS_ROOT, landlock_abi, wait_no_survivor

import sandtrap

REPO = Path(__file__).resolve().parents[3]
VECTORS_DIR = REPO / "tests" / "vectors"
VECTORS_FILE = VECTORS_DIR / "attacks.json"
PYTHON = "/usr/bin/python3"


def _load() -> dict[str, Any]:
    if not VECTORS_FILE.is_file():
        return {"base_policy": {}, "vectors": []}
    return json.loads(VECTORS_FILE.read_text())


DATA = _load()
VECTORS: list[dict[str, Any]] = DATA.get("vectors", []) if isinstance(DATA, dict) else DATA


def test_vector_file_present() -> None:
    assert VECTORS_FILE.is_file(), f"{VECTORS_FILE} is missing"
    assert VECTORS, "no vectors"
    names = [v["name"] for v in VECTORS]
    assert len(names) == len(set(names)), "vector names must be unique"


# -- fixtures of tests/vectors/README.md --------------------------------------------------

TMP_FILES = {
    "work/public.txt": "PUBLIC",
    "work/sub/keep.txt": "KEEP",
    "work/denied/secret.txt": "TOPSECRET",
    "outside/secret.txt": "TOPSECRET",
    "outside/run.sh": "#!/bin/sh\necho escaped\n",
}


def layout(tmp: Path) -> None:
    """The {tmp} tree: directories 0755, files 0644 (run.sh 0755)."""
    os.chmod(tmp, 0o755)
    (tmp / "bin").mkdir(mode=0o755)
    shutil.copyfile(VECTORS_DIR / "attack.py", tmp / "bin" / "attack.py")
    os.chmod(tmp / "bin" / "attack.py", 0o644)
    for rel, content in TMP_FILES.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        p.write_text(content)
        os.chmod(p, 0o755 if rel.endswith(".sh") else 0o644)
    for d in [tmp, *[p for p in tmp.rglob("*") if p.is_dir()]]:
        os.chmod(d, 0o755)


class Listener:
    """A stream socket that accepts and sends HELLO, then closes, until stopped."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.listen(16)
        sock.settimeout(0.1)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            try:
                c.sendall(b"HELLO")
            except OSError:
                pass
            finally:
                c.close()

    def close(self) -> None:
        self._stop.set()
        self._t.join(2)
        self.sock.close()


class Recorder:
    """A TCP listener that accepts, sends HELLO and records what it receives."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.conns = 0
        self.got = b""
        self._lock = threading.Lock()
        self._readers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.conns += 1
            t = threading.Thread(target=self._read, args=(c,), daemon=True)
            self._readers.append(t)
            t.start()

    def _read(self, c: socket.socket) -> None:
        try:
            c.sendall(b"HELLO")
            c.settimeout(3)
            while chunk := c.recv(65536):
                with self._lock:
                    self.got += chunk
        except OSError:
            pass
        finally:
            c.close()

    def settle(self) -> tuple[int, str]:
        """Wait a moment for what is in flight; (connections, bytes received)."""
        time.sleep(0.3)
        for t in list(self._readers):
            t.join(3)
        with self._lock:
            return self.conns, self.got.decode(errors="replace")

    def close(self) -> None:
        self._stop.set()
        self._t.join(2)
        self.sock.close()


def host_fixture(*args: str) -> str:
    """tests/vectors/host_fixtures.py: the fixtures every harness shares."""
    p = subprocess.run([PYTHON, str(VECTORS_DIR / "host_fixtures.py"), *args], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.fail(f"host_fixtures.py {args}: {p.stderr}")
    return p.stdout.strip()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_PLACEHOLDER = re.compile(r"^\{[a-z_]+\}$")


def subst(v: Any, repl: dict[str, str]) -> Any:
    """Replace placeholders; a value that is exactly a placeholder and becomes a number
    (a port) is passed as an int, like the Go runner."""
    if isinstance(v, str):
        out = v
        for k, r in repl.items():
            out = out.replace(k, r)
        if _PLACEHOLDER.match(v) and out != v and out.isdigit():
            return int(out)
        return out
    if isinstance(v, list):
        return [subst(x, repl) for x in v]
    if isinstance(v, dict):
        return {k: subst(x, repl) for k, x in v.items()}
    return v


def _alive(p: subprocess.Popen[bytes]) -> bool:
    if p.poll() is not None:
        return False
    # a zombie would also answer signal 0: look at its state
    try:
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def vector_env() -> Iterator[dict[str, Any]]:
    # {tmp} lives where few entries sit beside it (/var/tmp), not in pytest's
    # directory: a vector granting "/" and denying {tmp}/work/denied makes a Landlock
    # rule of every entry beside the way down (docs/security.md), and pytest's
    # directory holds one entry per test that ran before
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else tempfile.gettempdir()
    tmp = Path(tempfile.mkdtemp(prefix="sandtrap-vector-", dir=base))
    env: dict[str, Any] = {"tmp": tmp, "cleanup": []}
    yield env
    for fn in reversed(env["cleanup"]):
        fn()
    shutil.rmtree(tmp, ignore_errors=True)


def setid_files(root: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            try:
                mode = os.lstat(p).st_mode
            except OSError:
                continue
            if mode & (stat.S_ISUID | stat.S_ISGID):
                out.append(f"{p} {oct(mode)}")
    return out


def check(
    vec: dict[str, Any],
    res: sandtrap.Result,
    wall: float,
    host: subprocess.Popen[bytes] | None,
    repl: dict[str, str],
    env: dict[str, Any] | None = None,
) -> list[str]:
    return check_expect(vec["expect"], res, wall, host, repl, env or {})


def check_expect(
    expect: dict[str, Any],
    res: sandtrap.Result,
    wall: float,
    host: subprocess.Popen[bytes] | None,
    repl: dict[str, str],
    env: dict[str, Any],
) -> list[str]:
    out = res.stdout.decode(errors="replace").strip()
    errors = []
    for key, want in expect.items():
        if key == "stdout":
            ok = out == want
        elif key == "stdout_in":
            ok = out in want
        elif key == "stdout_startswith":
            ok = out.startswith(want)
        elif key == "stderr_contains":
            ok = want in res.stderr.decode(errors="replace")
        elif key == "exit_code":
            ok = res.exit_code == want
        elif key == "signal":
            ok = res.signal == want
        elif key == "success":
            ok = res.success == want
        elif key == "timed_out":
            ok = res.timed_out == want
        elif key == "stdout_truncated":
            ok = res.stdout_truncated == want
        elif key == "error_kind":
            ok = res.error is not None and res.error.kind == want
        elif key == "stdout_len":
            ok = len(res.stdout) == want
        elif key == "max_wall_s":
            ok = wall <= want
        elif key == "host_process_alive":
            ok = host is not None and _alive(host) == want
        elif key == "no_survivor":
            cmdline = subst(want, repl)
            ok = not wait_no_survivor(cmdline)
        elif key in ("build_error_kind", "build_error_contains"):
            errors.append("the sandbox was built (build_error_kind is checked before the run)")
            continue
        elif key == "no_setid_under":
            left = setid_files(subst(want, repl))
            ok = not left
            if left:
                errors.append(f"set-id files left: {left}")
        elif key == "free_ipc_key_unused":
            found = json.loads(host_fixture("ipc-sweep", env["free_ipc_key"], "64"))
            ok = (not found) == want
            if not ok:
                errors.append(f"IPC objects the run left on the host: {found}")
        elif key in ("rec_listener_connections", "rec_listener_got"):
            rec = env.get("recorder")
            if rec is None:
                errors.append(f"{key} needs the recording_listener fixture")
                continue
            conns, got = rec.settle()
            ok = (conns if key == "rec_listener_connections" else got) == want
            if not ok:
                errors.append(f"recording listener: {conns} connections, received {got!r}")
        elif key == "one_of":
            why = []
            for i, alt in enumerate(want):
                e = check_expect(alt, res, wall, host, repl, env)
                if not e:
                    break
                why.append(f"alternative {i}: " + "; ".join(e))
            else:
                errors.append("one_of: none holds: " + " | ".join(why))
            continue
        else:
            errors.append(f"unknown expect key {key!r}")
            continue
        if not ok:
            errors.append(f"{key}: want {want!r}")
    if errors:
        short = out if len(out) <= 200 else out[:200] + "…"
        errors.append(
            f"stdout={short!r} stderr={res.stderr[:500]!r} exit={res.exit_code} signal={res.signal} "
            f"error={res.error!r} wall={wall:.2f}s"
        )
    return errors


@pytest.mark.parametrize("vec", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vec: dict[str, Any], vector_env: dict[str, Any]) -> None:
    req = vec.get("requires") or {}
    if "landlock_abi" in req and landlock_abi() < req["landlock_abi"]:
        pytest.skip(f"needs Landlock ABI {req['landlock_abi']}, kernel has {landlock_abi()}")
    if "root" in req and bool(req["root"]) != IS_ROOT:
        pytest.skip(f"needs root={req['root']}")
    if vec.get("root_only") and not IS_ROOT:
        pytest.skip("root only")

    tmp: Path = vector_env["tmp"]
    layout(tmp)
    repl = {"{tmp}": str(tmp), "{python}": PYTHON}
    host: subprocess.Popen[bytes] | None = None
    for fx in vec.get("fixtures") or []:
        if fx == "tcp_listener":
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            lst = Listener(s)
            vector_env["cleanup"].append(lst.close)
            port = s.getsockname()[1]
            repl["{port}"], repl["{other_port}"] = str(port), str(port + 1)
        elif fx == "free_port":
            port = free_port()
            repl["{free_port}"], repl["{other_port}"] = str(port), str(port + 1)
        elif fx == "abstract_listener":
            name = f"sandtrap-test-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\0" + name)
            lst = Listener(s)
            vector_env["cleanup"].append(lst.close)
            repl["{abstract}"] = name
        elif fx == "host_process":
            host = subprocess.Popen(["sleep", "60"])
            vector_env["cleanup"].append(lambda p=host: (p.kill(), p.wait()))
            repl["{pid}"] = str(host.pid)
        elif fx == "recording_listener":
            rec = Recorder()
            vector_env["cleanup"].append(rec.close)
            vector_env["recorder"] = rec
            repl["{rec_port}"] = str(rec.port)
        elif fx == "sink_listener":
            sink = socket.socket()
            sink.bind(("127.0.0.1", 0))
            sink.listen(4096)  # never accepts, never reads
            vector_env["cleanup"].append(sink.close)
            repl["{sink_port}"] = str(sink.getsockname()[1])
        elif fx == "host_ipc":
            key = host_fixture("ipc-key")
            vector_env["cleanup"].append(lambda k=key: host_fixture("ipc-sweep", k, "1"))
            host_fixture("ipc-create", key)
            repl["{ipc_key}"] = key
        elif fx == "free_ipc_key":
            key = host_fixture("ipc-key")
            vector_env["cleanup"].append(lambda k=key: host_fixture("ipc-sweep", k, "64"))
            vector_env["free_ipc_key"] = key
            repl["{free_ipc_key}"] = key
        elif fx == "user_xattrs":
            host_fixture("xattrs", str(tmp))
        elif fx == "symlinks":
            os.symlink(tmp / "work", tmp / "worklink")
        elif fx == "mknod_zero":
            host_fixture("mknod", str(tmp / "bin" / "zero"), "1", "5")
        elif fx == "root_block_device":
            dev = host_fixture("rootdev")
            if not dev:
                pytest.skip("fixture root_block_device: no block device node holds /")
            repl["{rootdev}"] = dev
        else:
            pytest.fail(f"unknown fixture {fx!r}")

    policy = {k: subst(v, repl) for k, v in (DATA.get("base_policy") or {}).items()}
    for k, v in (vec.get("policy") or {}).items():
        if v is None:
            policy.pop(k, None)
        else:
            policy[k] = subst(v, repl)
    argv = [subst(a, repl) for a in vec["argv"]]
    argv = [str(a) for a in argv]

    want_build = vec["expect"].get("build_error_kind")
    if want_build is not None:
        try:
            sb = sandtrap.Sandbox(**policy)
        except sandtrap.SandtrapError as e:
            assert e.kind == want_build, f"{vec['name']}: want a {want_build} error, got {e.kind}: {e}"
            for sub in vec["expect"].get("build_error_contains") or []:
                assert subst(sub, repl) in str(e), f"{vec['name']}: the error lacks {subst(sub, repl)!r}: {e}"
            return
        sb.close()
        pytest.fail(f"{vec['name']}: want a {want_build} error, the sandbox was built")

    with sandtrap.Sandbox(**policy) as sb:
        start = time.monotonic()
        res = sb.run(argv, timeout=vec.get("timeout") or None, stdin=vec.get("stdin"))
        wall = time.monotonic() - start
    errors = check(vec, res, wall, host, repl, vector_env)
    assert not errors, f"{vec['name']}: " + "; ".join(errors)
