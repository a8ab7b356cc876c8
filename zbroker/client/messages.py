"""The client's message types: what a subscriber receives and holds.

:class:`Message` (one delivered message), :class:`MessageId` (the ID its origin node
assigned) and :class:`Subscription` (a handle that ends one subscription), plus the two
conversions between user values and the wire: :func:`encode_payload` (a publisher's
payload to bytes and format) and :func:`message_from_fields` (a delivery envelope to a
Message, with its field checks: the one place that rule lives).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from .. import _cython as cython  # (typed: Cython's own module has no stubs)
else:
    try:
        import cython  # compiled: the compiler's; from the sources: Cython's no-ops
    except ImportError:  # the sources without Cython installed
        from .. import _cython as cython

from .. import wire
from ..errors import PayloadError, ProtocolError

__all__ = [
    "Gap",
    "Message",
    "MessageId",
    "Subscription",
    "encode_payload",
    "message_from_fields",
    "messages_from_envelopes",
    "messages_from_runs",
]

_FMT_BYTES = wire.FMT_BYTES
_FMT_MSGPACK = wire.FMT_MSGPACK


def encode_payload(payload: Any) -> tuple[bytes, int]:
    """(payload bytes, fmt): bytes-like as they are, anything else msgpack-encoded."""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload), wire.FMT_BYTES
    try:
        return wire.packb(payload), wire.FMT_MSGPACK
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"payload cannot be encoded with msgpack: {exc}") from exc


@dataclass(frozen=True, slots=True)
class MessageId:
    """The ID the origin node assigned: ``(origin broker, its incarnation, sequence)``."""

    origin: str
    incarnation: int
    seq: int

    def __str__(self) -> str:
        return f"{self.origin}:{self.incarnation}:{self.seq}"


@cython.no_gc
@cython.cclass
class Message:
    """A delivered message (treat as read-only).

    ``payload`` is what the publisher passed: ``bytes``, or the decoded value when the
    publisher sent an object (``payload_type`` says which: ``"bytes"`` or ``"msgpack"``).
    ``raw`` is the payload as it crossed the wire. ``pattern`` is the subscription it was
    delivered for. ``id`` is the :class:`MessageId` the origin node assigned.

    A plain slotted class rather than a frozen dataclass: one is built per delivery, and a
    frozen dataclass's ``__init__`` costs about 1.5 us more per message. Compiled, it is an
    extension type the cyclic garbage collector does not track (``messages.pxd``): a
    tracked object per delivery made a flooded subscriber run the collector every few
    hundred messages. It holds only its fields, which never refer back to it (a cycle a
    caller makes through one, a header holding the message, is never collected).

    A stateful topic's update carries ``version`` (and ``removed`` for a removal); a
    value from a snapshot or a fetch is ``initial`` (see :mod:`zbroker.stateful`).
    """

    initial = False  # (a class attribute: InitialMessage says True; no per-message cost)

    __slots__ = (
        "_headers",
        "incarnation",
        "log_seq",
        "origin",
        "pattern",
        "payload",
        "payload_type",
        "raw",
        "redelivered",
        "seq",
        "timestamp",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        payload: Any,
        payload_type: str,
        headers: dict[str, Any] | None,
        origin: str,
        incarnation: int,
        seq: int,
        timestamp: float,
        pattern: str,
        raw: bytes,
        log_seq: int | None = None,
        redelivered: bool = False,
    ) -> None:
        self.log_seq = log_seq  # retention-log sequence (messages from Client.read)
        # a durable subscription's message sent before and not acknowledged (the
        # subscriber may have seen it)
        self.redelivered = redelivered
        self.topic = topic
        self.payload = payload
        self.payload_type = payload_type
        self._headers = headers  # (None or empty: a dict made when first asked for)
        self.origin = origin
        self.incarnation = incarnation
        self.seq = seq
        self.timestamp = timestamp
        self.pattern = pattern
        self.raw = raw

    @property
    def headers(self) -> dict[str, Any]:
        """The publisher's headers (a dict; empty when it sent none). Made when first
        read for a message that came without any: a dict per delivery, read or not, made
        a flooded subscriber run the garbage collector (each is a tracked allocation)."""
        h = self._headers
        if not h:
            h = self._headers = {}
        return h

    @headers.setter
    def headers(self, value: dict[str, Any]) -> None:
        self._headers = value

    @property
    def id(self) -> MessageId:
        return MessageId(self.origin, self.incarnation, self.seq)

    @property
    def version(self) -> int | None:
        """A stateful topic's version (None: a plain message)."""
        h = self._headers
        v = h.get("zb.version") if h else None
        return v if type(v) is int else None

    @property
    def removed(self) -> bool:
        """A stateful topic's removal."""
        h = self._headers
        return bool(h.get("zb.removed")) if h else False

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, payload={self.payload!r}, "
            f"payload_type={self.payload_type!r}, headers={self.headers!r}, id={self.id}, "
            f"timestamp={self.timestamp!r}, pattern={self.pattern!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in _FIELDS)

    __hash__ = None  # type: ignore[assignment]


#: Message's fields as a reader sees them (``__eq__`` compares these: ``self.__slots__``
#: is ``()`` on a subclass such as InitialMessage)
_FIELDS = tuple(name.lstrip("_") for name in Message.__slots__)


def message_from_fields(pattern: str, fields: list[Any], cls: type[Message] = Message) -> Message:
    """Build a Message (or ``cls``, a subclass) from a delivery envelope's fields
    ``[topic, payload, fmt, headers, origin, incarnation, seq, ts]`` (raises
    ProtocolError). Called once per message."""
    try:
        topic, raw, fmt, headers, origin, inc, seq, ts = fields
    except (TypeError, ValueError) as exc:
        raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array") from exc
    if type(topic) is not str or type(raw) is not bytes:
        raise ProtocolError("bad_type", "delivery envelope has wrong field types")
    if fmt == _FMT_BYTES:  # the common case first, against module constants
        return cls(topic, raw, "bytes", headers, origin, inc, seq, ts, pattern, raw)
    if fmt != _FMT_MSGPACK:
        raise ProtocolError("bad_type", f"unknown payload format {fmt!r}")
    try:
        payload = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:  # (TypeError: a map key
        # Python cannot hash, such as an array)
        raise ProtocolError("not_msgpack", "payload marked msgpack does not decode") from exc
    return cls(topic, payload, "msgpack", headers, origin, inc, seq, ts, pattern, raw)


def messages_from_envelopes(pattern: str, envelopes: list[list[Any]]) -> list[Message]:
    """Messages from a delivery frame's envelopes, each an 8-element array (the frame's
    decoder checked the lengths); raises ProtocolError as :func:`message_from_fields`.

    A bytes payload with a string topic (what a flood is made of) is built inline, one
    call per message fewer; anything else goes through :func:`message_from_fields`."""
    return [
        Message(topic, raw, "bytes", headers, origin, inc, seq, ts, pattern, raw)
        if fmt == _FMT_BYTES and type(topic) is str and type(raw) is bytes
        else message_from_fields(pattern, [topic, raw, fmt, headers, origin, inc, seq, ts])
        for topic, raw, fmt, headers, origin, inc, seq, ts in envelopes
    ]


def messages_from_runs(pattern: str, runs: list[list[Any]]) -> list[Message]:
    """Messages from a delivery frame's runs ``[topic, origin, incarnation, entries]``,
    each entry ``[payload, fmt, headers, seq, ts]`` (the frame's decoder checked the
    lengths): what :func:`messages_from_envelopes` gives for the same messages spelled
    out, built without spelling them out."""
    return [
        Message(topic, raw, "bytes", headers, origin, inc, seq, ts, pattern, raw)
        if fmt == _FMT_BYTES and type(topic) is str and type(raw) is bytes
        else message_from_fields(pattern, [topic, raw, fmt, headers, origin, inc, seq, ts])
        for topic, origin, inc, entries in runs
        for raw, fmt, headers, seq, ts in entries
    ]


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages of a subscription may be missing: a link died upstream (at ``node``, its
    link ``link`` to ``peer``, for ``reason``). Non-persistent messages in flight on it
    may be lost; how many, neither end can tell."""

    node: str
    link: str
    peer: str
    reason: str


class Subscription:
    """A handle on one subscription; ``unsubscribe()`` ends it (idempotent).

    ``on_gap``: called (in the client's thread, like the callback) with a :class:`Gap`
    when a link upstream died and messages of this subscription may be missing; ``gaps``
    counts those notices. ``snapshot`` is set once its snapshot of stateful topics was
    delivered."""

    __slots__ = (
        "_active", "_end", "callback", "durable", "gaps", "on_gap", "pattern", "selector",
        "snapshot",
    )  # fmt: skip

    def __init__(
        self,
        end: Callable[[Subscription], None],
        pattern: str,
        callback: Callable[[Message], Any],
    ) -> None:
        self._end = end  # the client part that holds it (subscriptions or durables)
        self.pattern = pattern
        self.callback = callback
        self.durable: str | None = None
        self.on_gap: Callable[[Gap], Any] | None = None
        self.gaps = 0
        self.selector: str | None = None  # canonical text, for a subscription with one
        self.snapshot = threading.Event()
        self._active = True

    @property
    def active(self) -> bool:
        return self._active

    def unsubscribe(self) -> None:
        if self._active:
            self._active = False
            self._end(self)

    def __repr__(self) -> str:
        sel = f" selector {self.selector!r}" if self.selector is not None else ""
        return f"<Subscription {self.pattern!r}{sel}{'' if self._active else ' (ended)'}>"
