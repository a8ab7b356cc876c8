"""The relay's shortcut: a link frame of one run whose head the node knows goes on as its
bytes the moment it is read, without being decoded, queued or packed again.

At a low rate a link frame is one message, and the general path (the pipeline and
:mod:`.relay`, then the link flush at the pass's end) costs it most of its time at a
node: decoded, checked, deduped, routed, queued, packed again. ``benchmarks/bare_hop.py``
measured the middle node of a chain: about 140 µs of CPU per message against 82 for a
hop that only moves frames, and 30-92 µs of the chain's median per node. Most of that
work is the same for every frame of one run's head (topic, origin, incarnation, path,
targets), so the node keeps, per head's bytes, what it does with the head's messages,
and a frame whose head it knows is:

1. walked by :func:`zbroker.wire.heads.run_head` (its shape, every entry checked as the
   node's checks would, consecutive seqs) and not decoded;
2. deduped by its seq range: new if its first seq is right above the origin's floor
   with nothing pending above (the in-order case of :class:`~zbroker.routing.DedupeWindow`),
   and taking it moves the floor to its last;
3. sent at once: to the next node, the head this node writes for it (its path with our
   ID, the branch's targets) followed by the entries' bytes as they came; to the local
   subscribers of each pattern it matches, a delivery frame of that one run, the
   entries' bytes again as they came.

It does so only where the general path would send exactly that and do nothing else: the
route sends the run over at most one link, one copy, and no feature sink takes it, no
selector stands between (in the route or on a local subscription); a link out is up,
nothing is queued on it this pass and no advertisement waits for it (a link carries
frames in order: what the pass queued before, and interest that reached us before the
message, still go first); the frame fits the next node's limit; the link in may send to
us; the run holds at most a link frame's messages (delivered here too in one frame, as
the general path delivers a run relayed whole). A flood's large frames, read as views of
libzmq's messages (:mod:`zbroker.wire.reading`), are walked and sent on in place like
any other: in a chain's flood the middle and last nodes then neither decode the entries
nor pack frames again. Any other frame takes the general path, counted and checked there
as before. The counters move as the general path moves them (messages in and out of
each link, forwarded, delivered, drops of a failed send); what differs is when a frame
leaves: at once, not at the pass's end, so a link's heartbeat read later in the same
pass already vouches for it (``unheard``), a link that goes down later in the pass has
it counted as forwarded rather than dropped, and an advertisement the pass makes after
it follows it.
The bytes it forwards are the entries as they came (an encoding another sender chose,
not repacked), and it never cuts a run in two.

The publishing node takes a client's publish frame, or batch of one publish run, the
same way (:meth:`Shortcut.publish`): its topic checked once, its route decided as a
relayed run's, its messages numbered here and sent on with their fields as the client
packed them; not while a queue group has members (a group picks a member per message),
nor once a frame of the same drain of the publish socket took the general path (what
it took leaves at the drain's or the pass's end, and this node's seqs leave in order).
A flood's batches bound for a link are held and leave together as one link frame when
the drain ends (or the frame is full, or anything else is to leave first), as the
general path would pack them; a batch only local subscribers want goes as one delivery
frame if one holds it (``DELIVERY_BATCH`` messages, ``DELIVERY_BATCH_BYTES``), else the
general path cuts it (zbroker's clients send at most 64 messages and 64 KiB a batch).

What a head decides is kept with what it was decided on: the engine's cached ``route()``
result, whose object is replaced whenever interest, links or hosts change what it would
be, and the version of the node's local interest (a second source of a pattern, a
feature's, changes which sinks take a message without the engine hearing of it). A
frame whose route is another object, or whose version moved on, decides again; while
some local subscription has a selector, a route with local patterns takes the general
path.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING, Any

from .. import wire
from ..const import LINK_BATCH
from ..errors import InvalidTopic, ProtocolError
from ..links.flush import sent
from ..links.state import LinkState
from ..topics import validate_publish_topic
from ..wire import entries, heads
from ..wire.codec import array_header, packb, unpack
from ..wire.frames import DELIVERY_BATCH, DELIVERY_BATCH_BYTES
from ..wire.heads import publish_run, run_head
from .relay import _plan

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..links.state import Link
    from ..links.table import LinkTable
    from ..routing import RoutingEngine
    from .pipeline import Pipeline

__all__ = [
    "HEADS",
    "HEAD_MAX_BYTES",
    "PUBLISH_LONG_ENTRIES",
    "PUBLISH_MAX_BYTES",
    "PUBLISH_MAX_ENTRIES",
    "WALK_MAX_BYTES",
    "Shortcut",
]

#: heads known at most (the table starts over when full: a peer's churn costs it nothing)
HEADS = 4096
#: a head longer than this is not learnt (a topic is at most 512 bytes, a path a few
#: IDs): a peer cannot make the table hold much
HEAD_MAX_BYTES = 2048
#: frames longer than this are not walked where the walk runs from its source (about 2 µs
#: an entry there, more than the general path's decode and checks; a low rate's frames
#: are well below it): None where it is compiled
WALK_MAX_BYTES = None if heads.COMPILED else 4096
#: a client's frame up to this long and of at most this many messages is sent on at once
#: (a low rate's frames are one message). From this node's sources a longer one takes the
#: general path (its entries built here in Python: one node's flood 0.90x with every
#: batch taken here, against the general path's C writer)
PUBLISH_MAX_BYTES = 4096
PUBLISH_MAX_ENTRIES = 4
#: where C writes the numbered entries from the frame's bytes (``entries.numbered``), a
#: longer batch (a flood's) of up to this many messages goes by the shortcut too: to local
#: subscribers only, as a delivery frame of its own (one node's flood at 1 KiB 1.10x the
#: messages a second, 0.87-0.90x the CPU); to a link only, held with the drain's batches
#: of its topic and sent as one link frame (:meth:`Shortcut.flush`: a frame per batch
#: cost the chain 1.15x the CPU per message at 1 KiB; held, 0.89x). None from the sources
PUBLISH_LONG_ENTRIES = LINK_BATCH if heads.COMPILED and entries.WRITES else None
_UP = LinkState.UP
#: the longest msgpack array header (array 32): what flush() writes before held entries
_ARRAY_HEADER_MAX = 5
#: an entry the node's checks pass, after a head's bytes: the run checked as a whole
_ONE_ENTRY = packb([[b"", 0, None, 1, 0.0]])
#: a receive time as msgpack packs a float (float 64)
_TS = struct.Struct(">Bd")


class _Head:
    """A known head: its fields, and what its route decides (``out`` None and no
    ``patterns``: the general way)."""

    __slots__ = (
        "advert", "delivered", "inc", "local", "origin", "out", "path", "patterns", "route",
        "targets", "topic", "version", "written",
    )  # fmt: skip

    def __init__(self, run: list[Any]) -> None:
        self.topic: str = run[0]
        self.origin: str = run[1]
        self.inc: int = run[2]
        self.path: tuple[str, ...] = run[3]
        self.targets: tuple[str, ...] | None = run[4]
        self.route: Any = None  # the engine's route it was decided on
        self.version = -1  # and the local interest's version
        self.local = False  # the route has local patterns
        self.out: Link | None = None
        self.advert: Any = None  # the engine's side of ``out`` (its advertisements)
        self.written = b""  # what goes before the entries on the link
        self.patterns: tuple[str, ...] = ()  # the local subscribers' patterns it matches
        self.delivered = b""  # what goes before the entries in a delivery frame


class Shortcut:
    """``take(link, frame, now)``: the messages a frame held if it went by the shortcut,
    else -1 (the caller takes it the general way)."""

    def __init__(self, pipe: Pipeline, table: LinkTable, engine: RoutingEngine) -> None:
        self._pipe = pipe
        self._table = table
        self._route = engine.route
        self._engine_links = engine.links
        self._state = pipe.dedupe.state
        self._delivery = delivery = pipe._delivery
        self._prefix = delivery.prefix
        self._selected = delivery.selected.by_pattern
        self._interest = pipe._interest
        self._heads: dict[bytes, _Head | None] = {}
        self._topics: dict[bytes, _Head | None] = {}  # a publish run's, by its bytes
        self._counters = pipe._counters
        self._groups = engine.groups
        #: frames longer are not walked: over the limit the general path refuses (and
        #: counts) them, and where the walk runs from its source long ones cost more
        self._walk_max = min(table.frame_limit, WALK_MAX_BYTES or table.frame_limit)
        #: publish frames longer are not walked (compiled: a flood's batch may be as long
        #: as the node takes; _hold and the link's limit bound what goes to a link)
        self._publish_max = table.frame_limit if PUBLISH_LONG_ENTRIES else PUBLISH_MAX_BYTES
        #: frames taken (the suite and the benchmarks read it)
        self.taken = 0
        #: a drain's batches bound for a link, held to leave as one frame (see publish)
        self._held: _Head | None = None
        self._held_parts: list[bytes] = []
        self._held_n = 0
        self._held_bytes = 0

    def take(self, link: Link, frame: bytes | memoryview, now: float) -> int:
        table = self._table
        if len(frame) > self._walk_max:
            return -1  # (an oversized frame: the general path counts it)
        at, first, last = run_head(frame)
        if at < 0 or at > HEAD_MAX_BYTES or link.state is not _UP or not link.can_receive:
            return -1
        n = last - first + 1
        key = frame[:at]
        head = _known(self._heads, key if type(key) is bytes else bytes(key), self._learn)
        if head is None:
            return -1  # (a bad head, or a loop: the general path counts it)
        path = head.path
        if not path or path[-1] != link.peer:
            return -1  # (not sent by the peer that spoke for it: the general path counts it)
        if not self._clear(head) or n > LINK_BATCH:
            return -1  # (the general path cuts a longer run into frames)
        out = head.out
        if out is not None and len(head.written) + len(frame) - at > out.frame_limit:
            return -1
        state = self._state(head.origin, head.inc)
        if state is None or state.above or state.floor != first - 1:
            return -1
        state.floor = last
        table.heard(link, len(frame), now)
        link.msgs_in += n
        self._send(head, frame[at:], n, now)
        return n

    def publish(self, frame: bytes) -> int:
        """A client's publish frame: the messages it held if it went by the shortcut,
        else -1 (the pipeline takes it the general way). Only a publish frame or a batch
        of one publish run (:func:`~zbroker.wire.heads.publish_run`) whose topic's route
        is as for a relayed run; numbered here, sent on with its entries' fields as the
        client packed them. Where C writes the entries, consecutive batches of one topic
        bound for a link are held and leave as one link frame (:meth:`flush`: when the
        drain ends, before anything else leaves, and when the frame is full), as the
        general path packs a drain's batches."""
        n = self._publish(frame)
        if n < 0 and self._held is not None:
            self.flush()  # (what the general path takes now must follow it)
        return n

    def _publish(self, frame: bytes) -> int:
        if len(frame) > self._publish_max:
            return -1
        at, spans = publish_run(frame)
        n = len(spans) // 2
        if at < 0 or n > (PUBLISH_LONG_ENTRIES or PUBLISH_MAX_ENTRIES) or self._groups.active:
            return -1  # (a queue group picks a member per message)
        head = _known(self._topics, frame[:at], self._learn_topic)
        if head is None or not self._clear(head):  # (a bad topic: the general path counts it)
            return -1
        out = head.out
        if out is None and (n > DELIVERY_BATCH or len(frame) > DELIVERY_BATCH_BYTES):
            return -1  # (a delivery frame holds no more: the general path cuts it)
        if out is not None and (n > PUBLISH_MAX_ENTRIES or len(frame) > PUBLISH_MAX_BYTES):
            return self._hold(head, out, frame, spans, n)
        if self._held is not None:
            self.flush()  # (a link's frames in order)
        counters = self._counters
        seq = counters.seq
        ts = _TS.pack(0xCB, time.time())  # (one receive time per frame, as the general path)
        written = entries.numbered(frame, spans, seq, ts)
        if written is None:  # (this module's sources: no C writer)
            parts: list[bytes] = [array_header(n)]
            for i in range(0, 2 * n, 2):
                seq += 1
                parts += (b"\x95", frame[spans[i] : spans[i + 1]], packb(seq), ts)
            written = b"".join(parts)
        if out is not None and len(head.written) + len(written) > out.frame_limit:
            return -1
        counters.seq += n
        counters.received += n
        self._send(head, written, n, time.monotonic())
        return n

    def _hold(self, head: _Head, out: Link, frame: bytes, spans: list[int], n: int) -> int:
        """A flood's batch bound for a link only: numbered and held with the batches of the
        same head before it, to leave as one link frame (-1 with local subscribers too: the
        general way). Only reached where C writes the entries (``PUBLISH_LONG_ENTRIES``:
        from the sources no batch this long gets past :meth:`_publish`'s first checks)."""
        if head.patterns:
            return -1
        if self._held is not head or self._held_n + n > LINK_BATCH:
            self.flush()
        counters = self._counters
        ts = _TS.pack(0xCB, time.time())  # (one receive time per frame, as the general path)
        body = entries.numbered(frame, spans, counters.seq, ts, header=False)
        if body is None:
            return -1
        limit = min(out.batch_bytes, out.frame_limit - len(head.written) - _ARRAY_HEADER_MAX)
        if self._held_bytes + len(body) > limit:
            self.flush()
            if len(body) > limit:
                return -1  # (the general path cuts it)
        self._held = head
        self._held_parts.append(body)
        self._held_n += n
        self._held_bytes += len(body)
        counters.seq += n
        counters.received += n
        self.taken += 1
        return n

    def flush(self) -> None:
        """Send the batches held for a link as one frame (the pipeline calls it when a
        drain of the publish socket ends)."""
        head = self._held
        if head is None:
            return
        parts, n = self._held_parts, self._held_n
        self._held, self._held_parts, self._held_n, self._held_bytes = None, [], 0, 0
        assert head.out is not None
        frame = b"".join([head.written, array_header(n), *parts])
        sent(self._table, head.out, frame, n, time.monotonic())

    def _clear(self, head: _Head) -> bool:
        """Whether the head's messages may take the shortcut now (its decision made again
        first if what it was made from changed)."""
        route = self._route(head.topic, head.path, head.targets)
        if route is not head.route or head.version != self._interest.version:
            self._decide(head, route)
        if head.local and self._selected:
            return False  # (a subscription's selector decides per message)
        out = head.out
        if out is not None and (
            out.outbox or out.state is not _UP or head.advert.pending or head.advert.full_pending
        ):
            return False
        if head.patterns:
            for p in head.patterns:  # noqa: SIM110  (a generator per frame costs more)
                if p not in self._prefix:
                    return False
            return True
        return out is not None

    def _send(self, head: _Head, entries: bytes | memoryview, n: int, now: float) -> None:
        """The head's ``n`` messages, their entries' array ``entries``, to the link out and
        the local patterns."""
        if head.out is not None:
            sent(self._table, head.out, head.written + entries, n, now)
        for p in head.patterns:
            self._delivery.send_run(p, head.delivered, entries, n)
        self.taken += 1

    def _learn_topic(self, key: bytes) -> _Head | None:
        """A publish run's topic seen first (``key``: the frame up to its end): checked as
        the publish checks check it (None: a bad topic, which the general path counts)."""
        try:
            topic = unpack(key[1:] if key[0] == 0x94 else key[2:])  # (after the arrays')
            validate_publish_topic(topic)
        except (ProtocolError, InvalidTopic):
            return None
        pipe = self._pipe
        return _Head([topic, pipe._me, pipe._inc, (), None])

    def _learn(self, key: bytes) -> _Head | None:
        """A head's bytes seen first: its fields decoded and checked as the general path
        checks a run's (None: a bad head, which the general path counts each time)."""
        try:
            runs = wire.decode_frame(key + _ONE_ENTRY)[1]
        except ProtocolError:
            return None
        errors: list[tuple[str, str]] = []
        wire.check_runs(runs, self._pipe._link_caches, errors)
        if errors or runs[0] is None or self._pipe._me in runs[0][3]:
            return None  # (bad, or a loop: never routed, counted the general way)
        return _Head(runs[0])

    def _decide(self, head: _Head, route: Any) -> None:
        """What ``route`` (the engine's, for the head's key) does with the head's messages:
        at most one link out and the local subscribers' patterns, or the general way."""
        head.route, head.version = route, self._interest.version
        head.out, head.patterns = None, ()
        fwd, patterns, links, missing, selective, sinks = _plan(
            self._pipe, head.topic, head.path, head.targets, {}
        )
        head.local = bool(patterns)
        if fwd is False or missing or selective is not None or sinks:
            return
        if len(links) > 1 or (links and links[0][2] != 1):
            return
        if links:
            out, targets = links[0][0], links[0][1]
            advert = self._engine_links.get(out.engine_id)
            if advert is None:
                return
            run = [head.topic, head.origin, head.inc, fwd, targets, []]
            head.written = wire.encode_link(wire.MSGR, [run])[:-1]  # (less the entries)
            head.advert = advert
            head.out = out
        head.patterns = tuple(p for p in patterns if p in self._prefix)
        head.delivered = packb([[head.topic, head.origin, head.inc, []]])[:-1]


def _known(
    known: dict[bytes, _Head | None], key: bytes, learn: Callable[[bytes], _Head | None]
) -> _Head | None:
    """The head of ``key`` in ``known``, learnt the first time (None: a bad one). The
    table starts over when full: a peer's churn costs it nothing but the learning."""
    head = known.get(key)
    if head is None and key not in known:
        if len(known) >= HEADS:
            known.clear()
        head = known[key] = learn(key)
    return head
