"""The end of a pass for links: every message queued for a link leaves in MSGR frames
(runs, :mod:`zbroker.wire.runs`) cut for the peer's limit (:mod:`.outbox`), then the
routing engine's batched interest changes leave as ADVERT frames.

A ROUTER adds an identity frame per send, and in pyzmq each frame costs about as much as
a message: one frame per link per pass amortizes both, and costs no latency because a
batch is only what one pass found.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from .. import wire
from ..const import LINK_FRAME_SLACK
from .outbox import advert_chunks, cut_runs, queued
from .state import Link, LinkState

if TYPE_CHECKING:
    from .table import LinkTable

__all__ = ["flush_adverts", "flush_outboxes", "sent", "too_large"]

log = logging.getLogger("zbroker.node")


def _encode_runs(chunk: list[Any]) -> bytes:
    frame = wire.spliced_msgr(chunk)  # (runs relayed whole carry their entries' bytes)
    return wire.encode_link(wire.MSGR, chunk) if frame is None else frame


def flush_outboxes(table: LinkTable) -> None:
    now = time.monotonic()
    counters = table.counters
    for link in table.dirty:
        box = link.outbox
        link.outbox = []
        if link.state is not LinkState.UP:
            n = queued(box)
            link.drops += n
            counters.drop("link_down", n)
            continue
        limit = link.frame_limit
        if len(box) == 1 and len(box[0][5]) == 1:
            # one message (a pass at a low rate): nothing to cut, so none of cut_runs'
            # generators, which cost a cold pass more than the encoding
            frame = _encode_runs(box)
            if len(frame) <= limit:
                sent(table, link, frame, 1, now)
                continue
        for frame, n, topic in cut_runs(box, link.batch_bytes, limit, _encode_runs):
            if len(frame) > limit:
                # one message the next node would refuse (its max_frame_bytes is smaller
                # than its publisher's node's, or headers and path grew it): counted
                too_large(table, link, f"a message of {len(frame)} bytes on {topic!r}")
            else:
                sent(table, link, frame, n, now)
    table.dirty.clear()


def sent(table: LinkTable, link: Link, frame: bytes, n: int, now: float) -> None:
    """Send a frame of ``n`` messages on ``link``, counted as sent or dropped."""
    if table.send(link, frame, now):
        link.msgs_out += n
        link.unheard += n
        table.counters.forwarded += n
    else:
        link.drops += n
        table.counters.drop(table.send_error, n)


def too_large(table: LinkTable, link: Link, what: str) -> None:
    """Count (and log at the 1st, 2nd, 4th, 8th... time: a stream of them is no flood)
    a message that no frame the peer of ``link`` accepts can hold."""
    link.drops += 1
    table.counters.drop("link_frame_too_large")
    n = table.counters.dropped["link_frame_too_large"]
    if n & (n - 1) == 0:
        log.warning(
            "link %s: %s does not fit in a frame %s accepts (at most %d bytes: its "
            "max_frame_bytes %d plus %d); dropped (%d such messages so far)",
            link.name,
            what,
            link.peer,
            link.frame_limit,
            link.peer_max_frame,
            LINK_FRAME_SLACK,
            n,
        )


def with_held(entries: list[list[Any]], held: frozenset[tuple[str, str]]) -> None:
    """Flag ADVERT entries held on a ghost of a down link (6th element, after the
    selectors or nil; engine rule 6): their receiver ranks them below every live one."""
    for e in entries:
        if len(e) > 3 and (e[0], e[1]) in held:
            if len(e) == 4:
                e.append(None)
            e.append(True)


def with_selectors(entries: list[list[Any]], selectors: dict[tuple[str, str], Any]) -> None:
    """Add to ADVERT entries the selectors behind them (5th element; engine rule 7)."""
    for e in entries:
        texts = selectors.get((e[0], e[1]))
        if texts is not None and e[2] is not None:
            if len(e) == 3:
                e.append(False)
            e.append(sorted(texts))


def flush_adverts(table: LinkTable) -> None:
    actions = table.engine.flush()
    if not actions:
        return
    now = time.monotonic()
    for action in actions:
        link = table.by_engine_id.get(action.link)
        if link is None or link.state is not LinkState.UP:
            continue
        sticky = action.sticky
        entries = [
            [p, o, None if path is None else list(path)]
            if (p, o) not in sticky
            else [p, o, list(path or ()), True]  # durable-backed: kept while down
            for p, o, path in action.entries
        ]
        if action.selectors:
            with_selectors(entries, action.selectors)
        if action.held:
            with_held(entries, action.held)
        if sticky:
            # a long table leaves in several frames and only the first says "full"
            # (replace): sticky entries first, so a returning ghost link's sticky routes,
            # which the receiver kept, are never withdrawn in between
            entries.sort(key=lambda e: not (len(e) > 3 and e[3]))
        full = action.full
        for chunk in advert_chunks(entries, link.batch_bytes):
            if not table.send(link, wire.encode_link(wire.ADVERT, full, chunk), now):
                # losing an advertisement would leave the peer's table wrong: restart
                reason = table.send_failed_reason()
                table.down(link, f"advertisement could not be sent ({reason})", now)
                break
            full = False
