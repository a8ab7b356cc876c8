"""Flooded branches: every publication of the branch goes to every node, and interest in
it is never advertised (the seed's "send everything everywhere": less interest traffic,
more message traffic). ``[[flood]] pattern = "LOG.>"``, ``zbroker start --flood PATTERN``.

Rules (beside rule 8 of :mod:`zbroker.routing.engine`):

* interest whose pattern a flooded branch covers is never advertised (like a local
  branch's, :mod:`~zbroker.routing.branches`): nobody needs it, every node gets every
  message of the branch;
* a publication of a flooded topic is delivered locally and sent over every live link
  that may carry it, with the targets ``(FLOOD,)``; a node that receives such a copy does
  the same, whatever its own configuration says, toward every neighbour not on the
  copy's path — except a node whose local branch holds the topic
  (:mod:`~zbroker.routing.branches`): it delivers the copy and relays it nowhere.

Exactly once: each node delivers and forwards only the first copy it gets (the per-node
dedupe of rule 5 drops the others); a flood copy carries no targets that a dropped copy
could lose, so the first copy to arrive is as good as any. Loop-free: a copy is never
sent to a node on its path, so every path is simple and bounded by the network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .events import Path

if TYPE_CHECKING:
    from .routes import Route, Router, Send

__all__ = ["FLOOD", "FLOOD_TARGETS", "route"]

#: the target of a flood copy (never a broker ID, which starts with a letter or digit)
FLOOD = "~"
FLOOD_TARGETS = (FLOOD,)


def route(router: Router, local: frozenset[str], topic: str, path: Path) -> Route:
    """Deliver here (``local``) and send a flood copy over every live link that may
    carry ``topic`` to a neighbour not on ``path``."""
    hops = len(path) + 1
    sends: list[Send] = [
        (link.id, FLOOD_TARGETS, 1)
        for link in router.links.values()
        if link.up and router.may_send(link, topic, path, hops)
    ]
    return local, sends
