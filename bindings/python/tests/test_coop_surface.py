"""Issue 19: the cooperative sandbox's seed surface, at every isolation level.

The bugs the issue lists (C code importing at call time, ``os.path`` through a
recursive grant, nested grants, echo modes, exception arguments, memory units), the
seed's names (``Sandbox(policy)``, ``sandtrap.errors``, ``IsolationStatus``, per-call
``echo=``, ``error._st_traceback_text``) and ``isolation="none"`` without the native
library."""

from __future__ import annotations

import email
import email.mime
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import sandtrap
from sandtrap import IsolatedFS, IsolationStatus, Policy, Sandbox, sandbox

LEVELS = ["none", "process", "kernel"]


def errname(err):
    return None if err is None else getattr(err, "type_name", type(err).__name__)


@pytest.fixture(params=LEVELS)
def level(request):
    return request.param


def open_sb(policy, level, tmp_path, **kw):
    return sandbox(policy, isolation=level, filesystem=IsolatedFS(tmp_path), **kw)


# --------------------------------------------------------------------- the bugs
def test_c_code_that_imports_at_call_time(level, tmp_path):
    p = Policy(timeout=20)
    p.module(time)
    with open_sb(p, level, tmp_path) as sb:
        r = sb.exec("import time\ny = time.strptime('2021', '%Y').tm_year")
    assert r.error is None, r.traceback
    assert r.namespace["y"] == 2021


def test_numpy_reduction_that_imports_at_call_time(level, tmp_path):
    np = pytest.importorskip("numpy")
    p = Policy(timeout=60)
    p.module(np, recursive=True)
    with open_sb(p, level, tmp_path) as sb:
        r = sb.exec("import numpy as np\ns = int(np.arange(3).sum())\nm = float(np.arange(4).mean())")
    assert r.error is None, r.traceback
    assert (r.namespace["s"], r.namespace["m"]) == (3, 1.5)


@pytest.mark.parametrize(
    "code",
    [
        "import os\nx = os.path.join('a', 'b')",
        "import os.path\nx = os.path.join('a', 'b')",
        "from os.path import join\nx = join('a', 'b')",
    ],
    ids=["attribute", "import", "from"],
)
def test_recursive_os_grants_os_path(level, tmp_path, code):
    p = Policy(timeout=20)
    p.module(os, recursive=True)
    with open_sb(p, level, tmp_path) as sb:
        r = sb.exec(code)
    assert r.error is None, r.traceback
    assert r.namespace["x"] == "a/b"


def test_nested_grants(level, tmp_path):
    p = Policy(timeout=20)
    p.module(email, recursive=True)
    p.module(email.mime, name="email.mime")
    with open_sb(p, level, tmp_path) as sb:
        ok = sb.exec("import email.utils\nx = email.utils.quote('a')")
        hidden = sb.exec("import email.mime.text")
        hidden_from = sb.exec("from email.mime import text")
    assert ok.error is None and ok.namespace["x"] == "a"
    assert errname(hidden.error) == "StImportDenied" and "email.mime.text" in str(hidden.error)
    assert errname(hidden_from.error) == "StImportDenied"


# ------------------------------------------------------- policy introspection
def _introspection_policy():
    import fractions
    import json

    p = Policy(timeout=20)
    p.module(os, recursive=True, exclude=["_*", "os.walk"])
    p.module(json)
    p.module(email, recursive=True)
    p.module(email.mime, name="email.mime")
    p.cls(fractions.Fraction, exclude=["_*", "limit_denominator"])
    return p


# (object expression in the sandbox, attribute): is_attr_allowed must say what a read does
_ATTR_CASES = [
    ("os", "getcwd"),
    ("os", "walk"),
    ("os", "_exit"),
    ("os", "path"),
    ("os", "no_such_name"),
    ("os.path", "join"),
    ("json", "loads"),
    ("json", "decoder"),
    ("email", "utils"),
    ("email.mime", "text"),
    ("Fraction(1, 3)", "numerator"),
    ("Fraction(1, 3)", "limit_denominator"),
    ("Fraction(1, 3)", "_numerator"),
    ("Fraction", "from_float"),
    ("Fraction", "__subclasses__"),
]
_IMPORT_CASES = ["os", "os.path", "json", "json.decoder", "sys", "os.no_such_module", "email", "email.utils"]
_IMPORT_CASES += ["email.mime", "email.mime.text", "fractions", "main.x", "os.path.join"]


def test_policy_introspection_agrees_with_the_sandbox(level, tmp_path):
    import fractions
    import json

    p = _introspection_policy()
    hosts = {"os": os, "os.path": os.path, "json": json, "email": email, "email.mime": email.mime}
    hosts |= {"Fraction(1, 3)": fractions.Fraction(1, 3), "Fraction": fractions.Fraction}
    src = "import os, os.path, json, email, email.mime\nout = []\n"
    for expr, attr in _ATTR_CASES:
        src += f"try:\n    getattr({expr}, {attr!r})\n    out.append(True)\nexcept (AttributeError, ImportError):\n    out.append(False)\n"
    with open_sb(p, level, tmp_path) as sb:
        r = sb.exec(src)
        assert r.error is None, r.traceback
        seen = dict(zip(_ATTR_CASES, r.namespace["out"], strict=True))
        imports = {name: sb.exec(f"import {name}").error is None for name in _IMPORT_CASES}
    said = {(e, a): p.is_attr_allowed(hosts[e], a) for e, a in _ATTR_CASES}
    assert said == seen
    # the cases are not all one answer
    assert sum(said.values()) == 7, said
    assert {n: p.is_import_allowed(n) for n in _IMPORT_CASES} == imports
    assert [n for n in _IMPORT_CASES if imports[n]] == ["os", "os.path", "json", "email", "email.utils", "email.mime"]


def test_policy_functions_and_introspection_refusals():
    p = Policy()

    @p.fn
    def report(x):
        return x

    assert p.functions is p.fns and p.functions["report"].func is report
    assert p.functions["report"].name == "report"
    assert p.is_import_allowed("") is False and p.is_import_allowed("a b") is False
    assert p.is_import_allowed(3) is False  # type: ignore[arg-type]
    assert p.is_attr_allowed(report, "__globals__") is False
    assert p.is_attr_allowed(os, 3) is False  # type: ignore[arg-type]
    assert p.is_attr_allowed(os, "getcwd") is False  # os is not granted here
    p.module(os)
    assert p.is_attr_allowed(os, "getcwd") is True  # a new grant is seen
    assert p.is_attr_allowed(os, "path") is False  # not recursive: submodules are not granted


# ------------------------------------------- configure=, network_access, host_fs_access
@pytest.fixture
def local_server():
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.sendall(b"hi")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


@pytest.mark.parametrize("how", ["none", "grant", "member"])
def test_network_access_of_a_grant_opens_the_kernel_worker_network(level, tmp_path, local_server, how):
    import coop_net_helper

    from sandtrap import MemberSpec

    p = Policy(timeout=20)
    if how == "grant":
        p.module(coop_net_helper, network_access=True)
    elif how == "member":
        p.module(coop_net_helper, configure={"fetch": MemberSpec(network_access=True)})
    else:
        p.module(coop_net_helper)
    assert p.needs_network() is (how != "none") and p.allow_network is False
    with open_sb(p, level, tmp_path) as sb:
        r = sb.exec(f"import coop_net_helper as h\nx = h.fetch({local_server})")
    assert r.error is None, r.traceback
    # at "none" and "process" granted code has the host's network anyway; at "kernel" only
    # a grant that asked for it opens the worker's (the report says so)
    opened = level != "kernel" or how != "none"
    assert r.namespace["x"] == ("hi" if opened else "PermissionError")
    assert r.isolation.allow_network is opened


def test_configure_grants_a_member_the_filter_excludes(level, tmp_path):
    import coop_net_helper

    from sandtrap import MemberSpec

    code = "import coop_net_helper as h\nf = h.read\ng = h.fetch"
    plain = Policy(timeout=20)
    plain.module(coop_net_helper, exclude=["_*", "read", "fetch"])
    conf = Policy(timeout=20)
    conf.module(coop_net_helper, exclude=["_*", "read", "fetch"], configure={"read": MemberSpec()})
    with open_sb(plain, level, tmp_path) as sb:
        denied = sb.exec(code)
    with open_sb(conf, level, tmp_path) as sb:
        r = sb.exec(code)
    assert errname(denied.error) == "StAttributeDenied" and "read" in str(denied.error)
    # the configured member is granted; the other excluded one stays refused
    assert errname(r.error) == "StAttributeDenied" and "fetch" in str(r.error)
    assert (plain.is_attr_allowed(coop_net_helper, "read"), conf.is_attr_allowed(coop_net_helper, "read")) == (
        False,
        True,
    )
    assert conf.is_attr_allowed(coop_net_helper, "fetch") is False


def test_host_fs_access(level, tmp_path):
    import coop_net_helper

    outside = tmp_path / "outside.txt"  # not the IsolatedFS root below
    outside.write_text("host file")
    root = tmp_path / "root"
    root.mkdir()
    p = Policy(timeout=20)
    p.module(coop_net_helper, host_fs_access=True)
    assert p.needs_host_fs() is True
    if level == "kernel":
        with pytest.raises(sandtrap.InvalidArgument, match=r"not offered at isolation=.kernel.*policy\.fn"):
            sandbox(p, isolation=level, filesystem=IsolatedFS(root))
    else:
        with sandbox(p, isolation=level, filesystem=IsolatedFS(root)) as sb:
            r = sb.exec(f"import coop_net_helper as h\nx = h.read({str(outside)!r})")
        assert r.error is None and r.namespace["x"] == "host file"
    # a function grant runs in the host at every level: it has the host's files
    q = Policy(timeout=20)
    q.fn(coop_net_helper.read, name="host_read", host_fs_access=True, network_access=True)
    assert q.needs_host_fs() is False and q.needs_network() is False
    with sandbox(q, isolation=level, filesystem=IsolatedFS(root)) as sb:
        r = sb.exec(f"x = host_read({str(outside)!r})")
    assert r.error is None and r.namespace["x"] == "host file"
    for bad in (
        {"configure": {"read": True}},
        {"configure": {"no such": sandtrap.MemberSpec()}},
        {"network_access": 1},
    ):
        with pytest.raises((TypeError, ValueError)):
            Policy().module(coop_net_helper, **bad)


# ------------------------------------------------------------------ help()
def test_help_shows_what_the_policy_lets_the_sandbox_read(level, tmp_path):
    import fractions
    import json

    p = Policy(timeout=20)
    p.module(json, exclude=["_*", "dumps"])
    p.cls(fractions.Fraction, exclude=["_*", "limit_denominator"])
    code = textwrap.dedent(
        """
        import json
        help(json)
        help(json.loads)
        help(Fraction(1, 3))
        def mine(a, *, b=3):
            "Mine, documented."
        help(mine)
        help()
        """
    )
    with open_sb(p, level, tmp_path, snapshot_prints=True) as sb:
        r = sb.exec(code)
        by_name = sb.exec("help('json')")
        extra = sb.exec("help(1, 2)")
    assert r.error is None, r.traceback
    out = r.stdout
    assert out.startswith("Help on module json:\n")
    assert "    loads(s, *, cls=None" in out and "Deserialize ``s``" in out
    assert "Help on function loads:\n\nloads(s, *, cls=None" in out
    assert "Help on class Fraction:" in out and "    from_float(f)" in out and "    numerator\n" in out
    assert "Help on function mine:\n\nmine(a, *, b=3)\n\n    Mine, documented.\n" in out
    assert "Welcome to help!" in out
    # excluded and private members are not listed, nor their docstrings
    hidden = ["    dumps(", "Serialize ``obj`` to a JSON formatted ``str``", "limit_denominator", "_numerator"]
    for text in [*hidden, "    decoder", "    scanner", "    _default_decoder"]:
        assert text not in out, text
    assert len(r.prints) == 5 and "".join(t for (t,) in r.prints) == out
    assert errname(by_name.error) == "TypeError" and "string argument" in str(by_name.error)
    assert errname(extra.error) == "TypeError"


def test_echo_all_and_per_call_echo(level, tmp_path):
    code = "1 + 1\nx = 5\nx * 2\nx"
    with open_sb(Policy(timeout=20), level, tmp_path, echo="all") as sb:
        assert sb.exec(code).stdout == "2\n10\n5\n"
        assert sb.exec(code, echo="last").stdout == "5\n"
        assert sb.exec(code, echo="none").stdout == ""
        assert sb.exec(code).stdout == "2\n10\n5\n"  # the sandbox's mode again
    with open_sb(Policy(timeout=20), level, tmp_path) as sb:
        assert sb.exec(code).stdout == ""
        assert sb.exec(code, echo=True).stdout == "5\n"


@pytest.mark.parametrize("bad", ["All", "yes", 1, None.__class__])
def test_invalid_echo_is_the_same_value_error_at_every_level(level, tmp_path, bad):
    with pytest.raises(ValueError, match="Invalid echo option") as e1:
        open_sb(Policy(timeout=20), level, tmp_path, echo=bad)
    assert type(e1.value) is ValueError
    with (
        open_sb(Policy(timeout=20), level, tmp_path) as sb,
        pytest.raises(ValueError, match="Invalid echo option") as e2,
    ):
        sb.exec("1", echo=bad)
    assert type(e2.value) is ValueError


def test_invalid_echo_over_the_protocol_is_refused_by_the_engine(tmp_path):
    # what a host other than Python (Node) sends: the engine checks the mode too
    with (
        sandbox(Policy(timeout=20), isolation="process") as sb,
        pytest.raises(sandtrap.InvalidRequest, match="Invalid echo option"),
    ):
        sb._request({"op": "coop_exec", "code": "1", "echo": "bad"})


def test_key_error_comes_back_with_its_argument(level, tmp_path):
    with open_sb(Policy(timeout=20), level, tmp_path) as sb:
        r = sb.exec("d = {}\nd['k']")
        r2 = sb.exec("raise OSError(2, 'gone')")
    assert type(r.error) is KeyError and r.error.args == ("k",) and repr(r.error) == "KeyError('k')"
    assert type(r2.error) is FileNotFoundError and r2.error.errno == 2 and r2.error.strerror == "gone"


def test_memory_limit_is_megabytes_at_every_level(level, tmp_path):
    with open_sb(Policy(timeout=30, memory_limit=64), level, tmp_path) as sb:
        small = sb.exec("x = bytearray(8 << 20)\ndel x")
        big = sb.exec("x = [bytearray(1 << 20) for _ in range(200)]")  # noticed at a checkpoint
    assert small.error is None, small.traceback
    assert type(big.error) is MemoryError and "67108864 bytes" in str(big.error)
    with open_sb(Policy(timeout=30, memory_limit_bytes=64 << 20), level, tmp_path) as sb:
        big = sb.exec("x = [bytearray(1 << 20) for _ in range(200)]")
    assert type(big.error) is MemoryError and "67108864 bytes" in str(big.error)


# ------------------------------------------------------------- the seed's names
def test_sandbox_class_dispatches_on_a_policy(tmp_path):
    policy = Policy(timeout=5.0, tick_limit=100_000)
    with Sandbox(policy) as sb:  # the seed's in-process class
        r = sb.exec("total = sum(range(10))\nprint(f'total = {total}')")
    assert isinstance(sb, sandtrap.CoopSandbox) and sb.level == "none"
    assert (r.stdout, r.namespace, r.error, r.ticks) == ("total = 45\n", {"total": 45}, None, 2)
    with Sandbox(policy=policy, echo="last") as sb:
        assert sb.exec("6 * 7").stdout == "42\n"
    with Sandbox(policy, isolation="process") as sb:
        assert sb.exec("x = 1").namespace == {"x": 1} and sb.level == "process"
    # the process sandbox keeps its keyword form
    ps = Sandbox(fs_readable=["/usr"], max_memory="64M")
    assert type(ps) is Sandbox and ps.policy["max_memory"]
    ps.close()
    with pytest.raises(sandtrap.PolicyError, match="keyword arguments only"):
        Sandbox("not a policy")


def test_errors_module_has_the_seed_names():
    from sandtrap import errors

    for name in (
        "StError",
        "StTimeout",
        "StCancelled",
        "StTickLimit",
        "StForkUnsafe",
        "StPolicyNotPortable",
        "StLostWrite",
        "StValidationError",
        "IsolationUnavailable",
        "RpcChannelClosed",
    ):
        assert isinstance(getattr(errors, name), type), name
    assert errors.StTimeout is sandtrap.StTimeout and errors.StPolicyNotPortable is sandtrap.StPolicyNotPortable
    assert (
        issubclass(errors.IsolationUnavailable, RuntimeError)
        and errors.IsolationUnavailable is sandtrap.IsolationUnavailable
    )
    assert issubclass(errors.StPolicyNotPortable, ValueError) and issubclass(errors.StForkUnsafe, RuntimeError)
    assert issubclass(errors.StLostWrite, OSError) and errors.WorkerCrashed is sandtrap.WorkerCrashed
    assert issubclass(errors.StImportDenied, ImportError) and issubclass(errors.StAttributeDenied, AttributeError)


def test_isolation_status_object_and_dict_view(level, tmp_path):
    with open_sb(Policy(timeout=20), level, tmp_path) as sb:
        st = sb.exec("x = 1").isolation
    assert isinstance(st, IsolationStatus)
    assert st["level"] == level == st.level and dict(st)["level"] == level
    assert st.requested is (level == "kernel")
    assert st.seatbelt is None and st.platform == sys.platform
    if level == "kernel":
        assert st.landlock is True and st.seccomp is True and st.degraded is False
        assert st.root == str(tmp_path.resolve()) and st.allow_network is False and st.allow_host_fs is False
        assert st["landlock"]["abi"] >= 1
        assert st.summary() == "kernel isolation on linux: landlock=applied, seccomp=applied"
    else:
        assert st.landlock is None and st.seccomp is None and st.degraded is False
        assert st.allow_host_fs is True and st.allow_network is True and st.root is None
    assert "isolation" in st.summary()


def test_traceback_where_the_seed_puts_it(level, tmp_path):
    with open_sb(Policy(timeout=20), level, tmp_path) as sb:
        r = sb.exec("def f():\n    return 1 / 0\nf()")
    tb = r.error._st_traceback_text
    assert tb == r.traceback.rstrip()
    assert tb.startswith("Traceback (most recent call last):") and tb.endswith("ZeroDivisionError: division by zero")
    assert 'File "<sandbox>", line 2, in f' in tb and "return 1 / 0" in tb
    assert "sandtrap_guest" not in tb


def test_start_method_fork_is_refused_with_the_reason():
    with pytest.raises(sandtrap.InvalidArgument, match="never inherit this process's memory"):
        sandbox(Policy(), isolation="process", start_method="fork")
    for sm in (None, "spawn", "forkserver"):
        sandbox(Policy(), start_method=sm, close_fds=True).close()
    with pytest.raises(sandtrap.InvalidArgument, match="mode must be 'raw'"):
        sandbox(Policy(), mode="json")


# ----------------------------------------------- "none" without the native library
HIDDEN = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {src!r})
    import sandtrap
    from sandtrap import Policy, sandbox, Sandbox, errors
    from sandtrap import _native
    print("CANDIDATES", [str(p) for p in _native.candidates()])
    with sandbox(Policy(timeout=5.0, tick_limit=100_000)) as sb:
        r = sb.exec("total = sum(range(10))\\nprint(f'total = {{total}}')")
    print("NONE", repr(r.stdout), r.namespace, r.error, r.isolation.level)
    with Sandbox(Policy()) as sb:
        print("SANDBOX", sb.exec("x = 2").namespace)
    print("LOADED", _native.lib_path())
    for level in ("process", "kernel"):
        try:
            sandbox(Policy(), isolation=level)
        except errors.IsolationUnavailable as e:
            print("REFUSED", level, e)
    """
)


@pytest.mark.parametrize("preload", [True, False])
def test_preload_grants_chooses_where_grants_are_imported(tmp_path, preload):
    import coop_import_pid

    p = Policy(timeout=20)
    p.module(coop_import_pid)
    p.module(os, include=["getpid"])
    code = "import coop_import_pid, os\nmine = coop_import_pid.IMPORT_PID == os.getpid()"
    for level in ("process", "kernel"):
        with open_sb(p, level, tmp_path, preload_grants=preload) as sb:
            first = sb.exec(code)
            assert first.error is None, first.traceback
            # preloaded: the template imported it (the worker is its fork); not: this worker did
            assert first.namespace["mine"] is (not preload), level
    with pytest.raises(sandtrap.InvalidArgument, match="preload_grants must be a bool"):
        sandbox(p, preload_grants="yes")  # type: ignore[arg-type]
    with sandbox(p, preload_grants=preload) as sb:  # no worker at "none": accepted, the host imported it
        assert sb.exec(code).namespace["mine"] is True


def test_isolation_none_works_without_the_native_library(tmp_path):
    # a copy of the package where no library can be found: SANDTRAP_LIB names
    # nothing, and no _lib/ or build/ library lies next to it
    src = Path(sandtrap.__file__).resolve().parent
    guest = Path(sys.modules["sandtrap_guest"].__file__).resolve().parent
    dest = tmp_path / "site"
    import shutil

    shutil.copytree(src, dest / "sandtrap", ignore=shutil.ignore_patterns("_lib", "__pycache__"))
    shutil.copytree(guest, dest / "sandtrap_guest", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SANDTRAP_LIB")}
    env["SANDTRAP_LIB"] = str(tmp_path / "nowhere" / "libsandtrap.so")
    p = subprocess.run(
        [sys.executable, "-c", HIDDEN.format(src=str(dest))], capture_output=True, text=True, env=env, timeout=120
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "CANDIDATES" in out and "build" not in out.split("CANDIDATES", 1)[1].splitlines()[0]
    assert "NONE 'total = 45\\n' {'total': 45} None none" in out
    assert "SANDBOX {'x': 2}" in out
    assert "LOADED None" in out  # the library was never loaded
    for level in ("process", "kernel"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"REFUSED {level}"))
        assert "libsandtrap.so" in line and "nowhere" in line and 'isolation="none" works without it' in line


# ------------------------------------------------------------------- VirtualFS
VFS_CODE = """
import os, os.path, pathlib
text = open('/data/in.txt').read()
with open('out.txt', 'w') as f:
    f.write(text.upper())
with open('/data/log.txt', 'a') as f:
    f.write('more')
seen = [os.path.exists('/out.txt'), os.path.isdir('/data'), os.path.isfile('/data'), sorted(os.listdir('/'))]
size = os.path.getsize('/out.txt')
p = pathlib.Path('/data') / 'p.txt'
p.write_text('via pathlib')
via = p.read_text()
names = sorted(str(x) for x in pathlib.Path('/data').iterdir())
globbed = sorted(str(x) for x in pathlib.Path('/').glob('data/*.txt'))
os.makedirs('/a/b', exist_ok=True)
os.rename('/out.txt', '/a/b/moved.txt')
os.remove('/data/p.txt')
binary = open('/data/bin', 'wb')
binary.write(bytes(range(256)))
"""


def _vfs_policy():
    import pathlib

    p = Policy(timeout=30)
    p.module(os, recursive=True)
    p.module(pathlib)
    return p


@pytest.mark.parametrize("backing", ["memory", "directory"])
def test_virtualfs_open_os_path_pathlib(level, tmp_path, backing):
    fs = sandtrap.VirtualFS() if backing == "memory" else sandtrap.VirtualFS(directory=tmp_path / "vfs")
    fs.write("/data/in.txt", "hello\n")
    fs.write("/data/log.txt", "log:")
    with sandbox(_vfs_policy(), isolation=level, filesystem=fs) as sb:
        r = sb.exec(VFS_CODE)
    assert r.error is None, r.traceback
    ns = r.namespace
    assert ns["text"] == "hello\n" and ns["via"] == "via pathlib"
    assert ns["seen"] == [True, True, False, ["data", "out.txt"]] and ns["size"] == 6
    assert ns["names"] == ["/data/in.txt", "/data/log.txt", "/data/p.txt"]
    assert ns["globbed"] == ["/data/in.txt", "/data/log.txt", "/data/p.txt"]
    # the host sees what the code wrote (a file left open was written back at the end)
    assert fs.read("/a/b/moved.txt") == b"HELLO\n" and fs.read("/data/log.txt") == b"log:more"
    assert fs.read("/data/bin") == bytes(range(256)) and not fs.exists("/data/p.txt")
    assert sorted(fs.list("/", recursive=True)) == [
        "a",
        "a/b",
        "a/b/moved.txt",
        "data",
        "data/bin",
        "data/in.txt",
        "data/log.txt",
    ]
    if backing == "directory":  # the files are in the directory, and only there
        assert (tmp_path / "vfs" / "a" / "b" / "moved.txt").read_bytes() == b"HELLO\n"


def test_virtualfs_stays_inside_itself(level, tmp_path):
    (tmp_path / "secret").write_text("host secret")
    fs = sandtrap.VirtualFS(directory=tmp_path / "vfs")
    os.symlink(tmp_path / "secret", tmp_path / "vfs" / "link")
    with sandbox(_vfs_policy(), isolation=level, filesystem=fs) as sb:
        for code, err in [
            ("open('/../secret').read()", "FileNotFoundError"),
            ("open('/link').read()", "PermissionError"),  # a symlink out of the directory
            ("open('/etc/hostname').read()", "FileNotFoundError"),
            ("import os\nos.listdir('/..')", None),
            ("import os\nos.open('/etc/hostname', 0)", "StAttributeDenied"),
            ("import pathlib\npathlib.Path('/etc/hostname').read_text()", "FileNotFoundError"),
        ]:
            r = sb.exec(code)
            assert errname(r.error) == err, (code, r.error)
        assert sb.exec("import os\nx = os.listdir('/..')").namespace["x"] == ["link"]


def test_virtualfs_imports_module_root_and_main(level, tmp_path):
    fs = sandtrap.VirtualFS()
    fs.write("/work/lib/helpers.py", "def double(x):\n    return 2 * x\n")
    p = _vfs_policy()
    p.module_root = "/work/lib"
    with sandbox(p, isolation=level, filesystem=fs) as sb:
        r1 = sb.exec(
            "import os\nos.makedirs('/work/lib/pkg', exist_ok=True)\n"
            "with open('/work/lib/pkg/__init__.py', 'w') as f:\n    f.write('from pkg.util import VALUE\\n')\n"
            "with open('/work/lib/pkg/util.py', 'w') as f:\n    f.write('VALUE = 41\\n')\n"
            "with open('/work/lib/mymodule.py', 'w') as f:\n"
            "    f.write('class Greeter:\\n    def __init__(self, n):\\n        self.n = n\\n'\n"
            "            '    def hi(self):\\n        return \"hi \" + self.n\\n')\n"
            "import mymodule, helpers, pkg\nfrom pkg.util import VALUE\n"
            "out = [mymodule.Greeter('a').hi(), helpers.double(2), pkg.VALUE + 1, VALUE]\n"
            "def later(x):\n    return x + 1\n"
        )
        assert r1.error is None, r1.traceback
        assert r1.namespace["out"] == ["hi a", 4, 42, 41]
        r2 = sb.exec("from main import later\nfrom mymodule import Greeter\nres = (later(1), Greeter('b').hi())")
        assert r2.error is None, r2.traceback
        assert list(r2.namespace["res"]) == [2, "hi b"]  # (a tuple comes back from a worker as a list)
        r3 = sb.exec(
            "with open('/work/lib/helpers.py', 'w') as f:\n    f.write('def double(x):\\n    return 3 * x\\n')\n"
            "import helpers\nz = helpers.double(2)"
        )
        assert r3.namespace["z"] == 6  # a changed source is run again
        r4 = sb.exec("import nothere")
        assert errname(r4.error) == "StImportDenied"
        r5 = sb.exec("with open('/work/lib/bad.py', 'w') as f:\n    f.write('import sys\\n')\nimport bad")
        assert errname(r5.error) == "StImportDenied" and "'sys'" in str(r5.error)


# ---------------------------------------------------------------- state across turns
STATE_CODE = """
import math
def area(r):
    return math.pi * r * r
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm(self):
        return math.hypot(self.x, self.y)
pt = Point(3, 4)
n = 5
data = {"k": [1, 2.5, "s", None, True]}
sq = lambda v: v * v
"""


def _state_policy():
    import math

    p = Policy(timeout=20)
    p.module(math)
    return p


@pytest.mark.parametrize("target", LEVELS)
def test_snapshot_and_restore_as_source_plus_data(level, target):
    with sandbox(_state_policy(), isolation=level) as sb:
        assert sb.exec(STATE_CODE).error is None
        snap = sb.snapshot()
    import json

    assert json.loads(json.dumps(snap)) == snap  # plain data: no pickle, nothing executable but source
    assert snap["data"] == {
        "n": 5,
        "data": {"k": [1, 2.5, "s", None, True]},
        "pt": {"__st_obj__": "Point", "state": {"x": 3, "y": 4}},
    }
    assert "def area(r):" in snap["source"] and "class Point:" in snap["source"] and "import math" in snap["source"]
    assert snap["dropped"] == ["sq"]
    with sandbox(_state_policy(), isolation=target, state=snap) as sb:
        r = sb.exec("res = [area(1), pt.norm(), n, type(pt).__name__, isinstance(pt, Point), Point(6, 8).norm()]")
    assert r.error is None, r.traceback
    assert r.namespace["res"] == [math_pi(), 5.0, 5, "Point", True, 10.0]


def math_pi():
    import math

    return math.pi


def test_state_survives_a_worker_restart(level):
    import threading

    with sandbox(_state_policy(), isolation=level, keep_state=True) as sb:
        assert sb.exec(STATE_CODE).error is None
        assert sb.exec("m = Point(6, 8)\nn = n + 1").error is None
        if level != "none":
            threading.Timer(0.5, sb.cancel).start()
            r = sb.exec("while True:\n    pass")  # the worker is killed
            assert errname(r.error) == "StCancelled"
        r = sb.exec("res = [area(1), pt.norm(), m.norm(), n]")
    assert r.error is None, r.traceback
    assert r.restarted is (level != "none")
    assert r.namespace["res"] == [math_pi(), 5.0, 10.0, 6]


def test_without_keep_state_a_restart_resets_the_namespace():
    import threading

    with sandbox(_state_policy(), isolation="process") as sb:
        sb.exec("x = 1")
        threading.Timer(0.5, sb.cancel).start()
        sb.exec("while True:\n    pass")
        r = sb.exec("y = 2")
    assert r.restarted and r.namespace == {"y": 2}


@pytest.mark.parametrize(
    "state, expect",
    [
        ({"version": 1, "source": "().__class__.__bases__", "data": {}, "objects": {}}, "StAttributeDenied"),
        ({"version": 1, "source": "import os", "data": {}, "objects": {}}, "StImportDenied"),
        ({"version": 1, "source": "", "data": {"__builtins__": 1}, "objects": {}}, "ValueError"),
        ({"version": 1, "source": "", "data": {"__st_ga__": 1}, "objects": {}}, "ValueError"),
        ({"version": 99, "source": "", "data": {}, "objects": {}}, "ValueError"),
        ({"version": 1, "source": 3, "data": {}, "objects": {}}, "ValueError"),
    ],
)
def test_a_hostile_state_is_checked_like_code(level, state, expect):
    if level == "none":
        with pytest.raises((ValueError, sandtrap.InvalidArgument)) as e:
            sandbox(_state_policy(), isolation=level, state=state)
        assert expect in (type(e.value).__name__, "ValueError") or expect in str(e.value)
        return
    with sandbox(_state_policy(), isolation=level, state=state) as sb:
        r = sb.exec("ran = True")
    assert errname(r.error) == expect and "ran" not in r.namespace, r.error


def test_a_state_cannot_build_host_objects(level):
    # objects only of classes the state's own source defined all the way down, never
    # a host class or a sandbox subclass of one (object.__new__ would skip its
    # constructor), and no dunder attributes
    import decimal

    p = _state_policy()
    p.cls(decimal.Decimal)
    state = {
        "version": 1,
        "source": "class Ok:\n    pass\nclass Sub(Decimal):\n    pass\n",
        "data": {},
        "objects": {
            "a": {"class": "Decimal", "state": {"x": 1}},
            "b": {"class": "Sub", "state": {"x": 1}},
            "c": {"class": "Ok", "state": {"__class__": 1, "__dict__": 2, "v": 3}},
            "d": {"class": "Missing", "state": {}},
        },
    }
    with sandbox(p, isolation=level, state=state) as sb:
        r = sb.exec(
            "ls = locals()\nnames = sorted(k for k in ('a', 'b', 'c', 'd') if k in ls)\nv = c.v\nt = type(c).__name__"
        )
    assert r.error is None, r.traceback
    assert r.namespace["names"] == ["c"] and r.namespace["v"] == 3 and r.namespace["t"] == "Ok"


# ------------------------------------------------------------------------ output
def test_prints_and_host_output_are_captured(level, capfd):
    import threading
    import warnings

    p = Policy(timeout=20)
    p.module(warnings)
    p.module(threading)

    @p.fn
    def host(x):
        print("host says", x)  # a granted function's print: captured
        print("to stderr", file=sys.stderr)
        with sandtrap.passthrough_stdio():
            print("REAL CONSOLE", x)  # opted out: the real stream
        return x

    code = (
        "print(1, [2], ('t',))\nhost(3)\nimport warnings\nwarnings.warn('careful')\n"
        "import threading\nt = threading.Thread(target=lambda: print('from a thread'))\nt.start()\nt.join()\n7"
    )
    with sandbox(p, isolation=level, snapshot_prints=True, echo=True) as sb:
        r = sb.exec(code)
        plain = sb.exec("print('x')")  # and the next exec's prints are its own
    assert r.error is None, r.traceback
    lines = r.stdout.splitlines()
    assert sorted(lines) == sorted(["1 [2] ('t',)", "host says 3", "from a thread", "7"])
    if level == "none":
        assert lines == ["1 [2] ('t',)", "host says 3", "from a thread", "7"]  # in order
    assert "to stderr" in r.stderr
    if level != "none":  # in this process pytest records warnings instead of showing them
        assert "UserWarning: careful" in r.stderr
    first = r.prints[0]
    assert first[:2] == (1, [2]) and list(first[2]) == ["t"]
    assert r.prints[1:] == [("from a thread",), (7,)]
    assert plain.prints == [("x",)] and plain.stdout == "x\n"
    out, err = capfd.readouterr()
    assert "REAL CONSOLE 3" in out and "host says" not in out and "careful" not in err


def test_prints_are_empty_without_snapshot_prints(level):
    with sandbox(Policy(timeout=20), isolation=level) as sb:
        r = sb.exec("print(1)")
    assert r.prints == [] and r.stdout == "1\n"


def test_a_warning_in_process_lands_in_stderr(tmp_path):
    code = (
        f"import sys, warnings\nsys.path.insert(0, {str(Path(sandtrap.__file__).resolve().parents[1])!r})\nfrom sandtrap import Policy, sandbox\n"
        "p = Policy()\np.module(warnings)\n"
        "r = sandbox(p).exec('import warnings\\nwarnings.warn(\"careful\")')\n"
        "print(repr(r.stderr))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "UserWarning: careful" in p.stdout and "careful" not in p.stderr, (p.stdout, p.stderr)


def test_host_streams_are_put_back_after_an_exec():
    before = sys.stdout, sys.stderr
    with sandbox(Policy(timeout=20)) as sb:
        sb.exec("print(1)")
    assert (sys.stdout, sys.stderr) == before
