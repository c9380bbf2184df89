"""What a result carries beyond the namespace: rendered prints (the seed's
render_prints / PrintRendering) and result.sizes, at every level (spool=:
test_coop_spool.py)."""

from __future__ import annotations

import pytest

from sandtrap import InvalidArgument, Policy, PrintRendering, sandbox

LEVELS = ["none", "process", "kernel"]

CODE = """\
class C:
    def __repr__(self):
        return 'ran sandbox code'
print('a', 1, [1, 2], C())
print('y' * 500)
help(len)
for i in range(3):
    print(i)
big = 'z' * 1000
small = 1
42
"""


@pytest.mark.parametrize("level", LEVELS)
def test_prints_are_rendered_as_bounded_text(level):
    with sandbox(Policy(), isolation=level, echo="last", render_prints=PrintRendering(per_print=60, limit=3)) as sb:
        r = sb.exec(CODE)
    assert r.error is None, r.error
    # a sandbox-defined __repr__ is never run to render a print
    assert r.rendered_prints[0] == "a 1 [1, 2] <__main__.C object>"
    assert len(r.rendered_prints[1]) == 60 and r.rendered_prints[1].endswith("...")
    assert r.rendered_prints[2].startswith("Help on")  # help() is a print too
    assert len(r.rendered_prints) == 3 and r.print_count == 7  # 3 rendered; 4 prints + the echo counted
    assert "ran sandbox code" not in "".join(r.rendered_prints)
    assert r.prints == []  # snapshot_prints is another option


def test_many_values_share_a_print_budget():
    with sandbox(Policy(), render_prints=PrintRendering(per_print=50, limit=5)) as sb:
        r = sb.exec("print(*range(1000))")
    assert len(r.rendered_prints[0]) <= 50 and r.rendered_prints[0].endswith("more"), r.rendered_prints


@pytest.mark.parametrize("level", ["process", "kernel"])
def test_sizes_say_what_each_value_took_on_the_wire(level):
    with sandbox(Policy(), isolation=level) as sb:
        r = sb.exec("big = 'z' * 1000\nsmall = 1\nnothing = None")
    assert r.sizes == {"big": 1003, "small": 1, "nothing": 1}
    with sandbox(Policy(), isolation=level) as sb:
        r = sb.exec("big = 'z' * 1000\nsmall = 1", keep=("small",))
    assert r.sizes == {"small": 1}  # what was left out never crossed


def test_sizes_are_empty_in_process():
    with sandbox(Policy()) as sb:
        assert sb.exec("x = 1").sizes == {}  # nothing crossed (as in the seed)


def test_render_prints_arguments_are_checked():
    # (spool=: test_coop_spool.py)
    with pytest.raises(ValueError, match="positive int"):
        PrintRendering(per_print=0)
    with pytest.raises(InvalidArgument, match="PrintRendering"):
        sandbox(Policy(), render_prints=(10, 10))
