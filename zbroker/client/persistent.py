"""Persistent publishes until confirmed, each stored once: the client's idempotent producer.

Each ``Client`` has a random producer id; its persistent publishes are numbered (``pseq``
1, 2, ...) and every ``PUBLISH`` request carries both. A publish not yet confirmed is sent
again under the same pair once :data:`RETRY_AFTER` passed since its last try (the client
thread looks at its tick), and at once when the client moved to another node, until
``publish_timeout``. A node recognises a pair it took
(from this client, or as the copy another node took and forwarded) and answers as it did
the first time, storing nothing again: the library's own retries never store a message
twice.

A publish that times out (``PublishTimeout``) may have been stored. Publishing the same
message again (same topic, payload, format and headers) on the same client is taken as
its retry: it goes under the same pair. So a loop that publishes until confirmed stores
the message exactly once, while the node still remembers that sequence (the last
``wire.PRODUCER_WINDOW`` of the producer; past it the node refuses the retry with an
error saying the message may have been stored).

The unconfirmed publishes of a client span at most ``wire.PRODUCER_WINDOW`` sequences (a
node remembers no more): a publish beyond waits for room, up to ``publish_timeout``.
A new ``Client`` is a new producer: a retry from another process is not recognised.

Threads: a user thread numbers the publish and posts it, with the one Future the caller
gets, to the client thread, which owns what waits for confirmation (by pseq), sends it,
completes the Future from the node's reply, and sweeps for retries and deadlines at its
tick: nothing per publish beyond the request itself (no second Future, no callback, no
wake-up of another thread).
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from .. import wire
from ..errors import BrokerUnreachable, ClientClosed, PublishTimeout
from .requests import Requests, reply_error

if TYPE_CHECKING:
    from .sessions import Session

__all__ = ["RETRY_AFTER", "Persistent"]

#: seconds without a confirmation after which a persistent publish is sent again
RETRY_AFTER = 1.0
#: timed-out publishes remembered, so that publishing one again retries it
_TIMED_OUT_KEPT = 1024
_monotonic = time.monotonic
_send_request = Requests.send


@dataclass(eq=False, slots=True)
class _Unconfirmed:
    """One persistent publish until it is confirmed, refused or given up."""

    seq: int
    body: dict[str, Any]
    done: Future[Any]  # the caller's own Future
    deadline: float
    sent_at: float = 0.0


class Persistent:
    """The producer id and sequence (user threads), and the persistent publishes not yet
    confirmed (the client thread's)."""

    def __init__(self, post: Callable[[Any], None], *, address: str, timeout: float) -> None:
        #: this client's producer id (random, 1..2^63-1)
        self.producer = secrets.randbits(63) or 1
        self._post = post  # a command to the client thread (raises ClientClosed)
        self._address = address  # for error messages
        self._timeout = timeout
        # user threads: numbering and posting in one order; timed-out publishes
        self._lock = threading.Lock()
        self._room_freed = threading.Condition(self._lock)  # publishes waiting for room
        self._room_waiters = 0
        self._pseq = 0
        self._timed_out: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._closed = False
        # the client thread's: by pseq (every try's request id is -pseq: a reply to any
        # try settles it, and no map of request ids is kept)
        self._unconfirmed: dict[int, _Unconfirmed] = {}
        self._newest = 0  # highest new pseq taken by the client thread
        #: lowest pseq not yet settled (the client thread writes, publishers read)
        self._oldest = 1

    # -- user threads ----------------------------------------------------------------------

    def publish(self, body: dict[str, Any], *, wait: bool) -> Any:
        """Send a persistent publish (``body``: topic, payload, fmt, headers) until it is
        confirmed; its confirmation, or (``wait`` False) a Future of it."""
        deadline = _monotonic() + self._timeout
        done: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise ClientClosed("client is closed")
            seq = self._timed_out.pop(_content(body), None) if self._timed_out else None
            if seq is None:  # a new message (not the retry of one that timed out)
                seq = self._pseq + 1
                if seq - self._oldest >= wire.PRODUCER_WINDOW:
                    self._room(seq, deadline)
                self._pseq = seq
            body["producer"], body["pseq"] = self.producer, seq
            u = _Unconfirmed(seq, body, done, deadline)
            self._post(u)  # (under the lock: the client thread gets them in pseq order)
        if not wait:
            return done
        try:
            return done.result(max(0.0, deadline - _monotonic()))
        except FutureTimeout:
            self._give_up(u)  # (at its deadline: the client thread may look later)
            return done.result(0)

    def _room(self, seq: int, deadline: float) -> None:
        """Wait (under the lock) until ``seq`` keeps the unconfirmed publishes within the
        span a node remembers."""
        self._room_waiters += 1  # (before looking again: see _settled)
        try:
            while seq - self._oldest >= wire.PRODUCER_WINDOW:
                if self._closed:
                    raise ClientClosed("client is closed")
                left = deadline - _monotonic()
                if left <= 0:
                    raise PublishTimeout(
                        f"{wire.PRODUCER_WINDOW} sequences of persistent publishes of this "
                        f"client wait for confirmation from the node at {self._address}: "
                        "this one was not sent"
                    )
                self._room_freed.wait(min(left, 0.1))
        finally:
            self._room_waiters -= 1

    def _give_up(self, u: _Unconfirmed) -> None:
        """PublishTimeout for ``u``, and a later publish of the same message is taken as
        its retry (unless it was settled meanwhile)."""
        content = _content(u.body)
        with self._lock:
            self._timed_out[content] = u.seq
            while len(self._timed_out) > _TIMED_OUT_KEPT:
                self._timed_out.popitem(last=False)
        try:
            u.done.set_exception(PublishTimeout(self._timeout_text(u.seq)))
        except InvalidStateError:  # confirmed or refused meanwhile: not to be retried
            with self._lock:
                if self._timed_out.get(content) == u.seq:
                    del self._timed_out[content]

    def _timeout_text(self, seq: int) -> str:
        return (
            f"node at {self._address} did not confirm the persistent message within "
            f"{self._timeout:g} s (it is down, overloaded or unreachable): it may have been "
            "stored. Retrying is safe: publish the same message again (same topic, payload "
            "and headers) on this client and it is sent under the same producer sequence "
            f"({self.producer:x}/{seq}), which a node that has it does not store again"
        )

    def close(self) -> None:
        """No more publishes; those waiting for room fail with ClientClosed (what is
        unconfirmed fails once the client thread stops: :meth:`stopped`)."""
        with self._lock:
            self._closed = True
            self._room_freed.notify_all()

    # -- the client thread -----------------------------------------------------------------

    def submit(self, u: _Unconfirmed, session: Session | None) -> None:
        """A publish posted by a user thread: track it and send it (None: no node yet,
        :meth:`moved` sends it)."""
        seq = u.seq
        if seq > self._newest:
            self._newest = seq
        elif seq < self._oldest:  # a retry of a timed-out publish
            self._oldest = seq
        self._unconfirmed[seq] = u
        self._send(u, session, _monotonic())

    def _send(self, u: _Unconfirmed, session: Session | None, now: float) -> None:
        """One try (again) under the same (producer, pseq)."""
        u.sent_at = now
        if session is None:
            return
        error = _send_request(session, -u.seq, wire.PUBLISH, u.body)
        if error is not None and not isinstance(error, BrokerUnreachable):
            self._settle(u.seq, None, error)  # (not sent: tried again after RETRY_AFTER)

    def reply(self, op: int, req_id: int, body: dict[str, Any]) -> None:
        """The node's answer to a try (request id -pseq): completes the caller's Future
        (ERROR: refused, nothing of it was stored)."""
        # (inline, not through _settle: one call per confirmation on the client thread)
        u = self._unconfirmed.pop(-req_id, None) if req_id < 0 else None
        if u is None:
            return  # settled by another try's answer
        if u.seq == self._oldest:
            self._settled(u.seq)
        try:
            if op == wire.ERROR:
                u.done.set_exception(reply_error(body))
            else:
                u.done.set_result(body)
        except InvalidStateError:
            pass  # given up at its deadline by the caller, or cancelled

    def _settle(self, seq: int, result: Any, error: Exception | None) -> None:
        u = self._unconfirmed.pop(seq, None)
        if u is None:
            return  # settled by another try's answer
        if seq == self._oldest:
            self._settled(seq)
        try:
            if error is None:
                u.done.set_result(result)
            else:
                u.done.set_exception(error)
        except InvalidStateError:
            pass  # given up at its deadline by the caller, or cancelled

    def _settled(self, seq: int) -> None:
        """``seq``, the oldest, is no longer unconfirmed: move the oldest on, wake who
        waits for room."""
        unconfirmed, newest = self._unconfirmed, self._newest
        while seq <= newest and seq not in unconfirmed:
            seq += 1
        self._oldest = seq
        if self._room_waiters:
            with self._lock:
                self._room_freed.notify_all()

    def sweep(self, now: float, session: Session | None) -> None:
        """At the client thread's tick: send again what waits too long, give up on what
        is past its deadline (or settled by its caller)."""
        if not self._unconfirmed:
            return
        resend, over = [], []
        retry_before = now - RETRY_AFTER
        for u in self._unconfirmed.values():
            # (a Future its caller settled is dropped once due: no lock per look)
            if u.sent_at <= retry_before or u.deadline <= now:
                if u.deadline <= now or u.done.done():
                    over.append(u)
                else:
                    resend.append(u)
        for u in over:
            if not u.done.done():
                self._give_up(u)
            self._settle(u.seq, None, None)  # (its Future is done: only forgotten)
        if session is not None:
            for u in resend:
                self._send(u, session, now)

    def moved(self, session: Session) -> None:
        """The client's primary changed: what waits for confirmation goes to it now."""
        now = _monotonic()
        for u in list(self._unconfirmed.values()):
            self._send(u, session, now)

    def stopped(self, queued: Callable[[], Iterable[Any]]) -> None:
        """The client thread stops: no publish is posted any more, and what is unconfirmed
        (``queued``: the commands it never took) fails with ClientClosed."""
        with self._lock:  # (a publish posts under it, after looking at _closed)
            self._closed = True
            self._room_freed.notify_all()
        for name, u, _ in queued():
            if name == "persistent":
                self._unconfirmed.setdefault(u.seq, u)
        for seq in list(self._unconfirmed):
            self._settle(seq, None, ClientClosed("client closed before the node confirmed"))


def _content(body: dict[str, Any]) -> bytes:
    """What makes two persistent publishes the same message."""
    content: bytes = msgpack.packb(
        [body["topic"], body["payload"], body["fmt"], body.get("headers")]
    )
    return content
