"""Unit tests for zbroker.wire's client frames: pinned encodings, round trips of publish,
control and delivery frames, and delivery batches and runs (several messages of one pattern
in one frame). Malformed frames and fuzzing: ``tests/test_wire_malformed.py``."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.client_frames import (
    FMT,
    GOOD_BODY,
    HEADERS,
    INT64,
    PATTERN,
    TOPIC,
    VALUE,
    error_reason,
    pack,
)
from zbroker import wire
from zbroker.errors import ProtocolError

# ---------------------------------------------------------------------------------------
# constants and exact encodings
# ---------------------------------------------------------------------------------------


def test_protocol_constants() -> None:
    assert (wire.FMT_BYTES, wire.FMT_MSGPACK) == (0, 1)
    assert (wire.HELLO, wire.STATUS, wire.PING, wire.ERROR) == (1, 2, 3, 15)
    # every op the client API relies on is named; every named op is a module constant
    assert {1: "HELLO", 2: "STATUS", 3: "PING", 15: "ERROR"}.items() <= wire.OPS.items()
    for value, name in wire.OPS.items():
        assert getattr(wire, name) == value
    assert wire.SYNC_PREFIX == b"\x02"


def test_publish_encoding_is_pinned() -> None:
    assert wire.encode_publish("A", b"x", 0, None) == b"\x94\xa1A\xc4\x01x\x00\xc0"
    assert wire.encode_publish("A.B", b"", 1, {"k": 1}) == (b"\x94\xa3A.B\xc4\x00\x01\x81\xa1k\x01")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 65535, 65536, 70000])
def test_bin_header_is_what_packb_writes(n: int) -> None:
    data = bytes(n)
    assert wire.bin_header(n) + data == msgpack.packb(data)


@given(st.integers(min_value=0, max_value=(1 << 32) - 1))
def test_bin_header_by_length(n: int) -> None:
    head = wire.bin_header(n)
    if n < 256:
        assert head == bytes((0xC4, n)) and head is wire.BIN8_HEADERS[n]
    else:
        assert head[0] == (0xC5 if n < 1 << 16 else 0xC6)
        assert int.from_bytes(head[1:], "big") == n and len(head) == (3 if n < 1 << 16 else 5)


def test_bin_header_refuses_what_msgpack_cannot_hold() -> None:
    with pytest.raises(ValueError):
        wire.bin_header(1 << 32)


def test_control_encoding_is_pinned() -> None:
    assert wire.encode_control(wire.PING, 7, {}) == b"\x93\x03\x07\x80"
    assert wire.encode_control(wire.ERROR, 1, {"message": "no"}) == (
        b"\x93\x0f\x01\x81\xa7message\xa2no"
    )


def test_delivery_body_encoding_is_pinned() -> None:
    body = wire.encode_delivery_body("A", b"x", 0, None, "n1", 2, 3, 1.5)
    assert body == b"\x98\xa1A\xc4\x01x\x00\xc0\xa2n1\x02\x03\xcb\x3f\xf8" + b"\x00" * 6


# ---------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------


def test_publish_round_trip_examples() -> None:
    frame = wire.encode_publish("PRICE.IBM", b"101.5", wire.FMT_BYTES, None)
    assert wire.decode_publish(frame) == ("PRICE.IBM", b"101.5", 0, None)
    frame = wire.encode_publish("T", pack({"a": 1}), wire.FMT_MSGPACK, {"h": [1, "x"]})
    assert wire.decode_publish(frame) == ("T", b"\x81\xa1a\x01", 1, {"h": [1, "x"]})
    assert wire.decode_publish(wire.encode_publish("T", b"", 0, {})) == ("T", b"", 0, {})


@settings(max_examples=200, deadline=None)
@given(topic=TOPIC, payload=st.binary(max_size=200), fmt=FMT, headers=HEADERS)
def test_publish_round_trip(
    topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None
) -> None:
    frame = wire.encode_publish(topic, payload, fmt, headers)
    assert isinstance(frame, bytes)
    decoded = wire.decode_publish(frame)
    assert decoded == (topic, payload, fmt, headers)
    assert type(decoded[1]) is bytes
    assert type(decoded[2]) is int


@settings(max_examples=100, deadline=None)
@given(
    pattern=PATTERN,
    topic=TOPIC,
    payload=st.binary(max_size=200),
    fmt=FMT,
    headers=HEADERS,
    origin=st.text(min_size=1, max_size=64),
    incarnation=st.integers(min_value=0, max_value=2**63 - 1),
    seq=st.integers(min_value=0, max_value=2**64 - 1),
    ts=st.floats(allow_nan=False),
)
def test_delivery_round_trip(
    pattern: str,
    topic: str,
    payload: bytes,
    fmt: int,
    headers: dict[str, Any] | None,
    origin: str,
    incarnation: int,
    seq: int,
    ts: float,
) -> None:
    body = wire.encode_delivery_body(topic, payload, fmt, headers, origin, incarnation, seq, ts)
    frame = pattern.encode("utf-8") + b"\0" + body
    got_pattern, fields = wire.decode_delivery(frame)
    assert got_pattern == pattern
    assert fields == [topic, payload, fmt, headers, origin, incarnation, seq, ts]


def test_delivery_round_trip_example() -> None:
    body = wire.encode_delivery_body("A.B", b"p", 0, {"k": "v"}, "alpha", 3, 42, 1700000000.25)
    pattern, fields = wire.decode_delivery(b"A.*\0" + body)
    assert pattern == "A.*"
    assert fields == ["A.B", b"p", 0, {"k": "v"}, "alpha", 3, 42, 1700000000.25]


def test_delivery_body_may_contain_nul_bytes() -> None:
    # only the first NUL separates the pattern; the msgpack body may hold any bytes
    body = wire.encode_delivery_body("A", b"\0\0", 0, {"k": "\0"}, "n\0", 0, 0, 0.0)
    assert b"\0" in body
    pattern, fields = wire.decode_delivery(b">\0" + body)
    assert pattern == ">"
    assert fields == ["A", b"\0\0", 0, {"k": "\0"}, "n\0", 0, 0, 0.0]


@settings(max_examples=100, deadline=None)
@given(
    op=INT64,
    req_id=INT64,
    body=st.dictionaries(st.text(max_size=10), VALUE, max_size=5),
)
def test_control_round_trip(op: int, req_id: int, body: dict[str, Any]) -> None:
    assert wire.decode_control(wire.encode_control(op, req_id, body)) == (op, req_id, body)


def test_control_round_trip_example() -> None:
    hello = {
        "broker_id": "alpha",
        "incarnation": 2,
        "version": 1,
        "endpoints": ["tcp://127.0.0.1:7100"],
        "ports": {"control": 7100, "publish": 7101, "deliver": 7102},
    }
    frame = wire.encode_control(wire.HELLO, 9, hello)
    assert wire.decode_control(frame) == (wire.HELLO, 9, hello)


def test_publish_round_trip_nested_map_with_int_keys() -> None:
    frame = wire.encode_publish("T", b"", 0, {"h": {1: "one"}})
    assert wire.decode_publish(frame) == ("T", b"", 0, {"h": {1: "one"}})


def test_delivery_frame_with_its_sequence_trailer() -> None:
    # what the node sends: pattern NUL envelope, then the per-pattern sequence (8 bytes)
    body = wire.encode_delivery_body("A.B", b"p", 0, None, "n", 1, 7, 0.5)
    frame = b"A.*\0" + body + (42).to_bytes(8, "big")
    assert wire.decode_delivery_frame(frame) == (
        "A.*",
        42,
        ["A.B", b"p", 0, None, "n", 1, 7, 0.5],
    )
    with pytest.raises(ProtocolError) as info:
        wire.decode_delivery_frame(b"A\0" + b"\x00" * 7)
    assert info.value.reason == "bad_shape"


# ---------------------------------------------------------------------------------------
# delivery batches (several messages of one pattern in one frame)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 15, 16, 65535, 65536])
def test_array_header_is_msgpacks(n: int) -> None:
    # the header msgpack itself writes before n elements
    assert wire.array_header(n) == pack([None] * n)[: len(pack([None] * n)) - n]


# patterns as a node has them: UTF-8 encodable (no lone surrogates), no NUL
_UTF8_PATTERN = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)
_ENVELOPE = st.tuples(
    TOPIC,
    st.binary(max_size=200),
    FMT,
    HEADERS,
    st.text(min_size=1, max_size=64),
    st.integers(min_value=0, max_value=2**63 - 1),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.floats(allow_nan=False),
)


@settings(max_examples=100, deadline=None)
@given(
    pattern=_UTF8_PATTERN,
    envelopes=st.lists(_ENVELOPE, min_size=1, max_size=40),
    last=st.integers(min_value=40, max_value=2**64 - 1),
)
def test_delivery_batch_round_trip(
    pattern: str, envelopes: list[tuple[Any, ...]], last: int
) -> None:
    bodies = [wire.encode_delivery_body(*e) for e in envelopes]
    body = bodies[0] if len(bodies) == 1 else wire.encode_delivery_batch(bodies)
    frame = pattern.encode("utf-8") + b"\0" + body + last.to_bytes(8, "big")
    got_pattern, first, got = wire.decode_delivery_batch(frame)
    assert got_pattern == pattern
    # the trailer numbers the batch's last message; the first is derived from the count
    assert first == last - len(envelopes) + 1
    assert got == [list(e) for e in envelopes]


def test_delivery_batch_is_the_array_of_envelopes() -> None:
    one = wire.encode_delivery_body("A", b"x", 0, None, "n1", 2, 3, 1.5)
    two = wire.encode_delivery_body("B", b"y", 1, {"k": 1}, "n1", 2, 4, 1.5)
    batch = wire.encode_delivery_batch([one, two])
    assert batch == b"\x92" + one + two
    assert msgpack.unpackb(batch) == [msgpack.unpackb(one), msgpack.unpackb(two)]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (pack([]), "bad_shape"),  # neither a message nor a batch
        (pack([[1, 2, 3]]), "bad_shape"),  # a batch holding a short envelope
        (pack([GOOD_BODY and msgpack.unpackb(GOOD_BODY), 5]), "bad_shape"),
        (pack("x"), "bad_shape"),
        (b"\xc1", "not_msgpack"),
    ],
)
def test_delivery_batch_malformed(body: bytes, reason: str) -> None:
    frame = b"A\0" + body + (9).to_bytes(8, "big")
    assert error_reason(wire.decode_delivery_batch, frame) == reason


@settings(max_examples=100, deadline=None)
@given(
    pattern=_UTF8_PATTERN,
    envelopes=st.lists(_ENVELOPE, min_size=1, max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=40),
    last=st.integers(min_value=40, max_value=2**64 - 1),
)
def test_delivery_runs_round_trip(
    pattern: str, envelopes: list[tuple[Any, ...]], cuts: list[int], last: int
) -> None:
    """A batch of runs (what a node relays) numbers and spells out its messages as the
    batch of their envelopes would: one run per stretch, its head taken from the first."""
    runs, i = [], 0
    for k in [*cuts, len(envelopes)]:
        stretch = envelopes[i : i + k]
        if stretch:
            topic, _, _, _, origin, inc, _, _ = stretch[0]
            runs.append([topic, origin, inc, [[e[1], e[2], e[3], e[6], e[7]] for e in stretch]])
        i += k
    heads = []  # per message, its run's head (topic, origin, incarnation)
    for r in runs:
        heads.extend([(r[0], r[1], r[2])] * len(r[3]))
    spelled = [
        [h[0], e[1], e[2], e[3], h[1], h[2], e[6], e[7]]
        for h, e in zip(heads, envelopes, strict=True)
    ]
    frame = pattern.encode("utf-8") + b"\0" + pack(runs) + last.to_bytes(8, "big")
    assert wire.decode_delivery_items(frame) == (pattern, last - len(envelopes) + 1, runs, True)
    assert wire.decode_delivery_batch(frame) == (pattern, last - len(envelopes) + 1, spelled)


def test_delivery_items_says_which_form() -> None:
    one = wire.encode_delivery_body("A", b"x", 0, None, "n1", 2, 3, 1.5)
    frame = b"A\0" + one + (9).to_bytes(8, "big")
    assert wire.decode_delivery_items(frame) == ("A", 9, [msgpack.unpackb(one)], False)
    batch = b"A\0" + wire.encode_delivery_batch([one, one]) + (9).to_bytes(8, "big")
    assert wire.decode_delivery_items(batch)[1:] == (8, [msgpack.unpackb(one)] * 2, False)


@pytest.mark.parametrize(
    "runs",
    [
        [["A", "n", 1, []]],  # a run holding nothing
        [["A", "n", 1, [[b"x", 0, None, 1]]]],  # a short entry
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]]], ["A", "n", 1, 5]],  # entries not an array
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]]], ["A", "n", 1]],  # a short run
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]]], [b"x", 0, None, 1, 0.0, 1, 2, 3]],
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]]], {"a": 1, "b": 2, "c": 3, "d": 4}],
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]]], {0: "A", 1: "n", 2: 1, 3: 3}],
        [["A", "n", 1, [{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}]]],  # a map for an entry
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0], "abcde"]]],  # a str for an entry
        # one run of one entry (a low rate's frame, decoded by a shorter way)
        [["A", "n", 1, 5]],  # entries not an array
        [["A", "n", 1, ["abcde"]]],  # a str for its entry
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0, 9]]]],  # a long entry
        [["A", "n", 1, [[b"x", 0, None, 1, 0.0]], 7]],  # a run of 5 elements
    ],
)
def test_delivery_runs_malformed(runs: list[Any]) -> None:
    frame = b"A\0" + pack(runs) + (9).to_bytes(8, "big")
    assert error_reason(wire.decode_delivery_items, frame) == "bad_shape"
    assert error_reason(wire.decode_delivery_batch, frame) == "bad_shape"


def test_delivery_batch_needs_prefix_and_trailer() -> None:
    assert error_reason(wire.decode_delivery_batch, b"A\0" + b"\x00" * 7) == "bad_shape"
    assert error_reason(wire.decode_delivery_batch, b"\0" + GOOD_BODY + b"\x00" * 8) == "bad_shape"
