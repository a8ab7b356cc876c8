"""The permission filter on the publish PULL: a ``recv`` that drops (and counts) the
frames whose sender may not publish to their topic.

The node's publish handler uses it in place of ``sock.recv`` when security is on, so the
plain-mode hot path is untouched. Per frame it costs one dict lookup in the usual case: a
decision is cached per (user, topic bytes as framed), and the topic is peeked from the
usual encoding (fixarray(4), then the topic as fixstr or str8) without decoding the frame.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack
import zmq
import zmq.backend

from .logs import CACHE_MAX

__all__ = ["publish_recv"]

#: may this user publish this publish frame? None: not a publish frame
Check = Callable[[str, bytes], "bool | None"]


def publish_recv(
    sock: zmq.Socket[bytes],
    may_publish: Callable[[str, str], bool],
    refuse: Callable[[str, str, str], str],
) -> Callable[[int], bytes]:
    """A ``recv(flags)`` for the publish PULL that drops (and counts, through ``refuse``)
    frames whose sender may not publish to their topic, and returns the others as bytes.
    Each element of a publish batch is checked; the refused ones are cut out of it."""
    recv = zmq.backend.Socket.recv.__get__(sock)  # skips pyzmq's Python wrapper
    allowed = _frame_check(may_publish, refuse)

    def secure_recv(flags: int) -> bytes:
        while True:
            frame = recv(flags, False)
            data: bytes = frame.bytes
            try:
                user = str(frame.get("User-Id"))
            except zmq.ZMQError:
                user = ""
            ok = allowed(user, data)
            if ok:
                return data
            if ok is False:
                continue
            batch = _publish_batch(data)
            if batch is None:
                return data  # malformed: the publish handler rejects and counts it
            # a publish batch: every element is checked; refused ones are dropped
            keep = [e for e in batch if allowed(user, e) is not False]
            if len(keep) == len(batch):
                return data
            if keep:
                return bytes(msgpack.packb(keep))

    return secure_recv


def _frame_check(
    may_publish: Callable[[str, str], bool], refuse: Callable[[str, str, str], str]
) -> Check:
    """The per-frame check of :func:`publish_recv`, with its cache of decisions."""
    # user -> {topic bytes as framed: allowed?}: one dict lookup per message
    decided: dict[str, dict[bytes, bool]] = {}

    def allowed(user: str, data: bytes) -> bool | None:
        """May ``user`` publish this publish frame? None: not a publish frame."""
        # the usual frame: fixarray(4), then the topic as fixstr or str8
        key = None
        if len(data) > 2 and data[0] == 0x94:
            b = data[1]
            if 0xA0 <= b <= 0xBF:
                key = data[2 : 2 + b - 0xA0]
            elif b == 0xD9:
                key = data[3 : 3 + data[2]]
        known = decided.get(user)
        if known is None:
            if len(decided) >= CACHE_MAX:
                decided.clear()
            known = decided[user] = {}
        ok = known.get(key) if key is not None else None
        if ok is None:
            topic = _publish_topic(data)
            if topic is None:
                return None
            ok = may_publish(user, topic)
            if key is not None:
                if len(known) >= CACHE_MAX:
                    known.clear()
                known[key] = ok
            if not ok:
                refuse("publish to", user, topic)
        elif not ok:
            refuse("publish to", user, key.decode("utf-8", "replace") if key else "?")
        return ok

    return allowed


def _publish_batch(frame: bytes) -> list[bytes] | None:
    """The elements of a publish batch frame (``[publish frame: bin, ...]``), or None."""
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(value) is list and value and all(type(e) is bytes for e in value):
        return value
    return None


def _publish_topic(frame: bytes) -> str | None:
    """The topic of a publish frame, or None when it is not a well-formed one (cheap
    path for the usual encoding: fixarray(4) then a str8/fixstr topic)."""
    if len(frame) > 2 and frame[0] == 0x94:
        b = frame[1]
        if 0xA0 <= b <= 0xBF:
            n = b - 0xA0
            raw = frame[2 : 2 + n]
        elif b == 0xD9:
            n = frame[2]
            raw = frame[3 : 3 + n]
        else:
            raw = None
        if raw is not None and len(raw) == n:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(value) is list and value and type(value[0]) is str:
        return str(value[0])
    return None
