"""Detours: a target whose best entry leads back along the copy's own path.

A copy arrives with the targets its sender chose this node for. While the network
changes (a link goes down or comes back, a ghost is outranked by a live entry) this node
may already prefer to reach one of them *through a node the copy has crossed*: the two
disagree for as long as an advertisement takes to cross. Rule 5 forbids that link, so the
target used to be dropped without a word. A persistent message lost so had been
confirmed to its publisher (the fault mesh of issue 18 lost one this way: N1 sent N3 a
copy for N4 just as N4 came back, and N3 then preferred N4's live entry through N1 to
its own ghost of the direct link).

:func:`detour` routes such a target by the best *other* entry of it this node holds
(live before held, then the shortest, as rule 2 ranks them) whose link the copy may take
and whose path crosses no node of the copy's path, so the detour cannot come back along
it either. The same holds for a target whose best entry's link is allowed but whose
entry crosses the copy's path further on (:func:`crossings`): the next node could only
send it back along the path, and would drop it. The fault mesh lost confirmed messages
so: N3, restarted, had its link to N2 up and its direct link to N4 not yet; N1 sent it
copies for N4, and N3's best entry of N4 was N2's, which leads through N1 (live before
its own held ghost of the direct link); N2 could route them nowhere.

Only a copy's explicit targets are detoured (a sender chose this node for them); nothing
is done when no such entry exists (counted by the caller, for persistent messages). The
patterns of the keys consulted are recorded like those of :mod:`.meets`, so a change of
any of their entries evicts the plan and its routes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .events import Key, Path
from .flood import FLOOD
from .hosts import MARK
from .table import EngineLink

__all__ = ["crossings", "detour", "unserved"]

#: (link id, targets or None, copies), as routes.Send (which imports this module)
_Send = tuple[str, tuple[str, ...] | None, int]


def crossings(
    groups: Mapping[str, list[str]],
    keys: Iterable[Key],
    links: Mapping[str, EngineLink],
    path: Path,
) -> dict[str, list[str]]:
    """Per group (link id -> origins), the origins whose every entry over that link
    crosses a node of ``path``; ``keys``: the keys the topic matches."""
    keys_of: dict[str, list[Key]] = {}
    for key in keys:
        keys_of.setdefault(key[1], []).append(key)
    out: dict[str, list[str]] = {}
    for link_id, origins in groups.items():
        adj_in = links[link_id].adj_in
        for origin in origins:
            entries = [adj_in.get(k) for k in keys_of.get(origin, ())]
            known = [e for e in entries if e is not None]
            if known and all(any(node in path for node in e) for e in known):
                out.setdefault(link_id, []).append(origin)
    return out


def detour(
    groups: dict[str, list[str]],
    blocked: Iterable[str],
    keys: Iterable[Key],
    links: Mapping[str, EngineLink],
    path: Path,
    may_send: Callable[[EngineLink], bool],
    consulted: set[str],
    crossing: Mapping[str, list[str]] | None = None,
) -> None:
    """Move the origins of the ``blocked`` groups (link id -> origins), and those of
    ``crossing`` (link id -> origins: see :func:`crossings`), to the link of their best
    entry the copy may take (``may_send``) and whose path avoids ``path``; ``keys``: the
    keys the topic matches. Origins with no such entry stay where they are."""
    blocked = list(blocked)
    moving = {link_id: list(groups[link_id]) for link_id in blocked}
    for link_id, origins in (crossing or {}).items():
        moving.setdefault(link_id, list(origins))
    wanted = {o for origins in moving.values() for o in origins}
    keys_of: dict[str, list[Key]] = {}
    for key in keys:
        if key[1] in wanted:
            keys_of.setdefault(key[1], []).append(key)
            consulted.add(key[0])
    usable = [ln for ln in links.values() if ln.id not in blocked and may_send(ln)]
    for link_id, origins in moving.items():
        for origin in origins:
            to = _best_way(usable, keys_of.get(origin, ()), path)
            if to is not None and to != link_id:
                groups[link_id].remove(origin)
                groups.setdefault(to, []).append(origin)


def _best_way(usable: list[EngineLink], keys: Iterable[Key], path: Path) -> str | None:
    """The link of the best entry of ``keys`` (one origin's) among ``usable`` whose path
    crosses no node of ``path``."""
    best: tuple[bool, int, str, str] | None = None
    for link in usable:
        for key in keys:
            entry = link.adj_in.get(key)
            if entry is None or any(node in path for node in entry):
                continue
            rank = link.rank(key, entry)
            if best is None or rank < best:
                best = rank
    return None if best is None else best[3]


def unserved(targets: tuple[str, ...], sends: Iterable[_Send], me: str) -> list[str]:
    """The ``targets`` of a copy that neither this node (``me``) nor any of its ``sends``
    serves: what it loses here (a caller counts it for a persistent message)."""
    if targets and targets[0][:1] in (MARK, FLOOD):
        return []  # (on its way to a host, or flooded: not a list of origins)
    served = {me}
    for _link, send_targets, _copies in sends:
        if send_targets is None:
            return []  # (a static push: its receiver computes the targets)
        served.update(send_targets)
    return [o for o in targets if o not in served]
