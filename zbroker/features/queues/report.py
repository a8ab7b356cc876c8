"""The ``queues`` section of a node's status: per queue group, its members per node (as
the network advertised them), what waits, is in flight and was delivered here, and what
this node dropped (its bound) and lost of the group's messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...routing.groups import DEFAULT_POLICY, GroupTable, split_key
from .members import LocalGroup

__all__ = ["queue_status"]


def queue_status(
    groups: GroupTable, local: dict[str, LocalGroup], me: str, lost: Mapping[str, int]
) -> list[dict[str, Any]]:
    """One row per group key known here (members here or elsewhere), sorted. ``lost``: per
    group key, what else this node lost of the group's messages (no member left it could
    reach, a link that went down with them) than in flight to a member here that died."""
    rows = []
    for gkey in sorted(set(groups.origins) | set(local)):
        parts = split_key(gkey)
        if parts is None:
            continue
        group, pattern = parts
        members: dict[str, int] = {}
        for origin in sorted(groups.origins.get(gkey, ())):
            cap = groups.capacity.get((gkey, origin))
            members[origin] = 1 if cap is None else cap[1]  # (1: not heard yet)
        lg = local.get(gkey)
        if lg is not None:
            members[me] = len(lg.members)
        rows.append(
            {
                "kind": "group",
                "group": group,
                "pattern": pattern,
                "policy": groups.policies.get(group, DEFAULT_POLICY),
                "members": members,
                "pending": 0 if lg is None else len(lg.pending),
                "in_flight": 0 if lg is None else lg.in_flight(),
                "delivered": 0 if lg is None else lg.delivered,
                "dropped": 0 if lg is None else lg.dropped,
                "lost": lost.get(gkey, 0) + (0 if lg is None else lg.lost),
            }
        )
    return rows
