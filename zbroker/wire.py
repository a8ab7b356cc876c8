"""The wire protocol: every frame zbroker sends, and the codec between frames and values.

All frames are single ZeroMQ frames (one frame per message on the hot path: in pyzmq each
extra frame of a multipart message costs about as much as a message). Bodies are msgpack.
The codec touches no socket; every decoder raises :class:`~zbroker.errors.ProtocolError`
for anything malformed, with a short ``reason`` the node uses as a counter key.

Client publish (client PUSH → node PULL, ``PORT+1``)::

    [topic: str, payload: bytes, fmt: int, headers: map[str, any] | nil]

``fmt`` says what the payload bytes are: ``0`` raw bytes as the publisher gave them,
``1`` a msgpack-encoded object (the client API accepts any msgpack-able value).

Publish batch (same socket), several publishes in one frame::

    [frame: bin, frame: bin, ...]      each ``frame`` one publish frame as above

An array whose first element is a ``bin`` is a batch (a publish frame starts with its topic,
a ``str``). The node takes each element as if it had arrived alone (an element that is not
a ``bin`` is counted as ``bad_shape``), so a batch changes nothing but the per-frame cost.
A node announces in its HELLO reply (``publish_batch``: bytes) that it reads batches and how
large they may be; a client batches only publishes that come faster than
:data:`~zbroker.const.PUBLISH_LINGER` apart, so a lone publish still leaves at once.

Delivery (node XPUB → client SUB, ``PORT+2``)::

    pattern-utf8  NUL  msgpack([topic, payload, fmt, headers, origin, incarnation, seq, ts])
        pattern-seq (8 bytes, big-endian)

A delivery frame may also carry several messages of one pattern (a *delivery batch*)::

    pattern-utf8  NUL  msgpack([envelope, envelope, ...])  pattern-seq (8 bytes, big-endian)

where each ``envelope`` is the 8-element array above. A reader tells the two forms apart by
the first element of the decoded array: a topic (str) for one message, an array for a
batch. The node batches what one drain pass produced for a pattern (up to
:data:`DELIVERY_BATCH` messages or about :data:`DELIVERY_BATCH_BYTES` of payload), so a
subscriber pays one receive per batch under load, and a lone message still travels alone
at once (no timer: batching never delays a message).

The trailer numbers the node's sends on that pattern (1, 2, 3, ...): a subscriber whose
queue overflowed at the node (a slow consumer: the node's XPUB drops for that subscriber
only, never stalling the others) sees a gap, counts it and reports it to the node
(``GAPS``), which counts it in its status. Numbers count messages, not frames: a batch of
``k`` messages takes the numbers ``n - k + 1 .. n`` and carries ``n``, so a dropped batch
shows as a gap of exactly the messages it held.

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
                  ports: {control, publish, deliver}, publish_batch}``
STATUS     2      request ``{}``; reply: the node's status map
PING       3      request ``{}``; reply ``{}``
GAPS       13     one-way ``{pattern: missed, ...}``: deliveries a subscriber's queue dropped
ROUTES     4      request ``{pattern?: str}``; reply ``{routes: [{pattern, origin, path,
                  hops, link}]}``
PEERS      5      request ``{}``; reply ``{peers: [{id, found_by, state, endpoint, links}]}``
PUBLISH    6      request ``{topic, payload, fmt, headers}``: a persistent publish; the
                  reply ``{id: [origin, incarnation, seq], retained_seq}`` comes after the
                  node's store committed it
READ       7      request ``{pattern, start, end?, limit}``: the retention log range
                  ``start <= seq < end``; reply ``{rows: [[seq, topic, payload, fmt,
                  headers, origin, incarnation, origin_seq, ts]], first_seq, last_seq,
                  expired_upto, next}`` (at most ``limit`` rows and about 8 MB of topics
                  and payloads, from at most 20,000 rows examined, so a pattern-filtered
                  page may hold fewer rows, or none, and still not be the last;
                  ``next``: where to continue; ``expired_upto``:
                  the highest sequence a rule retaining ``pattern`` lost to its bounds).
                  With ``columns: true`` the reply has ``columns: [[seq...], [topic...],
                  ...]`` (the same nine fields, one array each) instead of ``rows``
DURABLE_OPEN 8    request ``{name, pattern, credit, max_msgs, max_bytes, max_age, overflow?}``:
                  create (if new; bounds: 0 = unbounded; overflow ``drop-oldest``
                  (default) or ``reject-new``) and attach
                  to a durable subscription; reply ``{name, pattern, stored, created}``
DURABLE_ACK 9     one-way ``{name, upto}``: messages with q <= upto are processed
DURABLE_CLOSE 10  one-way ``{name}``: detach (the subscription and its store remain)
DURABLE_DELETE 11 request ``{name}``: delete it and its stored messages; reply
                  ``{deleted}``
DELIVER    12     node to client, req_id 0: ``{name, q, redelivered, msg: [topic,
                  payload, fmt, headers, origin, incarnation, seq, ts]}``; at most
                  ``credit`` unacknowledged at a time
STAGE      14     request ``{token, part, group?, rows: [[topic, payload, fmt, headers], ...]}``:
                  hold chunk ``part`` (0, 1, ...) of a write task's rows under ``token``;
                  reply ``{token, rows}`` (rows held under it so far). Nothing is published.
STAGE_COMMIT 23   request ``{tokens: [[token, rows], ...], writer?, batch?, group?}``:
                  publish the rows of every token (all or none); a ``(writer, batch)``
                  applied before is not applied again. Reply after the store commit:
                  ``{applied: int, duplicate: bool}``. ``group``: then drop the group's
                  other tokens (attempts no commit names)
STAGE_ABORT 24    request ``{tokens: [token, ...], group?}``: drop their rows (and the
                  group's); reply ``{discarded}``
ERROR      15     reply ``{message: str}``
=========  =====  ===========================================================

Links (dialing node's DEALER → other node's ROUTER, ``PORT``; the DEALER's routing id is
``broker_id/link_name``). Every link frame is an array whose first element is its type;
types 16 and up, so the ROUTER tells them from control requests by the first element::

    LINK_HELLO    [16, {id, incarnation, group, version, name, duplex, ttl, conduit,
                        include, exclude, static, heartbeat_interval, heartbeat_timeout}]
    LINK_WELCOME  [17, {id, incarnation, group, version}]
    LINK_REFUSE   [18, {reason: str, retry: bool}]
    HEARTBEAT     [19]
    ADVERT        [20, full: bool, [[pattern, origin, path: [str] | nil, sticky?: true], ...]]
    MSGS          [21, [[topic, payload, fmt, headers, origin, incarnation, seq, ts,
                         path: [str], targets: [str] | nil], ...]]
    BYE           [22, {reason: str}]
    PMSGS         [25, epoch: int, base: int, [[lseq, topic, payload, fmt, headers, origin,
                         incarnation, seq, ts, path: [str], targets: [str] | nil, pseq], ...]]
    PACK          [26, epoch: int, upto: int]

``ADVERT`` carries interest entries (``path`` nil withdraws; ``full`` replaces the
receiver's table for this link). An entry with a fourth element ``true`` is *sticky*: it is
backed by a durable subscription, and a receiver keeps it (lowest preference) while the link
it came over is down, so persistent messages are still routed toward it and wait in a
link queue (see :mod:`zbroker.forward`).

``MSGS`` batches every message one drain pass found for the link into one frame (a ROUTER
adds an identity frame per send: amortize it), cut by count and by bytes so that no frame
passes what the next node accepts (see ``zbroker.const.LINK_BATCH_BYTES``). An ``ADVERT``
too long for one frame is sent as several: only the first says ``full``.

``PMSGS`` carries persistent messages store-and-forward: ``epoch`` names the sender's
outbound queue for this link (random, made with the queue), ``lseq`` numbers its entries
(1, 2, ... per queue; the receiver takes them strictly in order), ``base`` is the sender's
oldest entry still held (entries below it that the receiver lacks were dropped by the
queue's bounds: it stops waiting for them), ``pseq`` numbers the origin's persistent
messages (per incarnation; the receiver's persistent dedupe key). ``PACK`` is the
receiver's cumulative answer, sent after the commit that stored every entry up to ``upto``
of that epoch; the sender then deletes them.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import ProtocolError

__all__ = [
    "DELIVERY_BATCH",
    "DELIVERY_BATCH_BYTES",
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
    "decode_delivery_batch",
    "decode_publish",
    "encode_control",
    "encode_delivery_batch",
    "encode_delivery_body",
    "encode_publish",
    "encode_publish_batch",
    "publish_batch_elements",
]

FMT_BYTES = 0
FMT_MSGPACK = 1
_FMTS = (FMT_BYTES, FMT_MSGPACK)

HELLO = 1
STATUS = 2
PING = 3
ROUTES = 4
PEERS = 5
PUBLISH = 6
READ = 7
DURABLE_OPEN = 8
DURABLE_ACK = 9
DURABLE_CLOSE = 10
DURABLE_DELETE = 11
DELIVER = 12
GAPS = 13
STAGE = 14
ERROR = 15
STAGE_COMMIT = 23
STAGE_ABORT = 24
OPS = {
    HELLO: "HELLO",
    STATUS: "STATUS",
    PING: "PING",
    ROUTES: "ROUTES",
    PEERS: "PEERS",
    PUBLISH: "PUBLISH",
    READ: "READ",
    DURABLE_OPEN: "DURABLE_OPEN",
    DURABLE_ACK: "DURABLE_ACK",
    DURABLE_CLOSE: "DURABLE_CLOSE",
    DURABLE_DELETE: "DURABLE_DELETE",
    DELIVER: "DELIVER",
    GAPS: "GAPS",
    STAGE: "STAGE",
    STAGE_COMMIT: "STAGE_COMMIT",
    STAGE_ABORT: "STAGE_ABORT",
    ERROR: "ERROR",
}

LINK_HELLO = 16
LINK_WELCOME = 17
LINK_REFUSE = 18
HEARTBEAT = 19
ADVERT = 20
MSGS = 21
BYE = 22
# 23 and 24 are control ops (STAGE_COMMIT, STAGE_ABORT): link types continue at 25
PMSGS = 25
PACK = 26
LINK_TYPES = frozenset(
    {LINK_HELLO, LINK_WELCOME, LINK_REFUSE, HEARTBEAT, ADVERT, MSGS, BYE, PMSGS, PACK}
)

#: messages per delivery batch frame at most (see "Delivery" above)
DELIVERY_BATCH = 256
#: payload bytes after which a delivery batch is cut (a frame stays well below a MB or so
#: unless one message alone is larger)
DELIVERY_BATCH_BYTES = 64 * 1024

#: First byte of a subscription-sync key. Not a valid pattern character, so it never
#: collides with a real subscription.
SYNC_PREFIX = b"\x02"

_packb = msgpack.packb
_unpackb = msgpack.unpackb
_ExtraData = msgpack.ExtraData
_UnpackErrors = (ValueError, msgpack.UnpackException, TypeError)


def _unpack(frame: bytes) -> Any:
    try:
        # strict_map_key=False: header values may hold maps with non-string keys; the
        # decoders check the keys that must be strings (header names) themselves.
        return _unpackb(frame, raw=False, strict_map_key=False)
    except _ExtraData as exc:
        raise ProtocolError("not_msgpack", "trailing bytes after the msgpack value") from exc
    except _UnpackErrors as exc:
        raise ProtocolError("not_msgpack", str(exc)) from exc


def encode_publish(topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None) -> bytes:
    """Encode a client publish frame (inputs already validated by the client)."""
    return _packb([topic, payload, fmt, headers])  # type: ignore[no-any-return]


def encode_publish_batch(frames: list[bytes]) -> bytes:
    """Encode a publish batch from publish frames (each from :func:`encode_publish`)."""
    return _packb(frames)  # type: ignore[no-any-return]


def publish_batch_elements(frame: bytes) -> list[Any] | None:
    """The elements of a publish batch (each should be a publish frame, ``bytes``), or
    None if ``frame`` is not a batch (then :func:`decode_publish` judges it)."""
    value = _unpack(frame)
    if type(value) is list and value and type(value[0]) is bytes:
        return value
    return None


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


def array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` elements (what precedes them)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_delivery_batch(bodies: list[bytes]) -> bytes:
    """The msgpack part of a delivery batch from envelopes already encoded with
    :func:`encode_delivery_body` (a concatenation: nothing is re-encoded)."""
    return array_header(len(bodies)) + b"".join(bodies)


def decode_delivery_batch(frame: bytes) -> tuple[str, int, list[list[Any]]]:
    """A whole delivery frame of either form: (pattern, pattern sequence of its *first*
    message, the envelopes it holds). Each envelope is an 8-element array."""
    if len(frame) < 10:
        raise ProtocolError("bad_shape", "delivery frame too short")
    last = int.from_bytes(frame[-8:], "big")
    nul = frame.find(b"\0")
    if nul <= 0:
        raise ProtocolError("bad_shape", "delivery frame has no pattern prefix")
    try:
        pattern = frame[:nul].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad_type", "pattern is not UTF-8") from exc
    value = _unpack(frame[nul + 1 : -8])
    if type(value) is not list or not value:
        raise ProtocolError("bad_shape", "delivery body must be a non-empty array")
    envelopes = value if type(value[0]) is list else [value]
    for fields in envelopes:
        if type(fields) is not list or len(fields) != 8:
            raise ProtocolError("bad_shape", "delivery envelope must be an 8-element array")
    return pattern, last - len(envelopes) + 1, envelopes


def decode_delivery_frame(frame: bytes) -> tuple[str, int, list[Any]]:
    """A whole delivery frame: (pattern, pattern sequence, envelope fields)."""
    if len(frame) < 10:
        raise ProtocolError("bad_shape", "delivery frame too short")
    pattern, fields = decode_delivery(frame[:-8])
    return pattern, int.from_bytes(frame[-8:], "big"), fields


def decode_delivery(frame: bytes) -> tuple[str, list[Any]]:
    """Split ``pattern NUL envelope`` (a delivery frame without its sequence trailer)
    into its pattern and the decoded envelope fields."""
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


# -- links ------------------------------------------------------------------------------


def encode_link(*parts: Any) -> bytes:
    """Encode a link frame ``[type, ...]``."""
    return _packb(list(parts))  # type: ignore[no-any-return]


def decode_frame(frame: bytes) -> list[Any]:
    """Decode any ROUTER/DEALER body into its array; the first element is an int type."""
    value = _unpack(frame)
    if type(value) is not list or not value or type(value[0]) is not int:
        raise ProtocolError("bad_shape", "frame must be an array starting with its type")
    return value


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if type(value) is not list or not all(type(v) is str for v in value):
        raise ProtocolError("bad_type", f"{what} must be an array of strings")
    return tuple(value)


def check_link_map(value: list[Any], size: int = 2) -> dict[str, Any]:
    """``[type, {map}]`` frames (HELLO, WELCOME, REFUSE, BYE): return the map."""
    if len(value) != size or type(value[1]) is not dict:
        raise ProtocolError("bad_shape", "link frame must be [type, map]")
    result: dict[str, Any] = value[1]
    return result


def decode_advert(
    value: list[Any],
) -> tuple[bool, tuple[tuple[str, str, tuple[str, ...] | None], ...]]:
    """Check an ADVERT frame's array; return (full, entries). Patterns are checked by the
    caller (the node validates them with :mod:`zbroker.topics`)."""
    full, entries, _ = decode_advert_sticky(value)
    return full, entries


def decode_advert_sticky(
    value: list[Any],
) -> tuple[bool, tuple[tuple[str, str, tuple[str, ...] | None], ...], frozenset[tuple[str, str]]]:
    """Like :func:`decode_advert`, plus the keys ``(pattern, origin)`` flagged sticky."""
    if len(value) != 3 or type(value[1]) is not bool or type(value[2]) is not list:
        raise ProtocolError("bad_shape", "ADVERT must be [20, full, entries]")
    entries = []
    sticky = set()
    for e in value[2]:
        if (
            type(e) is not list
            or not 3 <= len(e) <= 4
            or type(e[0]) is not str
            or type(e[1]) is not str
        ):
            raise ProtocolError("bad_type", "ADVERT entry must be [pattern, origin, path]")
        path = None if e[2] is None else _str_list(e[2], "ADVERT path")
        if len(e) == 4:
            if type(e[3]) is not bool:
                raise ProtocolError("bad_type", "ADVERT sticky flag must be a boolean")
            if e[3] and path is not None:
                sticky.add((e[0], e[1]))
        entries.append((e[0], e[1], path))
    return value[1], tuple(entries), frozenset(sticky)


def encode_pmsgs(epoch: int, base: int, entries: list[bytes]) -> bytes:
    """A PMSGS frame from entries already msgpack-encoded (each is encoded once, when it is
    queued, and kept in that form in memory and in the store)."""
    n = len(entries)
    if n < 16:
        header = bytes((0x90 | n,))
    elif n < 1 << 16:
        header = b"\xdc" + n.to_bytes(2, "big")
    else:
        header = b"\xdd" + n.to_bytes(4, "big")
    head: bytes = _packb(PMSGS) + _packb(epoch) + _packb(base)
    return b"\x94" + head + header + b"".join(entries)


def decode_pmsgs(value: list[Any]) -> tuple[int, int, list[Any]]:
    """Check a PMSGS frame's array; return (epoch, base, entries). Entries are checked one
    by one with :func:`check_pmsgs_entry` (a bad one is skipped, the rest are taken)."""
    if (
        len(value) != 4
        or type(value[1]) is not int
        or type(value[2]) is not int
        or type(value[3]) is not list
    ):
        raise ProtocolError("bad_shape", "PMSGS must be [25, epoch, base, entries]")
    if not 0 <= value[1] < 1 << 63 or not 1 <= value[2] < 1 << 63:
        raise ProtocolError("bad_value", "PMSGS epoch or base out of range")
    return value[1], value[2], value[3]


def check_pmsgs_entry(m: Any) -> int:
    """Type-check one PMSGS entry; return its lseq (raises ProtocolError). The lseq is
    checked first and alone, so a receiver can still account for an entry whose other
    fields are bad (see :func:`pmsgs_lseq`)."""
    lseq = pmsgs_lseq(m)
    check_link_msg(m[1:11])
    pseq = m[11]
    if type(pseq) is not int or not 0 <= pseq < 1 << 63:
        raise ProtocolError("bad_type", "PMSGS pseq must be a non-negative integer")
    return lseq


def pmsgs_lseq(m: Any) -> int:
    """The link sequence of a PMSGS entry (raises ProtocolError if it has none)."""
    if type(m) is not list or len(m) != 12:
        raise ProtocolError("bad_shape", "PMSGS entry must be a 12-element array")
    lseq = m[0]
    if type(lseq) is not int or not 1 <= lseq < 1 << 63:
        raise ProtocolError("bad_type", "PMSGS lseq must be a positive integer")
    return lseq


def decode_pack(value: list[Any]) -> tuple[int, int]:
    """Check a PACK frame's array; return (epoch, upto)."""
    if (
        len(value) != 3
        or type(value[1]) is not int
        or type(value[2]) is not int
        or not 0 <= value[1] < 1 << 63
        or not 0 <= value[2] < 1 << 63
    ):
        raise ProtocolError("bad_shape", "PACK must be [26, epoch, upto] (non-negative ints)")
    return value[1], value[2]


def check_link_msg(m: Any) -> None:
    """Type-check one message of a MSGS batch (raises ProtocolError)."""
    if type(m) is not list or len(m) != 10:
        raise ProtocolError("bad_shape", "MSGS entry must be a 10-element array")
    topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
    if (
        type(topic) is not str
        or type(payload) is not bytes
        or type(fmt) is not int
        or fmt not in _FMTS
        or (headers is not None and type(headers) is not dict)
        or type(origin) is not str
        or type(inc) is not int
        or type(seq) is not int
        or type(ts) not in (float, int)
        or type(path) is not list
        or (targets is not None and type(targets) is not list)
    ):
        raise ProtocolError("bad_type", "MSGS entry has wrong field types")
