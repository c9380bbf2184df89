"""sandtrap run through the built binary: every option class, exit codes, --json, -i."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import stat
import time

import pytest
from conftest import PY, ROOT, R, sandtrap

# ---- exit status -----------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 3, 42, 255])
def test_exit_code_passes_through(code):
    p = sandtrap("run", *R, "--", "/bin/sh", "-c", f"exit {code}")
    assert p.returncode == code, p.stderr


def test_killed_by_a_signal_is_128_plus_n():
    p = sandtrap("run", *R, "--", "/bin/sh", "-c", "kill -TERM $$")
    assert p.returncode == 128 + signal.SIGTERM, p.stderr


def test_not_found_is_127():
    p = sandtrap("run", *R, "--", "no-such-program-xyz")
    assert p.returncode == 127
    assert b"not found" in p.stderr


def test_not_executable_is_126(tmp_path):
    f = tmp_path / "script"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    p = sandtrap("run", *R, "-r", str(tmp_path), "--", str(f))
    assert p.returncode == 126, p.stderr
    # outside every readable path: the same (found on the host, refused to the run)
    f.chmod(0o755)
    p = sandtrap("run", *R, "--", str(f))
    assert p.returncode == 126, p.stderr
    assert b"permission denied" in p.stderr


def test_timeout_is_124_and_kills_the_tree():
    t0 = time.monotonic()
    p = sandtrap("run", *R, "-t", "0.5", "--", "/bin/sh", "-c", "setsid sleep 30 & sleep 30")
    assert p.returncode == 124
    assert time.monotonic() - t0 < 10
    assert b"timed out after 0.5s" in p.stderr


def test_invalid_policy_is_125_with_every_problem():
    p = sandtrap("run", "-m", "lots", "-P", "-1", "--net-allow-bind", "70000", *R, "--", "/bin/true")
    assert p.returncode == 125
    err = p.stderr.decode()
    assert "3 problems" in err
    assert "--memory (max_memory)" in err and "--processes (max_processes)" in err
    assert "--net-allow-bind (net_allow_bind)" in err


def test_unknown_option_is_125():
    p = sandtrap("run", "--no-such-option", "--", "/bin/true")
    assert p.returncode == 125
    assert b"unknown flag: --no-such-option" in p.stderr


def test_no_program_is_125():
    p = sandtrap("run", *R)
    assert p.returncode == 125 and b"no program given" in p.stderr


def test_program_options_are_its_own():
    # options stop at PROGRAM: -t here is ls's... here echo's
    p = sandtrap("run", *R, "/bin/echo", "-t", "-m")
    assert p.returncode == 0 and p.stdout == b"-t -m\n"


# ---- stdio -----------------------------------------------------------------------


def test_stdin_stdout_stderr_are_the_commands():
    p = sandtrap("run", *R, "--", "/bin/sh", "-c", "cat; echo err >&2", stdin=b"piped\n")
    assert p.returncode == 0
    assert p.stdout == b"piped\n" and p.stderr == b"err\n"


def test_json_result_and_isolation_report():
    p = sandtrap("run", "--json", *R, "-m", "64M", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
    assert p.returncode == 3
    d = json.loads(p.stdout)
    assert d["exit_code"] == 3 and d["success"] is False
    assert d["stdout"] == "out\n" and d["stderr"] == "err\n"
    assert d["isolation"]["landlock"]["abi"] >= 1
    assert d["isolation"]["limits"]["max_memory"]["value"] == 64 << 20
    assert d["isolation"]["seccomp"]["enforced"] is True
    assert "usage" in d


def test_json_sandtrap_failure():
    p = sandtrap("run", "--json", "-m", "lots", *R, "--", "/bin/true")
    assert p.returncode == 125 and p.stderr == b""
    d = json.loads(p.stdout)
    assert d["success"] is False and "--memory (max_memory)" in d["error"]["message"]


def test_json_binary_output_is_base64():
    p = sandtrap("run", "--json", *R, "--", "/usr/bin/printf", "\\377\\376")
    d = json.loads(p.stdout)
    assert "stdout" not in d and d["stdout_base64"] == "//4="


# ---- every class of option -------------------------------------------------------


def test_read_and_write(tmp_path):
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "f").write_text("data")
    script = f"cat {ro}/f; echo x > {rw}/new && echo wrote; echo y > {ro}/no || echo refused"
    p = sandtrap("run", *R, "-r", str(ro), "-w", str(rw), "--", "/bin/sh", "-c", script)
    assert p.stdout == b"datawrote\nrefused\n", p.stderr
    assert (rw / "new").read_text() == "x\n"
    assert not (ro / "no").exists()
    assert b"Read-only file system" in p.stderr or b"Permission denied" in p.stderr


def test_relative_paths_are_made_absolute(tmp_path):
    (tmp_path / "w").mkdir()
    p = sandtrap("run", *R, "--write", "w", "--cwd", "w", "--", "/bin/sh", "-c", "pwd; echo 1 > f", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == str(tmp_path / "w")
    assert (tmp_path / "w" / "f").exists()


def test_deny_inside_a_grant(tmp_path):
    (tmp_path / "secret").write_text("s")
    (tmp_path / "open").write_text("o")
    p = sandtrap(
        "run", *R, "-r", str(tmp_path), "--deny", str(tmp_path / "secret"), "--",
        "/bin/sh", "-c", f"cat {tmp_path}/open; cat {tmp_path}/secret",
    )  # fmt: skip
    assert p.stdout == b"o" and p.returncode == 1
    assert b"secret" in p.stderr


def test_reading_outside_the_policy_is_eacces():
    p = sandtrap(
        "run",
        *R,
        "--",
        PY,
        "-c",
        "open('/root/.profile')" if os.path.exists("/root/.profile") else "open('/proc/1/environ')",
    )
    assert p.returncode == 1
    assert b"PermissionError" in p.stderr or b"Permission denied" in p.stderr


def _listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


CONNECT = "import socket,sys\nfor p in sys.argv[1:]:\n    try:\n        socket.create_connection(('127.0.0.1', int(p)), timeout=3).close(); print(p, 'ok')\n    except OSError as e:\n        print(p, type(e).__name__)\n"


def test_net_allow_and_net_deny():
    a, b = _listener(), _listener()
    pa, pb = a.getsockname()[1], b.getsockname()[1]
    try:
        p = sandtrap("run", *R, "--net-allow", f"127.0.0.1:{pa}", "--", PY, "-c", CONNECT, str(pa), str(pb))
        assert p.stdout.decode().split("\n")[:2] == [f"{pa} ok", f"{pb} PermissionError"], p.stderr
        p = sandtrap("run", *R, "--net-deny", f"127.0.0.1:{pb}", "--", PY, "-c", CONNECT, str(pa), str(pb))
        assert p.stdout.decode().split("\n")[:2] == [f"{pa} ok", f"{pb} PermissionError"], p.stderr
        # nothing granted: nothing reachable
        p = sandtrap("run", *R, "--", PY, "-c", CONNECT, str(pa))
        assert p.stdout.decode().startswith(f"{pa} PermissionError"), p.stderr
    finally:
        a.close()
        b.close()


def test_net_allow_bind_comma_list():
    p1, p2, p3 = _free_port(), _free_port(), _free_port()
    code = "import socket,sys\nfor p in sys.argv[1:]:\n    s=socket.socket()\n    try:\n        s.bind(('127.0.0.1', int(p))); s.listen(); print('ok')\n    except OSError as e:\n        print(type(e).__name__)\n    s.close()\n"
    p = sandtrap("run", *R, "--net-allow-bind", f"{p1},{p2}", "--", PY, "-c", code, str(p1), str(p2), str(p3))
    assert p.stdout.decode().split() == ["ok", "ok", "PermissionError"], p.stderr


def test_env_clean_env_and_passing_a_variable():
    env = {"SANDTRAP_T_HOST": "h", "SANDTRAP_T_PASS": "p"}
    show = "echo ${SANDTRAP_T_HOST:-unset} ${SANDTRAP_T_PASS:-unset} $A"
    p = sandtrap("run", *R, "-e", "A=1", "--", "/bin/sh", "-c", show, env=env)
    assert p.stdout == b"h p 1\n"
    p = sandtrap(
        "run", *R, "--clean-env", "--env", "A=2", "--env", "SANDTRAP_T_PASS", "--", "/bin/sh", "-c", show, env=env
    )
    assert p.stdout == b"unset p 2\n", p.stderr
    p = sandtrap("run", *R, "--env", "SANDTRAP_T_NOT_SET_ANYWHERE", "--", "/bin/true")
    assert p.returncode == 125 and b"no variable SANDTRAP_T_NOT_SET_ANYWHERE" in p.stderr


def test_memory_limit():
    p = sandtrap("run", *R, "-m", "64M", "--", PY, "-c", "b = bytearray(512 << 20); print('allocated')")
    assert p.returncode in (1, 137), p.stderr
    assert b"allocated" not in p.stdout


def test_process_limit_stops_a_fork_bomb():
    bomb = "import os,time\nn=0\ntry:\n    while n < 500:\n        if os.fork()==0:\n            time.sleep(5); os._exit(0)\n        n+=1\nexcept OSError:\n    pass\nprint(n)\n"
    p = sandtrap("run", *R, "-P", "8", "-t", "20", "--", PY, "-c", bomb)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) < 8


def test_cpu_time_limit():
    t0 = time.monotonic()
    p = sandtrap("run", *R, "--cpu-time", "0.5", "-t", "20", "--", PY, "-c", "while True: pass")
    assert p.returncode in (128 + signal.SIGKILL, 128 + signal.SIGXCPU), p.stderr
    assert b"CPU time limit" in p.stderr
    assert time.monotonic() - t0 < 15


def test_open_files_disk_output_and_cpu_limits_are_applied():
    code = "fs=[]\ntry:\n    [fs.append(open('/dev/null')) for _ in range(50)]\nexcept OSError as e:\n    print('EMFILE', e.errno)\nprint('x' * 100)\n"
    p = sandtrap(
        "run", "--json", *R, "--open-files", "16", "--disk", "1K", "--max-output", "20", "--cpu", "50", "--", PY, "-c", code,
    )  # fmt: skip
    d = json.loads(p.stdout)
    assert d["stdout"].startswith("EMFILE 24") and d["stdout_truncated"] is True
    lim = d["isolation"]["limits"]
    assert lim["max_open_files"]["value"] == 16 and lim["max_disk"]["value"] == 1024 and lim["max_cpu"]["value"] == 50


def test_disk_limit(tmp_path):
    p = sandtrap(
        "run",
        *R,
        "-w",
        str(tmp_path),
        "--disk",
        "4K",
        "--",
        "/bin/sh",
        "-c",
        f"head -c 100000 /dev/zero > {tmp_path}/big",
    )
    assert p.returncode != 0
    assert (tmp_path / "big").stat().st_size <= 4096


def test_deny_syscall_and_allow_syscall():
    code = "import os\ntry:\n    os.uname(); print('ok')\nexcept OSError as e:\n    print(e.errno)\n"
    p = sandtrap("run", *R, "--deny-syscall", "uname,getcpu", "--", PY, "-c", code)
    assert p.stdout == b"1\n", p.stderr  # EPERM
    p = sandtrap("run", *R, "--allow-syscall", "uname", "--deny-syscall", "uname", "--", "/bin/true")
    assert p.returncode == 125 and b"both allowed and denied" in p.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="--uid/--gid need a root host (the option is refused otherwise)")
def test_uid_gid():
    p = sandtrap("run", *R, "--uid", "65534", "--gid", "65534", "--", "/bin/sh", "-c", "id -u; id -g")
    assert p.stdout == b"65534\n65534\n", p.stderr
    p = sandtrap("run", *R, "--uid", "65534", "--", "/bin/true")
    assert p.returncode == 125 and b"must be given together with gid" in p.stderr


def test_allow_degraded_and_the_booleans_are_accepted():
    p = sandtrap("run", "--json", *R, "--allow-degraded", "--net-allow-unix", "--net-allow-udp", "--", "/bin/true")
    d = json.loads(p.stdout)
    assert (
        p.returncode == 0
        and d["isolation"]["seccomp"]["unix_sockets"] is True
        and d["isolation"]["seccomp"]["udp"] is True
    )


def test_every_field_has_its_option_in_help():
    """The options of docs/sandbox-reference.md (generated from the schema) are all run's."""
    ref = (ROOT / "docs" / "sandbox-reference.md").read_text()
    opts = set(re.findall(r"`(?:-\w`, `)?(--[a-z-]+)[^`]*` \| `", ref))
    assert len(opts) >= 20
    help_text = sandtrap("run", "--help").stdout.decode()
    for o in opts:
        assert o in help_text, o
    assert "-r, --read" in help_text and "-w, --write" in help_text and "-m, --memory" in help_text
    assert "-P, --processes" in help_text and "-t, --timeout" in help_text and "-i, --interactive" in help_text


def test_help_reads_like_a_man_page():
    h = sandtrap("--help").stdout.decode()
    for part in ("EXIT STATUS", "124", "125", "126", "127", "FILES", "profiles/NAME.toml"):
        assert part in h
    for cmd in ("run", "probe", "ps", "inspect", "kill", "profile", "mcp", "completion"):
        assert re.search(rf"^\s+{cmd}\s", h, re.M), cmd


def test_completion_scripts():
    for shell in ("bash", "zsh", "fish"):
        p = sandtrap("completion", shell)
        assert p.returncode == 0 and b"sandtrap" in p.stdout


def test_probe():
    p = sandtrap("probe", "--json")
    d = json.loads(p.stdout)
    assert d["landlock_abi"] >= 1 and d["seccomp"] is True
    assert b"landlock:" in sandtrap("probe").stdout


# ---- -i: a pty of the run's own --------------------------------------------------


def _pty_run(args, send: bytes, want: bytes, timeout=15):
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        os.execv(args[0], args)
    out = b""
    sent = False
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                d = os.read(fd, 4096)
            except OSError:
                break
            if not d:
                break
            out += d
        if not sent and want in out:
            os.write(fd, send)
            sent = True
    _, st = os.waitpid(pid, 0)
    os.close(fd)
    return out, os.waitstatus_to_exitcode(st)


def test_interactive_gets_a_terminal_of_its_own():
    from conftest import CLI

    script = (
        "test -t 0 && test -t 1 && test -t 2 && echo ALL_TTY; stty size; printf 'name? '; read x; echo got:$x; exit 5"
    )
    out, code = _pty_run([CLI, "run", "-i", *R, "--", "/bin/sh", "-c", script], b"alice\r", b"name? ")
    assert code == 5, out
    assert b"ALL_TTY" in out and b"got:alice" in out
    assert re.search(rb"\d+ \d+", out)  # a window size
    # without -i the program has the caller's stdio (not a terminal here)
    p = sandtrap("run", *R, "--", "/bin/sh", "-c", "test -t 0 || echo NO_TTY")
    assert p.stdout == b"NO_TTY\n"


def test_interactive_program_cannot_inject_into_the_users_terminal():
    """TIOCSTI on the run's terminal is refused (and it is not the user's terminal anyway)."""
    from conftest import CLI

    code = "import fcntl,termios,sys\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('INJECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    out, _ = _pty_run([CLI, "run", "-i", *R, "--", PY, "-c", code], b"", b"\x00")
    assert b"refused" in out and b"INJECTED" not in out, out


def test_executable_bits():
    assert os.stat(os.environ.get("SANDTRAP_CLI", ROOT / "build" / "sandtrap")).st_mode & stat.S_IXUSR


def test_protections_by_name_and_port_lists():
    # --allow-degraded=NAMES degrades those; --disable turns some off; ports take comma lists
    p = sandtrap(
        "run", "--json", *R, "--allow-degraded=signal_scope", "--disable", "fs_ioctl_dev,fs_refer",
        "--net-allow-bind", "8080,8443", "--", "/bin/true",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    iso = json.loads(p.stdout)["isolation"]
    assert iso["protections"]["fs_ioctl_dev"] == "disabled" and iso["protections"]["fs_refer"] == "disabled"
    assert iso["protections"]["fs_truncate"] == "enforced"
    if iso["landlock"]["net"]:
        assert iso["landlock"]["bind_ports"] == [8080, 8443]
    # alone, --allow-degraded is the boolean
    assert sandtrap("run", *R, "--allow-degraded", "--", "/bin/true").returncode == 0
    bad = sandtrap("run", *R, "--disable", "sig", "--", "/bin/true")
    assert bad.returncode == 125
    assert '--disable (disable): "sig" is not a protection' in bad.stderr.decode()


def test_max_processes_default_and_none():
    p = sandtrap("run", "--json", *R, "--", "/bin/true")
    lim = json.loads(p.stdout)["isolation"]["limits"]
    assert lim.get("max_processes", {"value": 64})["value"] == 64
    p = sandtrap("run", "--json", "-P", "0", *R, "--", "/bin/true")
    assert "max_processes" not in json.loads(p.stdout)["isolation"]["limits"]
