"""``benchmarks/trace_pass.py`` stamps fixed lines of the node's sources: each must still be
there as often as its entry says, and the stamped module must still compile, or the
benchmark stops with the line's text. Checked here so a change that moves one of those
lines says so in the suite, not at the next measurement."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_pass import MARKS, REWRITE, stamp

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("rel", sorted({m[0] for m in MARKS}))
def test_every_stamped_line_is_where_trace_pass_looks_for_it(rel: str) -> None:
    source = (REPO / rel).read_text()
    stamped = stamp(source, rel)
    compile(stamped, rel, "exec")
    wanted = sum(
        ((before is not None) + (after is not None) + REWRITE.get(line, "").count("_mark(")) * count
        for file, line, before, after, count in MARKS
        if file == rel
    )
    assert stamped.count("_mark(") - source.count("_mark(") == wanted
    assert "from zbroker._trace import mark as _mark" in stamped


def test_hops_pair_each_sent_frame_with_the_next_nodes_next_wake() -> None:
    from trace_pass import hops

    # (mark, ns): poll called, poll returned, ..., a link frame sent (12) or delivered (26)
    sender = [
        [(0, 0), (1, 1_000), (12, 5_000)],
        [(0, 10_000), (1, 11_000), (26, 20_000)],
        [(0, 30_000), (1, 31_000)],  # (sent nothing: not paired)
        [(0, 40_000), (1, 41_000), (12, 3_000_000)],  # (no wake follows within 1 ms)
    ]
    receiver = [
        [(0, 1_000), (1, 7_000)],
        [(0, 8_000), (1, 23_500)],
    ]
    assert hops(sender, receiver) == [2.0, 3.5]
