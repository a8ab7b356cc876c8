"""Helpers shared by test modules (fixtures live in conftest.py files)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import zbroker
from tests.processes import Proc
from zbroker import BrokerUnreachable, Client, Message

ROOT = Path(zbroker.__file__).resolve().parent.parent

#: seconds: the default upper bound of a Collector's waits (generous: CI machines are slow)
COLLECT_WAIT = 20.0


class Collector:
    """A subscription callback that keeps what arrived, in order, and lets a test wait
    for it. Callbacks run on the client thread; every read takes the lock."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._cond = threading.Condition()

    def __call__(self, msg: Message) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self.messages)

    def wait_until(self, pred: Callable[[list[Message]], bool], timeout: float) -> bool:
        """Wait until ``pred(messages so far)`` holds (False after ``timeout`` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: pred(self.messages), timeout)

    def wait_for(self, n: int, timeout: float = COLLECT_WAIT) -> bool:
        """At least ``n`` messages."""
        return self.wait_until(lambda ms: len(ms) >= n, timeout)

    wait_count = wait_for

    def wait_topic(self, topic: str, timeout: float = COLLECT_WAIT) -> bool:
        return self.wait_until(lambda ms: any(m.topic == topic for m in ms), timeout)

    def wait_payload(self, payload: Any, timeout: float = COLLECT_WAIT) -> bool:
        return self.wait_until(lambda ms: any(m.payload == payload for m in ms), timeout)

    def snapshot(self) -> list[Message]:
        with self._cond:
            return list(self.messages)

    def topics(self) -> Counter[str]:
        with self._cond:
            return Counter(m.topic for m in self.messages)

    def payloads(self, topic: str | None = None) -> list[Any]:
        """Payloads in arrival order, of ``topic`` only when given."""
        with self._cond:
            return [m.payload for m in self.messages if topic is None or m.topic == topic]

    def redelivered(self) -> list[bool]:
        with self._cond:
            return [m.redelivered for m in self.messages]

    def clear(self) -> None:
        with self._cond:
            self.messages.clear()


#: the name the staging and Spark tests use
Inbox = Collector


def from_source(module: ModuleType) -> ModuleType:
    """``module`` executed afresh from its ``.py`` (its package's relative imports as
    usual), whatever zbroker imported for it: a compiled module's pure-Python twin."""
    path = ROOT / (module.__name__.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(module.__name__ + "_from_source", path)
    assert spec is not None and spec.loader is not None
    source = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = source  # (a dataclass looks its module up by name)
    spec.loader.exec_module(source)
    return source


def wait_ready(endpoint: str, timeout: float = 20.0, proc: Proc | None = None) -> dict[str, Any]:
    """Poll the node at ``endpoint`` until a HELLO succeeds; return the HELLO reply.

    Raises TimeoutError after ``timeout`` seconds (each attempt is bounded too), or
    RuntimeError at once if ``proc`` (the node's process) has exited.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{proc.describe()} exited with {proc.returncode} before it was ready; "
                f"stderr: {proc.stderr_text()!r}"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no node answered HELLO at {endpoint} within {timeout:g} s") from (
                last
            )
        try:
            # A DEALER queues the HELLO until the connection is up, so one attempt
            # succeeds as soon as the node binds within the attempt's timeout.
            with Client(endpoint, timeout=max(0.2, min(left, 2.0))) as client:
                return dict(client.hello)
        except BrokerUnreachable as exc:
            last = exc


def wait_until(cond: Callable[[], bool], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``cond`` until it is true (returns True) or ``timeout`` passes (returns False)."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
