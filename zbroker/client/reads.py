"""Reading the node's retention log: paging through READ replies into Messages; and the
iterator form of a subscription. :class:`LogMethods` are these methods of
:class:`~.api.Client` (mixed in)."""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator
from typing import Any

from .. import wire
from ..errors import ProtocolError
from ..topics import validate_pattern
from .messages import Message, message_from_fields

__all__ = ["LogMethods", "iterate", "log_range", "read_log"]

Request = Callable[[int, dict[str, Any]], dict[str, Any]]

log = logging.getLogger("zbroker.client")


def read_log(
    request: Request, pattern: str, start_seq: int, end_seq: int | None, limit: int
) -> list[Message]:
    """:meth:`Client.read` (``pattern`` checked by the caller): as many READ requests as
    the node's pages take."""
    out: list[Message] = []
    start = start_seq
    while len(out) < limit:
        body = {"pattern": pattern, "start": start, "limit": min(limit - len(out), 10_000)}
        if end_seq is not None:
            body["end"] = end_seq
        reply = request(wire.READ, body)
        for seq, topic, raw, fmt, headers, origin, inc, oseq, ts in reply["rows"]:
            fields = [topic, raw, fmt, headers, origin, inc, oseq, ts]
            try:
                msg = message_from_fields(pattern, fields)
            except ProtocolError as exc:  # (a raw publisher's; the rest of the page is good)
                log.warning("skipped log seq %s of %r: %s", seq, pattern, exc)
                continue
            msg.log_seq = seq
            out.append(msg)
        nxt = int(reply["next"])
        # a page may hold no rows and still not be the end: a sparse pattern's scan is
        # bounded per request (READ_SCAN_ROWS), so go on while `next` moves
        if nxt <= start or nxt >= (end_seq if end_seq is not None else reply["last_seq"] + 1):
            break
        start = nxt
    return out


def log_range(request: Request) -> tuple[int, int]:
    """(first, last) sequence of the node's retention log; first > last when empty."""
    reply = request(wire.READ, {"pattern": ">", "start": 0, "end": 0, "limit": 1})
    return int(reply["first_seq"]), int(reply["last_seq"])


def iterate(
    subscribe: Callable[[str, Callable[[Message], Any]], Any], pattern: str, timeout: float | None
) -> Iterator[Message]:
    """Messages matching ``pattern`` as they come (``Client.messages``); stops after
    ``timeout`` seconds without one (None: never). Subscribed at the first ``next()``,
    unsubscribed when the iterator is closed."""
    q: queue.SimpleQueue[Message] = queue.SimpleQueue()
    sub = subscribe(pattern, q.put)
    try:
        while True:
            try:
                yield q.get(timeout=timeout)
            except queue.Empty:
                return
    finally:
        sub.unsubscribe()


class LogMethods:
    """The retention-log methods of :class:`~.api.Client`, and its iterator form."""

    request: Callable[..., dict[str, Any]]
    subscribe: Callable[..., Any]
    _check: Callable[[str, str], None]

    def read(
        self, pattern: str = ">", start_seq: int = 1, end_seq: int | None = None, limit: int = 1000
    ) -> list[Message]:
        """Messages of the node's retention log with ``start_seq <= seq < end_seq`` (None:
        up to the newest) whose topic matches ``pattern``, oldest first, at most ``limit``.
        Each has ``log_seq``. Sequences that expired from the log are simply absent: compare
        ``start_seq`` with :meth:`log_range` to detect it."""
        validate_pattern(pattern)
        self._check("subscribe", pattern)
        return read_log(self.request, pattern, start_seq, end_seq, limit)

    def log_range(self) -> tuple[int, int]:
        """(first, last) sequence of the node's retention log; first > last when empty."""
        return log_range(self.request)

    def messages(self, pattern: str, timeout: float | None = None) -> Iterator[Message]:
        """Iterate over messages matching ``pattern``; stop after ``timeout`` seconds without
        one (``None``: never). The subscription ends when the iterator is closed."""
        return iterate(self.subscribe, pattern, timeout)
