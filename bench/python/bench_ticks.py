"""The guest runtime's tick-counting overhead on loop shapes: sandboxed vs plain
``exec``, best of REPS (default 15) interleaved CPU-time runs each (process_time, so
other load matters less).

    python3 bench/python/bench_ticks.py            # REPS=31 python3 ... for a noisy machine
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../core/guest/python"))
from sandtrap_guest import GuestSession, Policy

CASES = {
    "for loop at module level": "s = 0\nfor i in range(1_000_000):\n    s += i * 2 % 7\n",
    "for loop inside a function": "def f():\n    s = 0\n    for i in range(1_000_000):\n        s += i * 2 % 7\n    return s\nr = f()\n",
    "while loop at module level": "s = 0\ni = 0\nwhile i < 1_000_000:\n    s += i * 2 % 7\n    i += 1\n",
    "list comprehension": "x = [i * 2 % 7 for i in range(1_000_000)]\n",
    "attribute-heavy loop": "class P:\n    pass\np = P()\np.x = 0\nout = []\nfor i in range(200_000):\n    p.x = p.x + 1\n    out.append(i)\n",
}


REPS = int(os.environ.get("REPS", "15"))


def cpu(fn):
    t = time.process_time()
    fn()
    return time.process_time() - t


print("| case | sandboxed / plain exec |\n|---|---|")
for name, code in CASES.items():
    s = GuestSession(Policy(timeout=60))
    r = s.exec(code)
    assert r.error is None, r.error
    plain, sb = [], []
    for _ in range(REPS):  # interleaved, so that drift in the VM's speed hits both alike
        plain.append(cpu(lambda: exec(code, {})))
        sb.append(cpu(lambda: s.exec(code)))
    print(f"| {name} | {min(sb) / min(plain):.2f}x |")
