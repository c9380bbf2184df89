"""A work function whose module refuses to import in a fork template (test_mapreduce.py):
the template's environment has FAIL_IMPORT set, the host's does not."""

import os

if os.environ.get("FAIL_IMPORT"):
    raise ImportError("refused in the template")


def work(cid):
    print(cid)
