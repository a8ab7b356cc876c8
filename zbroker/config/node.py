"""NodeConfig: everything a node needs to start, validated field group by field group.

Every path that builds one (keywords, :func:`~zbroker.config.load_config`,
:meth:`NodeConfig.replace`) runs the same checks in ``__post_init__``; each group of checks
below is one table of the config file, and errors name the file key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..const import (
    DEFAULT_HOST,
    DEFAULT_HWM,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_PORT,
    RESERVED_PREFIX,
)
from ..errors import ConfigError, InvalidTopic
from ..store import OVERFLOW_POLICIES, RetainRule
from ..topics import patterns_overlap, validate_pattern
from .advisories import AdvisoryConfig
from .checks import check_float, check_int, check_patterns, validate_broker_id
from .link import LINK_KEYS, LinkConfig
from .monitor import MonitorConfig
from .queues import QueueRule, check_queue_rules
from .replication import check_replicate

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

#: the shortest ``[state] tombstone_ttl``. A tombstone is what stops an older value of a
#: removed topic from coming back: in a fetch or snapshot that merges the answers of
#: several nodes (a value older than a removal anywhere is dropped), and in a replica's
#: sync (the secondary's own tombstone outranks an older value in the answer). The
#: longest an older copy is still served by design is a secondary that lost its primary's
#: link: the link's heartbeat_timeout (3 s by default) until the loss is seen, then
#: RESUME_WINDOW (30 s) waiting for the same primary process, then the resume sync (a
#: query of at most QUERY_TIMEOUT, 3 s; a cut answer is asked again within RETRY_MAX,
#: 60 s): about 96 s. Five minutes is three times that, so no ttl the config accepts ends
#: a tombstone while one of those still relies on it (tests/test_tombstone_ttl.py checks
#: the sum against those constants). What no ttl covers is a node cut off while a remove
#: ran (it keeps its own copy): it must come back within the ttl, as with Cassandra's
#: gc_grace_seconds (features/state/topics.py).
TOMBSTONE_TTL_MIN = 300.0
#: the longest (ten years, as the other lifetimes)
TOMBSTONE_TTL_MAX = 10 * 365 * 86400.0


def default_data_dir(port: int) -> Path:
    """``$XDG_DATA_HOME/zbroker/node-PORT`` (``~/.local/share`` when XDG_DATA_HOME is unset)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zbroker" / f"node-{port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Everything a node needs to start. Build with keywords, :func:`load_config` or
    :meth:`replace`; every path validates in :meth:`__post_init__`."""

    broker_id: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path | None = None
    log_level: str = "info"
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    hwm: int = DEFAULT_HWM
    group: str = "default"
    links: tuple[LinkConfig, ...] = ()
    #: seconds a subscribe or fetch waits for missing-topic handlers (then proceeds)
    missing_topic_timeout: float = 2.0
    #: ``[state]``: seconds a removed stateful topic's tombstone is kept, then forgotten
    #: (at least :data:`TOMBSTONE_TTL_MIN`)
    tombstone_ttl: float = 86_400.0
    #: LAN discovery (mDNS). Off for an embedded Broker unless asked; ``zbroker start``
    #: turns it on when neither a flag nor the file says, unless the host is a loopback
    #: address.
    discovery: bool = False
    #: addresses discovery runs on; empty = derived from ``host`` (see discovery.py)
    interfaces: tuple[str, ...] = ()
    #: LinkConfig options (no name/uri) for links made to discovered peers
    discovery_link_defaults: dict[str, Any] = field(default_factory=dict)
    #: retention log rules (topics kept in the store, readable by sequence range)
    retain: tuple[RetainRule, ...] = ()
    #: ``[[queue]]``: routing policy per queue group (default local_first)
    queues: tuple[QueueRule, ...] = ()
    #: fsync every store commit (survives power loss, not only a killed process)
    fsync: bool = False
    #: CurveZMQ on every network socket (see zbroker/security.py); off = plain mode
    security: bool = False
    #: where node.key/node.key_secret are (default: the data directory)
    key_dir: Path | None = None
    #: peer nodes' public keys: a directory of BROKER_ID.key files or an "ID KEY" file
    allowlist: Path | None = None
    #: client keys and permissions: a TOML file, or the parsed table itself
    clients: Path | dict[str, Any] | None = None
    #: store-and-forward link queues: bounds per link (0 = unbounded; oldest dropped first)
    forward_max_msgs: int = 1_000_000
    forward_max_bytes: int = 1 << 30
    #: a link queue at its bound: "drop-oldest" (counted) or "reject-new" (back-pressure:
    #: the next node stops taking, the origin refuses persistent publishes)
    forward_overflow: str = "drop-oldest"
    #: seconds sticky (durable-backed) routes over a down link are kept, and its queue
    sticky_ttl: float = 86_400.0
    #: ``[durables]``: seconds a shared durable's home waits with no consumer of its own,
    #: while consumers elsewhere take from it, before it moves to them (0: at once)
    redistribution_delay: float = 1.0
    #: ``[durables]``: moves a stored message may make; a durable holding one that made
    #: this many stays where it is until that one is consumed (counted: move_limited)
    max_moves: int = 3
    #: the monitoring HTTP server (``[monitor]``; off by default); a HOST:PORT string
    #: is taken as ``MonitorConfig(listen=...)``
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    #: ``[routing] local``: patterns whose topics never leave this node, and whose
    #: interest is never advertised (zbroker/routing/branches.py)
    local_branches: tuple[str, ...] = ()
    #: ``[advisories]``: events on $ZB.ADVISORY topics and STATS (an AdvisoryConfig or
    #: the table's keys as a dict)
    advisories: AdvisoryConfig = field(default_factory=AdvisoryConfig)
    #: ``[[host]] pattern``: branches this node hosts (zbroker/routing/hosts.py)
    host_branches: tuple[str, ...] = ()
    #: ``[[flood]] pattern``: branches sent to every node unasked (zbroker/routing/flood.py)
    flood_branches: tuple[str, ...] = ()
    #: where the values came from, for error messages ("file.toml", "keyword", ...)
    source: str = field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        # a fixed order: with several bad values, the same one is reported every time
        self._check_node()
        self._check_links()
        self._check_tombstone_ttl()
        self._check_discovery()
        self._check_store()
        self._check_security()
        self._check_forward()
        monitor = MonitorConfig.coerce(self.monitor, self.source)
        monitor.check_security(self.security, self.source)
        self._set("monitor", monitor)
        self._set(
            "local_branches", check_patterns(self.local_branches, f"{self.source}: routing.local")
        )
        self._set("queues", check_queue_rules(self.queues, f"{self.source}"))
        self._set("advisories", AdvisoryConfig.from_mapping(self.advisories, self.source))
        self._check_branches()

    def _check_branches(self) -> None:
        """``[[host]]`` and ``[[flood]]``: patterns outside the node's own ``$ZB`` topics
        (which the node routes itself), no branch both hosted and flooded, and no hosted
        branch that overlaps a local one."""
        src = self.source
        hosts = check_patterns(self.host_branches, f"{src}: host.pattern")
        floods = check_patterns(self.flood_branches, f"{src}: flood.pattern")
        for kind, patterns in (("host", hosts), ("flood", floods)):
            for p in patterns:
                if p == RESERVED_PREFIX or p.startswith(RESERVED_PREFIX + "."):
                    raise ConfigError(
                        f"{src}: {kind}.pattern: {p!r} is of the node's own {RESERVED_PREFIX} "
                        "topics, which it routes itself"
                    )
        both = sorted(set(hosts) & set(floods))
        if both:
            raise ConfigError(
                f"{src}: {both[0]!r} is both a [[host]] and a [[flood]] branch: route it one "
                "way (through its hosts, or to every node)"
            )
        for h in hosts:
            kept = [p for p in self.local_branches if patterns_overlap(h, p)]
            if kept:
                # a host serves every publication of its branch; one it keeps local would
                # be delivered to no subscriber of another node, however it arrived
                raise ConfigError(
                    f"{src}: {h!r} is a [[host]] branch and [routing] local {kept[0]!r} "
                    "keeps some of its topics on this node: host it, or keep it local"
                )
        self._set("host_branches", hosts)
        self._set("flood_branches", floods)

    def _set(self, name: str, value: Any) -> None:
        """Store a normalized value (a tuple for a list, a Path for a str) in the frozen
        object."""
        object.__setattr__(self, name, value)

    def _check_node(self) -> None:
        """``[node]`` and ``[limits]``: identity, address, data directory, logging."""
        src = self.source
        if self.broker_id is not None:
            validate_broker_id(self.broker_id, f"{src}: node.id")
        if not isinstance(self.host, str) or not self.host or any(c in self.host for c in " /"):
            raise ConfigError(f"{src}: node.host: {self.host!r} is not a host name or address")
        check_int(self.port, f"{src}: node.port", 0, 65533)
        if self.data_dir is not None and not isinstance(self.data_dir, Path):
            if not isinstance(self.data_dir, str) or not self.data_dir:
                raise ConfigError(f"{src}: node.data_dir: {self.data_dir!r} is not a path")
            self._set("data_dir", Path(self.data_dir))
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"{src}: node.log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        check_int(self.max_frame_bytes, f"{src}: limits.max_frame_bytes", 64, 1 << 30)
        check_int(self.hwm, f"{src}: limits.hwm", 1, 10_000_000)
        validate_broker_id(self.group, f"{src}: node.group")

    def _check_links(self) -> None:
        """``[[link]]``: LinkConfig objects (each checked itself) with distinct names."""
        src = self.source
        links = tuple(self.links)
        for link in links:
            if not isinstance(link, LinkConfig):
                raise ConfigError(f"{src}: links must be LinkConfig objects, not {link!r}")
        names = [link.name for link in links]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"{src}: link name(s) used twice: {', '.join(sorted(dup))}")
        check_replicate(links, src)
        check_float(self.missing_topic_timeout, f"{src}: state.missing_topic_timeout", 0.01, 3600)
        self._set("links", links)

    def _check_tombstone_ttl(self) -> None:
        """``[state] tombstone_ttl``: a number of seconds, not below the windows that rely
        on a tombstone (:data:`TOMBSTONE_TTL_MIN`)."""
        where = f"{self.source}: state.tombstone_ttl"
        ttl = self.tombstone_ttl
        if type(ttl) in (int, float) and ttl < TOMBSTONE_TTL_MIN:
            raise ConfigError(
                f"{where}: {ttl} is below the minimum {TOMBSTONE_TTL_MIN:g} s: a tombstone "
                "must outlive a replica's resume window and sync, or a removed value could "
                f"come back (range {TOMBSTONE_TTL_MIN:g}..{TOMBSTONE_TTL_MAX:.0f})"
            )
        self._set("tombstone_ttl", check_float(ttl, where, TOMBSTONE_TTL_MIN, TOMBSTONE_TTL_MAX))

    def _check_discovery(self) -> None:
        """``[discovery]``: the switch, interface addresses, and the discovered links'
        options (checked by building one such link)."""
        src = self.source
        if type(self.discovery) is not bool:
            raise ConfigError(f"{src}: discovery.enabled must be true or false")
        interfaces = tuple(self.interfaces)
        for addr in interfaces:
            try:
                if not isinstance(addr, str):  # (ip_address takes an int for an IPv4)
                    raise TypeError(addr)
                ipaddress.ip_address(addr)
            except (ValueError, TypeError) as exc:
                raise ConfigError(
                    f"{src}: discovery.interfaces: {addr!r} is not an IPv4 or IPv6 address"
                ) from exc
        self._set("interfaces", interfaces)
        self.discovered_link("check", "tcp://127.0.0.1:1")  # validates the defaults

    def _check_store(self) -> None:
        """``[[retain]]`` rules (distinct valid patterns, bounds, overflow) and fsync."""
        src = self.source
        retain = tuple(self.retain)
        seen: set[str] = set()
        for i, rule in enumerate(retain):
            where = f"{src}: retain #{i + 1}"
            if not isinstance(rule, RetainRule):
                raise ConfigError(f"{where}: {rule!r} is not a RetainRule")
            try:
                validate_pattern(rule.pattern)
            except InvalidTopic as exc:
                raise ConfigError(f"{where}: {exc}") from exc
            if rule.pattern in seen:
                raise ConfigError(f"{where}: pattern {rule.pattern!r} appears twice")
            seen.add(rule.pattern)
            check_int(rule.max_msgs, f"{where}: max_msgs", 0, 1 << 62)
            check_int(rule.max_bytes, f"{where}: max_bytes", 0, 1 << 62)
            check_float(rule.max_age, f"{where}: max_age", 0, 10 * 365 * 86400)
            _check_overflow(rule.overflow, f"{where}: overflow")
        self._set("retain", retain)
        if type(self.fsync) is not bool:
            raise ConfigError(f"{src}: node.fsync must be true or false")

    def _check_security(self) -> None:
        """``[security]``: the switch, key and allowlist paths, and with security on, the
        expected peer of every link."""
        src = self.source
        if type(self.security) is not bool:
            raise ConfigError(f"{src}: security.enabled must be true or false")
        for name in ("key_dir", "allowlist", "clients"):
            value = getattr(self, name)
            if value is None or (isinstance(value, Path | dict) and name == "clients"):
                continue
            if isinstance(value, Path):
                continue
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{src}: security.{name}: {value!r} is not a path")
            self._set(name, Path(value).expanduser())
        if self.security:
            for link in self.links:
                if link.peer is None:
                    raise ConfigError(
                        f"{src}: link {link.name!r}: with security enabled, set peer = "
                        '"BROKER_ID" (or --peer ID@URI): the node must know whose public key '
                        "to expect there"
                    )

    def _check_forward(self) -> None:
        """``[forward]``: store-and-forward queue bounds and sticky route lifetime."""
        src = self.source
        check_int(self.forward_max_msgs, f"{src}: forward.max_msgs", 0, 1 << 40)
        check_int(self.forward_max_bytes, f"{src}: forward.max_bytes", 0, 1 << 50)
        check_float(self.sticky_ttl, f"{src}: forward.sticky_ttl", 0.1, 10 * 365 * 86400)
        _check_overflow(self.forward_overflow, f"{src}: forward.overflow:")
        check_float(self.redistribution_delay, f"{src}: durables.redistribution_delay", 0, 86400)
        check_int(self.max_moves, f"{src}: durables.max_moves", 1, 1000)

    def discovered_link(self, name: str, uri: str) -> LinkConfig:
        """A LinkConfig for a link to a discovered peer: the discovery defaults applied."""
        defaults = dict(self.discovery_link_defaults)
        if "peer" in defaults:
            # the dialer would expect this one node (and its key) at every discovered one
            raise ConfigError(
                f"{self.source}: discovery.link_defaults: peer cannot be set: a discovered "
                "link's peer is the node discovery found"
            )
        if defaults.get("replicate"):
            # every discovered link would replicate the same branches: a branch has one
            # source (overlapping branches on two links are refused for configured links)
            raise ConfigError(
                f"{self.source}: discovery.link_defaults: replicate cannot be set: a branch "
                "is replicated over one link, and every discovered link would take it"
            )
        bad = set(defaults) - (LINK_KEYS - {"name", "uri"})
        if bad:
            raise ConfigError(
                f"{self.source}: discovery.link_defaults: unknown key(s) {', '.join(sorted(bad))}"
            )
        return LinkConfig(
            name=name, uri=uri, source=f"{self.source}: discovery.link_defaults", **defaults
        )

    def replace(self, *, source: str = "keyword", **changes: Any) -> NodeConfig:
        """A copy with ``changes`` applied (``None`` values are ignored), validated again.
        Errors name ``source`` (where the overrides came from), not the original file."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
        real = {k: v for k, v in changes.items() if v is not None}
        if not real:
            return self
        return dataclasses.replace(self, source=source, **real)


def _check_overflow(value: object, where: str) -> None:
    """A queue's overflow policy: one of :data:`~zbroker.store.OVERFLOW_POLICIES`
    (``where`` ends as the message needs: "retain #1: overflow", "forward.overflow:")."""
    if value not in OVERFLOW_POLICIES:
        raise ConfigError(f"{where} {value!r} is not one of {', '.join(OVERFLOW_POLICIES)}")
