"""Retention: the node's log of the topics ``[[retain]]`` rules cover, and reading it.

Each rule's pattern is local interest (source ``retain``): the network brings its topics
here, and the pipeline hands this feature's sink every message it matches, to be appended
to the log (SQLite) in the pass's transaction. READ returns a range of the log
(``start <= seq < end``) matching a pattern, bounded in rows, bytes and rows examined so a
sparse pattern over a long log never holds the loop. With ``overflow = "reject-new"`` a
full rule refuses persistent messages instead of dropping old ones (admission).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgpack

from .. import wire
from ..errors import InvalidTopic
from ..node import Feature, Op, Refusal, Request
from ..node.context import Context
from ..topics import is_reserved, match, validate_pattern

__all__ = ["READ_PAGE_BYTES", "READ_SCAN_ROWS", "Retention"]

#: a READ reply stops adding rows once they hold this many bytes (at least one row)
READ_PAGE_BYTES = 8 * 1024 * 1024
#: rows a READ examines at most (a pattern-filtered page may then hold fewer than asked)
READ_SCAN_ROWS = 20_000
_I64 = 1 << 63


class Retention(Feature):
    name = "retention"
    sink_sources = ("retain",)

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        for rule in ctx.config.retain:
            # a retention rule is local interest: the network brings its topics here
            ctx.add_interest(rule.pattern, "retain")

    def ops(self) -> Sequence[Op]:
        return (Op(wire.READ, self._read, _read_subjects),)

    def sink(self, batch: list[list[Any]]) -> None:
        store = self._ctx.store
        assert store is not None
        retain_rule, retain = store.retain_rule, store.retain
        receipts = self._ctx.pipeline.receipts
        me = self._ctx.broker_id
        for m in batch:
            topic, payload, fmt, headers, origin, inc, seq, ts = m[:8]
            rule = retain_rule(topic)
            if rule is not None:
                n = retain(rule, topic, payload, fmt, headers, origin, inc, seq, ts)
                if receipts and origin == me and seq in receipts:
                    receipts[seq]["retained_seq"] = n

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        store = self._ctx.store
        if store is None or not store.rules:
            return None
        adds: dict[str, list[int]] = {}
        for topic, (n, size) in topics.items():
            rule = store.retain_rule(topic)
            if rule is not None:
                a = adds.setdefault(rule, [0, 0])
                a[0] += n
                a[1] += size
        full = store.overflowing_rule(adds)
        if full is None:
            return None
        limits = (
            f"(max_msgs {full.max_msgs or 'unbounded'}, max_bytes "
            f"{full.max_bytes or 'unbounded'}; overflow policy reject-new)"
        )
        if batch:
            message = (
                f"refused: retention rule {full.pattern!r} cannot take this batch {limits}; "
                "the rows stay staged until aborted"
            )
        else:
            message = f"refused: retention rule {full.pattern!r} is full {limits}"
        return Refusal(message, sum(n for n, _ in adds.values()))

    def _read(self, req: Request) -> None:
        ctx = self._ctx
        store = ctx.store
        if store is None:
            ctx.error(req, "this node has no store")
            return
        body = req.body
        pattern, start, end, limit = (
            body.get("pattern", ">"),
            body.get("start", 1),
            body.get("end"),
            body.get("limit", 1000),
        )
        problem = _read_problem(pattern, start, end, limit)
        if problem is not None:
            ctx.error(req, problem)
            return
        store.commit()  # a reader sees everything received so far

        def wanted(topic: str) -> bool:
            return match(pattern, topic)

        # bounded by bytes too: a page of large payloads stays a frame of sane size; and by
        # rows examined: a sparse pattern over a long log must not hold the loop (links
        # and clients wait while it scans), so a page may end with few or no rows. ``>``
        # matches every topic but those under $ZB (a rule may retain advisories), which a
        # reader allowed ``>`` may not see: one prefix test a row
        rows, resume_at = store.read_page(
            start,
            end,
            limit,
            READ_PAGE_BYTES,
            _not_reserved if pattern == ">" else wanted,
            READ_SCAN_ROWS,
        )
        upper = end if end is not None else store.last_seq + 1
        if resume_at is not None:
            upper = resume_at  # more may follow: resume from here
        reply = _rows(rows, columns=body.get("columns") is True)
        reply.update(
            first_seq=store.first_seq(),
            last_seq=store.last_seq,
            expired_upto=store.expired_upto(pattern),
            next=upper,
        )
        ctx.reply(req, wire.READ, reply)


def _not_reserved(topic: str) -> bool:
    """Does ``>`` match ``topic``? (Every topic but those under $ZB: :func:`match`.)"""
    return not is_reserved(topic)


def _read_subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
    pattern = body.get("pattern", ">")
    return (("subscribe", pattern),) if isinstance(pattern, str) else ()


def _read_problem(pattern: Any, start: Any, end: Any, limit: Any) -> str | None:
    try:
        validate_pattern(pattern)
    except InvalidTopic as exc:
        return str(exc)
    if (
        type(start) is not int
        or not 0 <= start < _I64
        or (end is not None and (type(end) is not int or not 0 <= end < _I64))
    ):
        return "start and end must be integer sequence numbers"
    if type(limit) is not int or not 1 <= limit <= 100_000:
        return "limit must be an integer in 1..100000"
    return None


def _rows(rows: list[Any], *, columns: bool) -> dict[str, Any]:
    unpack = msgpack.unpackb
    if columns:
        # one array per field: a bulk reader (Spark) builds its columns from these without
        # a Python object per row
        cols: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * 9
        cols[4] = [None if h is None else unpack(h, strict_map_key=False) for h in cols[4]]
        return {"columns": cols}
    return {
        "rows": [
            (*r[:4], unpack(r[4], strict_map_key=False), *r[5:]) if r[4] is not None else r
            for r in rows
        ]
    }
