"""Capacity: the members and free credit of each group's members on this node, measured
and flooded to every link in QCAP frames (stamped: newer replaces older), what other
nodes flood, and the whole of it for a link that comes up.

A node keeps capacity only for the origins it has an entry of
(:meth:`~zbroker.routing.groups.GroupTable.set_capacity`): a group whose last member
here left has no capacity here, and none is flooded for it; the withdrawal of its
interest tells every node, and takes their entry with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ... import wire
from ...identity import EPOCH
from ...routing.groups import split_key
from .members import LocalGroup

if TYPE_CHECKING:
    from ...links.state import Link
    from ...node.context import Context
    from ...routing.groups import GroupTable

__all__ = ["CapacityFlood"]


class CapacityFlood:
    """QCAP in and out for one node."""

    def __init__(self, ctx: Context, groups: GroupTable) -> None:
        self._ctx = ctx
        self._groups = groups
        self._stamp = ctx.incarnation << 32
        self.ups: set[str] = set()  # engine link ids that came up: the whole to send

    def on_qcap(self, link: Link, value: list[Any]) -> None:
        me = self._ctx.broker_id
        # a stamp is its origin's incarnation (seconds since EPOCH) << 32 and a count: one
        # from over a day ahead of our clock would never be replaced by a real one
        latest = (int(time.time()) - EPOCH + 86_400) << 32
        for gkey, origin, stamp, members, free in wire.decode_qcap(value):
            if split_key(gkey) is None or stamp > latest:
                self._ctx.bad(link.source, "bad_value", f"QCAP entry {gkey!r} of {origin!r}")
            elif origin != me:
                self._groups.set_capacity(gkey, origin, (stamp, members, free))

    def send_to_new_links(self) -> None:
        """The whole capacity held, to each link that came up: called after the pass's
        adverts left (before_commit), since the peer keeps capacity only for the origins
        it has an entry of, which our full table, sent on link up, gives it."""
        ups, self.ups = self.ups, set()
        caps = self._groups.all_capacity()
        if not caps:
            return
        now = time.monotonic()
        for engine_id in ups:
            link = self._ctx.links.by_engine_id.get(engine_id)
            if link is not None:
                self._ctx.links.send(link, wire.encode_qcap(caps), now)

    def flood(self, local: Mapping[str, LocalGroup], dirty: set[str], now: float) -> None:
        """Measure the groups of ``dirty`` here, then flood every capacity that changed
        (measured here or heard) since the last flood."""
        me = self._ctx.broker_id
        for gkey in dirty:
            group = local.get(gkey)
            if group is not None:  # (gone here: see the module docstring)
                self._stamp += 1
                cap = (self._stamp, len(group.members), group.free())
                self._groups.set_capacity(gkey, me, cap)
        dirty.clear()
        changed = self._groups.take_changed()
        if changed:
            frame = wire.encode_qcap(changed)
            links = self._ctx.links
            for link in links.all():
                if link.engine_id in links.by_engine_id:
                    links.send(link, frame, now)
