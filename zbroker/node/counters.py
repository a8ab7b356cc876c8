"""The node's counters: plain attributes for the hot path's few, a dict for drop reasons,
and the rate-limited log of bad input.

Every counter only increases for the life of the node (a link that vanishes takes its own
figures with it, never the node's).
"""

from __future__ import annotations

import logging
import time

from ..const import BAD_INPUT_LOG_INTERVAL

__all__ = ["BadInputLog", "Counters"]

log = logging.getLogger("zbroker.node")


class BadInputLog:
    """Logs malformed input at most once per (source, reason) per interval; counts it all."""

    def __init__(
        self, interval: float = BAD_INPUT_LOG_INTERVAL, what: str = "dropped bad input"
    ) -> None:
        self._interval = interval
        self._what = what
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}

    def report(self, source: str, reason: str, detail: str, now: float) -> None:
        key = (source, reason)
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if len(self._last) > 10_000:  # bounded: a flood of sources cannot grow memory
            self._last.clear()
            self._suppressed.clear()
        more = self._suppressed.pop(key, 0)
        suffix = f" ({more} more since the last report)" if more else ""
        log.warning("%s from %s: %s: %s%s", self._what, source, reason, detail, suffix)
        self._last[key] = now


class Counters:
    """What the node counts. Features add their own under their status section."""

    __slots__ = (
        "_bad_log",
        "bad_input",
        "delivered",
        "dropped",
        "forwarded",
        "handshakes_refused",
        "handshakes_refused_duplicate_id",
        "links_down",
        "links_up",
        "received",
        "seq",
        "unrouted",
    )

    def __init__(self) -> None:
        self.seq = 0  # message sequence of this incarnation (the last one given)
        self.received = 0
        self.delivered = 0
        self.forwarded = 0
        self.bad_input = 0
        self.links_up = 0
        self.links_down = 0
        self.handshakes_refused = 0  # every refusal, here or by the peer
        #: of those, the ones refused here because another process holds the peer's ID
        self.handshakes_refused_duplicate_id = 0
        #: client publishes no subscriber anywhere wanted (no local interest, no route)
        self.unrouted = 0
        self.dropped: dict[str, int] = {}
        self._bad_log = BadInputLog()

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def bad(self, source: str, reason: str, detail: str) -> None:
        """Malformed input: counted under ``bad_input.<reason>``, logged (rate-limited)."""
        self.bad_input += 1
        self.drop(f"bad_input.{reason}")
        self._bad_log.report(source, reason, detail, time.monotonic())
