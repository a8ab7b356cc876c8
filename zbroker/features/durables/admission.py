"""Admission: a persistent publish refused when a ``reject-new`` durable it would fill is
full (the kernel asks before it takes the publish)."""

from __future__ import annotations

from collections.abc import Callable

from ...node import Refusal
from ...node.context import Context
from ...node.events import DurableOverflow

__all__ = ["admit"]


def admit(
    ctx: Context,
    match: Callable[[str], frozenset[str]],
    topics: dict[str, list[int]],
    *,
    batch: bool,
) -> Refusal | None:
    """``topics``: topic -> [messages, bytes] of the publish; ``match``: the durables a
    topic goes to. A refusal names the first full durable."""
    store = ctx.store
    if store is None:
        return None
    adds: dict[str, list[int]] = {}
    total = 0
    for topic, (n, size) in topics.items():
        total += n
        for name in match(topic):
            a = adds.setdefault(name, [0, 0])
            a[0] += n
            a[1] += size
    for name, (n, size) in adds.items():
        if store.durable_rejects(name, n, size):
            ctx.emit(DurableOverflow(name=name, policy="reject-new", messages=total))
            return Refusal(
                f"refused: durable subscription {name!r} is full (overflow policy "
                "reject-new): it must be drained or deleted first"
                + ("; the rows stay staged until aborted" if batch else ""),
                total,
            )
    return None
