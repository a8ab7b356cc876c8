"""Where each durable subscription lives: its home node, as the network advertises it.

Sans-IO, like the rest of :mod:`zbroker.routing`. A durable name is one durable in the
network: the node that holds durable ``NAME`` holds local interest under the *home key*
``$ZB.DURABLE.<NAME>`` (:func:`home_key`; dots of a name become ``:`` so the name is one
segment), the way a topic host advertises ``$ZB.HOST.<branch>``. Rules 1-3 of the engine
carry it to every node, loop-free, and withdraw it when the home, or every way to it,
goes. No client can publish under ``$ZB`` and leading wildcards match no ``$ZB`` topic, so
a home key never matches a message and costs plain pub/sub nothing.

The engine feeds every change of a home key's best entry to :class:`DurableHomes`, which
knows per durable name the live nodes holding it; the durables feature asks it before
creating a durable (:meth:`DurableHomes.elsewhere`).
"""

from __future__ import annotations

from ..const import RESERVED_PREFIX
from .events import Key

__all__ = ["HOME_PREFIX", "DurableHomes", "home_key", "name_of"]

#: the interest key pattern under which a node advertises a durable it holds
HOME_PREFIX = RESERVED_PREFIX + ".DURABLE."


def home_key(name: str) -> str:
    """The interest pattern the home of durable ``name`` advertises (a broker-ID-like name
    has no ``:``, so the mapping is reversible)."""
    return HOME_PREFIX + name.replace(".", ":")


def name_of(pattern: str) -> str | None:
    """The durable name of a home key, None for any other pattern."""
    if not pattern.startswith(HOME_PREFIX):
        return None
    return pattern[len(HOME_PREFIX) :].replace(":", ".")


class DurableHomes:
    """Per durable name, the live nodes that hold it (by their best entries here)."""

    def __init__(self) -> None:
        self.homes: dict[str, set[str]] = {}

    def changed(self, key: Key, present: bool) -> None:
        """The best entry of ``key`` (a home key) came (``present``) or went."""
        name = name_of(key[0])
        if name is None:
            return
        origins = self.homes.get(name)
        if present:
            self.homes.setdefault(name, set()).add(key[1])
        elif origins is not None:
            origins.discard(key[1])
            if not origins:
                del self.homes[name]

    def elsewhere(self, name: str, me: str) -> list[str]:
        """The live nodes other than ``me`` that hold durable ``name`` (sorted)."""
        return sorted(o for o in self.homes.get(name, ()) if o != me)
