"""The ``replicate`` option of links: fan-out branches a secondary copies from a primary.

A replica topic has one source: two links (or one link twice) replicating overlapping
branches is refused at start, naming both (the seed system warns that such an overlap
makes the data on the topic incorrect)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..topics import patterns_overlap

if TYPE_CHECKING:
    from .link import LinkConfig

__all__ = ["check_replicate"]


def check_replicate(links: Sequence[LinkConfig], where: str) -> None:
    """Refuse overlapping ``replicate`` branches (on two links, or twice on one)."""
    seen: list[tuple[str, str]] = []  # (link, branch)
    for link in links:
        for branch in link.replicate:
            for other_link, other in seen:
                if patterns_overlap(branch, other):
                    same = other_link == link.name
                    raise ConfigError(
                        f"{where}: link {link.name!r} replicates {branch!r}, which overlaps "
                        f"{other!r} replicated {'by it already' if same else 'by link '}"
                        f"{'' if same else repr(other_link)}: a replica topic must have one "
                        "source (replicate disjoint branches)"
                    )
            seen.append((link.name, branch))
