"""The advisory kinds: which node event becomes which ``$ZB.ADVISORY.<id>.<KIND>``, and
its payload.

The table is open: a feature that emits a new node event (``zbroker/node/events.py``)
gets its advisory with one line in :data:`KINDS`; the payload is the event's fields (a
tuple becomes an array), beside the fields every advisory has (:func:`payload`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...const import RESERVED_PREFIX
from ...node.events import (
    AuthRefused,
    DurableAttached,
    DurableDeleted,
    DurableDetached,
    DurableOpened,
    DurableOverflow,
    HandshakeRefused,
    InterestAdded,
    InterestRemoved,
    LinkWentDown,
    LinkWentUp,
    NodeEvent,
    PeerFound,
    PeerLost,
    PermissionRefused,
    QueueJoined,
    QueueLeft,
    SlowSubscriber,
)

__all__ = [
    "ADVISORY_PREFIX",
    "KINDS",
    "SUMMARY_KINDS",
    "SYS_PREFIX",
    "advisory_topic",
    "event_fields",
    "payload",
    "stats_topic",
]

ADVISORY_PREFIX = RESERVED_PREFIX + ".ADVISORY"
SYS_PREFIX = RESERVED_PREFIX + ".SYS"

#: node event -> advisory kind (one line per kind: the payload is the event's fields)
KINDS: dict[type[NodeEvent], str] = {
    LinkWentUp: "LINK_UP",
    LinkWentDown: "LINK_DOWN",
    PeerFound: "PEER_FOUND",
    PeerLost: "PEER_LOST",
    InterestAdded: "INTEREST_ADDED",
    InterestRemoved: "INTEREST_REMOVED",
    SlowSubscriber: "SLOW_SUBSCRIBER",
    DurableOpened: "DURABLE_OPENED",
    DurableAttached: "DURABLE_ATTACHED",
    DurableDetached: "DURABLE_DETACHED",
    DurableDeleted: "DURABLE_DELETED",
    DurableOverflow: "DURABLE_OVERFLOW",
    HandshakeRefused: "HANDSHAKE_REFUSED",
    AuthRefused: "AUTH_REFUSED",
    PermissionRefused: "PERMISSION_REFUSED",
    QueueJoined: "QUEUE_JOINED",
    QueueLeft: "QUEUE_LEFT",
}

#: kinds the feature summarizes from the node's counters (not events): at most one of
#: each per ``summary_interval``, and only when something happened
SUMMARY_KINDS = ("NO_SUBSCRIBER", "DROPS")


def advisory_topic(broker_id: str, kind: str) -> str:
    return f"{ADVISORY_PREFIX}.{broker_id}.{kind}"


def stats_topic(broker_id: str) -> str:
    return f"{SYS_PREFIX}.{broker_id}.STATS"


def event_fields(event: NodeEvent) -> dict[str, Any]:
    """An event's fields as a msgpack-ready map (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def payload(
    kind: str, broker_id: str, seq: int, ts: float, suppressed: int, fields: dict[str, Any]
) -> dict[str, Any]:
    """An advisory: the common fields, then the kind's own."""
    return {
        "kind": kind,
        "broker": broker_id,
        "seq": seq,
        "time": ts,
        "suppressed": suppressed,
        **fields,
    }
