"""The subscriber processes of ``soak.py``: the churning subscribers and the durable one.

Multiprocessing targets (spawn), as in :mod:`soak_roles`: each starts its guard, imports
``zbroker`` only once it runs, and reports on the result queue under its role's tag.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from soak_roles import DURABLE, PATTERN, PPATTERN, guard, watch_client


class _Churn:
    """The churning subscribers' clients, oldest first, and what opening and closing them
    took."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.counts: list[int] = []  # deliveries per client ever opened
        self.live: list[tuple[Any, Any, int]] = []  # (client, subscription, index in counts)
        self.st: dict[str, Any] = {
            "opened": 0,
            "closed": 0,
            "closed_unsub": 0,
            "missed": 0,
            "errors": {},
            "max_open_s": 0.0,
            "max_close_s": 0.0,
        }

    def open_one(self) -> None:
        from zbroker import Client

        counts = self.counts
        idx = len(counts)
        counts.append(0)

        def on_msg(msg: Any, idx: int = idx) -> None:
            counts[idx] += 1

        t = time.monotonic()
        client = Client(self.endpoint)
        try:
            sub = client.subscribe(PATTERN, on_msg)
        except BaseException:
            client.close()
            raise
        self.st["max_open_s"] = max(self.st["max_open_s"], time.monotonic() - t)
        self.live.append((client, sub, idx))
        self.st["opened"] += 1

    def close_oldest(self, unsub: bool) -> None:
        client, sub, _ = self.live.pop(0)
        t = time.monotonic()
        if unsub:
            sub.unsubscribe()
            self.st["closed_unsub"] += 1
        self.st["missed"] += client.missed
        client.close()
        self.st["max_close_s"] = max(self.st["max_close_s"], time.monotonic() - t)
        self.st["closed"] += 1

    def replace_oldest(self, unsub: bool) -> bool:
        """The oldest leaves (after ``unsubscribe()`` if ``unsub``), a new one joins; an
        error is counted. Returns ``unsub`` for the next turn (flipped once the oldest left)."""
        try:
            self.close_oldest(unsub)
            unsub = not unsub
            self.open_one()
        except Exception as exc:
            key = type(exc).__name__
            self.st["errors"][key] = self.st["errors"].get(key, 0) + 1
        return unsub


def churn_sub_main(
    q: Any,
    endpoint: str,
    k: int,
    churn_s: float,
    ready: Any,
    stop: Any,
    received: Any,
    deadline_s: float,
) -> None:
    """``k`` subscriber clients on ``PATTERN``; every ``churn_s`` the oldest leaves and a new
    one joins (alternately unsubscribe()+close() and close() alone)."""
    guard(deadline_s)
    events = watch_client("churn")
    churn = _Churn(endpoint)
    try:
        for _ in range(k):
            churn.open_one()
        ready.set()
        next_churn = time.monotonic() + churn_s
        flip = True
        while not stop.wait(0.25):
            received.value = sum(churn.counts)
            if time.monotonic() >= next_churn:
                next_churn += churn_s
                flip = churn.replace_oldest(flip)
        received.value = sum(churn.counts)
        while churn.live:
            churn.close_oldest(False)
        q.put(
            (
                "churn",
                {
                    **churn.st,
                    "received": sum(churn.counts),
                    "clients": len(churn.counts),
                    "lost_node": events.lost_node,
                    "warnings": events.warnings,
                },
            )
        )
    finally:
        for client, _, _ in churn.live:
            client.close()


def durable_sub_main(
    q: Any,
    gen: int,
    endpoint: str,
    credit: int,
    path: str,
    ready: Any,
    stop: Any,
    delivered: Any,
    deadline_s: float,
) -> None:
    """A durable subscriber: each delivery is appended to ``path`` (index, redelivered)
    before the callback returns. Stops cleanly when ``stop`` is set (or is SIGKILLed)."""
    guard(deadline_s)
    from zbroker import Client

    # line buffered: a line is written (to the page cache) per delivery, before the ack
    out = Path(path).open("a", buffering=1)  # noqa: SIM115 (closed in the finally below)
    count = [0, 0]

    def on_msg(msg: Any) -> None:
        i = int.from_bytes(msg.payload[:8], "little")
        out.write(f"{i} {1 if msg.redelivered else 0}\n")
        count[0] += 1
        count[1] += bool(msg.redelivered)
        delivered.value += 1

    events = watch_client(f"dsub{gen}")
    client = Client(endpoint)
    try:
        client.subscribe(PPATTERN, on_msg, durable=DURABLE, credit=credit)
        q.put((f"dsub{gen}-open", client.durable_info.get(DURABLE, {})))
        ready.set()
        while not stop.wait(0.2):
            pass
        q.put(
            (
                f"dsub{gen}",
                {"delivered": count[0], "redelivered": count[1], "lost_node": events.lost_node},
            )
        )
    finally:
        client.close()
        out.close()
