"""tests/vectors/problems.json: invalid policies that every binding refuses with the
same problems, each (field, message), run through the Python API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sandtrap import PolicyError, Sandbox
from sandtrap._fields import KEYWORDS

FILE = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "problems.json"
CASES: list[dict[str, Any]] = json.loads(FILE.read_text())["cases"]


def name(key: str) -> str:
    """The keyword of a msgpack key (a key that is no field stays as it is)."""
    return KEYWORDS.get(key, key)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_problem_vector(case: dict[str, Any]) -> None:
    with pytest.raises(PolicyError) as ei:
        Sandbox(**{name(k): v for k, v in case["policy"].items()})
    got = sorted((p.field, p.message) for p in ei.value.problems)
    want = sorted(
        (name(p["field"]), re.sub(r"\{(\w+)\}", lambda m: name(m.group(1)), p["message"])) for p in case["problems"]
    )
    assert got == want
