"""Where the client finds nodes: broker addresses and the locators that list candidates.

A locator answers ``candidates()`` (the endpoints to try; the client picks among them at
random) and is asked again on every tick of the client thread, so a zeroconf group's
membership can change under a running client. :func:`make_locator` picks one from the
``broker`` address: a static list of ``tcp://`` endpoints, or ``zeroconf://GROUP``.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..config import validate_broker_id
from ..const import DEFAULT_PORT
from ..errors import BrokerUnreachable, ConfigError

__all__ = [
    "Locator",
    "StaticLocator",
    "ZeroconfLocator",
    "endpoint",
    "make_locator",
    "parse_address",
]

log = logging.getLogger("zbroker.client")


#: a host name ZeroMQ can connect to (it refuses others at once, which left the client
#: thread dead with a socket open and the constructor hanging in ``Context.term``)
_HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def parse_address(address: str) -> tuple[str, int]:
    """``tcp://host:port``, ``host:port`` or ``host`` → (host, port). IPv6 in brackets.
    Raises ConfigError for anything else (a host that is neither an IP address nor a
    name of letters, digits, ``-``, ``_`` and ``.``)."""
    text = address.strip()
    if "://" not in text:
        text = "tcp://" + text
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError as exc:  # (an unclosed IPv6 bracket)
        raise ConfigError(f"broker address {address!r}: {exc}") from exc
    if parts.scheme != "tcp" or not host or parts.path not in ("", "/"):
        raise ConfigError(f"broker address {address!r} is not of the form tcp://HOST:PORT")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ConfigError(f"broker address {address!r} has a bad port") from exc
    if not _valid_host(host):
        raise ConfigError(f"broker address {address!r} has a bad host {host!r}")
    return host, port


def _valid_host(host: str) -> bool:
    if ":" in host:  # IPv6 (urlsplit took it out of its brackets)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return _HOST_NAME.fullmatch(host) is not None


def endpoint(host: str, port: int) -> str:
    """The ZeroMQ endpoint of ``host:port`` (an IPv6 host goes in brackets)."""
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def is_zeroconf(broker: str) -> bool:
    return broker.strip().startswith("zeroconf://")


def static_endpoints(broker: str) -> list[str]:
    """The endpoints of a comma-separated address list, in the order given."""
    return [endpoint(*parse_address(part)) for part in broker.strip().split(",")]


class Locator(Protocol):
    def candidates(self) -> list[str]: ...

    def close(self) -> None: ...


class StaticLocator:
    """Candidates from a fixed list of addresses, in the order given."""

    def __init__(self, endpoints: list[str]) -> None:
        self._endpoints = endpoints

    def candidates(self) -> list[str]:
        return self._endpoints

    def close(self) -> None:
        pass


class ZeroconfLocator:
    """Candidates found on the LAN by mDNS: nodes of one group, in broker-ID order."""

    def __init__(self, group: str, interfaces: list[str] | None) -> None:
        from zeroconf import InterfaceChoice, ServiceBrowser, Zeroconf

        from ..discovery import SERVICE_TYPE

        self.group = group
        self._nodes: dict[str, str] = {}  # broker id -> endpoint
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._zc = Zeroconf(interfaces=interfaces or InterfaceChoice.All)
        except (OSError, ValueError) as exc:
            raise BrokerUnreachable(
                f"zeroconf://{group}: cannot join mDNS multicast on "
                f"{', '.join(interfaces or ['all interfaces'])}: {exc}"
            ) from exc
        self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        from ..discovery import parse_txt

        if self._closed:
            return
        instance = name[: -len(service_type) - 1] if name.endswith(service_type) else name
        try:
            if state_change is ServiceStateChange.Removed:
                with self._lock:
                    self._nodes.pop(instance, None)
                return
            info = zeroconf.get_service_info(service_type, name, timeout=3000)
            peer = parse_txt(info.properties or {}) if info is not None else None
            if peer is None or peer["group"] != self.group:
                return
            with self._lock:
                self._nodes[peer["id"]] = peer["endpoints"][0]
        except Exception:  # a closing zeroconf or a bad record must not kill its thread
            if not self._closed:
                log.exception("client discovery failed for %s", name)

    def candidates(self) -> list[str]:
        with self._lock:
            return [self._nodes[k] for k in sorted(self._nodes)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._browser.cancel()
        finally:
            self._zc.close()


def make_locator(broker: str, interfaces: list[str] | None) -> Locator:
    text = broker.strip()
    if is_zeroconf(text):
        group = text[len("zeroconf://") :].strip("/") or "default"
        validate_broker_id(group, f"broker address {broker!r}: group")
        return ZeroconfLocator(group, interfaces)
    endpoints = static_endpoints(text)
    if not endpoints:
        raise ConfigError(f"broker address {broker!r} names no node")
    return StaticLocator(endpoints)
