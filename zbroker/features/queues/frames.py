"""QMSGS frames on links: the outboxes of entries sent in frames (what cannot be sent is
dropped, counted), and the check that an incoming frame's entries were sent by the
link's peer."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ... import wire

if TYPE_CHECKING:
    from ...links.table import LinkTable

__all__ = ["QMSGS_BATCH", "QMSGS_BYTES", "check_senders", "cut", "send_outboxes"]

#: QMSGS entries per frame at most, and payload bytes after which a frame is cut
QMSGS_BATCH = 256
QMSGS_BYTES = 256 * 1024


def check_senders(entries: list[Any], peer: str, errors: list[tuple[str, str]]) -> None:
    """A checked QMSGS entry whose path does not end with the link's peer becomes None, bad
    input (told in ``errors``): every node adds itself to a path before it sends, so such
    an entry is the peer speaking for others, as on the relay path
    (:func:`zbroker.node.relay.check_senders`); its path would also steer the repick."""
    for i, m in enumerate(entries):
        if m is not None and (not m[8] or m[8][-1] != peer):
            entries[i] = None
            errors.append(("path_not_from_peer", f"path {list(m[8])} of {m[0]!r}"))


def cut(entries: list[list[Any]]) -> Iterable[list[list[Any]]]:
    """``entries`` in frames of at most QMSGS_BATCH entries, cut after QMSGS_BYTES."""
    start = 0
    while start < len(entries):
        size = 0
        end = start
        while end < len(entries) and end - start < QMSGS_BATCH:
            size += len(entries[end][1])
            end += 1
            if size >= QMSGS_BYTES:
                break
        yield entries[start:end]
        start = end


def send_outboxes(
    links: LinkTable,
    out: dict[str, list[list[Any]]],
    drop: Callable[[list[list[Any]], str], None],
) -> int:
    """Each link's entries (``out``: engine link id -> entries) in QMSGS frames; returns
    how many were sent. Those of a link that went down meanwhile, or that its socket
    refused, go to ``drop(entries, reason)``."""
    sent = 0
    for via, entries in out.items():
        link = links.by_engine_id.get(via)
        if link is None:
            drop(entries, "link_down")
            continue
        for chunk in cut(entries):
            if links.send(link, wire.encode_qmsgs(chunk), time.monotonic()):
                sent += len(chunk)
                link.msgs_out += len(chunk)
            else:
                drop(chunk, links.send_failed_reason())
    return sent
