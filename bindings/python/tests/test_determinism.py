"""Determinism (issue 21): random_seed, time_start, deterministic_dirs. Each claim
is checked against a control run without the field, so that a test cannot pass
by accident (two unseeded runs differ, the host's clock is not time_start, an
unsorted listing is not sorted)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import SYS_RO, SYSTEM_PYTHON, have_python_in_sandbox

from sandtrap import PolicyError, Sandbox, load_profile, policy_from_dict

RO = [*SYS_RO, "/dev"]

PROBE = """
import os, random, uuid
print(os.urandom(32).hex())
print(random.random())
print(uuid.uuid4())
print(open("/dev/urandom", "rb").read(32).hex())
"""

pytestmark = pytest.mark.skipif(not have_python_in_sandbox(), reason="no system python3")


def _probe(**kw) -> list[str]:
    with Sandbox(fs_readable=RO, **kw) as sb:
        r = sb.run([SYSTEM_PYTHON, "-I", "-c", PROBE])
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.decode().split()
    assert len(lines) == 4
    return lines


def test_same_seed_same_bytes_different_seed_different():
    a, b = _probe(random_seed=1234), _probe(random_seed=1234)
    c = _probe(random_seed=1235)
    n1, n2 = _probe(), _probe()
    assert a == b
    for i in range(4):
        assert a[i] != c[i]
        assert n1[i] != n2[i]  # the control: unseeded runs differ
        assert a[i] != n1[i]


def test_seed_zero_is_a_seed():
    assert _probe(random_seed=0) == _probe(random_seed=0)


def test_time_start_clock_starts_there_and_advances():
    start = 946684800  # 2000-01-01T00:00:00Z
    for value in ("2000-01-01T00:00:00Z", start, "2000-01-01"):
        with Sandbox(fs_readable=RO, time_start=value) as sb:
            t0 = time.monotonic()
            r = sb.run(["sh", "-c", "date +%s; sleep 1; date +%s"])
            elapsed = time.monotonic() - t0
            assert sb.isolation()["determinism"]["time_start"] == start
        first, second = (int(x) for x in r.stdout.split())
        assert start <= first <= start + elapsed + 1, (value, r.stdout)
        assert first + 1 <= second <= start + elapsed + 1
    with Sandbox(fs_readable=RO) as sb:
        host = int(sb.run(["date", "+%s"]).stdout)
    assert abs(host - time.time()) < 5  # the control: the host's clock otherwise


def test_time_start_python_time_and_datetime():
    code = "import time, datetime; print(int(time.time())); print(datetime.datetime.now(datetime.timezone.utc).year)"
    with Sandbox(fs_readable=RO, time_start="1999-12-31T23:59:30Z") as sb:
        r = sb.run([SYSTEM_PYTHON, "-I", "-c", code])
    secs, year = r.stdout.split()
    assert 946684770 <= int(secs) <= 946684770 + 10 and year in (b"1999", b"2000"), r.stdout


def test_deterministic_dirs_ls_f_sorted(tmp_path):
    os.chmod(tmp_path, 0o755)
    names = [f"n{(i * 37) % 300:03d}" for i in range(300)]
    for n in names:
        (tmp_path / n).write_text("")
    want = sorted([".", "..", *names])

    def ls(**kw) -> list[str]:
        with Sandbox(fs_readable=[*RO, str(tmp_path)], **kw) as sb:
            r = sb.run(["ls", "-f", str(tmp_path)])
        assert r.exit_code == 0, r.stderr
        return r.stdout.decode().split()

    assert ls(deterministic_dirs=True) == want
    unsorted = ls()
    assert sorted(unsorted) == want and unsorted != want  # the control


def test_bad_values_are_refused_by_name():
    with pytest.raises(PolicyError) as e:
        Sandbox(random_seed=-1, time_start="yesterday")
    msg = str(e.value)
    assert "random_seed" in msg and "time_start" in msg


def test_profile_determinism_section(tmp_path):
    f = tmp_path / "det.toml"
    f.write_text(
        "[determinism]\nrandom_seed = 9\ntime_start = 2000-01-01T00:00:00Z\ndeterministic_dirs = true\n"
        f"[filesystem]\nfs_readable = {RO!r}\n".replace("'", '"')
    )
    kw = policy_from_dict(load_profile(f))
    assert kw["random_seed"] == 9 and kw["deterministic_dirs"] is True
    assert _probe(**{k: v for k, v in kw.items() if k != "fs_readable"}) == _probe(random_seed=9, time_start=946684800)


def test_cli_flags(tmp_path):
    cli = str(Path(__file__).resolve().parents[3] / "build" / "sandtrap")
    if not os.path.exists(cli):
        pytest.skip("the CLI is not built")
    ro_args = [arg for p in RO for arg in ("-r", p)]
    args = [
        cli,
        "run",
        *ro_args,
        "--random-seed",
        "5",
        "--time-start",
        "2000-01-01T00:00:00Z",
        "--",
        SYSTEM_PYTHON,
        "-I",
        "-c",
        "import os, time; print(os.urandom(8).hex(), int(time.time()) // 1000)",
    ]
    a = subprocess.run(args, capture_output=True, check=True).stdout
    b = subprocess.run(args, capture_output=True, check=True).stdout
    assert a == b and a.split()[1] == b"946684", a


def test_time_start_is_each_runs_start():
    # the clock is per run: a sandbox's later run starts at time_start again, not
    # at time_start plus the time since the sandbox was built
    with Sandbox(fs_readable=RO, time_start=946684800) as sb:
        first = int(sb.run(["date", "+%s"]).stdout)
        time.sleep(2.5)
        second = int(sb.run(["date", "+%s"]).stdout)
    assert first <= 946684801 and second <= 946684801, (first, second)
