"""Rule 3 of :mod:`zbroker.routing.engine`: which interest is advertised over which link,
queued per link and sent as changes only.

Per link, ``pending`` holds what the next :func:`flush` sends and ``adj_out`` what was last
sent, so a flush skips what would repeat it (refcount-style). Whether a link carries our
interest at all is its ``can_receive`` (the propagation policy table in the engine's
docstring); besides, an entry is never advertised back over the link it came from (split
horizon), to a neighbour already on its path, past the link's ttl, against its filters, or
to a ghost.
"""

from __future__ import annotations

from .events import Entry, Key, Path, SendAdvert
from .keys import judged_pattern
from .loops import path_holds, ttl_spent
from .table import Best, EngineLink, InterestTable

__all__ = ["advertise", "flush", "offer_table", "withdraw"]


def advertise(
    links: dict[str, EngineLink],
    key: Key,
    best: Best,
    path: Path,
    sticky: bool,
    selectors: frozenset[str] | None = None,
    allowed: set[str] | None = None,
    held: bool = False,
) -> None:
    """Queue the new best entry of ``key`` (``path``: its path with our ID appended) for
    every link at once: the advertised path is the same for all. ``allowed``: the only
    links it may go over (interest in a hosted branch goes toward the hosts, rule 8)."""
    via = best[0]
    pattern = judged_pattern(key[0])
    adv = (path, sticky, selectors, held)
    hops = len(path)
    for link in links.values():
        if not link.up:
            continue  # nothing is sent to a ghost
        if (
            link.can_receive
            and via != link.id  # split horizon
            and not path_holds(path, link.peer)
            and not ttl_spent(hops, link.options.ttl)
            and link.filter.allows_pattern(pattern)
            and (allowed is None or link.id in allowed)
        ):
            link.pending[key] = adv
        elif key in link.adj_out or key in link.pending:
            link.pending[key] = None


def withdraw(links: dict[str, EngineLink], key: Key) -> None:
    """Queue the withdrawal of ``key`` wherever it was advertised or is about to be."""
    for link in links.values():
        if key in link.adj_out or key in link.pending:
            link.pending[key] = None


def offer_table(link: EngineLink, table: InterestTable) -> None:
    """A new link first receives the full table: queue every best entry it may carry."""
    if not link.up or not link.can_receive:
        return  # a ghost, or the peer cannot send to us
    me = table.broker_id
    hosts = table.hosts
    for key, best in table.best.items():
        via, path = best
        if via == link.id:
            continue  # split horizon
        new_path = (*path, me)
        if path_holds(new_path, link.peer) or ttl_spent(len(new_path), link.options.ttl):
            continue
        if not link.filter.allows_pattern(judged_pattern(key[0])):
            continue
        if hosts.branches:
            allowed = hosts.allowed(key[0])
            if allowed is not None and link.id not in allowed:
                continue  # hosted interest goes toward the hosts only (rule 8)
        if table.unadvertised(key[0]):
            continue  # a local or flooded branch: never advertised, whatever the filters say
        sticky, selectors = table.is_sticky(key, best), table.selectors_of(key, best)
        link.pending[key] = (new_path, sticky, selectors, sticky and table.is_held(key, best))


def flush(links: dict[str, EngineLink]) -> list[SendAdvert]:
    """The queued changes, one action per link that has any (or owes its full table)."""
    out: list[SendAdvert] = []
    for link in links.values():
        if not link.pending and not link.full_pending:
            continue
        entries: list[Entry] = []
        sticky: set[Key] = set()
        held: set[Key] = set()
        selectors: dict[Key, frozenset[str]] = {}
        adj_out = link.adj_out
        for key, adv in link.pending.items():
            if adj_out.get(key) == adv:
                continue  # never repeat what was last sent
            if adv is None:
                if key not in adj_out:
                    continue
                del adj_out[key]
                entries.append((key[0], key[1], None))
            else:
                adj_out[key] = adv
                entries.append((key[0], key[1], adv[0]))
                if adv[1]:
                    sticky.add(key)
                    if adv[3]:
                        held.add(key)
                if adv[2] is not None:
                    selectors[key] = adv[2]
        link.pending.clear()
        if entries or link.full_pending:
            out.append(
                SendAdvert(
                    link=link.id,
                    full=link.full_pending,
                    entries=tuple(entries),
                    sticky=frozenset(sticky),
                    held=frozenset(held),
                    selectors=selectors,
                )
            )
        link.full_pending = False
    return out
