"""``[[host]]`` tables: the branches of the topic tree this node hosts (topic-host routing,
:mod:`zbroker.routing.hosts`).

    [[host]]
    pattern = "ORDERS.>"

Each table names one branch (a valid pattern); the command line's ``--host-topic PATTERN``
replaces the list.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError

__all__ = ["hosts_from_toml"]


def hosts_from_toml(value: Any, source: str) -> tuple[str, ...]:
    """The patterns of the ``[[host]]`` tables (checked by the NodeConfig)."""
    if not isinstance(value, list):
        raise ConfigError(f"{source}: hosted branches are written as [[host]] tables")
    out = []
    for i, item in enumerate(value):
        where = f"{source}: [[host]] #{i + 1}"
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
