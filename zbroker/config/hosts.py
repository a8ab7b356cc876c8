"""``[[host]]`` and ``[[flood]]`` tables: the branches of the topic tree this node hosts
(topic-host routing, :mod:`zbroker.routing.hosts`) and those it floods
(:mod:`zbroker.routing.flood`).

    [[host]]
    pattern = "ORDERS.>"

    [[flood]]
    pattern = "LOG.>"

Each table names one branch (a valid pattern); the command line's ``--host-topic
PATTERN`` and ``--flood PATTERN`` replace the lists.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

__all__ = ["hosts_from_toml"]


def hosts_from_toml(value: Any, source: str, table: str = "host") -> tuple[str, ...]:
    """The patterns of the ``[[host]]`` (or ``[[flood]]``) tables (checked by the
    NodeConfig)."""
    if not isinstance(value, list):
        raise ConfigError(f"{source}: {table} branches are written as [[{table}]] tables")
    out = []
    for i, item in enumerate(value):
        where = f"{source}: [[{table}]] #{i + 1}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where} is not a table")
        unknown = set(item) - {"pattern"}
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: pattern)"
            )
        if "pattern" not in item:
            raise ConfigError(f"{where}: missing key 'pattern'")
        out.append(item["pattern"])
    return tuple(out)
