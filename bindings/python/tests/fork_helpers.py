"""Module-level init/work functions for the fork tests (imported by the template)."""

import os

data = None


def init():
    global data
    with open(os.environ["DATA_DIR"] + "/numbers.txt") as f:
        data = [int(x) for x in f.read().split()]


def work(clone_id):
    shard = data[clone_id::4]
    print(sum(shard))


def trivial(clone_id):
    print(clone_id)


def flood(clone_id):
    os.write(1, b"x" * (10 << 20))


def misbehave(clone_id):
    if clone_id == 1:
        raise RuntimeError("clone 1 fails")
    if clone_id == 2:
        os.kill(os.getpid(), 9)
    if clone_id == 3:
        import time

        time.sleep(60)
    print("ok", clone_id, os.environ["CLONE_ID"])


def escape(clone_id):
    try:
        open("/etc/hostname").read()
        print("READ")
    except PermissionError:
        print("EACCES")
