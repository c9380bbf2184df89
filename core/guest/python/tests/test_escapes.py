"""The escape corpus (escapes.json), run at the in-process level.

Each entry names the exact exception class the attempt must end in; the class must
match exactly (not a subclass or parent), and ``contains`` must be in str(error).
"""

import importlib
import json
import os

import pytest

from sandtrap_guest import GuestSession, Policy

CORPUS = json.load(open(os.path.join(os.path.dirname(__file__), "escapes.json")))


def test_corpus_is_large_and_well_formed():
    assert len(CORPUS) >= 60
    names = [e["name"] for e in CORPUS]
    assert len(names) == len(set(names)), "duplicate names"
    for e in CORPUS:
        assert set(e) <= {"name", "code", "error", "contains", "grants", "policy"}, e
        assert isinstance(e["code"], str) and isinstance(e["error"], str)


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_escape(entry):
    policy = Policy(timeout=10, **entry.get("policy", {}))
    for mod in entry.get("grants", []):
        policy.module(importlib.import_module(mod))
    result = GuestSession(policy).exec(entry["code"])
    err = result.error
    assert err is not None, f"escape ran to completion: {entry['code']!r}\nstdout={result.stdout!r}"
    assert type(err).__name__ == entry["error"], (
        f"expected {entry['error']}, got {type(err).__name__}: {err}\n{result.traceback}")
    if entry.get("contains"):
        assert entry["contains"] in str(err), f"{entry['contains']!r} not in {str(err)!r}"
    # a rejected attempt never leaves runtime internals in the user namespace
    assert not any(k.startswith("__st_") for k in result.namespace)
