"""``[monitor]``: the monitoring HTTP server (metrics, API, network map) of a node.

Off by default. ``listen = "HOST:PORT"`` (or ``zbroker start --monitor HOST:PORT``) turns
it on there; ``enabled = true`` alone serves on :data:`DEFAULT_MONITOR`. The monitor has
no authentication, so with security on it stays off unless an address is given
explicitly (a secured node never opens an unauthenticated port on its own).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .checks import check_float

__all__ = ["DEFAULT_MONITOR", "MONITOR_KEYS", "MonitorConfig", "parse_listen"]

DEFAULT_MONITOR = "127.0.0.1:8222"
MONITOR_KEYS = frozenset({"enabled", "listen", "interval"})


def parse_listen(value: object, where: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6; port 0: any free one) as (host, port)."""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{where}: {value!r} is not HOST:PORT")
    host, _, port_s = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or any(c in host for c in " /[]"):
        raise ConfigError(f"{where}: {value!r}: bad host {host!r}")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{where}: {value!r}: bad IPv6 address {host!r}") from None
    if not port_s.isdigit() or int(port_s) > 65535:
        raise ConfigError(f"{where}: {value!r}: bad port {port_s!r}")
    return host, int(port_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorConfig:
    """Where the monitor listens (None: off) and how often the loop publishes the
    snapshot it serves (while somebody reads it)."""

    enabled: bool = False
    listen: str | None = None
    #: seconds between snapshots of the node while the monitor is read
    interval: float = 1.0
    source: str = dataclasses.field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        src = self.source
        if type(self.enabled) is not bool:
            raise ConfigError(f"{src}: monitor.enabled must be true or false")
        if self.listen is not None:
            parse_listen(self.listen, f"{src}: monitor.listen")
        object.__setattr__(
            self, "interval", check_float(self.interval, f"{src}: monitor.interval", 0.05, 3600.0)
        )

    @property
    def on(self) -> bool:
        return self.enabled or self.listen is not None

    def address(self) -> tuple[str, int]:
        """Where to listen: the explicit address, else the default one."""
        return parse_listen(self.listen or DEFAULT_MONITOR, f"{self.source}: monitor.listen")

    def check_security(self, security: bool, where: str) -> None:
        """With security on, only an explicit address turns the monitor on."""
        if security and self.enabled and self.listen is None:
            raise ConfigError(
                f"{where}: monitor.enabled with security on: the monitor has no "
                "authentication, so give its address explicitly (monitor.listen or --monitor)"
            )

    @classmethod
    def coerce(cls, value: Any, where: str) -> MonitorConfig:
        """A MonitorConfig, or an address string (the monitor on there)."""
        if isinstance(value, MonitorConfig):
            return value
        if isinstance(value, str):
            return cls(listen=value, source=where)
        raise ConfigError(f"{where}: monitor: {value!r} is not a MonitorConfig or HOST:PORT")

    @classmethod
    def from_toml(cls, value: Any, source: str) -> MonitorConfig:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: monitor must be a table")
        unknown = set(value) - MONITOR_KEYS
        if unknown:
            raise ConfigError(
                f"{source}: unknown key(s) {', '.join(f'monitor.{k}' for k in sorted(unknown))} "
                f"(known: {', '.join(sorted(MONITOR_KEYS))})"
            )
        return cls(source=source, **value)
