"""The loop rules, one named function each (each has its own tests).

Every message and every interest advertisement carries the *path* of broker IDs it has
crossed (origin first). Together with per-node dedupe these rules make loops impossible
and bound every path.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "is_duplicate_link",
    "is_link_to_self",
    "path_holds",
    "ttl_spent",
]


def path_holds(path: Sequence[str], broker_id: str) -> bool:
    """Own ID in path: a node never accepts a message or an advertisement that already
    crossed it, and never sends one to a neighbour already on its path."""
    return broker_id in path


def ttl_spent(hops: int, ttl: int) -> bool:
    """TTL spent: something that has crossed (or would cross) ``hops`` links may not go
    over a link whose ``ttl`` is smaller."""
    return hops > ttl


def is_link_to_self(own_id: str, peer_id: str) -> bool:
    """Link to self: a handshake that names our own broker ID is refused."""
    return own_id == peer_id


def is_duplicate_link(
    existing: tuple[str, str, int] | None, peer_id: str, link_name: str, incarnation: int
) -> bool:
    """Duplicate link: an existing link from the same broker under the same name. The
    newer handshake replaces it (a restarted node has a higher incarnation; the same
    incarnation redialling after a timeout also supersedes its stale link)."""
    return (
        existing is not None
        and existing[0] == peer_id
        and existing[1] == link_name
        and (incarnation >= existing[2])
    )
