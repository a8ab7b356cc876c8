"""A durable name is one durable in the network: its home advertises it, others refuse it.

The node that holds durable ``NAME`` (its *home*) holds local interest under the home key
``$ZB.DURABLE.<NAME>`` (:mod:`zbroker.routing.durable_homes`) from the moment it creates
the durable (or loads it from its store) until it deletes it, so every node it is linked to,
directly or not, learns where the durable lives. A DURABLE_OPEN that would create a durable
whose name a live node already holds, or a DURABLE_DELETE of it, is refused with an error
naming that node (the reply carries ``home``: a client whose address list names that node
sends it there); every
DURABLE_OPEN reply names the node that answered (``home``), so a client knows where its
durables live and keeps to that node when it fails over (client/durable_session.py).

What this cannot see: a home that is down, or cut off from this node, advertises nothing,
so a client that never reached the durable before and opens it elsewhere then creates a
second one there. Two opens of a new name on two nodes before either advertisement arrives
create two as well.
"""

from __future__ import annotations

from ...node.context import Context
from ...routing.durable_homes import home_key

__all__ = ["SOURCE", "advertise", "elsewhere", "refusal", "withdraw"]

#: the interest source of a home key (no sink, not sticky: withdrawn when the home goes)
SOURCE = "durable-home:"


def advertise(ctx: Context, name: str) -> None:
    ctx.add_interest(home_key(name), SOURCE + name)


def withdraw(ctx: Context, name: str) -> None:
    ctx.drop_interest(home_key(name), SOURCE + name)


def elsewhere(ctx: Context, name: str) -> str | None:
    """The live node other than this one that holds durable ``name`` (None: none known)."""
    homes = ctx.engine.durable_homes.elsewhere(name, ctx.broker_id)
    return homes[0] if homes else None


def refusal(name: str, home: str) -> dict[str, str]:
    """The ERROR body refusing to create ``name`` here: it lives on ``home``."""
    return {
        "message": f"durable subscription {name!r} lives on node {home!r}: a durable name "
        "is one durable in the network, so it is neither created nor deleted here; open or "
        "delete it on that node",
        "home": home,
    }
