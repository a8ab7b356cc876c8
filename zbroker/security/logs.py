"""The security log: warnings about refused keys, handshakes and operations, at most one
per (source, reason) per interval, so a flood of bad peers cannot flood the log; and the
bound every per-key cache of this package keeps (a flood of distinct keys cannot grow
memory without end)."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["CACHE_MAX", "ThrottledLog", "log"]

log = logging.getLogger("zbroker.security")

#: entries a per-key cache holds before it is cleared
CACHE_MAX = 10_000
_LOG_INTERVAL = 10.0


class ThrottledLog:
    """Warnings on :data:`log`, throttled per (source, reason)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}

    def warn(self, source: str, reason: str, fmt: str, *args: Any) -> None:
        """Log at most once per (source, reason) per interval."""
        now = time.monotonic()
        k = (source, reason)
        last = self._last.get(k)
        if last is not None and now - last < _LOG_INTERVAL:
            return
        if len(self._last) > CACHE_MAX:
            self._last.clear()
        self._last[k] = now
        log.warning(fmt, *args)
