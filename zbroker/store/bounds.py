"""What the retention log and durable queues share about their bounds: the overflow
policies, and where a byte bound cuts (oldest first)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["OVERFLOW_POLICIES", "oldest_cut"]

#: ``drop-oldest`` trims the oldest messages to fit the bounds; ``reject-new`` keeps what
#: is stored and refuses what does not fit
OVERFLOW_POLICIES = ("drop-oldest", "reject-new")


def oldest_cut(rows: Iterable[tuple[int, int]], excess: int) -> int | None:
    """The key up to which (inclusive) the oldest rows go so that at least ``excess``
    bytes go. ``rows``: (key, size), oldest first; read only as far as needed (the caller
    runs the query only once it knows the rows are over their bound)."""
    cut = None
    for key, size in rows:
        excess -= size
        cut = key
        if excess <= 0:
            break
    return cut
