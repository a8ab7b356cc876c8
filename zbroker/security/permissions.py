"""Client permissions: which topics a client key may publish to and subscribe to.

A TOML file (or the ``[security.clients]`` table of the node config)::

    [alice]
    key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"   # or key_file = "alice.key"
    publish = ["ORDERS.>"]
    subscribe = ["PRICE.>", "ORDERS.*.FILLED"]
    monitor = false   # true: may read the node's status, routes and peers

A client may publish to a topic that one of its ``publish`` patterns matches, and
subscribe to a pattern that one of its ``subscribe`` patterns covers (every topic the
pattern matches, the allowed one matches too). An operation that publishes to (or
changes) every topic of a pattern, such as removing stateful topics, needs a ``publish``
pattern that covers it. A client may read what the node knows of the whole network (its
status, routes and peers: every subscription's pattern, every link, every route) only
with ``monitor = true``: those name topics far outside its own permissions. Nodes are not
clients: they have no permissions here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..const import RESERVED_PREFIX
from ..errors import ConfigError, InvalidTopic
from ..names import validate_broker_id
from ..topics import is_pattern, match, validate_pattern
from .keys import is_z85, read_public_key
from .logs import CACHE_MAX

__all__ = ["ClientPermissions", "ClientRule", "covers", "load_clients"]


@dataclass(frozen=True, slots=True)
class ClientRule:
    """One client key's permissions: topic patterns it may publish to / subscribe to."""

    name: str
    key: bytes
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    #: may read the node's status, routes and peers (STATUS, ROUTES, PEERS)
    monitor: bool = False


def load_clients(source: Path | dict[str, Any], base: Path | None = None) -> dict[str, ClientRule]:
    """Client rules from a TOML file or an already parsed table (``{name: {key | key_file,
    publish, subscribe}}``)."""
    where = str(source) if isinstance(source, Path) else "[security.clients]"
    if isinstance(source, Path):
        try:
            data: Any = tomllib.loads(source.read_text("utf-8"))
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"client permissions {source}: cannot read it: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"client permissions {source}: not valid TOML: {exc}") from exc
        base = source.parent
    else:
        data = source
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a table of clients")
    rules: dict[str, ClientRule] = {}
    keys: dict[bytes, str] = {}
    for name, entry in data.items():
        w = f"{where}: client {name!r}"
        validate_broker_id(name, f"{where}: client name")
        if not isinstance(entry, dict):
            raise ConfigError(f"{w} must be a table")
        unknown = set(entry) - {"key", "key_file", "publish", "subscribe", "monitor"}
        if unknown:
            raise ConfigError(f"{w}: unknown key(s) {', '.join(sorted(unknown))}")
        if ("key" in entry) == ("key_file" in entry):
            raise ConfigError(f"{w}: give exactly one of key (Z85 text) or key_file (a path)")
        if "key" in entry:
            if not isinstance(entry["key"], str) or not is_z85(entry["key"]):
                raise ConfigError(f"{w}: key must be a 40-character Z85 public key")
            key = entry["key"].encode()
        else:
            if not isinstance(entry["key_file"], str) or not entry["key_file"]:
                raise ConfigError(f"{w}: key_file must be the path of a public key file")
            kf = Path(entry["key_file"]).expanduser()
            if not kf.is_absolute() and base is not None:
                kf = base / kf
            try:
                key = read_public_key(kf)
            except ConfigError as exc:  # (it names the file, not whose key it is)
                raise ConfigError(f"{w}: key_file: {exc}") from exc
        if key in keys:
            raise ConfigError(f"{w}: same key as client {keys[key]!r}")
        keys[key] = name
        perms: dict[str, tuple[str, ...]] = {}
        for kind in ("publish", "subscribe"):
            value = entry.get(kind, [])
            if not isinstance(value, list):
                raise ConfigError(f"{w}: {kind} must be a list of patterns")
            try:
                perms[kind] = tuple(validate_pattern(p) for p in value)
            except InvalidTopic as exc:
                raise ConfigError(f"{w}: {kind}: {exc}") from exc
        monitor = entry.get("monitor", False)
        if type(monitor) is not bool:
            raise ConfigError(f"{w}: monitor must be true or false")
        rules[name] = ClientRule(name, key, perms["publish"], perms["subscribe"], monitor)
    return rules


def covers(allowed: str, pattern: str) -> bool:
    """True if every topic matching ``pattern`` also matches ``allowed`` (both valid).
    A leading wildcard matches no ``$ZB`` topic (:func:`zbroker.topics.match`), so it
    permits no ``$ZB`` pattern: those are permitted by name (``$ZB.ADVISORY.>``)."""
    a = allowed.split(".")
    p = pattern.split(".")
    if p[0] == RESERVED_PREFIX and a[0] in ("*", ">"):
        return False
    for i, seg in enumerate(a):
        if seg == ">":
            return len(p) > i
        if i >= len(p) or p[i] == ">":
            return False
        if seg != "*" and (p[i] == "*" or p[i] != seg):
            return False
    return len(a) == len(p)


class ClientPermissions:
    """The client rules by user id (``client:NAME``), with each decision cached: the same
    user publishes to the same topics again and again."""

    def __init__(self, clients: dict[str, ClientRule]) -> None:
        self._rules = {"client:" + n: r for n, r in clients.items()}
        self._pub_ok: dict[tuple[str, str], bool] = {}
        self._sub_ok: dict[tuple[str, str], bool] = {}
        #: no client is refused a publish: there is nothing to check
        self.publish_anywhere = all(">" in rule.publish for rule in clients.values())

    def of(self, user: str) -> dict[str, Any] | None:
        """The permissions a client is told in the HELLO reply (None: not a client):
        its publish and subscribe patterns, and whether it may read the node's status."""
        rule = self._rules.get(user)
        if rule is None:
            return None
        return {
            "publish": list(rule.publish),
            "subscribe": list(rule.subscribe),
            "monitor": rule.monitor,
        }

    def may_publish(self, user: str, topic: str) -> bool:
        """May ``user`` publish to ``topic``, or, given a pattern (a request that changes
        every topic it matches, e.g. a state removal), to every topic of it? A pattern
        is judged by :func:`covers`: :func:`match` would take its ``>`` and ``*`` for
        literal segments (``S.*`` would allow ``S.>``)."""
        k = (user, topic)
        ok = self._pub_ok.get(k)
        if ok is None:
            rule = self._rules.get(user)
            judge = covers if is_pattern(topic) else match
            ok = rule is not None and any(judge(p, topic) for p in rule.publish)
            if len(self._pub_ok) >= CACHE_MAX:
                self._pub_ok.clear()
            self._pub_ok[k] = ok
        return ok

    def may_monitor(self, user: str) -> bool:
        """May ``user`` read the node's status, routes and peers (``monitor = true``)?"""
        rule = self._rules.get(user)
        return rule is not None and rule.monitor

    def may_subscribe(self, user: str, pattern: str) -> bool:
        k = (user, pattern)
        ok = self._sub_ok.get(k)
        if ok is None:
            rule = self._rules.get(user)
            ok = rule is not None and any(covers(p, pattern) for p in rule.subscribe)
            if len(self._sub_ok) >= CACHE_MAX:
                self._sub_ok.clear()
            self._sub_ok[k] = ok
        return ok
