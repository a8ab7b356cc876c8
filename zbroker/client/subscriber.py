"""Plain subscriptions: the registry user threads change, and the SUB socket that
delivers.

:class:`Subscriptions` holds the callbacks by pattern (user threads add and end them).
:class:`Subscriber` is the client thread's: it owns the SUB socket, counts how many
subscriptions want each pattern, confirms each subscribe with a sync key (the node echoes
it once it has processed what came before), decodes delivery frames, notices gaps in the
node's per-pattern numbering and runs the callbacks, in arrival order.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

import msgpack
import zmq

from .. import selectors, wire
from ..errors import ClientClosed, PermissionDenied, ProtocolError
from ..wire.gaps import decode_gap_notice
from ..wire.lone import COMPILED as _LONE_COMPILED
from ..wire.lone import lone_delivery
from ..wire.reading import FrameReader
from .credentials import Credentials
from .messages import Gap, Message, Subscription, messages_from_envelopes, messages_from_runs

__all__ = ["Subscriber", "Subscriptions"]

log = logging.getLogger("zbroker.client")

_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_SYNC = wire.SYNC_PREFIX[0]
_SEP = wire.SELECTOR_SEP
#: a lone message's frame read by its bytes first (compiled only: from its source that
#: read costs more than the general decode it saves)
_LONE = _LONE_COMPILED

#: by pattern; read without the lock (each value is a tuple, replaced whole)
Callbacks = dict[str, tuple[Subscription, ...]]


class Subscriptions:
    """The plain subscriptions of one client (durable ones are :mod:`.durables`')."""

    def __init__(self, command: Callable[[str, Any], Future[Any]]) -> None:
        self._command = command  # to the client thread: "sub"/"unsub" a pattern
        self._lock = threading.Lock()
        self.by_pattern: Callbacks = {}
        self._closed = False

    def add(
        self, pattern: str, callback: Callable[[Message], Any], selector: str | None = None
    ) -> tuple[Subscription, str]:
        """Register a callback (the caller then asks the client thread to subscribe to
        the name returned: the pattern, or with a selector its key). A bad selector
        raises SelectorError; its canonical text is what the node is sent."""
        sub = Subscription(self._end, pattern, callback)
        sub.selector = None if selector is None else selectors.canonical(selector)
        name = _name(sub)
        with self._lock:
            self.by_pattern[name] = (*self.by_pattern.get(name, ()), sub)
        return sub, name

    def _end(self, sub: Subscription) -> None:
        name = _name(sub)
        with self._lock:
            left = tuple(s for s in self.by_pattern.get(name, ()) if s is not sub)
            if left:
                self.by_pattern[name] = left
            else:
                self.by_pattern.pop(name, None)
            if self._closed:
                return  # (the node drops them with the client's connection)
        try:
            self._command("unsub", name)
        except (ClientClosed, zmq.ZMQError):
            pass  # closed: nothing to tell the node

    def close(self) -> None:
        """The client closes: every subscription ends (no callback runs after this; the
        client thread reads the registry per message)."""
        with self._lock:
            self._closed = True
            ended = [s for subs in self.by_pattern.values() for s in subs]
            self.by_pattern.clear()
        for sub in ended:
            sub.unsubscribe()  # (inactive; nothing is sent)


def _name(sub: Subscription) -> str:
    """What the node knows a subscription by: its pattern, or ``pattern SEP selector``."""
    if sub.selector is None:
        return sub.pattern
    return sub.pattern + wire.SELECTOR_SEP + sub.selector


class Subscriber:
    """The client thread's SUB socket and what it delivers."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], hwm: int, callbacks: Callbacks):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IPV6, 1)
        self.sock.setsockopt(zmq.RCVHWM, hwm)
        # What a SUB sends is its subscriptions, and on every new connection (a failover, a
        # node restart) libzmq re-sends all of them at once into a pipe bounded by SNDHWM,
        # dropping what does not fit, silently: at the default 1,000 a client with 3,000
        # patterns kept 1,000. They are bounded by the caller instead (one per subscribe).
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self._callbacks = callbacks
        self._token = uuid.uuid4().hex[:12].encode()
        self._sync_counter = itertools.count(1)
        self._refs: dict[str, int] = {}  # pattern -> subscriptions wanting it
        self._syncs: dict[bytes, Future[Any]] = {}  # sync key -> its subscribe() waiting
        self._pseq: dict[str, int] = {}  # last delivery sequence seen per pattern
        self._read = FrameReader(self.sock)  # (large frames as views: a flood's)
        # frames read from a node we left, with that node's sequences: delivered first
        self._backlog: deque[tuple[deque[bytes], dict[str, int]]] = deque()
        self._gaps: dict[str, int] = {}  # missed deliveries not yet reported
        #: deliveries the node's queue toward this client dropped (a slow consumer)
        self.missed = 0
        self.malformed = 0  # messages delivered that could not be read (dropped, logged)

    def subscribe(self, pattern: str, done: Future[Any]) -> None:
        """Want ``pattern``; ``done`` resolves once the node has it."""
        n = self._refs.get(pattern, 0)
        self._refs[pattern] = n + 1
        if n == 0:
            self._pseq.pop(pattern, None)  # what we missed while away is no gap
            self.sock.subscribe(pattern.encode() + b"\0")
        key = wire.SYNC_PREFIX + self._token + b"." + str(next(self._sync_counter)).encode()
        self._syncs[key] = done
        self.sock.subscribe(key)

    def unsubscribe(self, pattern: str) -> None:
        n = self._refs.get(pattern, 0)
        if n <= 1:
            self._refs.pop(pattern, None)
            if n == 1:
                self.sock.unsubscribe(pattern.encode() + b"\0")
        else:
            self._refs[pattern] = n - 1

    def connect(self, endpoint: str, deliver_endpoint: str, credentials: Credentials) -> None:
        """Receive from the node at ``endpoint`` (the new primary). The SUB socket re-sends
        every subscription on the new connection by itself."""
        self._pseq = {}  # another node numbers its sends afresh
        credentials.secure(self.sock, endpoint)
        self.sock.connect(deliver_endpoint)

    def disconnect(self, deliver_endpoint: str) -> None:
        """Stop receiving from a node (the primary we leave). What its connection holds
        is read first, because libzmq drops a disconnected pipe's frames: a failover lost
        every message the client had received but not yet delivered, uncounted. Those
        frames are delivered before anything of the next node, and their gaps counted by
        the sequences of the node that sent them."""
        frames: deque[bytes] = deque()
        recv = self.sock.recv
        while True:
            try:
                frames.append(recv(zmq.NOBLOCK))
            except zmq.Again:
                break
        self.sock.disconnect(deliver_endpoint)
        if frames:
            self._backlog.append((frames, self._pseq))
        self._pseq = {}  # the next node numbers its sends afresh

    def take_gaps(self) -> dict[str, int]:
        """Missed deliveries per pattern since the last call (to report to the node)."""
        gaps, self._gaps = self._gaps, {}
        return gaps

    @property
    def backlog(self) -> bool:
        """Frames of a node we left wait to be delivered (see :meth:`disconnect`)."""
        return bool(self._backlog)

    def on_frames(self, until: float) -> None:
        """Deliver what a node we left sent (:meth:`disconnect`), then what the SUB socket
        holds, until the monotonic time ``until`` is past (checked between frames): the
        client thread serves its sessions, commands and publish batches between slices,
        however slow the callbacks are."""
        clock = time.monotonic
        backlog = self._backlog
        while backlog:
            frames, numbered = backlog[0]
            while frames:
                self._deliver(frames.popleft(), numbered)
                if clock() > until:
                    return
            backlog.popleft()
        read = self._read
        pseq = self._pseq
        events = cast("Callable[[int], int]", self.sock.getsockopt)
        for i in range(1024):
            # after the frame poll() announced, ask the socket rather than end on
            # zmq.Again: at low rates that exception was a large part of a delivery's cost
            if i and (not events(_EVENTS) & _POLLIN or clock() > until):
                return
            try:
                frame = read(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._deliver(frame, pseq)

    def _deliver(self, frame: bytes | memoryview, pseq: dict[str, int]) -> None:
        """One frame: a sync key's echo, or deliveries (one message, a batch, or a batch of
        runs), numbered in ``pseq`` (the sequences of the node that sent it)."""
        if frame[0] == _SYNC:
            self._synced(bytes(frame))  # (an echo is small: bytes already, not copied)
            return
        one = lone_delivery(frame) if _LONE and type(frame) is bytes else None
        if one is not None:  # a low rate's frame: one message, read in one pass
            pattern, first, topic, origin, inc, raw, seq, ts = one
            label = pattern.partition(_SEP)[0] if _SEP in pattern else pattern
            msgs = [Message(topic, raw, "bytes", None, origin, inc, seq, ts, label, raw)]
            held = 1
        else:
            decoded = self._decode(frame)
            if decoded is None:
                return
            # (``held``: a message dropped as unreadable was numbered too, and is no gap)
            pattern, first, msgs, held = decoded
        last = pseq.get(pattern)
        if last is not None and first > last + 1:
            self._gap(pattern, first - last - 1)
        pseq[pattern] = first + held - 1
        subs = self._callbacks
        for msg in msgs:
            # looked up per message: a callback may unsubscribe in the middle of a batch
            for s in subs.get(pattern, ()):
                try:
                    s.callback(msg)
                except Exception:
                    log.exception("subscriber callback for %r raised", pattern)

    def _decode(self, frame: bytes | memoryview) -> tuple[str, int, list[Message], int] | None:
        """A delivery frame of any form by the general decode: (pattern, its first
        message's pattern sequence, the messages, how many the frame held); None for a
        malformed frame (logged) or a gap notice (handled). A message that cannot be read
        (a payload marked msgpack that does not decode, which a raw publisher can send)
        is dropped alone, logged and counted (``malformed``), not the frame with it."""
        try:  # one decoder per frame, whichever form it has
            pattern, first, items, runs = wire.decode_delivery_items(frame)
            # a subscription with a selector is named ``pattern SEP selector``
            label = pattern.partition(_SEP)[0] if _SEP in pattern else pattern
            read = messages_from_runs if runs else messages_from_envelopes
            try:
                msgs = read(label, items)
            except ProtocolError:
                msgs, held = self._salvage(read, label, runs, items)
                return pattern, first, msgs, held
        except ProtocolError as exc:
            # (a notice's body is a map: rare, so here; a small frame, never a view)
            notice = decode_gap_notice(frame) if type(frame) is bytes else None
            if notice is None:
                log.warning("dropped malformed delivery: %s", exc)
            else:
                self._gap_notice(*notice)
            return None
        return pattern, first, msgs, len(msgs)

    def _salvage(
        self,
        read: Callable[[str, list[Any]], list[Message]],
        label: str,
        runs: bool,
        items: list[Any],
    ) -> tuple[list[Message], int]:
        """The messages of a frame (``items``, read by ``read``) one of which could not be
        read, each read alone: the readable ones, and how many the frame held."""
        alone = (
            [[[topic, origin, inc, [e]]] for topic, origin, inc, entries in items for e in entries]
            if runs
            else [[m] for m in items]
        )
        msgs: list[Message] = []
        for one in alone:
            try:
                msgs += read(label, one)
            except ProtocolError as exc:
                self.malformed += 1
                log.warning("dropped a malformed message of %r: %s", label, exc)
        return msgs, len(alone)

    def _synced(self, frame: bytes) -> None:
        # a secure node answers the refusals since the last sync key after a NUL
        key, _, refusal = frame.partition(b"\0")
        fut = self._syncs.pop(key, None)
        self.sock.unsubscribe(key)
        error = None
        if refusal:
            try:
                answer = msgpack.unpackb(refusal)
                error, refused = str(answer["error"]), list(answer["refused"])
            except Exception:
                error, refused = "permission denied (unreadable refusal)", []
            for pattern in refused:
                self.unsubscribe(str(pattern))  # what subscribe() counted and sent
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(PermissionDenied(error))

    def _gap_notice(self, pattern: str, said: dict[str, Any]) -> None:
        """A link died upstream: messages of ``pattern`` may be missing."""
        gap = Gap(*(str(said.get(k)) for k in ("node", "link", "peer", "reason")))
        log.warning(
            "messages of %r may be missing: link %s of %s to %s died (%s)",
            pattern, gap.link, gap.node, gap.peer, gap.reason,
        )  # fmt: skip
        for s in self._callbacks.get(pattern, ()):
            s.gaps += 1
            if s.on_gap is not None:
                try:
                    s.on_gap(gap)
                except Exception:
                    log.exception("on_gap callback for %r raised", pattern)

    def _gap(self, pattern: str, missed: int) -> None:
        """The node's queue toward us overflowed: count, and tell the node (next tick)."""
        self.missed += missed
        self._gaps[pattern] = self._gaps.get(pattern, 0) + missed

    def fail(self, why: str) -> None:
        """The client thread stops: every subscribe() still waiting for the node fails
        with ClientClosed."""
        syncs, self._syncs = self._syncs, {}
        for fut in syncs.values():
            if not fut.done():
                fut.set_exception(ClientClosed(f"{why} before the node confirmed the subscription"))

    def close(self) -> None:
        self.sock.close()
