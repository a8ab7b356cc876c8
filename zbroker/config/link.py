"""LinkConfig: one link a node dials, its options and their checks; ``--peer`` links."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..const import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_RECONNECT_INITIAL,
    DEFAULT_RECONNECT_MAX,
    DEFAULT_RECONNECT_MULTIPLIER,
)
from ..errors import ConfigError
from ..routing import DEFAULT_TTL, LinkOptions
from ..routing.filters import pattern_covers
from ..topics import patterns_overlap
from .checks import check_float, check_int, check_patterns, is_tcp_host_port, validate_broker_id


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkConfig:
    """A link this node dials (the options travel in the handshake, so both ends agree).

    ``duplex``: messages flow both ways over one connection; otherwise only from this node
    (the dialer) to the acceptor, and interest flows the other way. ``ttl``: max hops for
    messages and interest. ``conduit``: one copy per message over the link (off: one per
    remote subscription). ``include``/``exclude``: a message crosses only if it matches some
    include pattern (when any) and no exclude pattern. ``static``: patterns forwarded over
    the link regardless of interest (the filters still apply: a static pattern outside
    every include pattern is a configuration error). Liveness: heartbeats every
    ``heartbeat_interval`` seconds; no frame for ``heartbeat_timeout`` seconds means the
    link is down. Redial:
    exponential backoff from ``reconnect_initial_delay`` to ``reconnect_max_delay``,
    multiplied by ``reconnect_multiplier``; ``reconnect_max_attempts`` 0 = forever.
    """

    name: str
    uri: str
    duplex: bool = True
    ttl: int = DEFAULT_TTL
    conduit: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    #: fan-out: branches of the peer's stateful topics this node keeps replicas of
    replicate: tuple[str, ...] = ()
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT
    reconnect_initial_delay: float = DEFAULT_RECONNECT_INITIAL
    reconnect_max_delay: float = DEFAULT_RECONNECT_MAX
    reconnect_multiplier: float = DEFAULT_RECONNECT_MULTIPLIER
    reconnect_max_attempts: int = 0
    #: the broker ID expected at ``uri``; with security on it picks the peer's public key
    #: from the allowlist (and the link is refused if another node answers)
    peer: str | None = None
    source: str = field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        # (discovery's link defaults are checked on a stand-in link: its name means nothing)
        defaults = self.source.endswith("discovery.link_defaults")
        where = self.source if defaults else f"{self.source}: link {self.name!r}"
        validate_broker_id(self.name, f"{self.source}: link.name")
        if self.peer is not None:
            validate_broker_id(self.peer, f"{where}: peer")
        if not isinstance(self.uri, str) or not is_tcp_host_port(self.uri):
            # checked here, not at connect time: 'tcp://host' (no port) started a node whose
            # link could never connect, with one log line about an invalid argument
            raise ConfigError(
                f"{where}: uri {self.uri!r} is not of the form tcp://HOST:PORT "
                "(a port from 1 to 65535)"
            )
        for flag in ("duplex", "conduit"):
            if type(getattr(self, flag)) is not bool:
                raise ConfigError(f"{where}: {flag} must be true or false")
        check_int(self.ttl, f"{where}: ttl", 1, 255)
        self._check_filters(where)
        self._check_timers(where)

    def _check_filters(self, where: str) -> None:
        """include/exclude/static: pattern lists, and every static pattern can cross."""
        for name in ("include", "exclude", "static", "replicate"):
            object.__setattr__(self, name, check_patterns(getattr(self, name), f"{where}: {name}"))
        for pattern in self.static if self.include else ():
            if not any(patterns_overlap(pattern, inc) for inc in self.include):
                # the filters apply to static pushes too: this one could never cross
                raise ConfigError(
                    f"{where}: static pattern {pattern!r} matches none of the include "
                    f"patterns {list(self.include)}, so nothing on it could cross the link "
                    "(include and exclude apply to static patterns too): add it to include"
                )
        for pattern in self.static:
            for exc in self.exclude:
                if pattern_covers(exc, pattern):
                    raise ConfigError(
                        f"{where}: static pattern {pattern!r} is wholly excluded by "
                        f"{exc!r}, so nothing on it could cross the link (include and "
                        "exclude apply to static patterns too)"
                    )

    def _check_timers(self, where: str) -> None:
        """Heartbeat and redial timing."""
        check_float(self.heartbeat_interval, f"{where}: heartbeat_interval", 0.01, 3600)
        check_float(self.heartbeat_timeout, f"{where}: heartbeat_timeout", 0.05, 86400)
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigError(f"{where}: heartbeat_timeout must exceed heartbeat_interval")
        check_float(self.reconnect_initial_delay, f"{where}: reconnect_initial_delay", 0.001, 3600)
        check_float(self.reconnect_max_delay, f"{where}: reconnect_max_delay", 0.001, 86400)
        if self.reconnect_initial_delay > self.reconnect_max_delay:
            raise ConfigError(
                f"{where}: reconnect_initial_delay ({self.reconnect_initial_delay}) exceeds "
                f"reconnect_max_delay ({self.reconnect_max_delay})"
            )
        check_float(self.reconnect_multiplier, f"{where}: reconnect_multiplier", 1.0, 100)
        check_int(self.reconnect_max_attempts, f"{where}: reconnect_max_attempts", 0, 1 << 31)

    @property
    def options(self) -> LinkOptions:
        return LinkOptions(
            ttl=self.ttl,
            conduit=self.conduit,
            include=self.include,
            exclude=self.exclude,
            static=self.static,
        )


#: the keys a ``[[link]]`` table (or ``discovery.link_defaults``, less name and uri) may set
LINK_KEYS = frozenset(f.name for f in dataclasses.fields(LinkConfig)) - {"source"}


def peer_link(uri: str) -> LinkConfig:
    """A duplex link with default options, as ``zbroker start --peer [ID@]URI`` makes
    (``ID@`` names the broker expected there, which security needs)."""
    peer = None
    if "@" in uri:
        peer, uri = uri.split("@", 1)
    name = "peer-" + "".join(c if c.isalnum() else "-" for c in uri.removeprefix("tcp://"))
    return LinkConfig(name=name.strip("-")[:64], uri=uri, peer=peer, source="--peer")
