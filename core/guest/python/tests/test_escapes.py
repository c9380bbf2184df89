"""The escape corpus (escapes.json), run at the in-process level.

Each entry names the exact exception class the attempt must end in; the class must
match exactly (not a subclass or parent), and ``contains`` must be in str(error).
Entries with ``plain`` are also run by plain ``exec()`` with real builtins, where the
same code must succeed (``plain`` holds): the attack is real, and the test can fail.
See corpus.py for the entry format.
"""

import sys

import corpus
import pytest

from sandtrap_guest import GuestSession, Policy

CORPUS = corpus.load()
LOCAL = [e for e in CORPUS if "none" in e.get("levels", ["none"])]
PLAIN = [e for e in CORPUS if "plain" in e]


def test_corpus_is_large_and_well_formed():
    assert len(CORPUS) >= 208
    assert len(PLAIN) >= 69
    names = [e["name"] for e in CORPUS]
    assert len(names) == len(set(names)), "duplicate names"
    for e in CORPUS:
        assert set(e) <= corpus.ENTRY_KEYS, e
        assert isinstance(e["code"], (str, list)) and isinstance(e["error"], str)


@pytest.mark.parametrize("entry", LOCAL, ids=[e["name"] for e in LOCAL])
def test_escape(entry):
    result = corpus.run_sandbox(entry, GuestSession, Policy)
    err = result.error
    assert err is not None, f"escape ran to completion: {entry['code']!r}\nstdout={result.stdout!r}"
    assert type(err).__name__ == entry["error"], (
        f"expected {entry['error']}, got {type(err).__name__}: {err}\n{result.traceback}"
    )
    if entry.get("contains"):
        assert entry["contains"] in str(err), f"{entry['contains']!r} not in {str(err)!r}"
    # a rejected attempt never leaves runtime internals in the user namespace
    assert not any(k.startswith("__st_") for k in result.namespace)


@pytest.fixture(scope="module")
def plain_results():
    return corpus.run_plain_isolated(PLAIN)


@pytest.mark.parametrize("entry", PLAIN, ids=[e["name"] for e in PLAIN])
def test_escape_works_under_plain_exec(entry, plain_results):
    if tuple(entry.get("min_python", ())) > sys.version_info[:2]:
        pytest.skip(f"the attack reaches what Python {entry['min_python']} added (the sandbox side runs anyway)")
    ok, why = plain_results[entry["name"]]
    assert ok, f"the attack does not work even without the sandbox ({entry['plain']}): {why}"
