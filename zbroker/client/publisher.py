"""The publisher: the PUSH socket(s), their lock, and publish batching.

``publish()`` sends on the caller's thread, under :class:`Publisher`'s own lock, on a
socket nothing else touches; the client thread only connects it and replaces it (under the
same lock) as it fails over, and sends the tail of a batch nobody filled
(:meth:`Publisher.flush_tail`). Publishes that come faster than ``PUBLISH_LINGER`` apart
leave together in one frame (at most ``PUBLISH_BATCH``), sized for the node that answered
(:meth:`Publisher.attach`); a lone publish leaves at once. The batch is held as runs of one
topic, each entry encoded at publish, and leaves as a batch of runs (their bytes joined:
:mod:`.publish_wire`) to a node of client protocol 3 or more, else as a publish batch.

With ``fanout`` every frame goes to every node's own PUSH socket instead (no batches).
Persistent publishes are control requests through the client thread, after what this
publisher still holds, as an idempotent producer (:mod:`.persistent`)."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import zmq
import zmq.backend

from .. import wire
from ..const import (
    PUBLISH_BATCH,
    PUBLISH_BATCH_BYTES,
    PUBLISH_LINGER,
    PUBLISH_RUNS,
    PUBLISH_TAIL_POLL_MS,
)
from ..errors import ClientClosed, PayloadError, PublishTimeout
from ..topics import validate_publish_topic
from . import publish_wire
from .credentials import Credentials
from .messages import encode_payload
from .persistent import Persistent
from .publish_wire import Entry, batch_frame, frame_of, too_large, with_headers
from .push import new_push

if TYPE_CHECKING:
    from .fanout import Fanout

__all__ = ["Publisher"]

log = logging.getLogger("zbroker.client")

_TOPIC_CACHE_MAX = 4096
_monotonic = time.monotonic
_packb = wire.packb  # one Packer per thread (wire.codec), not one per call
_bin_header = wire.bin_header
#: fixarray(3) and a bin8 header of each length: the start of a small payload's entry
_ENTRY_BIN8 = tuple(b"\x93" + h for h in wire.BIN8_HEADERS)
_ENTRY_BIN16 = struct.Struct(">BBH").pack  #: fixarray(3), bin16 header: entries of 256 B-64 KiB
_NOBLOCK = zmq.NOBLOCK
_FMT_BYTES = wire.FMT_BYTES
#: a batch this full was a flood's: 8 publishes within PUBLISH_LINGER (80,000 a second)
_FLOOD_BATCH = PUBLISH_BATCH // 8


class Publisher:
    """Publishing for one client: owns its PUSH sockets, lock, batch and linger."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        *,
        address: str,
        hwm: int,
        publish_timeout: float,
        fanout: Fanout | None,
        credentials: Credentials,
        check: Callable[[str, str], None],
        wake: Callable[[], None],
        post: Callable[[Any], None],
    ) -> None:
        self._address = address  # for error messages
        self._timeout = publish_timeout
        self._fanout = fanout  # every frame to every node instead
        self._credentials = credentials
        self._check = check  # raises PermissionDenied for a topic the node does not allow
        self._wake = wake  # wakes the client thread (to send a batch's tail)
        #: persistent publishes (through the client thread, until confirmed)
        self.persistent = Persistent(post, address=address, timeout=publish_timeout)
        #: this client's producer id (idempotent persistent publishes)
        self.producer = self.persistent.producer
        self._lock = threading.Lock()
        self._closed = False
        # msgpack fixarray(4) + the topic: the constant start of every frame on it
        self._topic_heads: dict[str, bytes] = {}
        self._ctx, self._hwm = ctx, hwm  # (a new PUSH after each failover: detach)
        self._push = new_push(ctx, hwm, publish_timeout)
        # the backend's send, bound: skips pyzmq's Python-level Socket.send wrapper
        self._send: Callable[[bytes, int], Any] = zmq.backend.Socket.send.__get__(self._push)
        # the batch: at most PUBLISH_BATCH entries, [payload, fmt, headers] encoded as
        # publish() made them (the headers as they were then), in runs of one topic (per
        # run its topic and first index); it leaves past _batch_full (publish frames' bytes)
        self._batch: list[Entry] = []
        self._starts: list[tuple[str, int]] = []
        self._run_head: bytes | None = None  # the last run's topic head (None: start one)
        self._batch_bytes = 0
        self._batch_since = 0.0  # when the oldest publish in the batch was made
        self._last_send = 0.0  # when a frame last went to the PUSH socket
        self._batch_item_max = 0  # a larger frame goes alone; 0: the node takes no batches
        self._frame_max = 0  # the node's max_frame_bytes (from its HELLO); 0: not known
        self._batch_full = 0  # bytes after which a batch leaves
        self._runs = False  # the node reads batches of runs (its client_protocol >= 3)
        #: the client thread flushes batch tails while armed, every ``tail_poll`` ms
        self.armed = False
        self.tail_poll = 1
        self._flood = False  # a flood's batch left since the client thread last looked

    @property
    def frame_max(self) -> int:
        """The node's max_frame_bytes as its HELLO announced it (0: not known)."""
        return self._frame_max

    # -- publish (user threads) ----------------------------------------------------------

    def publish(
        self,
        topic: str,
        payload: Any = b"",
        headers: dict[str, Any] | None = None,
        *,
        persistent: bool = False,
        confirm: bool = False,
    ) -> Any:
        """:meth:`Client.publish` (a client's ``publish`` is this method: see there)."""
        if persistent or confirm:
            return self._publish_persistent(topic, payload, headers, wait=confirm)
        if self._closed:
            raise ClientClosed("client is closed")
        head = self._topic_heads.get(topic) or self._topic_head(topic)
        entry: Any = _entry(topic, head, payload, headers)  # (bytes, or a large one's parts)
        n = len(entry)  # (3: its parts, see publish_wire.Entry; any entry's bytes are longer)
        size = len(head) - 1 + (n if n != 3 else len(entry[0]) + len(entry[1]) + 2)
        if self._frame_max and size > self._frame_max:
            raise PayloadError(too_large(size, self._frame_max))  # the node would drop it
        if self._fanout is not None:
            return self._fanout.publish(frame_of(head, entry))
        with self._lock:
            if self._closed:
                raise ClientClosed("client is closed")
            now = _monotonic()
            batch = self._batch
            if size <= self._batch_item_max and (
                batch or now - self._last_send < PUBLISH_LINGER
            ):  # publishes are coming fast: this one joins (or starts) a batch
                if not batch:
                    self._batch_since = now  # (its bytes are 0: _flush_batch reset them)
                if head is not self._run_head:  # a new run (None when the batch is new)
                    self._run_head = head
                    self._starts.append((topic, len(batch)))
                batch.append(entry)
                self._batch_bytes += size + 5  # (+ its share of the batch's own headers)
                if (
                    len(batch) < PUBLISH_BATCH
                    and self._batch_bytes <= self._batch_full
                    and (now - self._batch_since < PUBLISH_LINGER)
                ):  # room: the client thread sends the batch if no publish comes to fill it
                    if not self.armed:
                        self.armed = True
                        self._wake()  # once per batch, not per message
                    return None
                if self._flush_batch(now):
                    return None
                wait, queued = entry, True  # no room: until it has left
            else:
                wait, queued = frame_of(head, entry), False  # the publish frame
                if not batch or self._flush_batch(now):  # what came before leaves first
                    try:
                        self._send(wait, _NOBLOCK)
                        self._last_send = now
                        return None
                    except zmq.Again:
                        pass
        return self._wait_taken(wait, queued)

    def _topic_head(self, topic: str) -> bytes:
        """The start of every publish frame on ``topic``, once the topic is checked (the
        cache holds allowed topics only)."""
        validate_publish_topic(topic)
        self._check("publish", topic)
        if len(self._topic_heads) >= _TOPIC_CACHE_MAX:
            self._topic_heads.clear()
        head: bytes = b"\x94" + _packb(topic)
        self._topic_heads[topic] = head
        return head

    def forget_topics(self) -> None:
        """Check every topic afresh (another node, other permissions)."""
        self._topic_heads.clear()

    def _wait_taken(self, item: Entry, queued: bool) -> None:
        """No room, or between nodes during a failover: wait until ``item`` (a frame, or
        if ``queued`` a batched entry) has left, without holding the lock between tries,
        so the client thread can connect the next node. PublishTimeout after
        publish_timeout; a batched entry not taken by then is taken out of the batch."""
        deadline = _monotonic() + self._timeout
        while True:
            with self._lock:
                if self._closed:
                    raise ClientClosed("client is closed")
                now = _monotonic()
                if queued:  # (each entry is its own object: identity finds it)
                    if not any(e is item for e in self._batch) or self._flush_batch(now):
                        return  # it has left (here, or from another thread)
                elif not self._batch or self._flush_batch(now):
                    try:
                        self._send(cast("bytes", item), _NOBLOCK)  # (a frame, not queued)
                        self._last_send = now
                        return
                    except zmq.Again:
                        pass
                left = deadline - now
                if left <= 0:
                    if queued:  # not taken: it must not leave later
                        pairs = publish_wire.pairs(self._batch, self._starts)
                        self._keep([(t, e) for t, e in pairs if e is not item])
                    raise PublishTimeout(
                        f"node at {self._address} did not take the message within "
                        f"{self._timeout:g} s (it is down or overloaded)"
                    )
            self._push.poll(int(min(left, 0.05) * 1000) + 1, zmq.POLLOUT)

    def _keep(self, pairs: list[tuple[str, Entry]]) -> None:
        """Make the batch these ``(topic, entry)`` (under the lock)."""
        self._batch[:], self._starts[:] = publish_wire.runs_of(pairs)
        self._run_head = None  # (the next publish starts a run)
        self._batch_bytes = sum(len(publish_wire.entry_frame(t, e)) + 5 for t, e in pairs)

    def _flush_batch(self, now: float) -> bool:
        """Send the pending publish batch (under the lock); False if there is no room.
        To a node of client protocol 3 it leaves as a batch of runs, to an older one as
        a publish batch (:func:`.publish_wire.batch_frame`)."""
        batch = self._batch
        if not batch:
            return True
        # a batch made for this node is counted at most full + item_max + 5 (each message
        # as its publish frame + 5): well within the frame limit, 64 bytes above that
        if self._batch_bytes > self._batch_full + self._batch_item_max + 5:
            # made for a node with a larger limit (before a failover): one by one
            pairs = publish_wire.pairs(batch, self._starts)
            for i, (topic, entry) in enumerate(pairs):
                try:
                    self._send(publish_wire.entry_frame(topic, entry), _NOBLOCK)
                except zmq.Again:
                    self._keep(pairs[i:])
                    return False
        else:
            try:
                self._send(batch_frame(batch, self._starts, self._runs), _NOBLOCK)
            except zmq.Again:
                return False
        if len(batch) >= _FLOOD_BATCH:
            self._flood = True
        batch.clear()
        self._starts.clear()
        self._run_head = None
        self._batch_bytes = 0
        self._last_send = now
        return True

    def flush_tail(self) -> None:
        """From the client thread (woken when a batch starts, then every ``tail_poll`` ms
        while armed): send a batch no publish came to fill once it is PUBLISH_LINGER old
        (the rest waited out here: a paced publisher's catch-up publish leaves within about
        the linger), then disarm. During a flood (its sender sent batches of a flood since
        the last look) stay armed, doubling ``tail_poll`` up to PUBLISH_TAIL_POLL_MS: only
        the flood's last batch needs this thread, and each look takes the publisher's GIL."""
        since = left = 0.0  # (C must see both set on every way out of the lock's block)
        with self._lock:
            now = _monotonic()
            flood, self._flood = self._flood, False  # its sender sent a flood's batches
            if self._closed or (not self._batch and not flood):
                # nothing waits: slow polls, until the next batch wakes this thread
                self._disarm()
                return
            since = self._batch_since
            left = since + PUBLISH_LINGER - now
            if self._batch and left <= 0:
                if not self._flush_batch(now):
                    return  # no room: again at the next poll
                self._flood = False  # (this send is no sign of a flood)
            if flood:  # look again later, and less often
                self.tail_poll = min(2 * self.tail_poll, PUBLISH_TAIL_POLL_MS)
                return
            if not self._batch:  # a tail left, or none waits
                self._disarm()
                return
        time.sleep(left)  # at most PUBLISH_LINGER, without the lock: publishes go on
        with self._lock:
            if self._closed:
                self._disarm()
            elif self._batch and self._batch_since == since and self._flush_batch(_monotonic()):
                self._disarm()  # (a batch started since is a publisher's own)

    def _disarm(self) -> None:
        """The client thread stops looking for tails (under the lock); until a publish
        arms it again no batch waits, so none can leave in between."""
        self.armed = False
        self.tail_poll = 1
        self._flood = False

    def _publish_persistent(
        self, topic: str, payload: Any, headers: dict[str, Any] | None, *, wait: bool
    ) -> Any:
        validate_publish_topic(topic)
        self._check("publish", topic)
        raw, fmt = encode_payload(payload)
        body = publish_wire.persistent_body(topic, raw, fmt, headers, self._frame_max)
        with self._lock:
            if self._batch and not self._closed:
                self._flush_batch(_monotonic())  # what was published before goes first
        return self.persistent.publish(body, wait=wait)

    # -- connections (the client thread) -------------------------------------------------

    def attach(self, endpoint: str, publish_endpoint: str, frame_max: int, protocol: Any) -> None:
        """The node at ``endpoint`` became the client's primary: without fan-out, publish
        to it, in batches for its ``frame_max`` (0: none), as runs if its client
        ``protocol`` (from its HELLO) is 3 or more."""
        self.forget_topics()  # topics allowed by the last node: this one checks afresh
        if self._fanout is not None:
            return
        with self._lock:
            self._batch_limits(frame_max)
            self._runs = type(protocol) is int and protocol >= PUBLISH_RUNS
            if not self._closed:
                self._credentials.secure(self._push, endpoint)
                self._push.connect(publish_endpoint)

    def detach(self) -> None:
        """The primary was lost: a new socket for the next node. The old one is closed,
        not disconnected: a close sends what its pipe holds (a node that said LEAVING
        takes it as it drains), a disconnect drops it."""
        if self._fanout is None:
            with self._lock:
                if not self._closed:
                    old, self._push = self._push, new_push(self._ctx, self._hwm, self._timeout)
                    self._send = zmq.backend.Socket.send.__get__(self._push)
                    old.close()  # (its linger, publish_timeout at most: in libzmq's reaper)

    def _batch_limits(self, frame_max: int) -> None:
        """Batches for a node taking frames up to ``frame_max`` bytes (0: none; locked)."""
        self._frame_max = frame_max  # no larger publish would be taken
        limit = min(PUBLISH_BATCH_BYTES, frame_max) - 64 if frame_max >= 1024 else 0
        # a batch of small frames that leaves once past `full` stays within `limit`
        self._batch_item_max = limit // 8
        self._batch_full = limit - limit // 8

    def batch_state(self) -> tuple[int, bool]:
        """(publishes in the batch, whether the client thread's flusher is armed), at once."""
        with self._lock:
            return len(self._batch), self.armed

    # -- closing -------------------------------------------------------------------------

    def drain(self) -> None:
        """Closing: no more publishes, and the batch goes to the socket (its linger)."""
        deadline = _monotonic() + self._timeout
        while True:
            with self._lock:
                self._closed = True  # (a publish batched after this was lost with the socket)
                if not self._batch or self._flush_batch(_monotonic()):
                    return
            if _monotonic() >= deadline:
                log.warning("closing: %d batched publishes not taken by the node", len(self._batch))
                return
            self._push.poll(10, zmq.POLLOUT)

    def close(self, linger: int | None = None) -> None:
        """Close every socket (``linger`` None: each socket's own, publish_timeout)."""
        self.persistent.close()
        with self._lock:
            self._closed = True
            self._push.close(linger=linger)
        if self._fanout is not None:
            self._fanout.close(linger)


def _entry(topic: str, head: bytes, payload: Any, headers: Any) -> Entry:
    """A message's ``[payload, fmt, headers]``, encoded (:data:`.publish_wire.Entry`):
    without headers as msgpack would write it, without a call to it (256 B or more: its
    parts, the payload not copied); with headers (checked) cut from its publish frame."""
    raw, fmt = (payload, _FMT_BYTES) if type(payload) is bytes else encode_payload(payload)
    if headers is None:
        n = len(raw)
        tail = b"\x00\xc0" if fmt == 0 else b"\x01\xc0"
        if n < 256:
            return _ENTRY_BIN8[n] + raw + tail
        # larger: the parts, joined once with the batch's frame (the common header in C)
        pre = _ENTRY_BIN16(0x93, 0xC5, n) if n < 65536 else b"\x93" + _bin_header(n)
        return (pre, raw, tail)
    return b"\x93" + with_headers(topic, raw, fmt, headers)[len(head) :]
