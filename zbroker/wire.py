"""The wire protocol: every frame zbroker sends, and the codec between frames and values.

All frames are single ZeroMQ frames (one frame per message on the hot path: in pyzmq each
extra frame of a multipart message costs about as much as a message). Bodies are msgpack.
The codec touches no socket; every decoder raises :class:`~zbroker.errors.ProtocolError`
for anything malformed, with a short ``reason`` the node uses as a counter key.

Client publish (client PUSH → node PULL, ``PORT+1``)::

    [topic: str, payload: bytes, fmt: int, headers: map[str, any] | nil]

``fmt`` says what the payload bytes are: ``0`` raw bytes as the publisher gave them,
``1`` a msgpack-encoded object (the client API accepts any msgpack-able value).

Delivery (node XPUB → client SUB, ``PORT+2``)::

    pattern-utf8  NUL  msgpack([topic, payload, fmt, headers, origin, incarnation, seq, ts])

The frame begins with the subscription pattern it is delivered for and a NUL byte (which no
pattern contains); clients subscribe to ``pattern + NUL``, so ZeroMQ's prefix filter becomes
an exact match and a client with two overlapping patterns receives one copy per pattern.
``(origin, incarnation, seq)`` is the message ID the origin node assigned; ``ts`` is the
origin node's receive time (float seconds since the epoch).

Subscription sync (client SUB → node XPUB): besides ``pattern + NUL`` a client subscribes to
``SYNC_PREFIX + token``. Subscriptions travel one connection in order, so when the node sees
the sync key every subscription sent before it is active; the node answers by publishing a
frame equal to the key, which only that client receives.

Control (client or peer DEALER → node ROUTER, ``PORT``)::

    request  [op: int, req_id: int, body: map]
    reply    [op: int, req_id: int, body: map]     (op = request op, or ERROR)

=========  =====  ===========================================================
op         value  body
=========  =====  ===========================================================
HELLO      1      request ``{}``; reply ``{broker_id, incarnation, version, endpoints,
                  ports: {control, publish, deliver}}``
STATUS     2      request ``{}``; reply: the node's status map
PING       3      request ``{}``; reply ``{}``
ERROR      15     reply ``{message: str}``
=========  =====  ===========================================================
"""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import ProtocolError

__all__ = [
    "ERROR",
    "FMT_BYTES",
    "FMT_MSGPACK",
    "HELLO",
    "OPS",
    "PING",
    "STATUS",
    "SYNC_PREFIX",
    "decode_control",
    "decode_delivery",
    "decode_publish",
    "encode_control",
    "encode_delivery_body",
    "encode_publish",
]

FMT_BYTES = 0
FMT_MSGPACK = 1
_FMTS = (FMT_BYTES, FMT_MSGPACK)

HELLO = 1
STATUS = 2
PING = 3
ERROR = 15
OPS = {HELLO: "HELLO", STATUS: "STATUS", PING: "PING", ERROR: "ERROR"}

#: First byte of a subscription-sync key. Not a valid pattern character, so it never
#: collides with a real subscription.
SYNC_PREFIX = b"\x02"

_packb = msgpack.packb
_unpackb = msgpack.unpackb
_ExtraData = msgpack.ExtraData
_UnpackErrors = (ValueError, msgpack.UnpackException, TypeError)


def _unpack(frame: bytes) -> Any:
    try:
        return _unpackb(frame, raw=False, strict_map_key=True)
    except _ExtraData as exc:
        raise ProtocolError("not_msgpack", "trailing bytes after the msgpack value") from exc
    except _UnpackErrors as exc:
        raise ProtocolError("not_msgpack", str(exc)) from exc


def encode_publish(topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None) -> bytes:
    """Encode a client publish frame (inputs already validated by the client)."""
    return _packb([topic, payload, fmt, headers])  # type: ignore[no-any-return]


def decode_publish(frame: bytes) -> tuple[str, bytes, int, dict[str, Any] | None]:
    """Decode and type-check a publish frame. Topic rules are checked by the caller."""
    value = _unpack(frame)
    if type(value) is not list or len(value) != 4:
        raise ProtocolError("bad_shape", "publish frame must be a 4-element array")
    topic, payload, fmt, headers = value
    if type(topic) is not str:
        raise ProtocolError("bad_type", "topic must be a string")
    if type(payload) is not bytes:
        raise ProtocolError("bad_type", "payload must be bytes")
    if fmt not in _FMTS or type(fmt) is not int:
        raise ProtocolError("bad_type", f"unknown payload format {fmt!r}")
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        raise ProtocolError("bad_type", "headers must be a map with string keys")
    return topic, payload, fmt, headers


def encode_delivery_body(
    topic: str,
    payload: bytes,
    fmt: int,
    headers: dict[str, Any] | None,
    origin: str,
    incarnation: int,
    seq: int,
    ts: float,
) -> bytes:
    """Encode the part of a delivery frame after ``pattern NUL`` (once per message)."""
    return _packb(  # type: ignore[no-any-return]
        [topic, payload, fmt, headers, origin, incarnation, seq, ts]
    )


def decode_delivery(frame: bytes) -> tuple[str, list[Any]]:
    """Split a delivery frame into its pattern and the decoded envelope fields."""
    nul = frame.find(b"\0")
    if nul <= 0:
        raise ProtocolError("bad_shape", "delivery frame has no pattern prefix")
    try:
        pattern = frame[:nul].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad_type", "pattern is not UTF-8") from exc
    fields = _unpack(frame[nul + 1 :])
    if type(fields) is not list or len(fields) != 8:
        raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array")
    return pattern, fields


def encode_control(op: int, req_id: int, body: dict[str, Any]) -> bytes:
    """Encode a control request or reply."""
    return _packb([op, req_id, body])  # type: ignore[no-any-return]


def decode_control(frame: bytes) -> tuple[int, int, dict[str, Any]]:
    """Decode a control request or reply; unknown ops are the caller's to refuse."""
    value = _unpack(frame)
    if type(value) is not list or len(value) != 3:
        raise ProtocolError("bad_shape", "control frame must be a 3-element array")
    op, req_id, body = value
    if type(op) is not int or type(req_id) is not int:
        raise ProtocolError("bad_type", "control op and request id must be integers")
    if type(body) is not dict:
        raise ProtocolError("bad_type", "control body must be a map")
    return op, req_id, body
