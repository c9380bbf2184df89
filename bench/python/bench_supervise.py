#!/usr/bin/env python3
"""The seccomp supervisor's cost: rules by destination vs rules the kernel alone
enforces, in sandtrap and in the peer (PyPI ``sandlock``), measured in one run.

    python3 bench/python/bench_supervise.py [-n 2000] [--rounds 5] [--sandlock-python VENV/bin/python]

A program inside the sandbox times a loop of N calls with ``perf_counter`` and
prints the median per call (the sandbox's start is not in the figure):

  * ``connect``: N TCP connects (and closes) to a listener on the host's 127.0.0.1
    — watched: ``net_allow=["127.0.0.1:PORT"]`` (the supervisor checks and performs
    each connect); unwatched: ``net_allow=[PORT]`` (Landlock's port rule alone);
  * ``sendto``: N UDP datagrams with an address — watched:
    ``net_allow=["udp://127.0.0.1:PORT"]``; unwatched: ``net_allow_udp=True``
    (UDP to anywhere, nothing trapped);
  * the same loops with no sandbox at all (the baseline).

With ``--sandlock-python``, the same programs run under sandlock with the same
rules (``net_allow=["127.0.0.1:PORT"]`` / ``["udp://127.0.0.1:PORT"]``). Rounds
interleave every configuration so each sees the same machine state; the figure is
the median of the rounds' medians.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import threading

FS = ["/usr", "/lib", "/lib64", "/bin", "/etc"]

LOOP = r"""
import socket, statistics, sys, time
kind, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ts = []
if kind == "connect":
    for _ in range(n):
        s = socket.socket()
        t = time.perf_counter(); s.connect(("127.0.0.1", port)); ts.append(time.perf_counter() - t)
        s.close()
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(n):
        t = time.perf_counter(); s.sendto(b"x", ("127.0.0.1", port)); ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e6)
"""

SANDLOCK = r"""
import json, sys
from sandlock import Sandbox
loop, fs, cases = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
fs = fs + sorted({sys.prefix, sys.base_prefix} - set(fs))  # this interpreter's own files
out = {}
for name, (rules, argv) in cases.items():
    sb = Sandbox(fs_readable=fs, net_allow=rules)
    r = sb.run([sys.executable, "-c", loop] + argv)
    assert r.success, (name, r, r.stderr)
    out[name] = float(r.stdout.decode().strip())
print(json.dumps(out))
"""


def serve() -> tuple[int, int]:
    """A TCP listener that accepts and drops, and a UDP socket that reads and drops."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4096)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            c, _ = tcp.accept()
            c.close()

    def drain() -> None:
        while True:
            udp.recv(64)

    threading.Thread(target=accept, daemon=True).start()
    threading.Thread(target=drain, daemon=True).start()
    return tcp.getsockname()[1], udp.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=2000, help="calls per loop (default 2000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sandlock-python", help="interpreter that has the sandlock package")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import sandtrap

    tport, uport = serve()
    py = sys.executable
    loop = lambda kind, port: [py, "-c", LOOP, kind, str(port), str(args.n)]  # noqa: E731
    # the interpreter's own prefix is readable too (a venv, a pyenv build)
    fs = FS + sorted({sys.base_prefix, sys.prefix} - {"/usr"})
    ours = {
        "connect watched": (sandtrap.Sandbox(fs_readable=fs, net_allow=[f"127.0.0.1:{tport}"]), "connect", tport),
        "connect unwatched": (sandtrap.Sandbox(fs_readable=fs, net_allow=[tport]), "connect", tport),
        "sendto watched": (sandtrap.Sandbox(fs_readable=fs, net_allow=[f"udp://127.0.0.1:{uport}"]), "sendto", uport),
        "sendto unwatched": (sandtrap.Sandbox(fs_readable=fs, net_allow_udp=True), "sendto", uport),
    }
    assert ours["connect watched"][0].isolation()["net"]["supervised"]
    assert not ours["connect unwatched"][0].isolation()["net"]["supervised"]
    peer_cases = {
        "connect watched": ([f"127.0.0.1:{tport}"], ["connect", str(tport), str(args.n)]),
        "sendto watched": ([f"udp://127.0.0.1:{uport}"], ["sendto", str(uport), str(args.n)]),
    }
    figs: dict[str, list[float]] = {}

    def add(k: str, v: float) -> None:
        figs.setdefault(k, []).append(v)

    for _ in range(args.rounds):
        for kind, port in (("connect", tport), ("sendto", uport)):
            r = subprocess.run(loop(kind, port), capture_output=True, check=True)
            add(f"{kind} plain", float(r.stdout))
        for name, (sb, kind, port) in ours.items():
            r = sb.run(loop(kind, port))
            assert r.success, (name, r.stderr)
            add(f"sandtrap {name}", float(r.stdout))
        if args.sandlock_python:
            r = subprocess.run(
                [args.sandlock_python, "-c", SANDLOCK, LOOP, json.dumps(fs), json.dumps(peer_cases)],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                print("sandlock failed:", r.stderr[-2000:], file=sys.stderr)
                args.sandlock_python = None
            else:
                for k, v in json.loads(r.stdout).items():
                    add(f"sandlock {k}", v)
    for sb, _, _ in ours.values():
        sb.close()

    med = {k: statistics.median(v) for k, v in figs.items()}
    print(f"per call, median of {args.rounds} rounds of {args.n} calls (µs):")
    for k in sorted(med):
        print(f"  {k:32s} {med[k]:8.2f}")
    for kind in ("connect", "sendto"):
        w, u, p = med[f"sandtrap {kind} watched"], med[f"sandtrap {kind} unwatched"], med[f"{kind} plain"]
        line = f"  {kind}: watched/unwatched {w / u:.2f}×, watched/plain {w / p:.2f}×"
        if f"sandlock {kind} watched" in med:
            line += f", sandtrap/sandlock (watched) {w / med[f'sandlock {kind} watched']:.2f}×"
        print(line)
    if args.json:
        print(json.dumps(med))
    return 0


if __name__ == "__main__":
    sys.exit(main())
