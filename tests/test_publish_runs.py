"""Batches of publish runs (client protocol 3): the wire checks, the grouping of publish
frames into runs, and the publisher's entries and batches, byte for byte what msgpack
would write.

A batch of runs is ``[[topic, [[payload, fmt, headers], ...]], ...]``: the node decodes it
once and checks and routes each run's topic once. The rules are a publish frame's, so a
malformed run or entry is counted as a publish frame with the same fault would be, and the
rest of the frame is taken. What the publisher sends to a node of each protocol, and when:
``tests/test_publisher_batches.py``.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.client import publish_wire, publisher
from zbroker.client.messages import encode_payload

pack = msgpack.packb


def _check(runs: list[Any]) -> tuple[int, list[Any], list[str]]:
    """(entries held, the runs as checked, the reasons counted)."""
    errors: list[tuple[str, str]] = []
    frame = wire.encode_publish_runs(runs)
    elements = wire.publish_elements(frame, errors)
    assert type(elements) is list and type(elements[0]) is list, "not taken for runs"
    held = wire.check_publish_runs(elements, errors, set())
    return held, elements, [reason for reason, _ in errors]


def test_a_batch_of_runs_is_taken_whole() -> None:
    runs = [
        ["R.a", [[b"1", 0, None], [b"\x01", 1, {"k": [1, 2]}]]],
        ["R.b", [[b"3", 0, None]]],
        ["R.a", [[b"4", 0, {}]]],
    ]
    held, checked, reasons = _check(copy.deepcopy(runs))
    assert (held, checked, reasons) == (4, runs, [])


def test_four_runs_are_not_taken_for_one_publish_frame() -> None:
    """A publish frame is a fixarray of 4 starting with its topic; a batch of four runs is
    a fixarray of 4 too, starting with an array (0x94 0x92...)."""
    runs = [[f"R.{i}", [[b"%d" % i, 0, None]]] for i in range(4)]
    frame = wire.encode_publish_runs(runs)
    assert frame[:2] == b"\x94\x92"
    held, checked, reasons = _check(runs)
    assert (held, checked, reasons) == (4, runs, [])


GOOD = [b"ok", 0, None]


@pytest.mark.parametrize(
    ("run", "held", "kept", "reasons"),
    [
        ("not a run", 1, None, ["bad_shape"]),
        (["R.a"], 1, None, ["bad_shape"]),
        (["R.a", [GOOD], 3], 1, None, ["bad_shape"]),
        (["R.a", b"entries"], 1, None, ["bad_shape"]),
        ([5, [GOOD, GOOD]], 2, None, ["bad_type", "bad_type"]),
        ([5, []], 1, None, ["bad_shape"]),  # a run without entries is malformed
        (["R..a", [GOOD, GOOD, GOOD]], 3, None, ["bad_topic"] * 3),
        (["$ZB.x", [GOOD]], 1, None, ["bad_topic"]),  # not publishable by a client
        (["R.*", [GOOD]], 1, None, ["bad_topic"]),
        # was: nothing to take or count, and a frame of them cost the sender one message
        # of the drain's budget however many topics the node checked (MSGR's rule now)
        (["R.a", []], 1, None, ["bad_shape"]),
        (["R.a", [GOOD, [b"x"], GOOD]], 3, ["R.a", [GOOD, GOOD]], ["bad_shape"]),
        (["R.a", [GOOD, "entry"]], 2, ["R.a", [GOOD]], ["bad_shape"]),
        (["R.a", [[b"x", 0, None, 1], GOOD]], 2, ["R.a", [GOOD]], ["bad_shape"]),
        (["R.a", [["text", 0, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 2, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", True, None], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 0, {1: 2}], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
        (["R.a", [[b"x", 0, [1]], GOOD]], 2, ["R.a", [GOOD]], ["bad_type"]),
    ],
)
def test_a_bad_run_or_entry_is_counted_and_the_rest_taken(
    run: Any, held: int, kept: Any, reasons: list[str]
) -> None:
    before, after = ["R.z", [[b"first", 0, None]]], ["R.z", [[b"last", 1, None]]]
    got_held, checked, got = _check([before, run, after])
    assert got == reasons
    assert got_held == held + 2
    assert checked == [before, kept, after]


def test_check_publish_runs_learns_valid_topics() -> None:
    valid: set[str] = set()
    runs: list[Any] = [["R.a", [GOOD]], ["R..b", [GOOD]]]
    errors: list[tuple[str, str]] = []
    assert wire.check_publish_runs(runs, errors, valid) == 2
    assert valid == {"R.a"} and runs[1] is None and errors[0][0] == "bad_topic"


_VALUE = st.one_of(
    st.none(),
    st.builds(
        lambda t, p, f, h: [t, p, f, h],
        st.sampled_from(["A", "B", "C"]),
        st.binary(max_size=4),
        st.sampled_from([0, 1]),
        st.sampled_from([None, {"k": 1}]),
    ),
)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(_VALUE, max_size=30))
def test_runs_of_publishes_keep_every_message_in_order(values: list[Any]) -> None:
    want = [list(v) for v in values if v is not None]
    runs = wire.runs_of_publishes(copy.deepcopy(values))
    assert [[topic, *e] for topic, entries in runs for e in entries] == want
    assert all(entries for _, entries in runs)  # no empty run
    # a run ends where the topic changes, and only there
    assert all(a[0] != b[0] for a, b in itertools.pairwise(runs))


_INT = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry
_MESSAGE = st.tuples(
    st.sampled_from(["A", "B.c", "ü"]),
    st.one_of(st.binary(max_size=300), _INT, st.text(max_size=5)),
    st.one_of(st.none(), st.dictionaries(st.text(max_size=3), _INT, max_size=2)),
)


def _joined(entry: publish_wire.Entry) -> bytes:
    """An entry's bytes (a large payload's entry is its parts)."""
    return b"".join(entry) if isinstance(entry, tuple) else entry


@pytest.mark.parametrize("size", [0, 1, 255, 256, 1024, 65535, 65536, 70_000])
def test_an_entry_of_any_size_is_what_msgpack_would_write(size: int) -> None:
    """Each payload size's header (bin8, bin16, bin32), built without msgpack; a payload
    of 256 B or more without headers is not copied into its entry (its parts, the payload
    itself among them, are joined only with the batch), and alone it leaves as the publish
    frame msgpack would write."""
    payload = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    head = b"\x94" + pack("T")
    for value, headers in ((payload, None), (size, None), (payload, {"k": 1})):
        entry = publisher._entry("T", head, value, headers)
        raw, fmt = encode_payload(value)
        assert _joined(entry) == pack([raw, fmt, headers])
        assert publish_wire.frame_of(head, entry) == pack(["T", raw, fmt, headers])
        assert publish_wire.entry_frame("T", entry) == pack(["T", raw, fmt, headers])
    parts = publisher._entry("T", head, payload, None)
    if size >= 256:
        assert isinstance(parts, tuple) and parts[1] is payload
    else:
        assert type(parts) is bytes


@pytest.mark.parametrize(
    "sizes",
    [[10, 300, 10], [300, 10, 300], [300, 300], [10, 10], [10, 70_000, 20, 5]],
)
def test_runs_of_small_and_large_payloads_join_into_the_frame_msgpack_would_write(
    sizes: list[int],
) -> None:
    # a large payload's entry is its parts (joined only here), a small one's its bytes:
    # a run of either, or of both in any order, leaves as packing the runs gives
    head = b"\x94" + pack("T")
    payloads = [bytes([i]) * n for i, n in enumerate(sizes)]
    pairs = [("T", publisher._entry("T", head, p, None)) for p in payloads]
    pairs.append(("U", publisher._entry("U", b"\x94" + pack("U"), payloads[0], None)))
    batch, starts = publish_wire.runs_of(pairs)
    want = [["T", [[p, 0, None] for p in payloads]], ["U", [[payloads[0], 0, None]]]]
    assert publish_wire.batch_frame(batch, starts, True) == pack(want)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=20))
def test_a_batch_is_what_msgpack_would_write(messages: list[Any]) -> None:
    """The publisher encodes each entry itself (no msgpack call without headers) and joins
    the entries' bytes under their runs' heads: byte for byte what msgpack writes for the
    same runs; the older form holds the same messages as publish frames."""
    pairs = []
    want: list[list[Any]] = []
    for topic, payload, headers in messages:
        head = b"\x94" + pack(topic)
        entry = publisher._entry(topic, head, payload, headers)
        raw, fmt = encode_payload(payload)
        assert _joined(entry) == pack([raw, fmt, headers])
        pairs.append((topic, entry))
        if want and want[-1][0] == topic:
            want[-1][1].append([raw, fmt, headers])
        else:
            want.append([topic, [[raw, fmt, headers]]])
    batch, starts = publish_wire.runs_of(pairs)
    assert publish_wire.pairs(batch, starts) == pairs
    assert publish_wire.batch_frame(batch, starts, True) == pack(want)
    frames = publish_wire.batch_frame(batch, starts, False)
    errors: list[tuple[str, str]] = []
    values = wire.check_publishes(wire.publish_elements(frames, errors), errors, set())
    assert errors == []
    assert values == [[t, *e] for t, entries in want for e in entries]
