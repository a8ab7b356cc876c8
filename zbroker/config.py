"""Node configuration: frozen dataclasses, loaded from TOML and validated.

Every error names where the bad value came from (file and key, or the keyword/flag) and the
value itself; unknown keys are errors, so a typo never silently falls back to a default.

File layout (all keys optional)::

    [node]
    id = "alpha"                  # broker ID; generated once and persisted if absent
    host = "127.0.0.1"            # interface to bind
    port = 7100                   # well-known port; PORT+1 publish, PORT+2 deliver; 0 = any
    data_dir = "/var/lib/zbroker" # identity (and later, the store)
    log_level = "info"

    group = "default"             # only nodes of the same network group link

    [limits]
    max_frame_bytes = 1048576     # larger frames are counted and dropped (links: +64 KiB)
    hwm = 100000                  # socket high-water marks, messages

    [discovery]                   # LAN discovery over mDNS (zbroker start: on by default)
    enabled = true
    interfaces = ["192.168.1.5"]  # default: the bound host address, or every interface
                                  # when the node binds 0.0.0.0
    [discovery.link_defaults]     # options of links made to discovered peers
    ttl = 8

    [[retain]]                    # keep matching messages in the retention log
    pattern = "TRADES.>"
    max_msgs = 1000000            # 0 = unbounded; also max_bytes, max_age (seconds)

    [[link]]                      # one table per link this node dials (see LinkConfig)
    name = "to-b"
    uri = "tcp://10.0.0.2:7100"
    duplex = true
    peer = "beta"                 # broker ID expected there (required with security on)

    [security]                    # CurveZMQ (see zbroker/security.py); off by default
    enabled = true
    key_dir = "/var/lib/zbroker"  # holds node.key + node.key_secret (default: data_dir)
    allowlist = "/etc/zbroker/nodes"  # dir of BROKER_ID.key files, or "ID KEY" lines
    clients = "/etc/zbroker/clients.toml"  # client keys and permissions (or a table)

Precedence where several sources set a value: command-line flag > environment variable
(``ZBROKER_<KEY>``) > config file > default. :func:`load_config` reads a file;
:meth:`NodeConfig.replace` applies overrides with the same validation.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .const import (
    DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_HOST,
    DEFAULT_HWM,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_PORT,
    DEFAULT_RECONNECT_INITIAL,
    DEFAULT_RECONNECT_MAX,
    DEFAULT_RECONNECT_MULTIPLIER,
)
from .errors import ConfigError, InvalidTopic
from .names import validate_broker_id
from .routing import DEFAULT_TTL, LinkOptions
from .store import OVERFLOW_POLICIES, RetainRule
from .topics import patterns_overlap, validate_pattern

__all__ = [
    "LOG_LEVELS",
    "LinkConfig",
    "NodeConfig",
    "RetainRule",
    "default_data_dir",
    "load_config",
    "peer_link",
    "validate_broker_id",
]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def default_data_dir(port: int) -> Path:
    """``$XDG_DATA_HOME/zbroker/node-PORT`` (``~/.local/share`` when XDG_DATA_HOME is unset)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zbroker" / f"node-{port}"


def _check_float(value: object, where: str, lo: float, hi: float) -> float:
    if type(value) not in (int, float):
        raise ConfigError(f"{where}: {value!r} is not a number")
    assert isinstance(value, int | float)
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range ({lo:g}..{hi:g})")
    return float(value)


def _check_patterns(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: {value!r} is not a list of patterns")
    for p in value:
        try:
            validate_pattern(p)
        except InvalidTopic as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return tuple(value)


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
        where = f"{self.source}: link {self.name!r}"
        validate_broker_id(self.name, f"{self.source}: link.name")
        if self.peer is not None:
            validate_broker_id(self.peer, f"{where}: peer")
        if not isinstance(self.uri, str) or not _is_tcp_host_port(self.uri):
            # checked here, not at connect time: 'tcp://host' (no port) started a node whose
            # link could never connect, with one log line about an invalid argument
            raise ConfigError(
                f"{where}: uri {self.uri!r} is not of the form tcp://HOST:PORT "
                "(a port from 1 to 65535)"
            )
        for flag in ("duplex", "conduit"):
            if type(getattr(self, flag)) is not bool:
                raise ConfigError(f"{where}: {flag} must be true or false")
        _check_int(self.ttl, f"{where}: ttl", 1, 255)
        for name in ("include", "exclude", "static"):
            object.__setattr__(self, name, _check_patterns(getattr(self, name), f"{where}: {name}"))
        for pattern in self.static if self.include else ():
            if not any(patterns_overlap(pattern, inc) for inc in self.include):
                # the filters apply to static pushes too: this one could never cross
                raise ConfigError(
                    f"{where}: static pattern {pattern!r} matches none of the include "
                    f"patterns {list(self.include)}, so nothing on it could cross the link "
                    "(include and exclude apply to static patterns too): add it to include"
                )
        _check_float(self.heartbeat_interval, f"{where}: heartbeat_interval", 0.01, 3600)
        _check_float(self.heartbeat_timeout, f"{where}: heartbeat_timeout", 0.05, 86400)
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigError(f"{where}: heartbeat_timeout must exceed heartbeat_interval")
        _check_float(self.reconnect_initial_delay, f"{where}: reconnect_initial_delay", 0.001, 3600)
        _check_float(self.reconnect_max_delay, f"{where}: reconnect_max_delay", 0.001, 86400)
        _check_float(self.reconnect_multiplier, f"{where}: reconnect_multiplier", 1.0, 100)
        _check_int(self.reconnect_max_attempts, f"{where}: reconnect_max_attempts", 0, 1 << 31)

    @property
    def options(self) -> LinkOptions:
        return LinkOptions(
            ttl=self.ttl,
            conduit=self.conduit,
            include=self.include,
            exclude=self.exclude,
            static=self.static,
        )


def _is_tcp_host_port(uri: str) -> bool:
    """``tcp://HOST:PORT`` a link can dial: a host (name, IPv4, or IPv6 in brackets), a port
    from 1 to 65535, nothing after it."""
    if not uri.startswith("tcp://"):
        return False
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return False
    return (
        bool(parts.hostname)
        and parts.hostname != "*"
        and port is not None
        and port >= 1
        and not parts.path
        and not parts.query
        and not parts.fragment
    )


def peer_link(uri: str) -> LinkConfig:
    """A duplex link with default options, as ``zbroker start --peer [ID@]URI`` makes
    (``ID@`` names the broker expected there, which security needs)."""
    peer = None
    if "@" in uri:
        peer, uri = uri.split("@", 1)
    name = "peer-" + "".join(c if c.isalnum() else "-" for c in uri.removeprefix("tcp://"))
    return LinkConfig(name=name.strip("-")[:64], uri=uri, peer=peer, source="--peer")


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
    #: LAN discovery (mDNS). Off for an embedded Broker unless asked; ``zbroker start``
    #: turns it on unless --no-discovery.
    discovery: bool = False
    #: addresses discovery runs on; empty = derived from ``host`` (see discovery.py)
    interfaces: tuple[str, ...] = ()
    #: LinkConfig options (no name/uri) for links made to discovered peers
    discovery_link_defaults: dict[str, Any] = field(default_factory=dict)
    #: retention log rules (topics kept in the store, readable by sequence range)
    retain: tuple[RetainRule, ...] = ()
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
    #: where the values came from, for error messages ("file.toml", "keyword", ...)
    source: str = field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        src = self.source
        if self.broker_id is not None:
            validate_broker_id(self.broker_id, f"{src}: node.id")
        if not isinstance(self.host, str) or not self.host or any(c in self.host for c in " /"):
            raise ConfigError(f"{src}: node.host: {self.host!r} is not a host name or address")
        _check_int(self.port, f"{src}: node.port", 0, 65533)
        if self.data_dir is not None and not isinstance(self.data_dir, Path):
            if not isinstance(self.data_dir, str) or not self.data_dir:
                raise ConfigError(f"{src}: node.data_dir: {self.data_dir!r} is not a path")
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"{src}: node.log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        _check_int(self.max_frame_bytes, f"{src}: limits.max_frame_bytes", 64, 1 << 30)
        _check_int(self.hwm, f"{src}: limits.hwm", 1, 10_000_000)
        validate_broker_id(self.group, f"{src}: node.group")
        links = tuple(self.links)
        for link in links:
            if not isinstance(link, LinkConfig):
                raise ConfigError(f"{src}: links must be LinkConfig objects, not {link!r}")
        names = [link.name for link in links]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError(f"{src}: link name(s) used twice: {', '.join(sorted(dup))}")
        object.__setattr__(self, "links", links)
        if type(self.discovery) is not bool:
            raise ConfigError(f"{src}: discovery.enabled must be true or false")
        interfaces = tuple(self.interfaces)
        for addr in interfaces:
            try:
                ipaddress.ip_address(addr)
            except (ValueError, TypeError) as exc:
                raise ConfigError(
                    f"{src}: discovery.interfaces: {addr!r} is not an IPv4 or IPv6 address"
                ) from exc
        object.__setattr__(self, "interfaces", interfaces)
        self.discovered_link("check", "tcp://127.0.0.1:1")  # validates the defaults
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
            _check_int(rule.max_msgs, f"{where}: max_msgs", 0, 1 << 62)
            _check_int(rule.max_bytes, f"{where}: max_bytes", 0, 1 << 62)
            _check_float(rule.max_age, f"{where}: max_age", 0, 10 * 365 * 86400)
            if rule.overflow not in OVERFLOW_POLICIES:
                raise ConfigError(
                    f"{where}: overflow {rule.overflow!r} is not one of "
                    f"{', '.join(OVERFLOW_POLICIES)}"
                )
        object.__setattr__(self, "retain", retain)
        if type(self.fsync) is not bool:
            raise ConfigError(f"{src}: node.fsync must be true or false")
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
            object.__setattr__(self, name, Path(value).expanduser())
        if self.security:
            for link in links:
                if link.peer is None:
                    raise ConfigError(
                        f"{src}: link {link.name!r}: with security enabled, set peer = "
                        '"BROKER_ID" (or --peer ID@URI): the node must know whose public key '
                        "to expect there"
                    )
        _check_int(self.forward_max_msgs, f"{src}: forward.max_msgs", 0, 1 << 40)
        _check_int(self.forward_max_bytes, f"{src}: forward.max_bytes", 0, 1 << 50)
        _check_float(self.sticky_ttl, f"{src}: forward.sticky_ttl", 0.1, 10 * 365 * 86400)
        if self.forward_overflow not in OVERFLOW_POLICIES:
            raise ConfigError(
                f"{src}: forward.overflow: {self.forward_overflow!r} is not one of "
                f"{', '.join(OVERFLOW_POLICIES)}"
            )

    def discovered_link(self, name: str, uri: str) -> LinkConfig:
        """A LinkConfig for a link to a discovered peer: the discovery defaults applied."""
        defaults = dict(self.discovery_link_defaults)
        bad = set(defaults) - (_LINK_KEYS - {"name", "uri"})
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


def _check_int(value: object, where: str, lo: int, hi: int) -> None:
    if type(value) is not int:
        raise ConfigError(f"{where}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range ({lo}..{hi})")


# TOML table -> {toml key: dataclass field}
_SCHEMA: dict[str, dict[str, str]] = {
    "node": {
        "id": "broker_id",
        "host": "host",
        "port": "port",
        "data_dir": "data_dir",
        "log_level": "log_level",
        "group": "group",
        "fsync": "fsync",
    },
    "limits": {"max_frame_bytes": "max_frame_bytes", "hwm": "hwm"},
    "forward": {
        "max_msgs": "forward_max_msgs",
        "max_bytes": "forward_max_bytes",
        "overflow": "forward_overflow",
        "sticky_ttl": "sticky_ttl",
    },
}


def config_from_mapping(data: dict[str, Any], source: str) -> NodeConfig:
    """Build a NodeConfig from parsed TOML; unknown tables and keys are errors."""
    kwargs: dict[str, Any] = {}
    for table, value in data.items():
        if table == "link":
            kwargs["links"] = _links_from_toml(value, source)
            continue
        if table == "discovery":
            kwargs.update(_discovery_from_toml(value, source))
            continue
        if table == "retain":
            kwargs["retain"] = _retain_from_toml(value, source)
            continue
        if table == "security":
            kwargs.update(_security_from_toml(value, source))
            continue
        keys = _SCHEMA.get(table)
        if keys is None:
            raise ConfigError(
                f"{source}: unknown table [{table}] (known: "
                f"{', '.join(f'[{t}]' for t in _SCHEMA)}, [[link]])"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {table} must be a table, not {type(value).__name__}")
        for key, item in value.items():
            name = keys.get(key)
            if name is None:
                raise ConfigError(
                    f"{source}: unknown key {table}.{key} (known: {', '.join(sorted(keys))})"
                )
            if name == "data_dir":
                if not isinstance(item, str):
                    raise ConfigError(f"{source}: {table}.{key}: {item!r} is not a path string")
                item = Path(item).expanduser()
            kwargs[name] = item
    return NodeConfig(source=source, **kwargs)


_LINK_KEYS = {f.name for f in dataclasses.fields(LinkConfig)} - {"source"}


def _links_from_toml(value: Any, source: str) -> tuple[LinkConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: links are written as [[link]] tables")
    links = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ConfigError(f"{source}: [[link]] #{i + 1} is not a table")
        unknown = set(item) - _LINK_KEYS
        if unknown:
            raise ConfigError(
                f"{source}: [[link]] #{i + 1}: unknown key(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(_LINK_KEYS))})"
            )
        for required in ("name", "uri"):
            if required not in item:
                raise ConfigError(f"{source}: [[link]] #{i + 1}: missing key {required!r}")
        links.append(LinkConfig(source=source, **item))
    return tuple(links)


def _retain_from_toml(value: Any, source: str) -> tuple[RetainRule, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: retention rules are written as [[retain]] tables")
    rules = []
    known = {"pattern", "max_msgs", "max_bytes", "max_age", "overflow"}
    for i, item in enumerate(value):
        where = f"{source}: [[retain]] #{i + 1}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} is not a table")
        unknown = set(item) - known
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if "pattern" not in item:
            raise ConfigError(f"{where}: missing key 'pattern'")
        age = item.get("max_age", 0.0)
        rules.append(
            RetainRule(
                pattern=item["pattern"],
                max_msgs=item.get("max_msgs", 0),
                max_bytes=item.get("max_bytes", 0),
                max_age=float(age) if type(age) in (int, float) else age,
                overflow=item.get("overflow", "drop-oldest"),
            )
        )
    return tuple(rules)


def _discovery_from_toml(value: Any, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: discovery must be a table")
    known = {"enabled", "interfaces", "link_defaults"}
    unknown = set(value) - known
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) discovery.{', discovery.'.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(known))})"
        )
    out: dict[str, Any] = {}
    if "enabled" in value:
        out["discovery"] = value["enabled"]
    if "interfaces" in value:
        if not isinstance(value["interfaces"], list):
            raise ConfigError(f"{source}: discovery.interfaces must be a list of addresses")
        out["interfaces"] = tuple(value["interfaces"])
    if "link_defaults" in value:
        if not isinstance(value["link_defaults"], dict):
            raise ConfigError(f"{source}: discovery.link_defaults must be a table")
        out["discovery_link_defaults"] = dict(value["link_defaults"])
    return out


def _security_from_toml(value: Any, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: security must be a table")
    known = {"enabled", "key_dir", "allowlist", "clients"}
    unknown = set(value) - known
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) security.{', security.'.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(known))})"
        )
    out: dict[str, Any] = {}
    if "enabled" in value:
        out["security"] = value["enabled"]
    base = Path(source).parent
    for key in ("key_dir", "allowlist", "clients"):
        item = value.get(key)
        if item is None:
            continue
        if key == "clients" and isinstance(item, dict):
            out[key] = item
            continue
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{source}: security.{key}: {item!r} is not a path string")
        p = Path(item).expanduser()
        out[key] = p if p.is_absolute() else base / p  # relative to the config file
    return out


def load_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Load and validate a TOML config file."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    return config_from_mapping(data, str(p))
