"""A queue group's members on this node: who they are, their credit, and which of them
gets the next message the network picked this node for.

Each member is a client connection (its routing id on the ROUTER) and a number the
client gave it, with a credit window (:class:`~zbroker.credit.CreditWindow`): it is sent
a message (QDELIVER) only while it has room, and acknowledges cumulatively after its
callback. Messages picked for this node wait (bounded) while every member's credit is
used up; among members with room they go round robin. The node keeps what is in flight
to each member until acknowledged: a member that leaves (QUEUE_LEAVE: it unsubscribed or
its client closed, after acknowledging what it processed) gives the rest back, first in
line for the others. Queue groups are at most once: a member that dies with messages in
flight loses them (counted).
"""

from __future__ import annotations

import collections
from typing import Any

from ...credit import CreditWindow

__all__ = ["LocalGroup", "Member"]

#: how far ahead of the least served member another may be served (strict shares)
SLACK = 4
#: seconds a member's credit may stay used up before strict shares stop waiting for it
STUCK_AFTER = 1.0


class Member:
    __slots__ = ("credit", "full_since", "held", "ident", "member", "n", "share", "window")

    def __init__(self, ident: bytes, member: int, credit: int) -> None:
        self.ident = ident  # the client connection's routing id
        self.member = member  # the client's number for this membership
        self.window = CreditWindow(credit)
        # the messages in flight, in the order of ``window.sent`` (given back on a leave)
        self.held: collections.deque[list[Any]] = collections.deque()
        self.n = 0  # deliveries numbered so far (QDELIVER ``n``)
        self.share = 0  # what decides who is served next (see the module docstring)
        self.full_since: float | None = None  # when its credit was last used up


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
        "pending_max",
        "rr",
        "spent",
    )

    def __init__(self, gkey: str, group: str, pattern: str, pending_max: int) -> None:
        self.gkey = gkey
        self.group = group
        self.pattern = pattern
        self.members: list[Member] = []
        self.pending: collections.deque[list[Any]] = collections.deque()
        # what waits while all credit is used up: as many as a subscriber's queue holds
        # (the node's hwm), past which the oldest is dropped, counted
        self.pending_max = pending_max
        self.rr = 0  # where the round robin over members resumes
        self.delivered = 0
        self.dropped = 0  # pending overflowed (oldest dropped)
        self.lost = 0  # in flight to a member that died
        # per other node: (its capacity stamp, messages spilled to it since: .spill)
        self.spent: dict[str, tuple[int, int]] = {}

    def offer(self, m: list[Any]) -> bool:
        """Queue a message for the members; False if that dropped the oldest waiting."""
        self.pending.append(m)
        if len(self.pending) > self.pending_max:
            self.pending.popleft()
            self.dropped += 1
            return False
        return True

    def add(self, m: Member) -> None:
        if self.members:
            m.share = min(x.share for x in self.members)
        self.members.append(m)

    def next_member(self, now: float, *, strict: bool = False) -> Member | None:
        """The least served member with credit left (ties round robin); None if all are
        full, or (``strict``) if it would run ahead of a slower member."""
        members = self.members
        n = len(members)
        best: Member | None = None
        at = 0
        floor: int | None = None
        for i in range(n):
            j = (self.rr + i) % n
            m = members[j]
            if m.window.room() > 0:
                if best is None or m.share < best.share:
                    best, at = m, j
            elif strict and m.full_since is not None and now - m.full_since >= STUCK_AFTER:
                continue  # stuck: not waited for
            if floor is None or m.share < floor:
                floor = m.share
        if best is None or (strict and floor is not None and best.share > floor + SLACK):
            return None
        best.share += 1
        self.rr = (at + 1) % n
        return best

    def sent(self, m: Member, msg: list[Any], now: float) -> None:
        m.n += 1
        m.window.sent_one(m.n)
        m.held.append(msg)
        if m.window.room() <= 0:
            m.full_since = now
        self.delivered += 1

    def unsend(self, m: Member, msgs: list[list[Any]]) -> None:
        """``msgs``, the last handed to ``m``, could not be sent: they wait again, first,
        and ``m``'s numbering and window forget them."""
        for _ in msgs:
            m.window.sent.pop()
            m.held.pop()
        m.n -= len(msgs)
        m.window.sent_upto = m.n
        m.share -= len(msgs)
        self.delivered -= len(msgs)
        self.pending.extendleft(reversed(msgs))

    @staticmethod
    def acked(m: Member, upto: int) -> None:
        m.window.acked(upto)
        while len(m.held) > len(m.window.sent):
            m.held.popleft()
        if m.window.room() > 0:
            m.full_since = None

    def give_back(self, m: Member) -> int:
        """``m`` leaves: what is in flight to it (it acknowledged what it processed, and
        runs no callback after leaving) waits again, first, for the others. Returns how
        many messages. (Pending may exceed its bound by at most ``m``'s credit.)"""
        back = m.held
        self.pending.extendleft(reversed(back))
        self.delivered -= len(back)
        m.held = collections.deque()
        m.window.reset(m.window.credit)
        return len(back)

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

    def stuck(self, now: float) -> bool:
        """Has every member's credit been used up for STUCK_AFTER seconds at least?"""
        return all(
            m.full_since is not None and now - m.full_since >= STUCK_AFTER for m in self.members
        )

    def free(self) -> int:
        return sum(max(m.window.room(), 0) for m in self.members)

    def in_flight(self) -> int:
        return sum(m.window.in_flight() for m in self.members)
