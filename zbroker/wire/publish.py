"""Client publish frames: one publish, a publish batch, and their checks.

A client PUSHes them to the node's PULL socket (``PORT+1``); see :mod:`.frames` for the
layout. The node checks topic rules itself; this module checks shape and types.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import packb, unpack
from .frames import FMTS


def encode_publish(topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None) -> bytes:
    """Encode a client publish frame (inputs already validated by the client)."""
    return packb([topic, payload, fmt, headers])  # type: ignore[no-any-return]


def encode_publish_batch(frames: list[bytes]) -> bytes:
    """Encode a publish batch from publish frames (each from :func:`encode_publish`)."""
    return packb(frames)  # type: ignore[no-any-return]


def publish_batch_elements(frame: bytes) -> list[Any] | None:
    """The elements of a publish batch (each should be a publish frame, ``bytes``), or
    None if ``frame`` is not a batch (then :func:`decode_publish` judges it)."""
    value = unpack(frame)
    if type(value) is list and value and type(value[0]) is bytes:
        return value
    return None


def decode_publish(frame: bytes) -> tuple[str, bytes, int, dict[str, Any] | None]:
    """Decode and type-check a publish frame. Topic rules are checked by the caller."""
    value = unpack(frame)
    if type(value) is not list or len(value) != 4:
        raise ProtocolError("bad_shape", "publish frame must be a 4-element array")
    topic, payload, fmt, headers = value
    if type(topic) is not str:
        raise ProtocolError("bad_type", "topic must be a string")
    if type(payload) is not bytes:
        raise ProtocolError("bad_type", "payload must be bytes")
    if fmt not in FMTS or type(fmt) is not int:
        raise ProtocolError("bad_type", f"unknown payload format {fmt!r}")
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        raise ProtocolError("bad_type", "headers must be a map with string keys")
    return topic, payload, fmt, headers
