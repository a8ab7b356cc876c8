"""Client publish frames: one publish, a publish batch, and their checks.

A client PUSHes them to the node's PULL socket (``PORT+1``); see :mod:`.frames` for the
layout. :func:`check_publishes` is the one place the rules live: it checks a whole batch
in one call, as the node's hot path needs; :func:`decode_publish` is its one-frame form.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ..const import TOPIC_CACHE_SIZE
from ..errors import InvalidTopic, ProtocolError
from ..topics import validate_publish_topic
from .codec import TRAILING, packb
from .frames import FMTS, Errors

#: msgpack's bin headers: an array whose first element is one is a publish batch
_BIN_TYPES = frozenset((0xC4, 0xC5, 0xC6))
_UNPACK_ERRORS = (ValueError, msgpack.UnpackException, TypeError)


def encode_publish(topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None) -> bytes:
    """Encode a client publish frame (inputs already validated by the client)."""
    return packb([topic, payload, fmt, headers])  # type: ignore[no-any-return]


def encode_publish_batch(frames: list[bytes]) -> bytes:
    """Encode a publish batch from publish frames (each from :func:`encode_publish`)."""
    return packb(frames)  # type: ignore[no-any-return]


def publish_batch_elements(frame: bytes) -> list[Any] | None:
    """The elements of a publish batch (each should be a publish frame, ``bytes``), or
    None if ``frame`` is not a batch (then :func:`decode_publish` judges it)."""
    errors: Errors = []
    elements = publish_elements(frame, errors)
    if errors:
        raise ProtocolError(*errors[0])
    return None if len(elements) == 1 and elements[0] is frame else list(elements)


def decode_publish(frame: bytes) -> tuple[str, bytes, int, dict[str, Any] | None]:
    """Decode and type-check one publish frame. Topic rules are checked by the caller."""
    errors: Errors = []
    (value,) = check_publishes((frame,), errors, None)
    if value is None:
        raise ProtocolError(*errors[0])
    topic, payload, fmt, headers = value
    return topic, payload, fmt, headers


def publish_elements(raw: bytes, errors: Errors) -> list[Any] | tuple[bytes, ...]:
    """The publish frames in ``raw``: itself (a fixarray of 4 whose first element is not
    a bin: our client's single form, not decoded here), or a batch's elements."""
    try:
        single = raw[0] == 0x94 and raw[1] not in _BIN_TYPES
    except IndexError:
        single = True
    if single:
        return (raw,)
    try:
        outer = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except _UNPACK_ERRORS as exc:
        errors.append(("not_msgpack", str(exc)))
        return ()
    if type(outer) is list and outer and type(outer[0]) is bytes:
        return outer  # a publish batch: [publish frame: bin, ...]
    return (raw,)


def check_publishes(
    elements: list[Any] | tuple[bytes, ...], errors: Errors, valid: set[str] | None
) -> list[list[Any] | None]:
    """Decode publish frames: per element its ``[topic, payload, fmt, headers]``, or None
    (the reason in ``errors``). ``valid``: topics already checked (their rules are checked
    here and added); None: topic rules are the caller's."""
    unpackb = msgpack.unpackb
    values: list[list[Any] | None] = []
    for frame in elements:
        try:
            if type(frame) is not bytes:
                raise ProtocolError("bad_shape", "publish batch element must be bin")
            try:
                value = unpackb(frame, raw=False, strict_map_key=False)
            except msgpack.ExtraData:
                raise ProtocolError("not_msgpack", TRAILING) from None
            except _UNPACK_ERRORS as exc:
                raise ProtocolError("not_msgpack", str(exc)) from None
            if type(value) is not list or len(value) != 4:
                raise ProtocolError("bad_shape", "publish frame must be a 4-element array")
            topic, payload, fmt, headers = value
            if (
                type(topic) is not str
                or type(payload) is not bytes
                or (fmt != 0 and fmt != 1)
                or type(fmt) is not int
                or (
                    headers is not None
                    and (type(headers) is not dict or not all(type(k) is str for k in headers))
                )
            ):
                raise ProtocolError("bad_type", _type_detail(value))
            if valid is not None and topic not in valid:
                try:
                    validate_publish_topic(topic)
                except InvalidTopic as exc:
                    raise ProtocolError("bad_topic", str(exc)) from None
                if len(valid) >= TOPIC_CACHE_SIZE:
                    valid.clear()
                valid.add(topic)
        except ProtocolError as exc:
            errors.append((exc.reason, exc.detail))
            values.append(None)
            continue
        values.append(value)
    return values


def _type_detail(value: list[Any]) -> str:
    """What is wrong with a publish frame's fields (only for one that is wrong)."""
    topic, payload, fmt = value[:3]
    if type(topic) is not str:
        return "topic must be a string"
    if type(payload) is not bytes:
        return "payload must be bytes"
    if fmt not in FMTS or type(fmt) is not int:
        return f"unknown payload format {fmt!r}"
    return "headers must be a map with string keys"
