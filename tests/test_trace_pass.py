"""``benchmarks/trace_pass.py`` stamps fixed lines of the node's sources: each must still be
there as often as its entry says, and the stamped module must still compile, or the
benchmark stops with the line's text. Checked here so a change that moves one of those
lines says so in the suite, not at the next measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.trace_pass import MARKS, REWRITE, stamp

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
