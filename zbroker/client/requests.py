"""Control requests in flight: ids, the futures waiting for replies, and their deadlines.

Owned by the client thread. A request made while no node is up waits here and is sent
once a primary answers; one that gets no reply within the client's timeout fails with
BrokerUnreachable.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import (
    BrokerUnreachable,
    ClientClosed,
    PayloadError,
    PermissionDenied,
    RequestError,
    SubscriptionCancelled,
)
from ..stateful import CANCELLED
from ..wire import ERROR, encode_control
from .sessions import Session

__all__ = ["Requests", "reply_error"]


class Requests:
    """Requests sent (or waiting for a node) and the futures of their callers."""

    def __init__(
        self, timeout: float, other: Callable[[int, int, dict[str, Any]], None] | None = None
    ) -> None:
        self._timeout = timeout
        self._ids = itertools.count(1)
        # replies to requests not made here (persistent publishes: negative ids)
        self._other = other
        self._pending: dict[int, tuple[Future[Any], float]] = {}  # req id -> (fut, deadline)
        self._waiting: list[tuple[int, int, dict[str, Any]]] = []  # requests with no node yet

    def submit(
        self, op: int, body: dict[str, Any], fut: Future[Any], session: Session | None
    ) -> None:
        """Send a request to ``session`` (None: once a node answers)."""
        req_id = next(self._ids)
        self._pending[req_id] = (fut, time.monotonic() + self._timeout)
        if session is None:
            self._waiting.append((req_id, op, body))
        else:
            self._send(session, req_id, op, body)

    def send_waiting(self, session: Session) -> None:
        for req_id, op, body in self._waiting:
            self._send(session, req_id, op, body)
        self._waiting.clear()

    def _send(self, session: Session, req_id: int, op: int, body: Any) -> None:
        """Send a pending request, or fail it at once."""
        error = self.send(session, req_id, op, body)
        if error is not None:
            pending = self._pending.pop(req_id, None)
            if pending is not None and not pending[0].done():
                pending[0].set_exception(error)

    @staticmethod
    def send(session: Session, req_id: int, op: int, body: Any) -> Exception | None:
        """Send a request; None, or why it was not sent: a request over the node's
        max_frame_bytes is counted and dropped there without a reply, so it would only
        have waited out the client's timeout as if the node were gone; one that cannot
        be encoded must not take the client thread down with it."""
        limit = session.frame_max
        try:
            frame = encode_control(op, req_id, body)
        except (TypeError, ValueError, OverflowError) as exc:
            error: Exception = PayloadError(f"request cannot be encoded with msgpack: {exc}")
        else:
            if limit and len(frame) > limit:
                error = PayloadError(
                    f"request of {len(frame)} bytes is over the node's limit of {limit} bytes "
                    "(its max_frame_bytes)"
                )
            elif session.send(frame):
                return None
            else:
                error = BrokerUnreachable("the request could not be sent")
        return error

    def reply(self, op: int, req_id: int, body: dict[str, Any]) -> None:
        """A reply came: resolve its request's future (ERROR: with the node's error)."""
        entry = self._pending.pop(req_id, None)
        if entry is None:
            if self._other is not None:
                self._other(op, req_id, body)
            return
        fut = entry[0]
        if op == ERROR:
            fut.set_exception(_error(body))
        else:
            fut.set_result(body)

    def expire(self, now: float) -> None:
        if self._pending:
            for req_id in [r for r, (_, dl) in self._pending.items() if dl < now]:
                fut, _ = self._pending.pop(req_id)
                self._waiting = [w for w in self._waiting if w[0] != req_id]
                if not fut.done():
                    fut.set_exception(BrokerUnreachable("the node did not answer in time"))

    def fail(self, why: str) -> None:
        """The client thread stops: every request still waiting fails with ClientClosed
        (``why`` says how it stopped)."""
        pending, self._pending, self._waiting = self._pending, {}, []
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(ClientClosed(f"{why} before the node answered"))


def _error(body: dict[str, Any]) -> RequestError:
    text = str(body.get("message", "request failed"))
    error = PermissionDenied if text.startswith("permission denied") else RequestError
    if text.startswith(CANCELLED):
        error = SubscriptionCancelled
    return error(text)


def reply_error(body: dict[str, Any]) -> RequestError:
    """The error an ERROR reply carries."""
    return _error(body)
