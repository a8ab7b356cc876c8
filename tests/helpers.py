"""Helpers shared by test modules (fixtures live in conftest.py files)."""

from __future__ import annotations

import threading
from typing import Any

from zbroker import Message


class Inbox:
    """A subscription callback that keeps what arrived and waits for a count."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._cond = threading.Condition()

    def __call__(self, msg: Message) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def wait_count(self, n: int, timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.messages) >= n, timeout)

    def snapshot(self) -> list[Message]:
        with self._cond:
            return list(self.messages)

    def payloads(self) -> list[Any]:
        with self._cond:
            return [m.payload for m in self.messages]
