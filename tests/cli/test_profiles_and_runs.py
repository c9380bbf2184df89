"""Profiles (precedence, bad files, list/show) and the run registry (ps, inspect, kill)."""

from __future__ import annotations

import json
import os
import subprocess
import time

from conftest import CLI, PY, SYSTEM, R, sandtrap

SYS = ", ".join(f'"{p}"' for p in SYSTEM)

PROFILE = f"""
[program]
exec = "/bin/sh"
args = ["-c", "echo from-profile $A $B"]
env = {{ A = "pa", B = "pb" }}

[filesystem]
fs_readable = [{SYS}]

[limits]
timeout = 0.5
max_memory = "64M"
"""


def test_profile_by_name_runs_its_program(xdg):
    (xdg / "basic.toml").write_text(PROFILE)
    p = sandtrap("run", "--profile", "basic")
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"from-profile pa pb\n"
    assert sandtrap("profile", "list").stdout == b"basic\n"


def test_options_override_and_extend_the_profile(xdg, tmp_path):
    (xdg / "basic.toml").write_text(PROFILE)
    # the profile's timeout (0.5 s) ends a 2 s sleep; -t 10 replaces it
    p = sandtrap("run", "--profile", "basic", "--", "/bin/sleep", "2")
    assert p.returncode == 124
    p = sandtrap("run", "--profile", "basic", "-t", "10", "--", "/bin/sleep", "2")
    assert p.returncode == 0, p.stderr
    # -m replaces the profile's max_memory; -r adds to its fs_readable; --env adds (and wins)
    (tmp_path / "f").write_text("extra")
    p = sandtrap(
        "run", "--json", "--profile", "basic", "-m", "128M", "-r", str(tmp_path), "-e", "B=cli",
        "--", "/bin/sh", "-c", f"cat {tmp_path}/f; echo $A $B",
    )  # fmt: skip
    d = json.loads(p.stdout)
    assert d["stdout"] == "extrapa cli\n", d
    assert d["isolation"]["limits"]["max_memory"]["value"] == 128 << 20
    paths = [r["path"] for r in d["isolation"]["landlock"]["fs_rules"]]
    assert "/usr" in paths and str(tmp_path) in paths


def test_profile_file_and_show(tmp_path, xdg):
    f = tmp_path / "p.toml"
    f.write_text(PROFILE)
    p = sandtrap("run", "--profile-file", str(f))
    assert p.stdout == b"from-profile pa pb\n"
    show = json.loads(sandtrap("profile", "show", str(f), "--json").stdout)
    assert show["policy"]["max_memory"] == "64M" and show["argv"][0] == "/bin/sh"
    assert sandtrap("profile", "show", str(f)).stdout.startswith(f"# {f}\n".encode())
    assert sandtrap("run", "--profile", "x", "--profile-file", str(f)).returncode == 125


BAD = """[filesytem]
fs_readable = ["/usr"]

[limits]
max_memory = ["256M"]
max_procs = 4
fs_writable = ["/tmp"]

[config]
fs_storage = 5

[network]
net_allow_bind = "x-y"
"""


def test_bad_profile_names_file_line_and_key_of_every_problem(tmp_path, xdg):
    f = tmp_path / "bad.toml"
    f.write_text(BAD)
    for args in (["run", "--profile-file", str(f), "--", "/bin/true"], ["profile", "show", str(f)]):
        p = sandtrap(*args)
        assert p.returncode == 125
        err = p.stderr.decode()
        assert "(6 problems)" in err, err
        for want in (
            f"{f}:1: filesytem: unknown section; did you mean [filesystem]?",
            f'{f}:5: limits.max_memory: want a byte count or a size string like "256M", got a list; for example: max_memory = "256M"',
            f"{f}:6: limits.max_procs: unknown key; did you mean max_processes?",
            f"{f}:7: limits.fs_writable: fs_writable belongs in [filesystem], not [limits]",
            f"{f}:10: config.fs_storage: want a string",
            f"{f}:13: network.net_allow_bind: want a list",
        ):
            assert want in err, (want, err)


def test_invalid_toml_names_the_line(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[limits]\nmax_memory = "1G"\ntimeout = \n')
    p = sandtrap("profile", "show", str(f))
    assert p.returncode == 125 and f"{f}:3:".encode() in p.stderr and b"not valid TOML" in p.stderr


def test_missing_profile_lists_the_saved_ones(xdg):
    (xdg / "one.toml").write_text("")
    p = sandtrap("run", "--profile", "two", "--", "/bin/true")
    assert p.returncode == 125 and b"saved profiles: one" in p.stderr
    assert sandtrap("profile", "path", "one").stdout.decode().strip() == str(xdg / "one.toml")


# ---- ps / inspect / kill ---------------------------------------------------------


def _wait_for(name, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        runs = json.loads(sandtrap("ps", "--json").stdout)
        for r in runs:
            if r["name"] == name and r.get("pid"):
                return r
        time.sleep(0.05)
    raise AssertionError(f"run {name} never showed up in ps")


def _procs_with(marker: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(d))
            except OSError:
                pass
    return out


def test_ps_inspect_kill_end_the_whole_tree(xdg):
    marker = "987.654"  # a daemon that leaves the session: kill must still end it
    proc = subprocess.Popen(
        [CLI, "run", "--name", "job1", *R, "--", "/bin/sh", "-c", f"setsid sleep {marker} & sleep 60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        r = _wait_for("job1")
        assert r["argv"][0] == "/bin/sh" and r["policy"]["fs_readable"]
        table = sandtrap("ps").stdout.decode()
        assert "job1" in table and str(r["pid"]) in table and "NAME" in table
        insp = json.loads(sandtrap("inspect", "job1").stdout)
        assert insp["pid"] == r["pid"] and insp["cli_pid"] == proc.pid and "started" in insp
        # a second live run of that name is refused
        p = sandtrap("run", "--name", "job1", *R, "--", "/bin/true")
        assert p.returncode == 125 and b"is live" in p.stderr
        end = time.monotonic() + 5
        while not _procs_with(marker) and time.monotonic() < end:
            time.sleep(0.05)
        assert _procs_with(marker), "the daemon never started"
        assert sandtrap("kill", "job1").returncode == 0
        assert proc.wait(10) == 137
        end = time.monotonic() + 5
        while _procs_with(marker) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _procs_with(marker), "the setsid daemon outlived kill"
        assert json.loads(sandtrap("ps", "--json").stdout) == []
        p = sandtrap("inspect", "job1")
        assert p.returncode == 1 and b"no live run named" in p.stderr
    finally:
        proc.kill()
        proc.wait()


def test_sigint_cancels_the_run(xdg):
    proc = subprocess.Popen([CLI, "run", "--name", "job2", *R, "--", "/bin/sleep", "60"], stderr=subprocess.PIPE)
    try:
        _wait_for("job2")
        proc.send_signal(2)
        assert proc.wait(10) == 130
    finally:
        proc.kill()
        proc.wait()


def test_stale_entries_are_dropped(xdg):
    rundir = xdg.parents[2] / "run" / "sandtrap" / "runs"
    sandtrap("ps")
    rundir.mkdir(parents=True, exist_ok=True)
    (rundir / "ghost.json").write_text(json.dumps({"name": "ghost", "cli_pid": 1, "cli_start_ticks": 1, "argv": ["x"]}))
    assert json.loads(sandtrap("ps", "--json").stdout) == []
    assert not (rundir / "ghost.json").exists()
    # and a stale entry does not block its name
    (rundir / "ghost.json").write_text(json.dumps({"name": "ghost", "cli_pid": 1, "cli_start_ticks": 1, "argv": ["x"]}))
    assert sandtrap("run", "--name", "ghost", *R, "--", "/bin/true").returncode == 0


def test_a_run_dir_open_to_others_is_refused(tmp_path):
    d = tmp_path / "rt"
    (d / "sandtrap").mkdir(parents=True)
    os.chmod(d / "sandtrap", 0o777)
    p = sandtrap("run", *R, "--", "/bin/true", env={"XDG_RUNTIME_DIR": str(d)})
    assert p.returncode == 125 and b"only it may write" in p.stderr
    os.chmod(d / "sandtrap", 0o755)  # readable by others (the guest runtime's cache shares it): fine
    (d / "sandtrap" / "runs").mkdir(mode=0o755)
    os.chmod(d / "sandtrap" / "runs", 0o755)  # but the entries' directory is the user's alone
    p = sandtrap("run", *R, "--", "/bin/true", env={"XDG_RUNTIME_DIR": str(d)})
    assert p.returncode == 125 and b"only it may enter" in p.stderr
    os.chmod(d / "sandtrap" / "runs", 0o700)
    assert sandtrap("run", *R, "--", "/bin/true", env={"XDG_RUNTIME_DIR": str(d)}).returncode == 0


def test_python_runs_under_a_profile(xdg):
    (xdg / "py.toml").write_text(f'[program]\nexec = "{PY}"\n[filesystem]\nfs_readable = [{SYS}]\n')
    p = sandtrap("run", "--profile", "py", "--", PY, "-c", "print(6*7)")
    assert p.stdout == b"42\n", p.stderr
