"""A worker remembers, within one exec, the VirtualFS files it wrote or read, and
answers its own reads of them without a host call (issue 19's benchmark) — and never
serves a stale file: what the host changes between execs, or during one through a
granted function, is read afresh. At both worker levels."""

from __future__ import annotations

import os

import pytest

import sandtrap._coop as coop
from sandtrap import Policy, VirtualFS, sandbox

LEVELS = ["process", "kernel"]

LOOP = """
for i in range(10):
    with open('/a.txt', 'w') as f:
        f.write('v' + str(i))
    with open('/a.txt') as f:
        x = f.read()
"""


@pytest.fixture
def ops(monkeypatch):
    seen: list[str] = []
    real = coop._serve_fs

    def counting(backend, name, args):
        seen.append(name)
        return real(backend, name, args)

    monkeypatch.setattr(coop, "_serve_fs", counting)
    return seen


@pytest.mark.parametrize("level", LEVELS)
def test_reads_of_its_own_writes_cost_no_host_call(level, ops):
    fs = VirtualFS()
    with sandbox(Policy(timeout=10), isolation=level, filesystem=fs) as sb:
        r = sb.exec(LOOP)
        assert r.error is None and r.namespace["x"] == "v9", r.error
    assert fs.read("/a.txt") == b"v9"
    assert ops.count("read") == 0, ops  # without the memory: 10
    # the first open for writing truncates at once (the file was not known), later
    # ones with the close's write: 2 + 9 (without the deferral: 20)
    assert ops.count("write") == 11, ops


@pytest.mark.parametrize("level", LEVELS)
def test_host_changes_are_never_served_stale(level, ops):
    fs = VirtualFS()
    p = Policy(timeout=10)
    p.module(os)

    @p.fn
    def host_write(path, text):
        fs.write(path, text)

    @p.fn
    def host_read(path):
        return fs.read(path).decode()

    with sandbox(p, isolation=level, filesystem=fs) as sb:
        assert sb.exec("open('/a.txt', 'w').write('mine')\ny = open('/a.txt').read()").namespace["y"] == "mine"
        fs.write("/a.txt", "host, between execs")
        assert sb.exec("y = open('/a.txt').read()").namespace["y"] == "host, between execs"
        r = sb.exec("z1 = open('/a.txt').read()\nhost_write('/a.txt', 'host, during')\nz2 = open('/a.txt').read()")
        assert (r.namespace["z1"], r.namespace["z2"]) == ("host, between execs", "host, during"), r.error
        # appends, removes and renames keep the memory true
        r = sb.exec(
            "open('/b', 'w').write('1')\nopen('/b', 'a').write('2')\nb = open('/b').read()\n"
            "import os\nos.rename('/b', '/c')\nc = open('/c').read()\n"
            "os.remove('/c')\ntry:\n    open('/c').read()\n    gone = False\nexcept FileNotFoundError:\n    gone = True\n"
        )
        assert (r.namespace.get("b"), r.namespace.get("c"), r.namespace.get("gone")) == ("12", "12", True), r.error
        # a deferred truncation is seen by everything that can look before the close
        r = sb.exec(
            "with open('/d', 'w') as w:\n    w.write('full')\nf = open('/d', 'w')\nsize = os.stat('/d').st_size\n"
            "f.write('x')\nf.close()\nafter = open('/d').read()\n"
            "with open('/d', 'w') as w:\n    w.write('full')\ng = open('/d', 'w')\nseen = host_read('/d')\ng.close()"
        )
        got = (r.namespace.get("size"), r.namespace.get("after"), r.namespace.get("seen"))
        assert got == (0, "x", ""), (got, r.error)
        # an open file never closed: truncated by the exec's end
        sb.exec("with open('/e', 'w') as w:\n    w.write('full')\nh = open('/e', 'w')")
    assert fs.read("/e") == b""
