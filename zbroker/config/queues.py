"""``[[queue]]`` tables: the routing policy of a queue group on this node.

Written in the node config, applied where a message enters the network (this node's
publishers' messages)::

    [[queue]]
    group = "workers"          # a queue group name (a broker-ID-like name)
    policy = "round_robin"     # local_first (default) | round_robin | weighted
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..names import validate_broker_id
from ..routing.groups import DEFAULT_POLICY, POLICIES

__all__ = ["QueueRule", "check_queue_rules", "queue_rules_from_toml"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRule:
    group: str
    policy: str = DEFAULT_POLICY


def check_queue_rules(rules: Any, source: str) -> tuple[QueueRule, ...]:
    """Each rule names a valid group once, with a known policy."""
    out = tuple(rules)
    seen: set[str] = set()
    for i, rule in enumerate(out):
        where = f"{source}: queue #{i + 1}"
        if not isinstance(rule, QueueRule):
            raise ConfigError(f"{where}: {rule!r} is not a QueueRule")
        validate_broker_id(rule.group, f"{where}: group")
        if rule.policy not in POLICIES:
            raise ConfigError(
                f"{where}: policy {rule.policy!r} is not one of {', '.join(POLICIES)}"
            )
        if rule.group in seen:
            raise ConfigError(f"{where}: group {rule.group!r} appears twice")
        seen.add(rule.group)
    return out


def queue_rules_from_toml(value: Any, source: str) -> tuple[QueueRule, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: queue policies are written as [[queue]] tables")
    rules = []
    for i, item in enumerate(value):
        where = f"{source}: [[queue]] #{i + 1}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} is not a table")
        unknown = set(item) - {"group", "policy"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if "group" not in item:
            raise ConfigError(f"{where}: missing key 'group'")
        rules.append(QueueRule(group=item["group"], policy=item.get("policy", DEFAULT_POLICY)))
    return tuple(rules)
