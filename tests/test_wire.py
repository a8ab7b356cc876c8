"""Unit tests for zbroker.wire: encoders, decoders and every malformed-frame reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import wire
from zbroker.errors import ProtocolError, ZBrokerError

pack = msgpack.packb

# ---------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------

_INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    _INT64,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
# what msgpack round-trips to an equal value (lists, not tuples; maps with str keys)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=6,
)
_HEADERS = st.one_of(st.none(), st.dictionaries(st.text(max_size=10), _VALUE, max_size=5))
# text that UTF-8 can carry: no lone surrogates (a str, not a wire value)
_TOPIC = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)
_PATTERN = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=40,
)
_FMT = st.sampled_from([wire.FMT_BYTES, wire.FMT_MSGPACK])

# any msgpack value, including maps with int keys and ext types: used for fuzzing
_ANY_MSGPACK = st.recursive(
    st.one_of(_LEAF, st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=9),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.binary(max_size=4), _INT64), inner, max_size=5
        ),
    ),
    max_leaves=8,
)


def _reason(decoder: Callable[[bytes], Any], frame: bytes) -> str:
    with pytest.raises(ProtocolError) as info:
        decoder(frame)
    return info.value.reason


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
@given(topic=_TOPIC, payload=st.binary(max_size=200), fmt=_FMT, headers=_HEADERS)
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
    pattern=_PATTERN,
    topic=_TOPIC,
    payload=st.binary(max_size=200),
    fmt=_FMT,
    headers=_HEADERS,
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
    op=_INT64,
    req_id=_INT64,
    body=st.dictionaries(st.text(max_size=10), _VALUE, max_size=5),
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


# ---------------------------------------------------------------------------------------
# malformed frames: every reason
# ---------------------------------------------------------------------------------------

DECODERS: list[Callable[[bytes], Any]] = [wire.decode_publish, wire.decode_control]
_GOOD_BODY = wire.encode_delivery_body("A", b"", 0, None, "n", 1, 1, 0.0)


def _delivery_envelope(frame_body: bytes) -> tuple[str, list[Any]]:
    return wire.decode_delivery(b"A\0" + frame_body)


ALL_BODY_DECODERS: list[Callable[[bytes], Any]] = [*DECODERS, _delivery_envelope]


@pytest.mark.parametrize("decoder", ALL_BODY_DECODERS)
@pytest.mark.parametrize(
    "frame",
    [
        b"",  # nothing
        b"\xc1",  # a byte msgpack never uses
        b"\x94\xa1A",  # truncated array
        b"\xa5abc",  # truncated string
        b"\xc4\x05ab",  # truncated bin
        b"\xdd\xff\xff\xff\xff",  # array claiming 4G elements
        b"\xa2\xff\xfe",  # str that is not UTF-8
        b"\xd6\xff\x00\x00",  # truncated timestamp ext
        b"\x91" * 200_000 + b"\xc0",  # nested too deep
    ],
)
def test_not_msgpack(decoder: Callable[[bytes], Any], frame: bytes) -> None:
    assert _reason(decoder, frame) == "not_msgpack"


@pytest.mark.parametrize("decoder", ALL_BODY_DECODERS)
def test_trailing_bytes(decoder: Callable[[bytes], Any]) -> None:
    good = {
        wire.decode_publish: wire.encode_publish("A", b"", 0, None),
        wire.decode_control: wire.encode_control(1, 1, {}),
        _delivery_envelope: _GOOD_BODY,
    }[decoder]
    decoder(good)  # the frame without the junk is fine
    for junk in (b"\x00", b"\xc0", good):
        with pytest.raises(ProtocolError) as info:
            decoder(good + junk)
        assert info.value.reason == "not_msgpack"
        assert info.value.detail == "trailing bytes after the msgpack value"
        assert str(info.value) == "not_msgpack: trailing bytes after the msgpack value"


@pytest.mark.parametrize(
    "value",
    [
        [],
        ["A", b"", 0],
        ["A", b"", 0, None, None],
        ["A", b"", 0, None, None, None, None, None],
        {"topic": "A", "payload": b"", "fmt": 0, "headers": None},
        "A",
        5,
        None,
        b"A",
    ],
)
def test_publish_bad_shape(value: object) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_publish(pack(value))
    assert info.value.reason == "bad_shape"
    assert info.value.detail == "publish frame must be a 4-element array"


@pytest.mark.parametrize(
    "value",
    [[], [1, 1], [1, 1, {}, None], {"op": 1}, 1, "x", None],
)
def test_control_bad_shape(value: object) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_control(pack(value))
    assert info.value.reason == "bad_shape"
    assert info.value.detail == "control frame must be a 3-element array"


@pytest.mark.parametrize(
    "value",
    [[], ["A", b"", 0, None, "n", 1, 1], ["A", b"", 0, None, "n", 1, 1, 0.0, 0], {"a": 1}, 1],
)
def test_delivery_bad_shape_envelope(value: object) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_delivery(b"A\0" + pack(value))
    assert info.value.reason == "bad_shape"
    assert info.value.detail == "delivery envelope must be an 8-element array"


@pytest.mark.parametrize(
    ("index", "bad", "detail"),
    [
        (0, b"A", "topic must be a string"),
        (0, 1, "topic must be a string"),
        (0, None, "topic must be a string"),
        (0, ["A"], "topic must be a string"),
        (1, "payload", "payload must be bytes"),
        (1, None, "payload must be bytes"),
        (1, 0, "payload must be bytes"),
        (1, [1], "payload must be bytes"),
        (2, 2, "unknown payload format 2"),
        (2, -1, "unknown payload format -1"),
        (2, 15, "unknown payload format 15"),
        (2, True, "unknown payload format True"),
        (2, False, "unknown payload format False"),
        (2, 1.0, "unknown payload format 1.0"),
        (2, 0.0, "unknown payload format 0.0"),
        (2, "0", "unknown payload format '0'"),
        (2, None, "unknown payload format None"),
        (2, [0], "unknown payload format [0]"),
        (3, [], "headers must be a map with string keys"),
        (3, "k", "headers must be a map with string keys"),
        (3, 0, "headers must be a map with string keys"),
        (3, False, "headers must be a map with string keys"),
        (3, {b"k": 1}, "headers must be a map with string keys"),
        (3, {"ok": 1, b"k": 1}, "headers must be a map with string keys"),
    ],
)
def test_publish_bad_type(index: int, bad: object, detail: str) -> None:
    value: list[object] = ["A", b"", 0, None]
    value[index] = bad
    with pytest.raises(ProtocolError) as info:
        wire.decode_publish(pack(value))
    assert info.value.reason == "bad_type"
    assert info.value.detail == detail
    assert str(info.value) == f"bad_type: {detail}"


def test_publish_int_header_keys_are_bad_type() -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_publish(pack(["A", b"", 0, {1: "x"}]))
    assert info.value.reason == "bad_type"


def test_publish_int_header_keys_raise_protocol_error() -> None:
    # whatever the reason, the decoder refuses int keys with a ProtocolError
    with pytest.raises(ProtocolError):
        wire.decode_publish(pack(["A", b"", 0, {1: "x"}]))


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        (["1", 1, {}], "control op and request id must be integers"),
        ([1.0, 1, {}], "control op and request id must be integers"),
        ([True, 1, {}], "control op and request id must be integers"),
        ([None, 1, {}], "control op and request id must be integers"),
        ([1, "1", {}], "control op and request id must be integers"),
        ([1, None, {}], "control op and request id must be integers"),
        ([1, False, {}], "control op and request id must be integers"),
        ([1, 1.5, {}], "control op and request id must be integers"),
        ([1, 1, []], "control body must be a map"),
        ([1, 1, None], "control body must be a map"),
        ([1, 1, "body"], "control body must be a map"),
        ([1, 1, b""], "control body must be a map"),
        ([1, 1, 0], "control body must be a map"),
    ],
)
def test_control_bad_type(value: list[object], detail: str) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_control(pack(value))
    assert info.value.reason == "bad_type"
    assert info.value.detail == detail


def test_control_unknown_op_is_the_callers_business() -> None:
    assert wire.decode_control(pack([99, 0, {}])) == (99, 0, {})
    assert wire.decode_control(pack([-1, -1, {"x": None}])) == (-1, -1, {"x": None})


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"A.B",
        b"A.B" + pack(["x", b"y"]),  # no separator anywhere
        b"\0" + _GOOD_BODY,  # empty pattern
        b"\0",
    ],
)
def test_delivery_without_pattern_prefix(frame: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_delivery(frame)
    assert info.value.reason == "bad_shape"
    assert info.value.detail == "delivery frame has no pattern prefix"


@pytest.mark.parametrize("prefix", [b"\xff", b"A.\xc3", b"\xed\xa0\x80", b"\xc0\xae"])
def test_delivery_pattern_not_utf8(prefix: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        wire.decode_delivery(prefix + b"\0" + _GOOD_BODY)
    assert info.value.reason == "bad_type"
    assert info.value.detail == "pattern is not UTF-8"


def test_delivery_pattern_only_is_not_msgpack() -> None:
    assert _reason(wire.decode_delivery, b"A.B\0") == "not_msgpack"


def test_delivery_envelope_fields_are_not_type_checked() -> None:
    # the decoder checks the shape; the client checks the fields
    pattern, fields = wire.decode_delivery(b"A\0" + pack([1, 2, 3, 4, 5, 6, 7, 8]))
    assert (pattern, fields) == ("A", [1, 2, 3, 4, 5, 6, 7, 8])


def test_protocol_error_is_a_zbroker_error() -> None:
    with pytest.raises(ZBrokerError):
        wire.decode_control(b"\xc1")
    err = ProtocolError("bad_shape")
    assert (str(err), err.reason, err.detail) == ("bad_shape", "bad_shape", "")


# ---------------------------------------------------------------------------------------
# fuzzing: any input either decodes or raises ProtocolError
# ---------------------------------------------------------------------------------------

FUZZ_DECODERS = [
    wire.decode_publish,
    wire.decode_control,
    wire.decode_delivery,
    wire.decode_delivery_items,
    wire.decode_delivery_batch,
]


def _decode_or_protocol_error(decoder: Callable[[bytes], Any], frame: bytes) -> None:
    try:
        decoder(frame)
    except ProtocolError as exc:
        assert exc.reason in {"not_msgpack", "bad_shape", "bad_type"}


@pytest.mark.parametrize("decoder", FUZZ_DECODERS)
@settings(max_examples=200, deadline=None)
@given(frame=st.binary(max_size=64))
def test_fuzz_random_bytes(decoder: Callable[[bytes], Any], frame: bytes) -> None:
    _decode_or_protocol_error(decoder, frame)


@pytest.mark.parametrize("decoder", FUZZ_DECODERS)
@settings(max_examples=100, deadline=None)
@given(prefix=st.binary(max_size=6), value=_ANY_MSGPACK, suffix=st.binary(max_size=3))
def test_fuzz_msgpack_values(
    decoder: Callable[[bytes], Any], prefix: bytes, value: Any, suffix: bytes
) -> None:
    # structured inputs reach the shape and type checks that random bytes rarely reach
    _decode_or_protocol_error(decoder, pack(value))
    _decode_or_protocol_error(decoder, prefix + b"\0" + pack(value) + suffix)


@settings(max_examples=100, deadline=None)
@given(
    fields=st.tuples(_ANY_MSGPACK, _ANY_MSGPACK, _ANY_MSGPACK, _ANY_MSGPACK).map(list),
)
def test_fuzz_publish_four_fields(fields: list[Any]) -> None:
    try:
        topic, payload, fmt, headers = wire.decode_publish(pack(fields))
    except ProtocolError as exc:
        assert exc.reason in {"not_msgpack", "bad_type"}
    else:
        assert type(topic) is str
        assert type(payload) is bytes
        assert fmt in (0, 1) and type(fmt) is int
        assert headers is None or (type(headers) is dict and all(type(k) is str for k in headers))


@settings(max_examples=100, deadline=None)
@given(fields=st.tuples(_ANY_MSGPACK, _ANY_MSGPACK, _ANY_MSGPACK).map(list))
def test_fuzz_control_three_fields(fields: list[Any]) -> None:
    try:
        op, req_id, body = wire.decode_control(pack(fields))
    except ProtocolError as exc:
        assert exc.reason in {"not_msgpack", "bad_type"}
    else:
        assert type(op) is int and type(req_id) is int and type(body) is dict


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
    alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)
_ENVELOPE = st.tuples(
    _TOPIC,
    st.binary(max_size=200),
    _FMT,
    _HEADERS,
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
        (pack([_GOOD_BODY and msgpack.unpackb(_GOOD_BODY), 5]), "bad_shape"),
        (pack("x"), "bad_shape"),
        (b"\xc1", "not_msgpack"),
    ],
)
def test_delivery_batch_malformed(body: bytes, reason: str) -> None:
    frame = b"A\0" + body + (9).to_bytes(8, "big")
    assert _reason(wire.decode_delivery_batch, frame) == reason


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
    assert _reason(wire.decode_delivery_items, frame) == "bad_shape"
    assert _reason(wire.decode_delivery_batch, frame) == "bad_shape"


def test_delivery_batch_needs_prefix_and_trailer() -> None:
    assert _reason(wire.decode_delivery_batch, b"A\0" + b"\x00" * 7) == "bad_shape"
    assert _reason(wire.decode_delivery_batch, b"\0" + _GOOD_BODY + b"\x00" * 8) == "bad_shape"
