"""Rule 8 for interest wider than a hosted branch: its *hosted part* goes toward the hosts.

A subscription on a pattern that a hosted branch does not cover but overlaps (``>`` or
``*.NEW`` beside a hosted ``ORDERS.>``) wants topics on both sides of the branch. Its
pattern is advertised everywhere, as direct interest, for the topics outside the branch;
a host that served the branch's topics from that everywhere-interest would follow the
shortest path to the subscriber, which may cross the publisher's way to the host, and the
loop rule (rule 5) then refuses the copy: the message is lost. So the topics of a hosted
branch are routed from interest *inside* hosted branches only, and a wider pattern adds
that interest for itself:

* For every local pattern ``P`` (not reserved, not covered by a branch with a live host)
  and every branch ``B`` with a live host that ``P`` overlaps, the node holds the local
  interest ``(P ∩ B, us)`` — the *hosted part*, :func:`intersect` — which ``B`` covers,
  so it is advertised only toward the hosts like any interest inside the branch. A part
  inside another part of the same pattern is left out (it would add nothing).
* A part carries the selectors and the stickiness of the local patterns it comes from
  (any without a selector: every message; any sticky: sticky), and is merged with a
  subscription on the same pattern, so one key stands for both.
* A part is not a subscription: it is never in the local trie, so it delivers nothing
  here (the local patterns that match a topic do).
* Parts follow the hosts: when a branch gets its first live host or loses its last, the
  parts of the local patterns that overlap it are made again.

With every subscriber of a hosted topic known only through interest inside the branch,
wide subscribers take exactly the ways inside subscribers take (toward the hosts), and
the claims and the host's service of rule 8 serve them once, loop-free, as they serve
inside interest (:mod:`~zbroker.routing.hosts`).
"""

from __future__ import annotations

from ..const import RESERVED_PREFIX
from ..topics import patterns_overlap
from .filters import pattern_covers
from .hosts import HostTable

__all__ = ["HostedParts", "intersect"]


def intersect(a: str, b: str) -> str | None:
    """The pattern of exactly the topics both ``a`` and ``b`` match (None: no topic).

    Patterns are closed under intersection: position by position a literal beats ``*``,
    two literals must agree, and where one pattern has ``>`` the rest of the other stands
    (both ``>``: ``>``)."""
    if not patterns_overlap(a, b):
        return None
    pa, pb = a.split("."), b.split(".")
    out: list[str] = []
    for i, sa in enumerate(pa):
        sb = pb[i]  # (overlapping patterns: pb runs at least as far until a '>')
        if sa == ">":
            out.extend(pb[i:])
            break
        if sb == ">":
            out.extend(pa[i:])
            break
        out.append(sb if sa == "*" else sa)
    return ".".join(out)


class HostedParts:
    """The hosted parts of this node's local interest."""

    def __init__(self) -> None:
        self.sources: dict[str, set[str]] = {}  # part -> local patterns it comes from
        self.parts: dict[str, frozenset[str]] = {}  # local pattern -> its parts

    @staticmethod
    def parts_of(pattern: str, hosts: HostTable) -> frozenset[str]:
        """The hosted parts of local interest in ``pattern`` as the live hosts stand."""
        if pattern.startswith(RESERVED_PREFIX) or not hosts.branches or hosts.covered(pattern):
            return frozenset()  # (covered interest goes toward the hosts itself)
        found = {p for b in hosts.branches if (p := intersect(pattern, b)) is not None}
        return frozenset(
            p for p in found if not any(o != p and pattern_covers(o, p) for o in found)
        )

    def refresh(self, pattern: str, present: bool, hosts: HostTable) -> set[str]:
        """Make the parts of local ``pattern`` again (``present``: it is still local
        interest); the parts it had or has, whose entries must be selected again."""
        new = self.parts_of(pattern, hosts) if present else frozenset()
        old = self.parts.pop(pattern, frozenset())
        if new:
            self.parts[pattern] = new
        for part in old - new:
            held = self.sources[part]
            held.discard(pattern)
            if not held:
                del self.sources[part]
        for part in new - old:
            self.sources.setdefault(part, set()).add(pattern)
        return set(old | new)

    def sticky(self, part: str, local_sticky: set[str]) -> bool:
        """Is a part sticky (some pattern it comes from, or the part itself, is)?"""
        return part in local_sticky or any(p in local_sticky for p in self.sources[part])

    def selectors(
        self, part: str, local_patterns: set[str], local_selectors: dict[str, frozenset[str]]
    ) -> frozenset[str] | None:
        """The selectors behind a part: None (every message) if a pattern it comes from,
        or a subscription on the part itself, has none; else all of theirs."""
        texts: set[str] = set()
        for p in (*self.sources[part], *((part,) if part in local_patterns else ())):
            sel = local_selectors.get(p)
            if sel is None:
                return None
            texts.update(sel)
        return frozenset(texts)
