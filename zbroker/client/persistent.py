"""Persistent publishes until confirmed, each stored once: the client's idempotent producer.

Each ``Client`` has a random producer id; its persistent publishes are numbered (``pseq``
1, 2, ...) and every ``PUBLISH`` request carries both. A publish not yet confirmed is sent
again under the same pair once :data:`RETRY_AFTER` passed since its last try (a thread of
this part looks that often), and at once when the client moved to another node, until
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
"""

from __future__ import annotations

import collections
import functools
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import msgpack

from .. import wire
from ..errors import BrokerUnreachable, ClientClosed, PublishTimeout

__all__ = ["RETRY_AFTER", "Persistent"]

#: seconds without a confirmation after which a persistent publish is sent again
RETRY_AFTER = 1.0
#: timed-out publishes remembered, so that publishing one again retries it
_TIMED_OUT_KEPT = 1024
#: the retry thread looks at most this often (seconds)
_TICK_MIN = 0.05
_monotonic = time.monotonic


@dataclass(eq=False, slots=True)
class _Unconfirmed:
    """One persistent publish until it is confirmed, refused or given up."""

    seq: int
    body: dict[str, Any]
    done: Future[Any]
    deadline: float
    sent_at: float = 0.0


class Persistent:
    """The producer id, the sequence, and the persistent publishes not yet confirmed."""

    def __init__(
        self,
        request: Callable[[int, dict[str, Any]], Future[Any]],
        *,
        address: str,
        timeout: float,
    ) -> None:
        #: this client's producer id (random, 1..2^63-1)
        self.producer = secrets.randbits(63) or 1
        self._request = request  # a control request through the client thread
        self._address = address  # for error messages
        self._timeout = timeout
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the retry thread waits on it
        self._room_freed = threading.Condition(lock)  # publishes waiting for room
        self._pseq = 0
        self._unconfirmed: dict[int, _Unconfirmed] = {}  # by pseq, oldest first
        self._timed_out: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._closed = False
        self._room_waiters = 0
        self._thread: threading.Thread | None = None

    def publish(self, body: dict[str, Any], *, wait: bool) -> Any:
        """Send a persistent publish (``body``: topic, payload, fmt, headers) until it is
        confirmed; its confirmation, or (``wait`` False) a Future of it."""
        deadline = _monotonic() + self._timeout
        with self._cond:
            if self._closed:
                raise ClientClosed("client is closed")
            seq = self._timed_out.pop(_content(body), None) if self._timed_out else None
            if seq is None:  # a new message (not the retry of one that timed out)
                self._room(deadline)
                self._pseq += 1
                seq = self._pseq
            body["producer"], body["pseq"] = self.producer, seq
            u = _Unconfirmed(seq, body, Future(), deadline)
            self._unconfirmed[seq] = u
            if self._thread is None:  # (it looks every RETRY_AFTER at most: never woken)
                self._thread = threading.Thread(
                    target=self._run, name="zbroker-persistent", daemon=True
                )
                self._thread.start()
        self._send(u)
        if not wait:
            return u.done
        try:
            return u.done.result(max(0.0, deadline - _monotonic()))
        except FutureTimeout:
            self._expire([u])  # (at its deadline: the retry thread may look later)
            return u.done.result(0)

    def _room(self, deadline: float) -> None:
        """Wait (under the lock) until a new sequence keeps the unconfirmed publishes
        within the span a node remembers."""
        while self._unconfirmed:
            if self._closed:
                raise ClientClosed("client is closed")
            oldest = next(iter(self._unconfirmed))
            if self._pseq + 1 - oldest < wire.PRODUCER_WINDOW:
                return
            left = deadline - _monotonic()
            if left <= 0:
                raise PublishTimeout(
                    f"{wire.PRODUCER_WINDOW} sequences of persistent publishes of this client "
                    f"wait for confirmation from the node at {self._address}: this one was "
                    "not sent"
                )
            self._room_waiters += 1
            try:
                self._room_freed.wait(left)
            finally:
                self._room_waiters -= 1

    def _send(self, u: _Unconfirmed) -> None:
        """One try (again) under the same (producer, pseq)."""
        u.sent_at = _monotonic()
        try:
            attempt = self._request(wire.PUBLISH, u.body)
        except ClientClosed as exc:
            self._settle(u, None, exc)
            return
        attempt.add_done_callback(functools.partial(self._answered, u))

    def _answered(self, u: _Unconfirmed, attempt: Future[Any]) -> None:
        try:
            result = attempt.result(0)
        except BrokerUnreachable:
            return  # no answer in time from that node: the retry thread sends it again
        except Exception as exc:  # refused: nothing of it was stored
            self._settle(u, None, exc)
        else:
            self._settle(u, result, None)

    def _settle(self, u: _Unconfirmed, result: Any, exc: BaseException | None) -> None:
        # (dict.pop is atomic: the lock is taken only when a publish waits for room, so
        # the client thread pays no lock per confirmation)
        if self._unconfirmed.get(u.seq) is u:  # (not: settled, or a later publish of it)
            self._unconfirmed.pop(u.seq, None)
        if self._room_waiters:
            with self._cond:
                self._room_freed.notify_all()
        try:  # (outside the lock: a caller's done-callback may publish)
            if exc is None:
                u.done.set_result(result)
            else:
                u.done.set_exception(exc)
        except InvalidStateError:
            pass  # settled already (another try's answer, or given up)

    def moved(self) -> None:
        """The client's primary changed: what waits for confirmation goes to it now."""
        with self._cond:
            waiting = list(self._unconfirmed.values())
        for u in waiting:
            self._send(u)

    def _run(self) -> None:
        """The retry thread: sends again what waits too long, gives up at the deadline."""
        while True:
            with self._cond:
                if self._closed:
                    return
                now = _monotonic()
                resend, expired = [], []
                wake = now + min(RETRY_AFTER, self._timeout)
                for u in self._unconfirmed.values():
                    if u.deadline <= now:
                        expired.append(u)
                    elif u.sent_at + RETRY_AFTER <= now:
                        u.sent_at = now
                        resend.append(u)
                    wake = min(wake, u.deadline, u.sent_at + RETRY_AFTER)
                if not resend and not expired:
                    self._cond.wait(max(_TICK_MIN, wake - now))
                    continue
            for u in resend:
                self._send(u)
            self._expire(expired)

    def _expire(self, expired: list[_Unconfirmed]) -> None:
        """Give up on these: PublishTimeout, and a later publish of the same message is
        taken as their retry."""
        for u in expired:
            with self._cond:
                if self._unconfirmed.get(u.seq) is not u:
                    continue  # settled meanwhile
                self._timed_out[_content(u.body)] = u.seq
                while len(self._timed_out) > _TIMED_OUT_KEPT:
                    self._timed_out.popitem(last=False)
            self._settle(u, None, PublishTimeout(self._timeout_text(u.seq)))

    def _timeout_text(self, seq: int) -> str:
        return (
            f"node at {self._address} did not confirm the persistent message within "
            f"{self._timeout:g} s (it is down, overloaded or unreachable): it may have been "
            "stored. Retrying is safe: publish the same message again (same topic, payload "
            "and headers) on this client and it is sent under the same producer sequence "
            f"({self.producer:x}/{seq}), which a node that has it does not store again"
        )

    def close(self) -> None:
        """Stop the retry thread; what is unconfirmed fails with ClientClosed."""
        with self._cond:
            self._closed = True
            waiting = list(self._unconfirmed.values())
            self._cond.notify_all()
            self._room_freed.notify_all()
        for u in waiting:
            self._settle(u, None, ClientClosed("client closed before the node confirmed"))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)


def _content(body: dict[str, Any]) -> bytes:
    """What makes two persistent publishes the same message."""
    content: bytes = msgpack.packb(
        [body["topic"], body["payload"], body["fmt"], body.get("headers")]
    )
    return content
