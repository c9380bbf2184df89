"""Functions the clones run, imported by name in every node's template."""

import hashlib

DATA: list[int] = []


def init() -> None:
    DATA.extend(range(1000))


def work(cid: int) -> None:
    print(cid, hashlib.sha256(f"{cid}:{sum(DATA)}".encode()).hexdigest()[:16])


def coop_policy():
    """The cooperative sandbox's policy, built on the node (a Policy holds live
    modules, which do not cross)."""
    import math

    from sandtrap import Policy

    p = Policy(timeout=10)
    p.module(math)
    return p


TEMPLATE: list[str] = []


def init_pid() -> None:
    import os

    # this node's template (its pid is 1 of its own namespace on every node: a random
    # token made once, in init_fn, tells templates apart); clones inherit it
    TEMPLATE.append(os.urandom(8).hex())


def work_pid(cid: int) -> None:
    print(cid, TEMPLATE[0])
