"""The routing engine's vocabulary: the events it is fed, the actions it returns, the
options of a link, and the shapes of paths and interest entries they carry.

Plain frozen dataclasses, so that a node, the simulator and the tests build and compare
them alike; nothing here decides anything (the rules are in :mod:`zbroker.routing.engine`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_TTL",
    "Action",
    "Adv",
    "AdvertIn",
    "Entry",
    "Event",
    "Key",
    "LinkDown",
    "LinkOptions",
    "LinkUp",
    "LocalSubscribe",
    "LocalUnsubscribe",
    "Path",
    "SendAdvert",
]

#: hops. Paths already prevent loops, so the ttl only bounds diameter: 32 crosses any
#: network of sensible size (the seed system's default of 1 silently breaks multi-hop).
DEFAULT_TTL = 32

Path = tuple[str, ...]
Key = tuple[str, str]  # (pattern, origin)
Entry = tuple[str, str, Path | None]  # (pattern, origin, path or None = withdraw)
#: what was (or is to be) advertised for a key: path, sticky, selectors (None: all)
#: what was last advertised of a key: (path, sticky, selectors, held for a down link)
Adv = tuple[Path, bool, frozenset[str] | None, bool]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkOptions:
    ttl: int = DEFAULT_TTL
    conduit: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    static: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class _Advert:
    """Interest entries crossing a link, in (AdvertIn) or out (SendAdvert): ``path=None``
    withdraws; ``full``: the sender's whole table for the receiver; ``sticky``: the keys
    durable subscriptions back (rule 6); ``selectors``: the keys whose interest is only in
    what these selectors accept (canonical texts; a key not named wants every message:
    rule 7); ``held``: sticky keys whose best entry, here or further on, is held on a
    ghost of a down link (rule 6: ranked below every live entry by whoever hears them)."""

    link: str
    full: bool
    entries: tuple[Entry, ...]
    sticky: frozenset[Key] = frozenset()
    held: frozenset[Key] = frozenset()
    selectors: dict[Key, frozenset[str]] = field(default_factory=dict)


# -- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalSubscribe:
    """A pattern gained its first local subscriber; sent again when its stickiness or its
    selectors change (``sticky``: a durable subscription backs it; ``selectors``: every
    local subscriber of it has a selector, and these are their canonical texts; None:
    some subscriber wants every message)."""

    pattern: str
    sticky: bool = False
    selectors: frozenset[str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalUnsubscribe:
    """A pattern lost its last local subscriber."""

    pattern: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkUp:
    """A link finished its handshake. ``can_send``: messages may flow to the peer;
    ``can_receive``: messages may flow from it (so we advertise our interest over it)."""

    link: str
    peer: str
    can_send: bool = True
    can_receive: bool = True
    options: LinkOptions = field(default_factory=LinkOptions)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkDown:
    """A link is gone (closed, heartbeats missed, replaced). ``keep_sticky``: keep its
    sticky entries on a ghost of the link (rule 6)."""

    link: str
    keep_sticky: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvertIn(_Advert):
    """Interest entries from a link. ``full``: this is the peer's whole table for us."""


Event = LocalSubscribe | LocalUnsubscribe | LinkUp | LinkDown | AdvertIn


# -- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAdvert(_Advert):
    """Send these interest entries over ``link`` (``path=None`` withdraws)."""


Action = SendAdvert
