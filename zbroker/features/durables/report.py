"""One durable's row in ``status()["durables"]`` (and ``zbroker status``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...store import Store
    from .state import Durable

__all__ = ["durable_row"]


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
