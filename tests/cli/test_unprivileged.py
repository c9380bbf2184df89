"""The CLI as an ordinary user (nobody), where limits, the run registry and the
profiles' directory differ from root's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
from conftest import CLI, PY, R

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to become nobody"
)


@pytest.fixture(scope="module")
def nobody():
    d = tempfile.mkdtemp(prefix="sandtrap-cli-nobody-")
    os.chmod(d, 0o755)
    cli = os.path.join(d, "sandtrap")
    shutil.copy(CLI, cli)
    os.chmod(cli, 0o755)
    home = os.path.join(d, "home")
    os.mkdir(home)
    os.chown(home, 65534, 65534)
    run = os.path.join(d, "run")
    os.mkdir(run, 0o700)
    os.chown(run, 65534, 65534)

    def call(*args, popen=False, **kw):
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "XDG_RUNTIME_DIR": run}
        argv = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", cli, *args]
        if popen:
            return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return subprocess.run(argv, check=False, env=env, capture_output=True, timeout=60, cwd=d, **kw)

    call.home = home
    yield call
    shutil.rmtree(d, ignore_errors=True)


def test_exit_code_and_identity(nobody):
    p = nobody("run", *R, "--", "/bin/sh", "-c", "id -u; exit 9")
    assert p.returncode == 9 and p.stdout == b"65534\n", p.stderr


def test_limits_as_nobody(nobody):
    bomb = "import os,time\nn=0\ntry:\n    while n < 300:\n        if os.fork()==0:\n            time.sleep(5); os._exit(0)\n        n+=1\nexcept OSError:\n    pass\nprint(n)\n"
    p = nobody("run", *R, "-P", "8", "-t", "20", "--", PY, "-c", bomb)
    assert p.returncode == 0 and int(p.stdout) < 8, p.stderr
    p = nobody("run", *R, "-m", "64M", "--", PY, "-c", "b = bytearray(512 << 20); print('allocated')")
    assert p.returncode != 0 and b"allocated" not in p.stdout


def test_profile_in_nobodys_home(nobody):
    d = os.path.join(nobody.home, ".config", "sandtrap", "profiles")
    os.makedirs(d)
    with open(os.path.join(d, "p.toml"), "w") as f:
        f.write('[filesystem]\nfs_readable = ["/usr", "/lib", "/bin"]\n[limits]\ntimeout = 0.5\n')
    p = nobody("profile", "list")
    assert p.stdout == b"p\n", p.stderr
    p = nobody("run", "--profile", "p", "--", "/bin/sleep", "3")
    assert p.returncode == 124, p.stderr


def test_ps_and_kill_as_nobody(nobody):
    proc = nobody("run", "--name", "nb", *R, "--", "/bin/sleep", "60", popen=True)
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            runs = json.loads(nobody("ps", "--json").stdout)
            if runs and runs[0].get("pid"):
                break
            time.sleep(0.05)
        assert runs and runs[0]["name"] == "nb"
        assert nobody("kill", "nb").returncode == 0
        assert proc.wait(10) == 137
    finally:
        proc.kill()
        proc.wait()


def test_learn_as_nobody(nobody):
    # the supervisor records as nobody too; the learning run's view is nobody's
    p = nobody("run", "--learn", "--", "/bin/sh", "-c", "cat /etc/hostname >/dev/null; cat /etc/shadow; exit 4")
    assert p.returncode == 4, p.stderr
    assert b"/etc/shadow: Permission denied" in p.stderr
    text = p.stdout.decode()
    assert text.startswith("# learned") and '  "/etc/hostname",\n' in text, text
