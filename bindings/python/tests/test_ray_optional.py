"""sandtrap.ray is an optional extra: the package and the module import without Ray,
and using the module says how to get it. (The cluster tests are tests/ray, run by
``make test-ray`` with Ray installed.)"""

from __future__ import annotations

import subprocess
import sys

from conftest import SYS_RO

from sandtrap import Sandbox


def test_imports_without_ray_and_says_how_to_get_it():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import sandtrap, sandtrap.ray\n"
        "try:\n"
        "    sandtrap.ray.SandboxPool(sandtrap.Sandbox())\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "sandtrap.ray needs Ray: pip install 'sandtrap[ray]'"


def test_fork_first_numbers_a_share_of_a_larger_fork():
    sb = Sandbox(fs_readable=SYS_RO, work_fn="import os\nprint(CLONE_ID, os.environ['CLONE_ID'])")
    got = sb.fork(5, first=100).results()
    assert [c.id for c in got] == list(range(100, 105))
    assert [c.stdout for c in got] == [b"%d %d\n" % (i, i) for i in range(100, 105)]
