"""Link handshakes (sans-IO): what a LINK_HELLO and a LINK_WELCOME say, and the checks
that decide whether a peer may link.

A HELLO states the dialer's broker ID, incarnation, starts, instance mark, group,
protocol version, link name and options, heartbeats and frame limit; the WELCOME answers
with the acceptor's ID, incarnation, starts, instance mark, group, version and frame
limit. A peer is
refused when it is this very process (its own dial came back), when it uses our broker ID
from another process (two nodes under one ID would break the loop rules), or when its
group or protocol version differs.

Two *other* nodes under one ID are seen here too: a link that is up already has a peer of
that ID with another instance mark (:func:`rival`). If the newcomer has started more
times on its data directory (``starts``, :mod:`zbroker.identity`; a node that does not
say counts its incarnation, as incarnations counted starts before), it is that node
restarted and the links of its former process are stale; if not,
two nodes use the ID (their message IDs collide, and each drops the other's messages as
loops), and the newcomer is refused: the link that was there first stays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..const import PROTOCOL_VERSION
from ..errors import ConfigError, InvalidTopic, ProtocolError
from ..names import validate_broker_id
from ..routing import LinkOptions
from ..topics import validate_pattern
from .state import Link, LinkState

if TYPE_CHECKING:
    from ..config import LinkConfig

__all__ = [
    "Hello",
    "Me",
    "Repeats",
    "Rival",
    "describe",
    "hello_body",
    "instance_of",
    "parse_hello",
    "peer_frame_max",
    "problem",
    "rival",
    "starts_of",
    "welcome_body",
]


@dataclass(frozen=True, slots=True)
class Me:
    """What this node says of itself in handshakes."""

    broker_id: str
    incarnation: int
    instance: str  # this process's mark: our own dial coming back carries it
    group: str
    max_frame_bytes: int
    starts: int = 1  # starts on our data directory (zbroker.identity)

    def is_self(self, peer: str, info: dict[str, Any]) -> bool:
        """Our own HELLO or WELCOME: our broker ID and this process's mark (a peer that
        sends no mark is an older node: its ID alone decides)."""
        return peer == self.broker_id and info.get("instance") in (None, self.instance)


@dataclass(frozen=True, slots=True)
class Hello:
    """A checked LINK_HELLO."""

    peer: str
    name: str
    incarnation: int
    options: LinkOptions
    duplex: bool
    heartbeat_interval: float
    heartbeat_timeout: float
    peer_max_frame: int
    instance: str  # the dialer's process mark ("" from a node that sends none)
    starts: int = 0  # the dialer's starts on its data directory (starts_of)


def hello_body(me: Me, name: str, cfg: LinkConfig) -> dict[str, Any]:
    return {
        **_common(me),
        "name": name,
        "duplex": cfg.duplex,
        "ttl": cfg.ttl,
        "conduit": cfg.conduit,
        "include": list(cfg.include),
        "exclude": list(cfg.exclude),
        "static": list(cfg.static),
        "heartbeat_interval": cfg.heartbeat_interval,
        "heartbeat_timeout": cfg.heartbeat_timeout,
    }


def welcome_body(me: Me) -> dict[str, Any]:
    return _common(me)


def _common(me: Me) -> dict[str, Any]:
    return {
        "id": me.broker_id,
        "incarnation": me.incarnation,
        "starts": me.starts,
        "instance": me.instance,
        "group": me.group,
        "version": PROTOCOL_VERSION,
        "max_frame_bytes": me.max_frame_bytes,
    }


def parse_hello(info: dict[str, Any], own_max: int) -> Hello:
    """Check a LINK_HELLO's fields; ProtocolError (or ConfigError, InvalidTopic for a bad
    name or pattern) names the first one wrong."""
    peer = info.get("id")
    name = info.get("name")
    if not isinstance(peer, str) or not isinstance(name, str):
        raise ProtocolError("bad_type", "LINK_HELLO needs id and name strings")
    validate_broker_id(peer)
    validate_broker_id(name, "link name")
    inc = incarnation_of(info, "LINK_HELLO")
    options = LinkOptions(
        ttl=_int(info, "ttl", 1, 255),
        conduit=_bool(info, "conduit"),
        include=_patterns(info, "include"),
        exclude=_patterns(info, "exclude"),
        static=_patterns(info, "static"),
    )
    interval, timeout = _num(info, "heartbeat_interval"), _num(info, "heartbeat_timeout")
    if timeout <= interval:
        # (a LinkConfig refuses it too) the link would go silent between two heartbeats
        raise ProtocolError("bad_value", "heartbeat_timeout must exceed heartbeat_interval")
    return Hello(
        peer=peer,
        name=name,
        incarnation=inc,
        options=options,
        duplex=_bool(info, "duplex"),
        heartbeat_interval=interval,
        heartbeat_timeout=timeout,
        peer_max_frame=peer_frame_max(info, own_max),
        instance=instance_of(info),
        starts=starts_of(info, inc),
    )


#: what parse_hello raises for a malformed HELLO
HELLO_ERRORS = (ProtocolError, ConfigError, InvalidTopic)


def problem(me: Me, peer: str, info: dict[str, Any]) -> str | None:
    """Why ``peer`` (its HELLO or WELCOME fields ``info``) may not link to us, or None."""
    if peer == me.broker_id:
        if me.is_self(peer, info):
            return f"refused link to self ({peer})"
        return (
            f"refused peer {peer}: another node uses our broker ID {peer!r} (broker IDs "
            "must be unique: give each node its own --id, or its own data directory)"
        )
    group = info.get("group")
    if group != me.group:
        return f"refused peer {peer}: it is in group {group!r}, we are in {me.group!r}"
    version = info.get("version")
    if version != PROTOCOL_VERSION:
        return f"refused peer {peer}: protocol version {version!r}, we speak {PROTOCOL_VERSION}"
    return None


def incarnation_of(info: dict[str, Any], frame: str) -> int:
    """The incarnation a HELLO or WELCOME states: an integer in 0..2**63-1, as every
    message's incarnation is on the wire (it is compared with theirs)."""
    v = info.get("incarnation")
    if type(v) is not int or not 0 <= v < 1 << 63:
        raise ProtocolError("bad_type", f"{frame} incarnation must be an integer in 0..2**63-1")
    return v


def instance_of(info: dict[str, Any]) -> str:
    """The process mark a HELLO or WELCOME states ("" if none: an older node)."""
    v = info.get("instance")
    if v is None:
        return ""
    if type(v) is not str or not 0 < len(v) <= 64:
        raise ProtocolError("bad_type", "instance must be a string of 1-64 characters")
    return v


def starts_of(info: dict[str, Any], incarnation: int) -> int:
    """The starts a HELLO or WELCOME states (an older node states none: its incarnation
    counted them)."""
    v = info.get("starts")
    if v is None:
        return incarnation
    if type(v) is not int or v < 0:
        raise ProtocolError("bad_type", "starts must be a non-negative integer")
    return v


def describe(name: str, dialled: bool, peer: str, instance: str) -> str:
    """How a duplicate-ID refusal names a link: two may share name and peer."""
    return f"link {name} ({'to' if dialled else 'from'} {peer}, process {instance[:8] or '?'})"


@dataclass(frozen=True, slots=True)
class Rival:
    """What the links that are up say of a peer that completes a handshake."""

    other: Link | None  # up, its peer another process under this ID that is not older
    stale: tuple[Link, ...]  # up, the links of this peer's former process (it restarted)

    def problem(self, newcomer: str) -> str | None:
        """Why the newcomer (``describe``d) is refused, or None."""
        other = self.other
        if other is None:
            return None
        kept = describe(other.name, other.dialer, other.peer, other.peer_instance)
        return (
            f"two nodes use broker ID {other.peer!r}: refused {newcomer}, kept {kept}, "
            "up before it; broker IDs must be unique (give each node its own --id, or "
            "its own data directory)"
        )


def rival(links: Iterable[Link], peer: str, instance: str, starts: int) -> Rival:
    """The links that are up to a peer claiming broker ID ``peer`` from a process other
    than ``instance`` that has started ``starts`` times (marks unknown on either side
    decide nothing). Starts, not incarnations: a second node under the ID on a fresh
    data directory has a larger incarnation (the clock's) but no more starts."""
    stale = []
    for link in links:
        mark = link.peer_instance
        if link.state is not LinkState.UP or link.peer != peer or not mark or not instance:
            continue
        if mark == instance:
            continue
        if starts > link.peer_starts:
            stale.append(link)  # the same node, restarted: that process is gone
        else:
            return Rival(link, ())
    return Rival(None, tuple(stale))


class Repeats:
    """When to say a refusal that repeats (a refused peer retries): the first time, then
    at most once per ``interval`` per key."""

    def __init__(self, interval: float = 60.0) -> None:
        self._interval = interval
        self._last: dict[str, tuple[float, int]] = {}  # key -> (said at, unsaid since)

    def due(self, key: str, now: float) -> int | None:
        """None: not now; else how many went unsaid since it was last said."""
        said, unsaid = self._last.get(key, (None, 0))
        if said is not None and now - said < self._interval:
            self._last[key] = (said, unsaid + 1)
            return None
        if len(self._last) > 1000:  # bounded: a flood of names cannot grow memory
            self._last.clear()
        self._last[key] = (now, 0)
        return unsaid


def peer_frame_max(info: dict[str, Any], own: int) -> int:
    """The max_frame_bytes a peer states in its LINK_HELLO or LINK_WELCOME. A node from
    before this field states none: it is taken to share ours (as was assumed then)."""
    v = info.get("max_frame_bytes")
    if v is None:
        return own
    if type(v) is not int or not 64 <= v <= 1 << 30:
        raise ProtocolError("bad_type", "max_frame_bytes must be an integer in 64..2**30")
    return v


def _int(info: dict[str, Any], key: str, lo: int, hi: int) -> int:
    v = info.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise ProtocolError("bad_type", f"{key} must be an integer in {lo}..{hi}")
    return v


def _bool(info: dict[str, Any], key: str) -> bool:
    v = info.get(key)
    if type(v) is not bool:
        raise ProtocolError("bad_type", f"{key} must be a boolean")
    return v


def _num(info: dict[str, Any], key: str) -> float:
    v = info.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v < 86400:
        raise ProtocolError("bad_type", f"{key} must be a positive number of seconds")
    return float(v)


def _patterns(info: dict[str, Any], key: str) -> tuple[str, ...]:
    v = info.get(key, [])
    if type(v) is not list:
        raise ProtocolError("bad_type", f"{key} must be a list of patterns")
    return tuple(validate_pattern(p) for p in v)
