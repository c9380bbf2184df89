"""The COW-fork template (sandtrap_guest.template), driven directly over its frames
(no engine, no confinement): clones, their outputs and failures, the forkers, the
flow of results and the bounds on what is held."""

import errno
import os
import select
import subprocess
import sys
import time

import pytest

from sandtrap_guest import mp

GUEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # core/guest/python

# the template's main with test code run first ({extra}); the bindings start it as
# ``python3 -m sandtrap_guest.template`` (test_started_as_a_module_too)
BOOT = (
    "import sys\n"
    "p = type(sys)('sandtrap_guest')\n"
    "p.__path__ = [sys.argv[1] + '/sandtrap_guest']\n"
    "sys.modules['sandtrap_guest'] = p\n"
    "{extra}\n"
    "from sandtrap_guest.template import main\n"
    "sys.exit(main())\n"
)


class Template:
    def __init__(self, extra="", module=False, env=None):
        argv = (
            [sys.executable, "-m", "sandtrap_guest.template"]
            if module
            else [sys.executable, "-c", BOOT.format(extra=extra), GUEST]
        )
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONPATH=GUEST, **(env or {})),
        )

    def send(self, frame):
        data = mp.packb(frame)
        self.p.stdin.write(len(data).to_bytes(4, "big") + data)
        self.p.stdin.flush()

    def _read(self, n, deadline):
        buf = b""
        fd = self.p.stdout.fileno()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no frame from the template; stderr: {self.stderr()}")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise EOFError(f"the template exited; stderr: {self.stderr()}")
            buf += chunk
        return buf

    def recv(self, timeout=30):
        deadline = time.monotonic() + timeout
        n = int.from_bytes(self._read(4, deadline), "big")
        return mp.unpackb(self._read(n, deadline))

    def ask(self, frame, timeout=30):
        self.send(frame)
        return self.recv(timeout)

    def start(self, work_src, init_src=None, n=1, **fork):
        r = self.ask({"op": "init", "work_src": work_src, "init_src": init_src, "sys_path": []})
        assert r["op"] == "ready", r
        frame = {"op": "fork", "n": n, "parallel": None, "timeout": None, "max_output": None}
        frame.update(fork)
        assert self.ask(frame)["op"] == "forking"

    def collect(self, timeout=60):
        """Every clone, by id; also the frames' item counts."""
        out, frames = {}, []
        deadline = time.monotonic() + timeout
        while True:
            r = self.ask({"op": "next"}, max(0.1, deadline - time.monotonic()))
            assert r["op"] == "clones", r
            for it in r["items"]:
                assert it["id"] not in out, f"clone {it['id']} reported twice"
                out[it["id"]] = it
            frames.append(len(r["items"]))
            if r["done"]:
                return out, frames

    def stderr(self):
        if self.p.poll() is None:
            return "(running)"
        return self.p.stderr.read().decode(errors="replace")[-2000:]

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()
        self.p.stderr.close()


@pytest.fixture
def tpl():
    made = []

    def make(**kw):
        t = Template(**kw)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def run(tpl, work_src, n, init_src=None, **fork):
    t = tpl()
    t.start(work_src, init_src, n=n, **fork)
    out, _ = t.collect()
    assert sorted(out) == list(range(n))
    return [out[i] for i in range(n)]


# max_processes 2: no room for a forker, the template forks the clones itself
MODES = [{"forkers": 2}, {"max_processes": 2}]


@pytest.mark.parametrize(
    "forkers,parallel,limit",
    [
        (1, 1, None),
        (1, 4, None),
        (2, 2, None),
        (2, 8, None),
        (3, 5, None),
        (4, 2, None),
        (None, 8, 2),
        (None, 8, 3),
        (None, 8, 6),
    ],
)
def test_every_clone_once_with_its_id_and_own_outputs(tpl, forkers, parallel, limit):
    work = "import os, sys\nprint('out', CLONE_ID, os.environ['CLONE_ID'])\nprint('err', CLONE_ID, file=sys.stderr)\n"
    res = run(tpl, work, 25, forkers=forkers, parallel=parallel, max_processes=limit)
    for i, c in enumerate(res):
        assert c["stdout"] == f"out {i} {i}\n".encode()
        assert c["stderr"] == f"err {i}\n".encode()
        assert c["exit_code"] == 0 and c["signal"] is None
        assert c["timed_out"] is False and c["stdout_truncated"] is False


def test_init_state_is_shared_and_clone_writes_stay_in_the_clone(tpl):
    init = "data = list(range(100))\nseen = []"
    work = "seen.append(CLONE_ID)\nprint(sum(data[CLONE_ID::4]), len(seen))"
    res = run(tpl, work, 4, init_src=init, forkers=2)
    assert [c["stdout"] for c in res] == [b"1200 1\n", b"1225 1\n", b"1250 1\n", b"1275 1\n"]


def test_work_ref_is_called_with_the_clone_id(tpl):
    t = tpl()
    r = t.ask({"op": "init", "work_ref": "builtins:print", "sys_path": []})
    assert r["op"] == "ready", r
    assert t.ask({"op": "fork", "n": 3, "forkers": 2})["op"] == "forking"
    out, _ = t.collect()
    assert [out[i]["stdout"] for i in range(3)] == [b"0\n", b"1\n", b"2\n"]


@pytest.mark.parametrize("mode", MODES)
def test_failures_are_reported_on_their_own(tpl, mode):
    work = (
        "import os, sys, time\n"
        "if CLONE_ID == 1: raise RuntimeError('clone 1 fails')\n"
        "if CLONE_ID == 2: os.kill(os.getpid(), 9)\n"
        "if CLONE_ID == 3: time.sleep(60)\n"
        "if CLONE_ID == 4: sys.exit()\n"
        "if CLONE_ID == 5: sys.exit(3)\n"
        "if CLONE_ID == 6: sys.exit('bye')\n"
        "if CLONE_ID == 7: os._exit(9)\n"
        "print('ok', CLONE_ID)\n"
    )
    t0 = time.monotonic()
    res = run(tpl, work, 9, timeout=1.5, **mode)
    assert time.monotonic() - t0 < 20
    assert res[0]["stdout"] == b"ok 0\n" and res[0]["exit_code"] == 0
    assert res[1]["exit_code"] == 1 and b"RuntimeError: clone 1 fails" in res[1]["stderr"]
    assert res[2]["signal"] == 9 and res[2]["exit_code"] is None and not res[2]["timed_out"]
    assert res[3]["timed_out"] and res[3]["signal"] == 9
    assert res[4]["exit_code"] == 0 and res[4]["stdout"] == b""
    assert res[5]["exit_code"] == 3
    assert res[6]["exit_code"] == 1 and res[6]["stderr"] == b"bye\n"
    assert res[7]["exit_code"] == 9
    assert res[8]["stdout"] == b"ok 8\n"


@pytest.mark.parametrize("mode", MODES)
def test_big_outputs_are_drained_concurrently(tpl, mode):
    work = "import os\nos.write(1, b'x' * (10 << 20))\nos.write(2, b'e' * (1 << 20))\n"
    res = run(tpl, work, 4, parallel=4, max_output=16 << 20, **mode)
    assert [len(c["stdout"]) for c in res] == [10 << 20] * 4
    assert [len(c["stderr"]) for c in res] == [1 << 20] * 4
    assert not any(c["stdout_truncated"] for c in res)


def test_output_beyond_max_output_is_cut_and_flagged(tpl):
    res = run(tpl, "import os\nos.write(1, b'x' * 300000)\n", 2, max_output=1000)
    assert [len(c["stdout"]) for c in res] == [1000, 1000]
    assert all(c["stdout_truncated"] and c["exit_code"] == 0 for c in res)


def test_results_arrive_while_other_clones_run(tpl):
    t = tpl()
    t.start("import time\nif CLONE_ID: time.sleep(3)\nprint(CLONE_ID)", n=3, forkers=1, parallel=3)
    t0 = time.monotonic()
    first = t.ask({"op": "next"})
    assert time.monotonic() - t0 < 2.5
    assert [it["id"] for it in first["items"]] == [0] and first["done"] is False
    out, _ = t.collect()
    assert sorted(out) == [1, 2]


def test_frames_carry_many_clones(tpl):
    t = tpl()
    t.start("print(CLONE_ID)", n=300, forkers=2)
    time.sleep(0.5)  # the host is busy: the template keeps forking meanwhile
    out, frames = t.collect()
    assert sorted(out) == list(range(300))
    assert len(frames) < 100, frames


@pytest.mark.parametrize("mode", MODES)
def test_clones_read_eof_on_stdin_not_the_frames(tpl, mode):
    res = run(tpl, "import sys\nprint(repr(sys.stdin.read()))", 3, **mode)
    assert [c["stdout"] for c in res] == [b"''\n"] * 3


def test_gc_is_on_in_clones_unless_init_turned_it_off(tpl):
    assert run(tpl, "import gc\nprint(gc.isenabled())", 2)[0]["stdout"] == b"True\n"
    res = run(tpl, "import gc\nprint(gc.isenabled())", 2, init_src="import gc\ngc.disable()")
    assert res[1]["stdout"] == b"False\n"


@pytest.mark.parametrize("forkers", [1, 2])
def test_a_dead_forker_reports_each_of_its_clones(tpl, forkers, tmp_path):
    # the process that forked clone 3 is killed (from outside: a clone is a Landlock
    # domain of its own and cannot signal it, test_a_clone_cannot_signal_the_template):
    # the clones that process held are reported one by one as failed, the others
    # still run
    mark = tmp_path / "forker"
    work = (
        "import os, time\n"
        "if CLONE_ID == 3:\n"
        f"    open({str(mark)!r} + '.tmp', 'w').write(str(os.getppid()))\n"
        f"    os.rename({str(mark)!r} + '.tmp', {str(mark)!r})\n"
        "    time.sleep(30)\n"
        "print(CLONE_ID)\n"
    )

    def killer():
        deadline = time.monotonic() + 30
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        os.kill(int(mark.read_text()), 9)

    import threading

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    res = run(tpl, work, 40, forkers=forkers, parallel=2 * forkers)
    t.join()
    lost = [c for c in res if c["exit_code"] != 0]
    assert 3 in [c["id"] for c in lost]
    for c in lost:
        assert c["exit_code"] is None and c["stdout"] == b""
        assert b"sandtrap:" in c["stderr"], c
    assert any(b"was killed by signal 9" in c["stderr"] for c in lost)
    if forkers == 2:  # the other forker took over the ids not handed out yet
        assert len(lost) < 20
    ok = [c for c in res if c["exit_code"] == 0]
    assert all(c["stdout"] == b"%d\n" % c["id"] for c in ok)


def test_failing_forks_are_retried(tpl):
    # every third os.fork() fails with EAGAIN (as under a process limit)
    extra = (
        "import os, errno\n"
        "_fork, _n = os.fork, [0]\n"
        "def fork():\n"
        "    _n[0] += 1\n"
        "    if _n[0] % 3 == 0:\n"
        "        raise OSError(errno.EAGAIN, 'Resource temporarily unavailable')\n"
        "    return _fork()\n"
        "os.fork = fork\n"
    )
    t = tpl(extra=extra)
    t.start("print(CLONE_ID)", n=30, forkers=2, parallel=4)
    out, _ = t.collect()
    assert [out[i]["stdout"] for i in range(30)] == [b"%d\n" % i for i in range(30)]


def test_clones_that_cannot_be_forked_are_reported(tpl):
    extra = (
        "import os, errno\n"
        "_fork, _me = os.fork, os.getpid()\n"
        "def fork():\n"
        "    if os.getpid() != _me:\n"
        "        raise OSError(errno.EAGAIN, 'Resource temporarily unavailable')\n"
        "    return _fork()\n"
        "os.fork = fork\n"
    )
    t = tpl(extra=extra)
    t0 = time.monotonic()
    t.start("print(CLONE_ID)", n=6, forkers=2)
    out, _ = t.collect()
    assert time.monotonic() - t0 < 10
    assert sorted(out) == list(range(6))
    for c in out.values():
        assert c["exit_code"] is None and c["signal"] is None
        assert b"could not fork clone %d" % c["id"] in c["stderr"] and os.strerror(errno.EAGAIN).encode() in c["stderr"]


@pytest.mark.parametrize("mode", [{"forkers": 1}, {"max_processes": 2}])
def test_a_host_that_does_not_ask_holds_the_forking_back(tpl, tmp_path, mode):
    t = tpl(extra="import sandtrap_guest.template as T\nT.BACKLOG_ITEMS = 4")
    work = f"open({str(tmp_path)!r} + '/%d' % CLONE_ID, 'w').close()"
    t.start(work, n=60, parallel=2, **mode)
    time.sleep(1.5)
    started = len(os.listdir(tmp_path))
    # the backlog, plus what the forker had been given (a few beyond its share)
    assert started <= 4 + 2 * 2 + 2, started
    out, _ = t.collect()
    assert sorted(out) == list(range(60)) and len(os.listdir(tmp_path)) == 60


def _fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        return 0


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def test_fds_stay_bounded(tpl):
    t = tpl()
    t.start("import time\ntime.sleep(0.01)\nprint(CLONE_ID)", n=400, forkers=2, parallel=8)
    peak_tpl = peak_forker = 0
    out = {}
    while True:
        peak_tpl = max(peak_tpl, _fds(t.p.pid))
        peak_forker = max([peak_forker] + [_fds(f) for f in _children(t.p.pid)])
        r = t.ask({"op": "next"})
        out.update((it["id"], it) for it in r["items"])
        if r["done"]:
            break
    assert sorted(out) == list(range(400))
    assert peak_tpl <= 12, peak_tpl  # stdio and two pipes per forker
    assert peak_forker <= 8 + 2 * 4, peak_forker  # two pipes per live clone


def test_started_as_a_module_too(tpl):
    # ``python3 -m sandtrap_guest.template``, as the bindings start it
    t = tpl(module=True)
    t.start("print(CLONE_ID)", n=5)
    out, _ = t.collect()
    assert [out[i]["stdout"] for i in range(5)] == [b"%d\n" % i for i in range(5)]


def test_the_module_start_stays_lean():
    # every clone copies what the template holds: the package's __init__ must not
    # load the cooperative runtime (or threading, whose at-fork hook each clone pays)
    code = (
        "import sys\n"
        "import sandtrap_guest.template\n"
        "print(sorted(m for m in sys.modules if m == 'threading' or m.startswith('sandtrap_guest.')))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=GUEST),
        check=True,
    ).stdout
    assert out.strip() == "['sandtrap_guest.mp', 'sandtrap_guest.template']"


def test_unexpected_frames_are_answered_with_errors(tpl):
    t = tpl()
    assert t.ask({"op": "next"})["op"] == "error"
    assert t.ask({"op": "fork", "n": 1})["op"] == "error"  # before init
    r = t.ask({"op": "init", "init_src": "raise ValueError('boom')", "work_src": "pass", "sys_path": []})
    assert r["op"] == "error" and "boom" in r["message"]


def _descendants(pid):
    out = []
    for c in _children(pid):
        out += [c] + _descendants(c)
    return out


@pytest.mark.parametrize("limit", [2, 3, 4, 7])
def test_forkers_and_clones_stay_within_the_process_limit(tpl, limit):
    t = tpl()
    t.start("import time\ntime.sleep(0.02)\nprint(CLONE_ID)", n=40, max_processes=limit)
    peak, out = 0, {}
    while True:
        peak = max(peak, len(_descendants(t.p.pid)))
        r = t.ask({"op": "next"})
        out.update((it["id"], it) for it in r["items"])
        if r["done"]:
            break
    assert [out[i]["stdout"] for i in range(40)] == [b"%d\n" % i for i in range(40)]
    assert 1 <= peak <= limit - 1, peak  # the template is the other one


def test_no_forker_can_be_forked_the_template_forks(tpl):
    extra = (
        "import os, errno\n"
        "os.environ['TPL'] = str(os.getpid())\n"
        "_fork, _n = os.fork, [0]\n"
        "def fork():\n"
        "    _n[0] += 1\n"
        "    if _n[0] == 1:  # the forker\n"
        "        raise OSError(errno.EAGAIN, 'Resource temporarily unavailable')\n"
        "    return _fork()\n"
        "os.fork = fork\n"
    )
    t = tpl(extra=extra)
    t.start("import os\nprint(CLONE_ID, os.getppid() == int(os.environ['TPL']))", n=5, forkers=1)
    out, _ = t.collect()
    assert [out[i]["stdout"] for i in range(5)] == [b"%d True\n" % i for i in range(5)]


def test_a_clone_holds_no_other_clones_pipes(tpl):
    # every clone sees only its own stdin, stdout and stderr: no read end of its own
    # or a sibling's output pipe (it could steal or block their output)
    t = tpl()
    t.start(
        "import os, stat, time\n"
        "time.sleep(0.05)\n"
        "def is_pipe(f):\n"
        "    try:\n"
        "        return stat.S_ISFIFO(os.fstat(f).st_mode)\n"
        "    except OSError:\n"
        "        return False  # listdir's own fd, closed by now\n"
        "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
        "print([f for f in fds if f > 2 and is_pipe(f)])\n",
        n=40,
        parallel=8,
    )
    out, _ = t.collect()
    assert len(out) == 40
    for i in range(40):
        assert out[i]["stdout"] == b"[]\n", (i, out[i])


def test_a_clone_cannot_signal_the_template_or_its_forker(tpl):
    # each clone enters a Landlock domain of its own (ABI >= 6 scopes signals)
    abi = __import__("ctypes").CDLL(None).syscall(444, None, 0, 1)
    if abi < 6:
        pytest.skip(f"Landlock ABI {abi} < 6 does not scope signals")
    work = (
        "import os, errno\n"
        "forker = os.getppid()\n"
        "template = int(open('/proc/%d/stat' % forker).read().rsplit(')', 1)[1].split()[1])\n"
        "out = []\n"
        "for pid in (forker, template):\n"
        "    try:\n"
        "        os.kill(pid, 0)\n"
        "        out.append('OK')\n"
        "    except OSError as e:\n"
        "        out.append(errno.errorcode[e.errno])\n"
        "print(' '.join(out))\n"
    )
    res = run(tpl, work, 2, forkers=1)
    assert [c["stdout"] for c in res] == [b"EPERM EPERM\n"] * 2, res
