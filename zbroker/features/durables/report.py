"""One durable's row in ``status()["durables"]`` (and ``zbroker status``), and the
``status()["queues"]`` rows of durables this node consumes from another node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...store import Store
    from .members import Member
    from .state import Durable

__all__ = ["durable_row", "member_rows"]


def durable_row(d: Durable, store: Store) -> dict[str, Any]:
    return {
        "name": d.name,
        "pattern": d.pattern,
        **({} if d.selector is None else {"selector": d.selector.text}),
        "attached": d.consumer is not None or bool(d.shared and d.shared.consumers),
        "in_flight": d.window.in_flight() if d.shared is None else d.shared.in_flight(),
        **_shared_status(d),
        "stored": store.durable_depth(d.name),
        "dropped": store.durable_dropped(d.name),
        "max_msgs": d.max_msgs,
    }


def _shared_status(d: Durable) -> dict[str, Any]:
    if d.shared is None:
        return {}
    st = d.shared
    return {
        "shared": True,
        "consumers": len(st.consumers),
        "delivered": st.delivered,
        "redelivered": st.redelivered,
    }


def member_rows(members: Iterable[Member], node: str) -> list[dict[str, Any]]:
    """The shared durables homed elsewhere that node ``node`` consumes."""
    return [
        {
            "kind": "shared_durable",
            "name": m.name,
            "pattern": m.pattern,
            "home": m.home,
            "node": node,
            "members": {node: len(m.consumers)},  # (the home has all)
            "attached": m.attached,
            "in_flight": sum(len(c.inflight) for c in m.consumers.values()),
            "delivered": m.delivered,
            "redelivered": m.redelivered,
        }
        for m in members
    ]
