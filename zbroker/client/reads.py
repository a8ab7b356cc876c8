"""Reading the node's retention log: paging through READ replies into Messages."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import Any

from .. import wire
from .messages import Message, message_from_fields

__all__ = ["iterate", "log_range", "read_log"]

Request = Callable[[int, dict[str, Any]], dict[str, Any]]


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
            msg = message_from_fields(pattern, [topic, raw, fmt, headers, origin, inc, oseq, ts])
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
