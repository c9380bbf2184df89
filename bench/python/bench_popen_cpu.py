#!/usr/bin/env python3
"""CPU time of ``cat`` streaming 256 MiB through its stdin and stdout: sandboxed
(``popen``) vs unconfined (``subprocess.Popen``), interleaved in the same run.

    python3 bench/python/bench_popen_cpu.py [--rounds 5]

The rusage of ``cat`` alone: unlike wall-clock MB/s it does not depend on how the
machine's other load shares the CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import threading
from typing import Any

TOTAL = 256 << 20
CHUNK = 256 << 10


def stream(stdin: Any, stdout: Any) -> None:
    block = b"x" * CHUNK

    def writer() -> None:
        for _ in range(TOTAL // CHUNK):
            stdin.write(block)
        stdin.close()

    t = threading.Thread(target=writer)
    t.start()
    buf = bytearray(CHUNK)
    got = 0
    while k := stdout.readinto(buf):
        got += k
    t.join()
    assert got == TOTAL


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import sandtrap
    from sandtrap import PIPED

    sb = sandtrap.Sandbox(fs_readable=["/usr", "/lib", "/bin", "/etc"])
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.rounds):
        p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        stream(p.stdin, p.stdout)
        _, _, ru = os.wait4(p.pid, 0)
        theirs.append(ru.ru_utime + ru.ru_stime)
        q = sb.popen(["cat"], stdin=PIPED, stdout=PIPED, bufsize=0)
        stream(q.stdin, q.stdout)
        u = q.wait().usage
        ours.append(float(u["cpu_user_s"]) + float(u["cpu_sys_s"]))
    print("cat CPU seconds per 256 MiB:")
    print(f"  unconfined  {[round(x, 3) for x in theirs]}")
    print(f"  sandtrap    {[round(x, 3) for x in ours]}")
    print(f"  median ratio (sandtrap / unconfined): {statistics.median(ours) / statistics.median(theirs):.2f}")
    sb.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
