"""Stopping a foreground command (``start``, ``sub``) on SIGINT/SIGTERM without a lock."""

from __future__ import annotations

import signal
import time
from typing import Any


class SignalStop:
    """SIGINT/SIGTERM ask a foreground command to stop.

    The handler only appends to a list. A handler that takes a lock, as
    ``threading.Event.set`` does, can run while the main thread holds that same lock
    inside ``Event.wait`` (Python runs handlers in the main thread between bytecodes), and
    then the process never stops: ``zbroker start`` was seen ignoring SIGTERM that way.
    """

    def __init__(self, *signums: int) -> None:
        self.received: list[int] = []
        for signum in signums:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signum)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True as soon as (within 0.1 s) a signal came."""
        end = time.monotonic() + timeout
        while not self.received:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.1))
        return True
