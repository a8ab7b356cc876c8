"""The permission filter on the publish PULL: a ``recv`` that drops (and counts) the
frames whose sender may not publish to their topic.

The node's publish handler uses it in place of ``sock.recv`` when security is on, so the
plain-mode hot path is untouched. Per frame it costs one dict lookup in the usual case: a
decision is cached per (user, topic bytes as framed), and the topic is peeked from the
usual encoding (fixarray(4), then the topic as fixstr or str8) without decoding the frame.
A publish batch is checked element by element, a batch of runs (client protocol 3) run by
run: what the sender may not publish is cut out, each message of it counted.
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
#: msgpack array headers: where the first element of an array starts, by its first byte
_FIRST = {**{b: 1 for b in range(0x90, 0xA0)}, 0xDC: 3, 0xDD: 5}


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
            if _is_runs(data):  # a batch of runs
                kept = _runs_allowed(data, user, may_publish, refuse)
                if kept is not None:
                    return kept
                continue
            ok = allowed(user, data)
            if ok:
                return data
            if ok is False:
                continue
            batch = _publish_batch(data)
            if batch is None:
                return data  # malformed: the publish handler rejects and counts it
            # a publish batch: every bin element is checked; refused ones are dropped
            # (one that is not a bin stays, after the bins, for the publish handler to
            # count as bad_shape: a batch must start with a bin to be read as one)
            keep = [e for e in batch if type(e) is bytes and allowed(user, e) is not False]
            if len(keep) == len(batch):
                return data
            if keep:
                return bytes(msgpack.packb(keep + [e for e in batch if type(e) is not bytes]))

    return secure_recv


def _is_runs(data: bytes) -> bool:
    """Whether ``data`` is an array whose first element is an array: what the publish
    handler takes for a batch of runs (whatever the arrays' sizes)."""
    at = _FIRST.get(data[0]) if data else None
    return at is not None and len(data) > at and data[at] in _FIRST


def _runs_allowed(
    data: bytes,
    user: str,
    may_publish: Callable[[str, str], bool],
    refuse: Callable[[str, str, str], str],
) -> bytes | None:
    """A batch of runs without the runs ``user`` may not publish (each of their messages
    counted through ``refuse``); None if none is left. A malformed frame or run is left
    for the publish handler, which rejects and counts it."""
    try:
        runs = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return data
    if type(runs) is not list:
        return data
    keep = []
    for run in runs:
        if type(run) is list and len(run) == 2 and type(run[0]) is str:
            topic = run[0]
            if not may_publish(user, topic):
                for _ in range(len(run[1]) if type(run[1]) is list and run[1] else 1):
                    refuse("publish to", user, topic)
                continue
        keep.append(run)
    if len(keep) == len(runs):
        return data
    return bytes(msgpack.packb(keep)) if keep else None


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


def _publish_batch(frame: bytes) -> list[object] | None:
    """The elements of a publish batch frame (``[publish frame: bin, ...]``), or None:
    an array whose first element is a bin, as the publish handler tells one (which takes
    every bin element of it, whatever the other elements are)."""
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(value) is list and value and type(value[0]) is bytes:
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
