"""Link filters: which topics may cross a link, and which interest is worth advertising.

A message crosses a link only if it matches some ``include`` pattern (when any are given)
and no ``exclude`` pattern. ``static`` patterns cross regardless of interest. Interest for a
pattern is advertised over a link only if some topic of that pattern could cross it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..const import INTERNAL_BRANCHES, RESERVED_PREFIX
from ..topics import match, patterns_overlap

__all__ = ["LinkFilter", "pattern_covers"]


def pattern_covers(a: str, b: str) -> bool:
    """True if every topic matching pattern ``b`` also matches pattern ``a``. A pattern
    starting with a wildcard covers nothing under ``$ZB`` (it matches none of its topics),
    nor one with a wildcard after ``$ZB`` anything in an internal branch."""
    pa = a.split(".")
    pb = b.split(".")
    if pb[0] == RESERVED_PREFIX and pa[0] in ("*", ">"):
        return False
    if len(pb) > 1 and pb[0] == RESERVED_PREFIX and pb[1] in INTERNAL_BRANCHES:
        if len(pa) > 1 and pa[1] in ("*", ">"):
            return False  # nor one after $ZB an internal branch
    for i, sa in enumerate(pa):
        if sa == ">":
            return i < len(pb)
        if i >= len(pb):
            return False
        sb = pb[i]
        if sb == ">":
            return False
        if sa != "*" and sa != sb:
            return False
    return len(pa) == len(pb)


@dataclass(frozen=True, slots=True)
class LinkFilter:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    static: tuple[str, ...] = ()

    def allows_topic(self, topic: str) -> bool:
        if not self.include and not self.exclude:
            return True
        if self.include and not any(match(p, topic) for p in self.include):
            return False
        return not any(match(p, topic) for p in self.exclude)

    def allows_pattern(self, pattern: str) -> bool:
        """Could any topic of ``pattern`` cross? (Advertise interest only then.)"""
        if not self.include and not self.exclude:
            return True
        if self.include and not any(patterns_overlap(p, pattern) for p in self.include):
            return False
        return not any(pattern_covers(p, pattern) for p in self.exclude)

    def is_static(self, topic: str) -> bool:
        return any(match(p, topic) for p in self.static)
