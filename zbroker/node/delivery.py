"""Delivery to subscribers: the XPUB socket, its subscriptions, and batch frames.

A delivery frame is ``pattern NUL body seq8``: ``body`` one msgpack envelope, an array
of them (a batch), or an array of runs (publishes and what links brought: a run's topic,
origin and incarnation once, then its entries as the publish or link frame had them), and
``seq8`` the pattern's running message count, by which a subscriber sees (and reports,
GAPS) what its full queue lost. What one pipeline batch produced for a pattern leaves as
frames of up to ``wire.DELIVERY_BATCH`` messages or about ``wire.DELIVERY_BATCH_BYTES``
(a run relayed whole with its entries' bytes goes whole: up to what its link frame held).
Subscribers subscribe to ``pattern NUL``, so ZeroMQ's prefix filter is exact match; a sync key
(``\\x02token``) is echoed once what came before it on that connection is in effect
(``subscribe()`` returns then).

The XPUB reports a pattern's first subscriber and its last unsubscribe: that is local
interest ``clients`` on and off. With security on it is in manual mode and each
subscription is approved by the sender's permissions (:mod:`.secure_subs`).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

import zmq
import zmq.backend

from .. import wire
from ..errors import InvalidTopic, ReservedTopic
from ..topics import validate_subscription
from ..wire.gaps import gap_notice
from .counters import Counters
from .events import NodeEvent, SlowSubscriber
from .interest import LocalInterest
from .selected import Selected, split_name

__all__ = ["Delivery", "raw_send"]

log = logging.getLogger("zbroker.node")

#: the per-pattern sequence trailer of a delivery frame
U64 = struct.Struct(">Q")
#: the interest source of subscribers on the XPUB
CLIENTS = "clients"


def raw_send(sock: zmq.Socket[bytes]) -> Callable[[bytes, int], Any]:
    """The Cython send of ``sock``, skipping pyzmq's Python-level wrapper (about 0.4 us
    per message on the hot path). Behaviour for bytes frames is identical."""
    send: Callable[[bytes, int], Any] = zmq.backend.Socket.send.__get__(sock)
    return send


class Delivery:
    """The XPUB side of a node: who holds which pattern, and sending to them."""

    def __init__(
        self,
        sock: zmq.Socket[bytes],
        counters: Counters,
        interest: LocalInterest,
        emit: Callable[[NodeEvent], None] | None = None,
    ) -> None:
        self.sock = sock
        self._emit = emit
        self._counters = counters
        self._interest = interest
        #: delivery prefix per pattern that clients hold: exists exactly while they do
        self.prefix: dict[str, bytes] = {}
        self._pseq: dict[str, int] = {}  # messages sent per pattern (the frame trailer)
        self._send = raw_send(sock)
        #: subscriptions with a selector (their names are in ``prefix`` too)
        self.selected = Selected(counters, interest)

    # -- subscriptions ------------------------------------------------------------------

    def parse(self, msg: bytes) -> tuple[bool, bytes, str | None] | None:
        """An XPUB (un)subscribe message: (subscribe, key, pattern or None for a sync
        key); None if malformed (counted)."""
        bad = self._counters.bad
        if not msg or msg[0] not in (0, 1):
            bad("subscriber", "bad_subscription", "not a (un)subscribe message")
            return None
        key = msg[1:]
        if key.startswith(wire.SYNC_PREFIX):
            return msg[0] == 1, key, None
        if not key.endswith(b"\0"):
            bad("subscriber", "bad_subscription", f"{key[:40]!r} lacks the NUL terminator")
            return None
        try:
            name = key[:-1].decode("utf-8")
            pattern, text = split_name(name)
            validate_subscription(pattern)
        except ReservedTopic as exc:
            # an internal branch's interest would pass for a queue group's, a durable's
            # home or a topic host (its key is the one they use): never added
            bad("subscriber", "internal_pattern", str(exc))
            return None
        except (UnicodeDecodeError, InvalidTopic) as exc:
            bad("subscriber", "bad_pattern", str(exc))
            return None
        if text is not None and not self.selected.valid(name):
            return None  # (counted: bad_selector)
        return msg[0] == 1, key, name

    def echo(self, key: bytes) -> None:
        """Every subscription the client sent before this sync key is now in effect."""
        try:
            self.sock.send(key, zmq.NOBLOCK)
        except zmq.Again:
            self._counters.drop("subscriber_queue_full")

    def first(self, pattern: str) -> None:
        """Clients hold ``pattern`` (or a subscription name with a selector) now."""
        self.prefix[pattern] = pattern.encode() + b"\0"
        self._pseq.setdefault(pattern, 0)
        if wire.SELECTOR_SEP in pattern:
            self.selected.first(pattern)
        else:
            self._interest.add(pattern, CLIENTS)

    def last(self, pattern: str) -> None:
        """No client holds ``pattern`` (or a selected subscription's name) any more."""
        self.prefix.pop(pattern, None)
        if wire.SELECTOR_SEP in pattern:
            self.selected.last(pattern)
        else:
            self._interest.drop(pattern, CLIENTS)

    def on_subscriptions(self, budget: int) -> None:
        """Drain the XPUB's (un)subscribe messages (plain mode: libzmq counts holders)."""
        recv = self.sock.recv
        for _ in range(budget):
            try:
                msg = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            parsed = self.parse(msg)
            if parsed is None:
                continue
            subscribe, key, pattern = parsed
            if pattern is None:
                if subscribe:
                    self.echo(key)
            elif subscribe:
                self.first(pattern)
            else:
                self.last(pattern)

    def notice(self, allows: Callable[[str], bool], info: dict[str, Any]) -> int:
        """Tell the subscribers of every pattern ``allows`` accepts that messages may be
        lost upstream (a gap notice, :mod:`zbroker.wire.gaps`); returns the patterns told."""
        told = 0
        for pattern, pfx in self.prefix.items():
            # a selected subscription's name is its pattern, the separator, its selector
            if allows(split_name(pattern)[0]):
                frame = gap_notice(pfx, info, U64.pack(self._pseq[pattern]))
                try:
                    self.sock.send(frame, zmq.NOBLOCK)
                except zmq.Again:
                    continue
                told += 1
        return told

    def on_gaps(self, body: dict[str, Any]) -> None:
        """A subscriber's report of messages its full queue here lost (GAPS)."""
        # bounded: a pattern counts only if this node delivers on it, and for no more than
        # it has sent on it (a lying or confused client cannot inflate the counter past
        # what it could have missed)
        sent = self._pseq
        gaps = {
            k: min(v, sent[k]) for k, v in body.items() if type(v) is int and v > 0 and sent.get(k)
        }
        missed = sum(gaps.values())
        if missed:
            # a subscriber's queue here overflowed: the one loss a lossy XPUB hides
            self._counters.drop("slow_subscriber", missed)
            if self._emit is not None:
                patterns = tuple(sorted(str(k)[:256] for k in gaps)[:16])
                self._emit(SlowSubscriber(patterns=patterns, missed=missed))

    # -- sending --------------------------------------------------------------------------

    def send(self, out: dict[str, list[Any]]) -> None:
        """Per pattern, one frame per DELIVERY_BATCH messages (or DELIVERY_BATCH_BYTES).
        ``out`` holds envelope arrays (8 fields: messages taken whole, persistent ones
        from a link or ones that start here; one msgpack call per frame packs them).
        Publishes and relayed messages leave as runs: :meth:`send_runs`."""
        send = self._send
        prefix = self.prefix
        pseq = self._pseq
        u64 = U64.pack
        packb = wire.packb
        noblock = zmq.NOBLOCK
        delivered = 0
        for pattern, items in out.items():
            pfx = prefix[pattern]
            n = pseq[pattern]
            delivered += len(items)
            for start, end in _ONE if len(items) == 1 else _cuts(items):
                k = end - start
                n += k
                body = packb(items[start]) if k == 1 else packb(items[start:end])
                send(b"".join((pfx, body, u64(n))), noblock)  # one copy of a large body
            pseq[pattern] = n
        self._counters.delivered += delivered

    def send_runs(self, out: dict[str, list[Any]]) -> None:
        """Per pattern, runs ``[topic, origin, incarnation, entries]`` (entries as a link
        frame brought them) in frames of at most DELIVERY_BATCH messages or about
        DELIVERY_BATCH_BYTES of payload, a run split where a frame ends; one msgpack
        call per frame, nothing rebuilt per message."""
        send = self._send
        prefix = self.prefix
        pseq = self._pseq
        u64 = U64.pack
        noblock = zmq.NOBLOCK
        delivered = 0
        for pattern, runs in out.items():
            pfx = prefix[pattern]
            n = pseq[pattern]
            for frame, k in _run_cuts(runs):
                n += k
                delivered += k
                send(b"".join([pfx, *_run_body(frame), u64(n)]), noblock)
            pseq[pattern] = n
        self._counters.delivered += delivered

    def send_run(self, pattern: str, head: bytes, entries: bytes | memoryview, k: int) -> None:
        """One frame of one run of ``k`` messages to ``pattern``'s subscribers: ``head`` its
        fields packed (the frame's array of one run, up to its entries), then its entries'
        array as bytes (as a link frame brought them, or as the publishing node wrote
        them: the shortcut, :mod:`.shortcut`)."""
        n = self._pseq[pattern] + k
        self._pseq[pattern] = n
        self._send(b"".join((self.prefix[pattern], head, entries, U64.pack(n))), zmq.NOBLOCK)
        self._counters.delivered += k


def _run_body(frame: list[list[Any]]) -> list[bytes | memoryview]:
    """A delivery frame's runs as the parts of its body: packed, or with the entries'
    bytes that runs relayed whole carry joined in as they are (:mod:`zbroker.wire.splice`)."""
    parts = wire.spliced(frame, 4)
    return [wire.packb(frame)] if parts is None else parts


def _run_cuts(runs: list[list[Any]]) -> list[tuple[list[list[Any]], int]]:
    """Runs cut into frames: (runs of one frame, the messages they hold). A frame ends at
    DELIVERY_BATCH messages or once its payloads reach DELIVERY_BATCH_BYTES; a run that
    fits goes on whole (the common case: no copy). A run that carries its entries' bytes
    (relayed whole from a link frame: :mod:`zbroker.wire.splice`) is never cut: it ends
    the frame it would overfill and goes on whole, joined as it came rather than packed
    again (so a frame may hold what one link frame held: LINK_BATCH messages, the link's
    batch bytes)."""
    most = wire.DELIVERY_BATCH
    most_bytes = wire.DELIVERY_BATCH_BYTES
    frames: list[tuple[list[list[Any]], int]] = []
    frame: list[list[Any]] = []
    n = size = 0
    for run in runs:
        entries = run[3]
        total = len(entries)
        if len(run) == 5:  # (its bytes: their length is about its payloads')
            if frame and (n + total > most or size + len(run[4]) > most_bytes):
                frames.append((frame, n))
                frame, n, size = [], 0, 0
            frame.append(run)
            n += total
            size += len(run[4])
            if n >= most or size >= most_bytes:
                frames.append((frame, n))
                frame, n, size = [], 0, 0
            continue
        start = 0
        while start < total:
            end = min(total, start + most - n)
            for i in range(start, end):
                size += len(entries[i][0])
                if size >= most_bytes:
                    end = i + 1
                    break
            whole = start == 0 and end == total
            frame.append(run if whole else [run[0], run[1], run[2], entries[start:end]])
            n += end - start
            start = end
            if n >= most or size >= most_bytes:
                frames.append((frame, n))
                frame, n, size = [], 0, 0
    if frame:
        frames.append((frame, n))
    return frames


#: the cuts of a pattern's lone message (the common case at low rates)
_ONE = ((0, 1),)


def _cuts(items: list[Any]) -> list[tuple[int, int]]:
    """(start, end) of each frame: at most DELIVERY_BATCH envelope arrays, cut once past
    DELIVERY_BATCH_BYTES, counting each one's payload (the bulk of a message)."""
    most = wire.DELIVERY_BATCH
    most_bytes = wire.DELIVERY_BATCH_BYTES
    total = len(items)
    cuts = []
    start = 0
    while start < total:
        end = min(start + most, total)
        size = 0
        for i in range(start, end):
            size += len(items[i][1])
            if size >= most_bytes:
                end = i + 1
                break
        cuts.append((start, end))
        start = end
    return cuts
