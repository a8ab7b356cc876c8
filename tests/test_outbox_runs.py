"""Link outboxes hold runs (zbroker/node/relay.py, zbroker/node/pipeline.py): a relay's
forwarded run shares its entries list with every link it goes to, so nothing may extend
it afterwards; and frames are cut by payload bytes even where the first and last payloads
of a stretch say it is small (zbroker/links/outbox.py)."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from zbroker import wire
from zbroker.const import LINK_BATCH_BYTES, LINK_FRAME_SLACK
from zbroker.links.flush import _encode_runs, flush_outboxes
from zbroker.links.outbox import cut_runs
from zbroker.links.state import LinkState
from zbroker.node import relay
from zbroker.node.counters import Counters
from zbroker.node.pipeline import Pipeline
from zbroker.node.publishes import _queue
from zbroker.routing import DedupeWindow


def test_a_forwarded_run_is_never_extended_for_one_link_only() -> None:
    l1, l2 = NS(outbox=[]), NS(outbox=[])
    links = NS(
        dirty=[],
        by_engine_id={"l1": l1, "l2": l2},
        resolve=lambda sends: ([(l1, None, 1), (l2, None, 1)], 0),
    )
    drops: list[Any] = []
    counters = NS(drop=lambda reason, n=1: drops.append((reason, n)))
    pipe: Any = NS(
        dedupe=DedupeWindow(),
        _delivery=NS(selected=NS(by_pattern={}, names=None), prefix=set()),
        _sink_out={},
        _links=links,
        _counters=counters,
        _fwd_paths={},
        _me="ME",
        _engine=NS(route=lambda t, p, tg: (frozenset(), [("l1", None, 1), ("l2", None, 1)])),
        _interest=NS(has_sinks=False),
        _enqueued={},
    )
    # a peer's run with our own origin and an empty path: its forwarded head is the one
    # this node gives a message of its own
    runs: list[Any] = [["t", "ME", 7, [], None, [[b"a", 0, None, 1, 1.0]]]]
    errors: list[Any] = []
    wire.check_runs(runs, (set(), set(), set()), errors)
    assert errors == []
    relay.relay(pipe, runs, {})
    assert l1.outbox[0][5] is l2.outbox[0][5]  # (cut-through: one list for both)
    Pipeline.enqueue(pipe, [("l1", None, 1)], ["t", b"mine", 0, None, "ME", 7, 9, 2.0, ["ME"]])
    assert [[e[0] for e in run[5]] for run in l2.outbox] == [[b"a"]]
    assert [[e[0] for e in run[5]] for run in l1.outbox] == [[b"a"], [b"mine"]]
    # a second message of ours extends the run enqueue made, not a new one
    Pipeline.enqueue(pipe, [("l1", None, 1)], ["t", b"more", 0, None, "ME", 7, 10, 2.0, ["ME"]])
    assert [[e[0] for e in run[5]] for run in l1.outbox] == [[b"a"], [b"mine", b"more"]]
    assert drops == []


def test_frames_are_cut_by_each_payload_where_the_ends_of_a_stretch_mislead() -> None:
    """Payloads alternating 100 B and 200 KB, the first and last small: every frame of
    more than one message still holds at most LINK_BATCH_BYTES of payload."""
    sizes = [100 if i % 2 == 0 else 200_000 for i in range(511)]
    entries = [[b"x" * n, 0, None, i + 1, 1.0] for i, n in enumerate(sizes)]
    box = [["T", "A", 1, ["A"], None, entries]]
    limit = (1 << 20) + LINK_FRAME_SLACK

    def encode(chunk: list[Any]) -> bytes:
        return wire.encode_link(wire.MSGR, chunk)

    frames = list(cut_runs(box, LINK_BATCH_BYTES, limit, encode))
    assert sum(n for _, n, _ in frames) == 511
    got = [e[3] for f, _, _ in frames for r in wire.decode_frame(f)[1] for e in r[5]]
    assert got == list(range(1, 512))
    for frame, n, _ in frames:
        payload = sum(len(e[0]) for r in wire.decode_frame(frame)[1] for e in r[5])
        assert n == 1 or payload <= LINK_BATCH_BYTES
        assert len(frame) <= limit


def _flush_one(payload: bytes, limit: int) -> tuple[list[bytes], Any, Counters]:
    """flush_outboxes on a link whose outbox holds one message (a pass at a low rate)."""
    sent: list[bytes] = []
    box = [["T", "A", 1, ["A"], None, [[payload, 0, None, 7, 1.0]]]]
    link = NS(outbox=box, state=LinkState.UP, frame_limit=limit, batch_bytes=LINK_BATCH_BYTES)
    link.msgs_out = link.unheard = link.drops = 0
    link.name, link.peer, link.peer_max_frame = "ab", "B", limit
    counters = Counters()
    table: Any = NS(counters=counters, dirty=[link], send_error="")

    def send(lk: Any, frame: bytes, now: float) -> bool:
        sent.append(frame)
        return True

    table.send = send
    expected = [f for f, _, _ in cut_runs(box, LINK_BATCH_BYTES, limit, _encode)]
    flush_outboxes(table)
    assert link.outbox == [] and table.dirty == []
    assert len(expected) == 1 and sent in ([], expected)  # what cut_runs would have sent
    return sent, link, counters


def test_a_lone_message_leaves_in_the_frame_cut_runs_makes_and_is_counted() -> None:
    sent, link, counters = _flush_one(b"m" * 100, 1 << 20)
    assert len(sent) == 1 and wire.decode_frame(sent[0])[1][0][5][0][:4] == [b"m" * 100, 0, None, 7]
    assert (link.msgs_out, link.unheard, link.drops, counters.forwarded) == (1, 1, 0, 1)


def test_a_lone_message_over_the_peers_limit_is_dropped_and_counted() -> None:
    sent, link, counters = _flush_one(b"m" * 5000, 2000)
    assert sent == [] and counters.forwarded == 0 and link.msgs_out == 0
    assert link.drops == 1 and counters.dropped == {"link_frame_too_large": 1}


def _encode(chunk: list[Any]) -> bytes:
    return wire.encode_link(wire.MSGR, chunk)


def _entries(first: int, n: int, size: int) -> list[list[Any]]:
    return [[bytes([s % 251]) * size, 0, None, s, 1.5] for s in range(first, first + n)]


def _relayed(first: int, n: int, size: int) -> list[Any]:
    """A run as a relay's decode gives it: from a one-run MSGR frame, its bytes kept."""
    frame = wire.encode_link(wire.MSGR, [["T", "A", 1, ["A"], None, _entries(first, n, size)]])
    (run,) = wire.decode_frame(frame)[1]
    assert len(run) == 7  # (the splice kept its bytes)
    return [*run[:3], ["A", "B"], *run[4:]]


def test_runs_relayed_whole_are_never_cut_whatever_frames_they_came_in() -> None:
    """A relay's pass drains frames of the previous node's cut (full ones and a
    pass's remainder); what it forwards is the same runs, each whole and spliced: cutting
    them again where this node's frames end would pack both pieces."""
    box, first = [], 1
    kib, small = [256, 256, 196, 256, 37], [512, 40, 50, 512]  # (1 KiB and 100 B payloads)
    for n, size in [*((n, 1024) for n in kib), *((n, 100) for n in small)]:
        box.append(_relayed(first, n, size))
        first += n
    limit = (1 << 20) + LINK_FRAME_SLACK
    chunks: list[list[Any]] = []

    def encode(chunk: list[Any]) -> bytes:
        chunks.append(chunk)
        return _encode_runs(chunk)  # (the link flush's: splices runs that carry bytes)

    frames = list(cut_runs(box, LINK_BATCH_BYTES, limit, encode))
    assert all(len(run) == 7 for chunk in chunks for run in chunk)  # none packed again
    # (a 1 KiB run of 256 is past the batch's payload bytes with its fields: alone)
    assert [n for _, n, _ in frames] == [256, 256, 196, 256, 37, 512, 40 + 50, 512]
    got = [e[3] for f, _, _ in frames for r in wire.decode_frame(f)[1] for e in r[5]]
    assert got == list(range(1, first))  # every message once, in order
    assert all(len(f) <= limit for f, _, _ in frames)
    # each frame is byte for byte what packing its runs gives
    assert [f for f, _, _ in frames] == [
        wire.encode_link(wire.MSGR, [r[:6] for r in c]) for c in chunks
    ]


def test_a_relayed_run_too_large_for_the_next_peer_is_cut_and_packed() -> None:
    """The next node takes smaller frames (its max_frame_bytes 64 KiB): a run that came
    whole in a 256 KiB frame is cut for it by its payloads, as any run."""
    box = [_relayed(1, 200, 1024)]
    most = 64 * 1024
    frames = list(cut_runs(box, most, most + LINK_FRAME_SLACK, _encode_runs))
    assert [n for _, n, _ in frames] == [64, 64, 64, 8]
    got = [e[3] for f, _, _ in frames for r in wire.decode_frame(f)[1] for e in r[5]]
    assert got == list(range(1, 201))


def test_a_run_that_fits_a_frame_alone_starts_the_next_frame_whole() -> None:
    """Two runs of 1 KiB messages, 100 then 200 (each fits a frame, not both): two frames
    of one whole run each, not the second run split across them."""
    box = [["T", "A", 1, ["A"], None, _entries(1, 100, 1024)]]
    box.append(["U", "A", 1, ["A"], None, _entries(101, 200, 1024)])
    limit = (1 << 20) + LINK_FRAME_SLACK
    frames = list(cut_runs(box, LINK_BATCH_BYTES, limit, _encode))
    assert [(n, topic) for _, n, topic in frames] == [(100, "T"), (200, "U")]
    # a run too large for a frame alone is still cut where frames end
    box = [box[0], ["U", "A", 1, ["A"], None, _entries(101, 400, 1024)]]
    frames = list(cut_runs(box, LINK_BATCH_BYTES, limit, _encode))
    assert [n for _, n, _ in frames] == [256, 244]
    # and a run that holds nothing (none reaches an outbox today) costs no frame
    box.insert(1, ["V", "A", 1, ["A"], None, []])
    assert [n for _, n, _ in cut_runs(box, LINK_BATCH_BYTES, limit, _encode)] == [256, 244]


@pytest.mark.parametrize(("size", "batch", "expected"), [(1024, 28, 252), (100, 64, 512)])
def test_a_nodes_link_runs_end_where_its_link_frames_do(
    size: int, batch: int, expected: int
) -> None:
    """A drain of publisher batches (28 messages of 1 KiB, or 64 of 100 B, each) queued
    for a link: its outbox holds runs of at most a frame each (LINK_BATCH messages, the
    link's batch bytes), so the flush sends each run whole in a frame of its own, every
    message once and in order."""
    link: Any = NS(outbox=[], batch_bytes=LINK_BATCH_BYTES)
    pipe: Any = NS(_links=NS(dirty=[]))
    tails: list[Any] = [None]
    head = ["T", "A", 1, ["A"]]
    for k in range(40):
        entries = _entries(1 + k * batch, batch, size)
        _queue(pipe, [(link, None, 1)], tails, head, entries, size * batch)
    assert pipe._links.dirty == [link]
    runs = link.outbox
    assert [len(r[5]) for r in runs[:-1]] == [expected] * (len(runs) - 1)
    assert sum(len(e[0]) for e in runs[0][5]) <= LINK_BATCH_BYTES
    chunks: list[list[Any]] = []

    def encode(chunk: list[Any]) -> bytes:
        chunks.append(chunk)
        return _encode(chunk)

    frames = list(cut_runs(runs, LINK_BATCH_BYTES, (1 << 20) + LINK_FRAME_SLACK, encode))
    assert chunks == [[r] for r in runs]  # each run whole, alone in its frame
    got = [e[3] for f, _, _ in frames for r in wire.decode_frame(f)[1] for e in r[5]]
    assert got == list(range(1, 40 * batch + 1))
