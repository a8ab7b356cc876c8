"""Spilling: what waits on this node for a group whose members here have no credit left
goes to other nodes that advertise free credit for the group.

``local_first`` sends *new* messages elsewhere while a group is saturated here
(:attr:`~zbroker.routing.groups.GroupTable.saturated`), but the messages already waiting
would wait for a slow or hung member here while a member elsewhere is idle (and, past
the bound, the oldest would be dropped). After each pass whose pump left messages
waiting and no member here with room, the oldest of them are picked again, afresh from
this node (their path starts here, as for a node whose last member left), among the
other nodes with room (:func:`pick`): a message waits only while no member anywhere has
room for it. Under ``round_robin`` (this node's policy for the group), whose members each
get an exact share, only once no member here has had room for a second
(:meth:`~.members.LocalGroup.stuck`), as its strict turns stop waiting for such a member:
a member that merely fell behind keeps its share.

How many: at most the free credit each node last advertised, less what this node spilled
to it since that advertisement (its stamp), so a node is not sent more than it said it
has room for before it says again. A node's advertisement may not count what is still on
its way to it yet: what it is sent beyond its room waits there, and goes on from there
the same way only if another node has room. Each message still reaches one member: it is
moved, never copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...routing.groups import GroupTable
    from .members import LocalGroup

__all__ = ["pick", "room", "spill"]

#: messages looked at beyond the room found, per pass (those no node with room may take:
#: a link that refuses their topic): the scan stays bounded however long the backlog
SCAN_EXTRA = 64


def room(groups: GroupTable, local: LocalGroup, me: str) -> dict[str, int]:
    """Per other node with members of ``local``'s group: how many waiting messages it
    may still be sent (only those with some). Updates ``local.spent`` to the stamps held."""
    gkey = local.gkey
    origins = groups.origins.get(gkey, ())
    spent = local.spent
    for gone in [o for o in spent if o not in origins]:
        del spent[gone]
    out: dict[str, int] = {}
    for origin in origins:
        if origin == me:
            continue
        cap = groups.capacity.get((gkey, origin))
        stamp, free = (0, 1) if cap is None else (cap[0], cap[2])  # (none heard: one)
        was = spent.get(origin)
        if was is None or was[0] != stamp:
            was = spent[origin] = (stamp, 0)
        if free - was[1] > 0:
            out[origin] = free - was[1]
    return out


def spill(
    groups: GroupTable,
    local: LocalGroup,
    me: str,
    send: Callable[[list[Any], str, str], None],
) -> int:
    """Move the oldest waiting messages of ``local`` to nodes with room (``send(msg, group
    key, origin)`` sends one); returns how many moved. The rest keep their order."""
    rooms = room(groups, local, me)
    total = sum(rooms.values())
    if not total:
        return 0
    pending = local.pending
    kept: list[list[Any]] = []
    moved = 0
    scan = total + SCAN_EXTRA
    while pending and moved < total and scan > 0:
        scan -= 1
        msg = pending.popleft()
        origin = pick(groups, local.gkey, msg[0], rooms, me)
        if origin is None:
            kept.append(msg)
            continue
        rooms[origin] -= 1
        stamp, used = local.spent[origin]
        local.spent[origin] = (stamp, used + 1)
        moved += 1
        send(msg, local.gkey, origin)
    pending.extendleft(reversed(kept))
    return moved


def pick(groups: GroupTable, gkey: str, topic: str, rooms: dict[str, int], me: str) -> str | None:
    """Where a message on ``topic`` that waits here goes: among the other origins of
    ``gkey`` it may reach from here (the checks of any pick) that ``rooms`` gives room to,
    the one with the most room left, the nearest among equals. None: no such origin."""
    best: tuple[int, int, str] | None = None
    for origin, hops in groups.candidates(gkey, topic).items():
        left = rooms.get(origin, 0)
        if left > 0 and origin != me:
            rank = (-left, hops, origin)
            if best is None or rank < best:
                best = rank
    return None if best is None else best[2]
