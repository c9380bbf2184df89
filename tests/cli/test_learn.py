"""sandtrap run --learn (main's learn op through the CLI), --dry-run (the engine's dry run of a
workdir), and the options of the fields main added (--hostname, --port-remap, --cpu-cores,
--no-huge-pages, --no-randomize-memory, --no-coredump)."""

from __future__ import annotations

import json
import os
import socket
import threading

from conftest import PY, R, sandtrap


def _dirs(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (src / "in.txt").write_text("hello\n")
    (src / "secret.txt").write_text("not read by the job\n")
    return src, out


def test_learn_prints_a_profile_that_runs_the_program_and_nothing_more(tmp_path):
    src, out = _dirs(tmp_path)
    job = f"cat {src}/in.txt > {out}/result.txt && echo done && echo to-stderr >&2"
    p = sandtrap("run", "--learn", "-w", str(out), "-m", "256M", "--", "/bin/sh", "-c", job)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode()
    # stdout is the profile alone: the program's output went to stderr
    assert "done" in p.stderr.decode() and "to-stderr" in p.stderr.decode()
    assert text.startswith("# learned by sandtrap run --learn"), text
    assert "[filesystem]" in text and f'  "{src}/in.txt",\n' in text and f'fs_writable = [\n  "{out}",\n]' in text
    assert "secret.txt" not in text
    assert 'max_memory = "256M"' in text  # the run's own options stay
    assert 'exec = "/bin/sh"' in text  # and its program
    (out / "result.txt").unlink()
    prof = tmp_path / "learned.toml"
    prof.write_text(text)
    # the profile runs the program: its [program], its grants
    p = sandtrap("run", "--profile-file", str(prof))
    assert p.returncode == 0 and p.stdout == b"done\n", p.stderr
    assert (out / "result.txt").read_text() == "hello\n"
    # and grants nothing it did not use: the unread file and a write beside it are refused
    p = sandtrap("run", "--profile-file", str(prof), "--", "/bin/cat", f"{src}/secret.txt")
    assert p.returncode == 1 and b"Permission denied" in p.stderr, p.stderr
    p = sandtrap("run", "--profile-file", str(prof), "--", "/bin/sh", "-c", f"echo x > {src}/new")
    assert p.returncode != 0 and not (src / "new").exists()


def test_learn_records_a_refused_write_and_passes_the_exit_code(tmp_path):
    _, out = _dirs(tmp_path)
    # no -w: the write is refused (and learned), the program fails, the profile still comes
    p = sandtrap("run", "--learn", "--", "/bin/sh", "-c", f"echo x > {out}/f; exit 7")
    assert p.returncode == 7, p.stderr
    assert not (out / "f").exists()
    assert f'fs_writable = [\n  "{out}",\n]' in p.stdout.decode()


def test_learn_records_refused_destinations(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    accepted: list[socket.socket] = []

    def accept():
        try:
            accepted.append(srv.accept()[0])
        except OSError:
            pass  # closed: nothing came

    threading.Thread(target=accept, daemon=True).start()
    code = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\nexcept OSError as e:\n    print(e.errno)\n"
    try:
        p = sandtrap("run", "--learn", "--", PY, "-c", code)
    finally:
        srv.close()
    assert p.returncode == 0, p.stderr
    assert not accepted, "the learning run reached a destination its policy does not allow"
    assert f'[network]\nnet_allow = [\n  "127.0.0.1:{port}",\n]' in p.stdout.decode()


def test_learn_json(tmp_path):
    src, out = _dirs(tmp_path)
    p = sandtrap("run", "--learn", "--json", "-w", str(out), "--", "/bin/sh", "-c", f"cat {src}/in.txt; exit 3")
    assert p.returncode == 3, p.stderr
    d = json.loads(p.stdout)
    assert d["result"]["exit_code"] == 3 and d["result"]["stdout"] == "hello\n"
    assert f"{src}/in.txt" in d["policy"]["fs_readable"] and "fs_writable" not in d["policy"]
    assert d["profile"].startswith("# learned") and d["dropped"] == 0
    assert "read-only view" in d["mode"] and f"{src}/in.txt" in d["observed"]["read"]


def test_learn_refuses_interactive():
    p = sandtrap("run", "--learn", "-i", *R, "--", "/bin/true")
    assert p.returncode == 125 and b"[interactive learn]" in p.stderr


def test_dry_run_lists_the_changes_and_leaves_the_workdir(tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    (w / "keep").write_text("old\n")
    (w / "gone").write_text("x\n")
    before = sorted((p.name, p.read_bytes()) for p in w.iterdir())
    script = "echo new > keep; echo b > added; rm gone; mkdir d"
    args = ("run", "--dry-run", *R, "-w", str(w), "--workdir", str(w), "--cwd", str(w), "--", "/bin/sh", "-c", script)
    p = sandtrap(*args)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stderr.decode().splitlines()) == ["A added", "A d", "D gone", "M keep"], p.stderr
    assert sorted((p.name, p.read_bytes()) for p in w.iterdir()) == before
    p = sandtrap(*args[:2], "--json", *args[2:])
    res = json.loads(p.stdout)
    assert p.returncode == 0 and sorted((c["kind"], c["path"]) for c in res["changes"]) == [
        ("A", "added"),
        ("A", "d"),
        ("D", "gone"),
        ("M", "keep"),
    ]
    assert sorted((p.name, p.read_bytes()) for p in w.iterdir()) == before


def test_dry_run_needs_a_workdir_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    p = sandtrap("run", "--dry-run", *R, "-w", str(tmp_path), "--", "/bin/sh", "-c", f"touch {marker}")
    assert p.returncode == 125
    assert b"--dry-run needs --workdir" in p.stderr and b"nothing was run" in p.stderr
    assert not marker.exists()


def test_hostname_option_and_profile_key(tmp_path):
    p = sandtrap("run", *R, "--hostname", "build-01", "--", "/bin/uname", "-n")
    assert p.returncode == 0 and p.stdout == b"build-01\n", p.stderr
    p = sandtrap("run", *R, "--hostname", "no spaces", "--", "/bin/true")
    assert p.returncode == 125 and b"--hostname (name)" in p.stderr, p.stderr
    prof = tmp_path / "h.toml"
    prof.write_text('[program]\nname = "from-profile"\n')
    p = sandtrap("run", "--profile-file", str(prof), *R, "--", "/bin/uname", "-n")
    assert p.returncode == 0 and p.stdout == b"from-profile\n", p.stderr
    # --name names the run (ps/kill), not the host
    p = sandtrap("run", *R, "--name", "x-run", "--", "/bin/uname", "-n")
    assert p.returncode == 0 and p.stdout.strip() == os.uname().nodename.encode()


def test_port_remap_option(tmp_path):
    # the host holds the port: a plain bind of it fails, a remapped one lands on a
    # port of the sandbox's own and answers the virtual one
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    port = host.getsockname()[1]
    code = f"import socket\ns = socket.socket()\ntry:\n    s.bind(('127.0.0.1', {port}))\nexcept OSError as e:\n    print('errno', e.errno)\nelse:\n    print(s.getsockname()[1])\n"
    try:
        p = sandtrap("run", *R, "--net-allow-bind", str(port), "--", PY, "-c", code)
        assert p.returncode == 0 and p.stdout == b"errno 98\n", (p.stdout, p.stderr)  # EADDRINUSE
        p = sandtrap("run", *R, "--net-allow-bind", str(port), "--port-remap", "--", PY, "-c", code)
        assert p.returncode == 0 and p.stdout == f"{port}\n".encode(), (p.stdout, p.stderr)
        prof = tmp_path / "p.toml"
        prof.write_text(f"[network]\nnet_allow_bind = [{port}]\nport_remap = true\n")
        p = sandtrap("run", "--profile-file", str(prof), *R, "--", PY, "-c", code)
        assert p.returncode == 0 and p.stdout == f"{port}\n".encode(), (p.stdout, p.stderr)
    finally:
        host.close()


def test_process_options_cpu_cores_huge_pages_aslr_and_core_dumps(tmp_path):
    # main's issue-21 fields through their options and a profile: each changes what the
    # run's own /proc says (the defaults: every CPU, huge pages, ASLR, no core dumps)
    show = "grep -E '^(THP_enabled|Cpus_allowed_list):' /proc/self/status; cat /proc/self/personality; ulimit -c"
    base = ("run", *R, "-r", "/proc", "--")
    p = sandtrap(*base, "/bin/sh", "-c", show)
    assert p.returncode == 0, p.stderr
    default = p.stdout.decode().split("\n")
    assert default[0] == "THP_enabled:\t1" and default[2] == "00000000" and default[3] == "0", default
    cpu = str(max(os.sched_getaffinity(0)))  # the last CPU this host lets us use
    opts = ("--cpu-cores", cpu, "--no-huge-pages", "--no-randomize-memory", "--no-coredump=false")
    p = sandtrap("run", *R, "-r", "/proc", "-w", str(tmp_path), *opts, "--", "/bin/sh", "-c", show)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode().split("\n")
    assert out[0] == "THP_enabled:\t0" and out[1] == f"Cpus_allowed_list:\t{cpu}", out
    assert int(out[2], 16) & 0x0040000 and out[3] != "0", out  # ADDR_NO_RANDOMIZE; a core limit
    prof = tmp_path / "proc.toml"
    prof.write_text(f'[program]\nno_huge_pages = true\n[limits]\ncpu_cores = ["{cpu}-{cpu}"]\n')
    p = sandtrap("run", "--profile-file", str(prof), *R, "-r", "/proc", "--", "/bin/sh", "-c", show)
    out = p.stdout.decode().split("\n")
    assert p.returncode == 0 and out[0] == "THP_enabled:\t0" and out[1] == f"Cpus_allowed_list:\t{cpu}", (out, p.stderr)
    p = sandtrap("run", *R, "--cpu-cores", "99999", "--", "/bin/true")
    assert p.returncode == 125 and b"--cpu-cores (cpu_cores)" in p.stderr, p.stderr


def test_placement_options_and_profile_keys(tmp_path):
    # issue 21's placement fields: --num-cpus, --no-supervisor, --gpu-devices, and
    # the same keys in [limits] and [program]
    p = sandtrap("run", *R, "--num-cpus", "1", "--no-supervisor", "--", "/bin/sh", "-c", "nproc")
    assert p.returncode == 0 and p.stdout == b"1\n", (p.stdout, p.stderr)
    prof = tmp_path / "place.toml"
    prof.write_text('[program]\nno_supervisor = true\n[limits]\nnum_cpus = 1\ngpu_devices = "all"\n')
    p = sandtrap("run", "--profile-file", str(prof), *R, "--", "/bin/sh", "-c", "nproc")
    assert p.returncode == 0 and p.stdout == b"1\n", (p.stdout, p.stderr)
    # a GPU this host lacks (none here), and a field that needs the supervisor
    p = sandtrap("run", *R, "--gpu-devices", "0,7", "--", "/bin/true")
    assert p.returncode == 125 and b"--gpu-devices (gpu_devices)" in p.stderr, p.stderr
    p = sandtrap("run", *R, "--no-supervisor", "--net-allow", "10.0.0.0/8:22", "--", "/bin/true")
    assert p.returncode == 125 and b"no_supervisor" in p.stderr and b"net-allow" in p.stderr, p.stderr
