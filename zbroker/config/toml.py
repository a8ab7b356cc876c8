"""Config files: TOML tables to a NodeConfig, with unknown tables and keys as errors.

Each table has its reader here; the values themselves are checked by the config objects
(:class:`~.node.NodeConfig`, :class:`~.link.LinkConfig`), so a file and keywords pass the
same checks. Paths in ``[security]`` (the ``key_file`` of a ``[security.clients]`` table
too) are relative to the config file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Set
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..store import RetainRule
from .advisories import AdvisoryConfig
from .hosts import hosts_from_toml
from .link import LINK_KEYS, LinkConfig
from .monitor import MonitorConfig
from .node import NodeConfig
from .queues import queue_rules_from_toml

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
    "durables": {
        "redistribution_delay": "redistribution_delay",
        "max_moves": "max_moves",
    },
    "routing": {"local": "local_branches"},
    "state": {
        "missing_topic_timeout": "missing_topic_timeout",
        "tombstone_ttl": "tombstone_ttl",
    },
}


def config_from_mapping(data: dict[str, Any], source: str) -> NodeConfig:
    """Build a NodeConfig from parsed TOML; unknown tables and keys are errors."""
    kwargs: dict[str, Any] = {}
    for table, value in data.items():
        reader = _READERS.get(table)
        if reader is not None:
            kwargs.update(reader[0](value, source))
            continue
        keys = _SCHEMA.get(table)
        if keys is None:
            raise ConfigError(
                f"{source}: unknown table [{table}] (known: {', '.join(known_tables())})"
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
                if not isinstance(item, str) or not item:  # ("": the working directory)
                    raise ConfigError(f"{source}: {table}.{key}: {item!r} is not a path string")
                item = Path(item).expanduser()
            kwargs[name] = item
    return NodeConfig(source=source, **kwargs)


def _links_from_toml(value: Any, source: str) -> tuple[LinkConfig, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: links are written as [[link]] tables")
    links = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ConfigError(f"{source}: [[link]] #{i + 1} is not a table")
        _check_keys(item, LINK_KEYS, f"{source}: [[link]] #{i + 1}")
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


def _check_keys(item: dict[str, Any], known: Set[str], where: str, prefix: str = "") -> None:
    """``item`` sets only ``known`` keys; the error lists them (each key as ``prefix`` +
    key) and every known one."""
    unknown = set(item) - known
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {prefix}{f', {prefix}'.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(known))})"
        )


def _check_table(value: Any, table: str, known: set[str], source: str) -> None:
    """``[table]`` is a table of ``known`` keys only."""
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {table} must be a table")
    _check_keys(value, known, source, f"{table}.")


def _discovery_from_toml(value: Any, source: str) -> dict[str, Any]:
    _check_table(value, "discovery", {"enabled", "interfaces", "link_defaults"}, source)
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
    _check_table(value, "security", {"enabled", "key_dir", "allowlist", "clients"}, source)
    out: dict[str, Any] = {}
    if "enabled" in value:
        out["security"] = value["enabled"]
    base = Path(source).parent
    for key in ("key_dir", "allowlist", "clients"):
        item = value.get(key)
        if item is None:
            continue
        if key == "clients" and isinstance(item, dict):
            out[key] = _clients_table(item, base)
            continue
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{source}: security.{key}: {item!r} is not a path string")
        p = Path(item).expanduser()
        out[key] = p if p.is_absolute() else base / p  # relative to the config file
    return out


def _clients_table(table: dict[str, Any], base: Path) -> dict[str, Any]:
    """A ``[security.clients]`` table with each relative ``key_file`` made relative to the
    config file, as the other paths of ``[security]`` are (the rest is checked when the
    permissions load)."""
    out: dict[str, Any] = {}
    for name, entry in table.items():
        key_file = entry.get("key_file") if isinstance(entry, dict) else None
        if isinstance(key_file, str) and key_file:
            path = Path(key_file).expanduser()
            entry = {**entry, "key_file": str(path if path.is_absolute() else base / path)}
        out[name] = entry
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


_Reader = Callable[[Any, str], dict[str, Any]]

#: the tables with a reader of their own (the others are _SCHEMA's): table -> (its
#: NodeConfig keywords from its value, whether a file writes it as an array [[table]])
_READERS: dict[str, tuple[_Reader, bool]] = {
    "discovery": (_discovery_from_toml, False),
    "security": (_security_from_toml, False),
    "monitor": (lambda v, src: {"monitor": MonitorConfig.from_toml(v, src)}, False),
    "advisories": (lambda v, src: {"advisories": AdvisoryConfig.from_mapping(v, src)}, False),
    "link": (lambda v, src: {"links": _links_from_toml(v, src)}, True),
    "retain": (lambda v, src: {"retain": _retain_from_toml(v, src)}, True),
    "queue": (lambda v, src: {"queues": queue_rules_from_toml(v, src)}, True),
    "host": (lambda v, src: {"host_branches": hosts_from_toml(v, src, "host")}, True),
    "flood": (lambda v, src: {"flood_branches": hosts_from_toml(v, src, "flood")}, True),
}


def known_tables() -> list[str]:
    """Every table a file may have, written as a file writes it (``[node]``, ``[[link]]``)."""
    readers = [f"[[{t}]]" if array else f"[{t}]" for t, (_, array) in _READERS.items()]
    return [f"[{t}]" for t in _SCHEMA] + readers
