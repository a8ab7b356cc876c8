"""How a node cuts delivery runs into frames (zbroker/node/delivery.py ``_run_cuts``):
every entry once, in order, under the same run head; no frame over DELIVERY_BATCH
messages; a frame ends only where a bound was reached (or the runs end); a run that fits
travels whole, as the very list it came in; a run that carries its entries' bytes (relayed
whole: zbroker/wire/splice.py) is never cut."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.node.delivery import _run_cuts

_SIZE = st.sampled_from([0, 1, 100, wire.DELIVERY_BATCH_BYTES // 5, wire.DELIVERY_BATCH_BYTES])
_RUN_LENGTHS = st.lists(st.lists(_SIZE, min_size=1, max_size=600), max_size=5)


def _runs(lengths: list[list[int]]) -> list[list[Any]]:
    return [
        [f"T.{i}", "o", 1, [[b"x" * size, 0, None, seq, 0.0] for seq, size in enumerate(sizes)]]
        for i, sizes in enumerate(lengths)
    ]


@settings(max_examples=100, deadline=None)
@given(lengths=_RUN_LENGTHS)
def test_delivery_runs_are_cut_at_the_bounds_and_lose_nothing(lengths: list[list[int]]) -> None:
    runs = _runs(lengths)
    frames = _run_cuts(runs)
    flat = [(r[0], r[1], r[2], id(e)) for frame, _ in frames for r in frame for e in r[3]]
    assert flat == [(r[0], r[1], r[2], id(e)) for r in runs for e in r[3]]
    for i, (frame, n) in enumerate(frames):
        assert n == sum(len(r[3]) for r in frame) > 0
        assert n <= wire.DELIVERY_BATCH
        size = sum(len(e[0]) for r in frame for e in r[3])
        last = i == len(frames) - 1
        # a frame ends early only once its payloads reached the bound, by its last entry
        assert last or n == wire.DELIVERY_BATCH or size >= wire.DELIVERY_BATCH_BYTES
        assert size - len(frame[-1][3][-1][0]) < wire.DELIVERY_BATCH_BYTES
    whole = {id(r) for frame, _ in frames for r in frame}
    for r in runs:  # a run no frame boundary falls in goes as it came, not copied
        parts = [f for frame, _ in frames for f in frame if any(f[3][0] is e for e in r[3])]
        cut = len(parts) > 1
        assert cut or id(r) in whole


def test_no_runs_no_frames() -> None:
    assert _run_cuts([]) == []


_CARRIED = st.lists(st.tuples(st.lists(_SIZE, min_size=1, max_size=600), st.booleans()), max_size=5)


@settings(max_examples=100, deadline=None)
@given(shapes=_CARRIED)
def test_runs_carrying_their_bytes_go_whole(shapes: list[tuple[list[int], bool]]) -> None:
    runs = _runs([sizes for sizes, _ in shapes])
    for run, (_, carried) in zip(runs, shapes, strict=True):
        if carried:  # as the relay passes a run on: its entries' bytes after them
            run.append(memoryview(wire.packb(run[3])))
    frames = _run_cuts(runs)
    flat = [(r[0], id(e)) for frame, _ in frames for r in frame for e in r[3]]
    assert flat == [(r[0], id(e)) for r in runs for e in r[3]]
    placed = [r for frame, _ in frames for r in frame]
    for run in runs:
        if len(run) == 5:
            assert sum(r is run for r in placed) == 1  # whole, in one frame, as it came
    for frame, n in frames:
        assert n == sum(len(r[3]) for r in frame) > 0
        # over the bounds only a run that carries its bytes, alone in its frame
        assert n <= wire.DELIVERY_BATCH or (len(frame) == 1 and len(frame[0]) == 5)
        if len(frame) > 1:
            carrying = [r for r in frame if len(r) == 5]
            before = frame[: frame.index(carrying[-1])] if carrying else []
            size = sum(len(e[0]) for r in before for e in r[3])
            # a carried run joined a frame only where it fit under the bounds
            assert not carrying or size < wire.DELIVERY_BATCH_BYTES
            assert not carrying or sum(len(r[3]) for r in before) < wire.DELIVERY_BATCH
