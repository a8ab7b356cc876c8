"""The node's advisory budget: at most ``limit`` advisories per ``window`` seconds (a
fixed window; sans clock: the caller says what time it is)."""

from __future__ import annotations

__all__ = ["WindowLimit"]


class WindowLimit:
    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._start = float("-inf")
        self._used = 0

    def allow(self, now: float) -> bool:
        """May one more advisory go now? (Taken from the budget if so.)"""
        if now >= self._start + self.window:
            self._start = now
            self._used = 0
        if self._used < self.limit:
            self._used += 1
            return True
        return False
