"""A queue group's members on this node: who they are, their credit, and which of them
gets the next message the network picked this node for.

Each member is a client connection (its routing id on the ROUTER) and a number the
client gave it, with a credit window (:class:`~zbroker.credit.CreditWindow`): it is sent
a message (QDELIVER) only while it has room, and acknowledges cumulatively after its
callback. Messages picked for this node wait (bounded) while every member's credit is
used up; among members with room they go round robin. Queue groups are at most once: a
member that dies with messages in flight loses them (counted).
"""

from __future__ import annotations

import collections
from typing import Any

from ...credit import CreditWindow

__all__ = ["PENDING_MAX", "LocalGroup", "Member"]

#: messages a group holds for its members here while all their credit is used up
PENDING_MAX = 10_000


class Member:
    __slots__ = ("credit", "ident", "member", "n", "window")

    def __init__(self, ident: bytes, member: int, credit: int) -> None:
        self.ident = ident  # the client connection's routing id
        self.member = member  # the client's number for this membership
        self.window = CreditWindow(credit)
        self.n = 0  # deliveries numbered so far (QDELIVER ``n``)


class LocalGroup:
    """The members of one group key on this node, and what waits for them."""

    __slots__ = (
        "delivered",
        "dropped",
        "gkey",
        "group",
        "lost",
        "members",
        "pattern",
        "pending",
        "rr",
    )

    def __init__(self, gkey: str, group: str, pattern: str) -> None:
        self.gkey = gkey
        self.group = group
        self.pattern = pattern
        self.members: list[Member] = []
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.rr = 0  # where the round robin over members resumes
        self.delivered = 0
        self.dropped = 0  # pending overflowed (oldest dropped)
        self.lost = 0  # in flight to a member that died

    def offer(self, m: list[Any]) -> bool:
        """Queue a message for the members; False if that dropped the oldest waiting."""
        self.pending.append(m)
        if len(self.pending) > PENDING_MAX:
            self.pending.popleft()
            self.dropped += 1
            return False
        return True

    def next_member(self) -> Member | None:
        """The next member with credit left, round robin; None if all are full."""
        members = self.members
        n = len(members)
        for i in range(n):
            m = members[(self.rr + i) % n]
            if m.window.room() > 0:
                self.rr = (self.rr + i + 1) % n
                return m
        return None

    def find(self, ident: bytes, member: int) -> Member | None:
        for m in self.members:
            if m.ident == ident and m.member == member:
                return m
        return None

    def remove(self, m: Member) -> None:
        self.members.remove(m)
        self.lost += m.window.in_flight()
        if self.members:
            self.rr %= len(self.members)

    def free(self) -> int:
        return sum(max(m.window.room(), 0) for m in self.members)

    def in_flight(self) -> int:
        return sum(m.window.in_flight() for m in self.members)
