"""Branches that would meet: a plan whose targets leave by two links and cross one node.

Rule 3's tree rests on every neighbour hearing the same entries: then the best paths from
a node never cross a third node by two first hops, and each node gets one copy. A link
whose ``ttl`` is below the network's diameter breaks that (its far side never hears the
longer entries), and so can filters: in a square P-A, P-B, A-W (``ttl`` 2), B-W, with
subscribers on W and on Z two hops past W, P's best entry for W goes through A (the
tie-break) and its only entry for Z through B. P would send two copies, one per first hop,
each naming its own targets; both reach W, whose dedupe keeps the first and drops the
second with the targets only it carried, so Z got nothing.

:func:`untangle` finds such a crossing in a topic's plan and moves one of the two origins
to the other's first hop, when that neighbour advertised a live entry of it as short as
the one chosen (its entry never leads back here: split horizon). That is another choice
among equally short entries, so no path gets longer and no message crosses a link with
more hops than before (a link's ttl counts a message's hops from its publisher, which no
entry tells). The two then travel as one copy and the neighbour routes both from its own
table (where the same check runs again). A crossing no neighbour can take so is left as
it was.

A plan that moved an origin depends on an entry that is not the best of its key, so the
patterns of the keys it consulted are recorded (:attr:`InterestTable.alternates`): any
change of an entry with such a pattern evicts the plans of its topics, as a change of a
best entry does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .events import Key, Path
from .table import EngineLink

__all__ = ["Chosen", "untangle"]

#: origin -> (link id of the first hop, path of the entry over it)
Chosen = dict[str, tuple[str, Path]]


def untangle(
    chosen: Chosen, keys: Iterable[Key], links: Mapping[str, EngineLink], consulted: set[str]
) -> list[str]:
    """Move origins of ``chosen`` until no two branches cross a node (or no move helps);
    ``keys``: the keys the plan matched. Returns the origins whose first hop changed;
    the patterns of the keys consulted for a move are added to ``consulted``."""
    if len({link_id for link_id, _ in chosen.values()}) < 2 or _crossing(chosen) is None:
        return []  # one branch, or a tree: the usual case, nothing to look up
    keys_of: dict[str, list[Key]] = {}
    for key in keys:
        keys_of.setdefault(key[1], []).append(key)
    first = {origin: link_id for origin, (link_id, _) in chosen.items()}
    for _ in range(len(chosen)):  # each turn moves one origin; bounded even if they swap
        pair = _crossing(chosen)
        if pair is None:
            break
        options: list[tuple[int, str, str, Path]] = []
        for origin, other in (pair, pair[::-1]):
            to = chosen[other][0]
            path = _entry(links[to], keys_of.get(origin, ()), consulted)
            if path is not None and len(path) <= len(chosen[origin][1]):  # (no longer)
                options.append((len(path) - len(chosen[origin][1]), origin, to, path))
        if not options:
            break
        _, origin, to, path = min(options)
        chosen[origin] = (to, path)
    return [origin for origin, (link_id, _) in chosen.items() if link_id != first[origin]]


def _crossing(chosen: Chosen) -> tuple[str, str] | None:
    """Two origins whose branches leave by different links and cross one node. (Run on
    every plan of more than one branch: the first pass keeps one string per node.)"""
    seen: dict[str, str] = {}  # node -> the first hop of the first branch crossing it
    get = seen.get
    for origin, (link_id, path) in chosen.items():
        for node in path:
            first = get(node)
            if first is None:
                seen[node] = link_id
            elif first != link_id:
                return _owner(chosen, node, first), origin
    return None


def _owner(chosen: Chosen, node: str, link_id: str) -> str:
    """The first origin whose branch leaves by ``link_id`` and crosses ``node``."""
    return next(o for o, (li, path) in chosen.items() if li == link_id and node in path)


def _entry(link: EngineLink, keys: Iterable[Key], consulted: set[str]) -> Path | None:
    """The shortest live entry ``link`` holds of any of ``keys`` (one origin's)."""
    best: Path | None = None
    if not link.can_send:
        return None
    for key in keys:
        consulted.add(key[0])
        path = link.adj_in.get(key)
        if path is not None and not link.is_held(key) and (best is None or len(path) < len(best)):
            best = path
    return best
