"""Unit tests for zbroker.wire's client frames, malformed: every ProtocolError reason a
publish, control or delivery frame can have, and fuzzing (any input either decodes or
raises ProtocolError)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.client_frames import ANY_MSGPACK, GOOD_BODY, error_reason, pack
from zbroker import wire
from zbroker.errors import ProtocolError, ZBrokerError

# ---------------------------------------------------------------------------------------
# malformed frames: every reason
# ---------------------------------------------------------------------------------------

DECODERS: list[Callable[[bytes], Any]] = [wire.decode_publish, wire.decode_control]


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
    assert error_reason(decoder, frame) == "not_msgpack"


@pytest.mark.parametrize("decoder", ALL_BODY_DECODERS)
def test_trailing_bytes(decoder: Callable[[bytes], Any]) -> None:
    good = {
        wire.decode_publish: wire.encode_publish("A", b"", 0, None),
        wire.decode_control: wire.encode_control(1, 1, {}),
        _delivery_envelope: GOOD_BODY,
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
        b"\0" + GOOD_BODY,  # empty pattern
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
        wire.decode_delivery(prefix + b"\0" + GOOD_BODY)
    assert info.value.reason == "bad_type"
    assert info.value.detail == "pattern is not UTF-8"


def test_delivery_pattern_only_is_not_msgpack() -> None:
    assert error_reason(wire.decode_delivery, b"A.B\0") == "not_msgpack"


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
@given(prefix=st.binary(max_size=6), value=ANY_MSGPACK, suffix=st.binary(max_size=3))
def test_fuzz_msgpack_values(
    decoder: Callable[[bytes], Any], prefix: bytes, value: Any, suffix: bytes
) -> None:
    # structured inputs reach the shape and type checks that random bytes rarely reach
    _decode_or_protocol_error(decoder, pack(value))
    _decode_or_protocol_error(decoder, prefix + b"\0" + pack(value) + suffix)


@settings(max_examples=100, deadline=None)
@given(
    fields=st.tuples(ANY_MSGPACK, ANY_MSGPACK, ANY_MSGPACK, ANY_MSGPACK).map(list),
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
@given(fields=st.tuples(ANY_MSGPACK, ANY_MSGPACK, ANY_MSGPACK).map(list))
def test_fuzz_control_three_fields(fields: list[Any]) -> None:
    try:
        op, req_id, body = wire.decode_control(pack(fields))
    except ProtocolError as exc:
        assert exc.reason in {"not_msgpack", "bad_type"}
    else:
        assert type(op) is int and type(req_id) is int and type(body) is dict
