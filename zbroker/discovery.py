"""LAN discovery over mDNS/DNS-SD (python-zeroconf): announce this node, find the others.

Service type ``_zbroker._tcp.local.``; instance name = broker ID; TXT properties ``id``,
``group``, ``version``, ``incarnation``, ``endpoint`` (the first well-known endpoint) and
``endpoints`` (all of them, comma-separated). The node announces itself once its sockets
are bound and sends goodbye when it stops.

Discovery runs in zeroconf's own threads plus one of ours (registration blocks for the
~1.7 s of probing). It never touches the node's sockets: every finding is handed to
``emit`` (the node passes a function that pushes onto its inproc discovery socket) as a
plain dict ``{"event": "found" | "lost", "id", "group", "version", "endpoints",
"updated"}``. Group filtering and the decision to link are the node's.

mDNS does not notice a crash (cached records live for many minutes): the node's link
heartbeats do, and a restarted node re-announces under the same name, which browsers
report as *updated*: treated like *added*.

Interfaces: discovery runs only on the addresses it is given. A node bound to one
address discovers on that address; a node bound to all addresses (0.0.0.0) discovers on
every interface. When multicast cannot be joined (no such device, no route) this logs one
clear line and the node keeps running with its static links.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable
from typing import Any

from .const import PROTOCOL_VERSION

__all__ = ["SERVICE_TYPE", "Discovery", "default_interfaces", "parse_txt"]

log = logging.getLogger("zbroker.discovery")

SERVICE_TYPE = "_zbroker._tcp.local."
#: bytes of a DNS label: the longest instance name (broker ID) mDNS can announce
_MAX_LABEL = 63
#: milliseconds to wait for a discovered service's records.
_INFO_TIMEOUT_MS = 3000


def default_interfaces(host: str) -> list[str]:
    """The addresses discovery uses when none are named: the bound address when the node
    binds one address; every address of every interface (IPv4 and IPv6, link-local
    excluded) when it binds all (``0.0.0.0``, ``::``, ``*``)."""
    if host not in ("0.0.0.0", "::", "*", ""):
        return [host]
    import ifaddr

    out: list[str] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            addr = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            try:
                parsed = ipaddress.ip_address(addr)
            except ValueError:
                continue
            if parsed.is_link_local:
                continue
            out.append(addr)
    non_loopback = [a for a in out if not ipaddress.ip_address(a).is_loopback]
    return non_loopback or out


def _txt(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def parse_txt(properties: dict[Any, Any]) -> dict[str, Any] | None:
    """A discovered service's TXT properties as a peer record, or None if unusable."""
    props = {_txt(k): _txt(v) for k, v in properties.items()}
    if not props.get("id") or not props.get("endpoint"):
        return None
    endpoints = [e for e in props.get("endpoints", "").split(",") if e] or [props["endpoint"]]
    try:
        version = int(props.get("version", "0"))
    except ValueError:
        version = 0
    return {
        "id": props["id"],
        "group": props.get("group", ""),
        "version": version,
        "endpoints": endpoints,
    }


def _endpoint(addr: str, port: int) -> str:
    return f"tcp://[{addr}]:{port}" if ":" in addr else f"tcp://{addr}:{port}"


class Discovery:
    """Announce ``broker_id`` on ``interfaces`` and report other zbroker services."""

    def __init__(
        self,
        *,
        broker_id: str,
        group: str,
        port: int,
        interfaces: list[str],
        emit: Callable[[dict[str, Any]], None],
        announce: bool = True,
        incarnation: int = 0,
    ) -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.group = group
        self.port = port
        self.interfaces = interfaces
        self.endpoints = [_endpoint(a, port) for a in interfaces]
        self._emit = emit
        self._announce = announce
        self._zc: Any = None
        self._browser: Any = None
        self._info: Any = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.error: str | None = None
        self.running = False
        self.announced = threading.Event()

    def start(self) -> bool:
        """Join multicast and start browsing; announce in the background. Returns False
        (after one clear log line) when the node cannot be announced or multicast cannot
        be joined."""
        from zeroconf import Error as ZeroconfError
        from zeroconf import IPVersion, ServiceBrowser, Zeroconf

        try:
            # first: a name mDNS cannot carry must not leave multicast joined behind it
            self._info = self._service_info()
        except (ZeroconfError, ValueError, IndexError) as exc:
            hint = (
                "; an mDNS instance name holds at most 63 bytes: give the node a shorter broker ID"
                if len(self.broker_id.encode()) > _MAX_LABEL
                else ""
            )
            return self._off(f"cannot announce {self.broker_id!r} by mDNS: {exc!r}{hint}")
        try:
            has_v4 = any(":" not in a for a in self.interfaces)
            has_v6 = any(":" in a for a in self.interfaces)
            version = (
                IPVersion.All
                if has_v4 and has_v6
                else IPVersion.V6Only
                if has_v6
                else IPVersion.V4Only
            )
            self._zc = Zeroconf(interfaces=self.interfaces, ip_version=version)
        except (OSError, ValueError) as exc:
            return self._off(
                f"cannot join mDNS multicast on "
                f"{', '.join(self.interfaces) or '(no interface)'}: {exc}"
            )
        self._browser = ServiceBrowser(self._zc, SERVICE_TYPE, handlers=[self._on_change])
        self.running = True
        if self._announce:
            self._thread = threading.Thread(
                target=self._register, name=f"zbroker-discovery-{self.broker_id}", daemon=True
            )
            self._thread.start()
        log.info(
            "LAN discovery on %s (group %s, service %s)",
            ", ".join(self.interfaces),
            self.group,
            SERVICE_TYPE,
        )
        return True

    def _off(self, why: str) -> bool:
        """Say (once, as :attr:`error`) why discovery is off; the node runs on."""
        self.error = f"LAN discovery is off: {why}. The node runs on with its configured links."
        log.error("%s", self.error)
        return False

    def _service_info(self) -> Any:
        """This node's mDNS service (raises zeroconf's BadTypeInNameException for a name
        it cannot carry)."""
        from zeroconf import ServiceInfo

        return ServiceInfo(
            SERVICE_TYPE,
            f"{self.broker_id}.{SERVICE_TYPE}",
            addresses=[ipaddress.ip_address(a).packed for a in self.interfaces],
            port=self.port,
            properties={
                "id": self.broker_id,
                "group": self.group,
                "version": str(PROTOCOL_VERSION),
                # a restarted node's records differ from the ones cached since its crash
                # (no goodbye was sent), so browsers report it as updated and redial it
                "incarnation": str(self.incarnation),
                "endpoint": self.endpoints[0],
                "endpoints": ",".join(self.endpoints),
            },
            server=f"{self.broker_id}.local.",
        )

    def _register(self) -> None:
        try:
            self._zc.register_service(self._info, allow_name_change=False)
            self.announced.set()
            log.info("announced %s as %s", self.broker_id, ", ".join(self.endpoints))
        except Exception as exc:  # zeroconf raises several kinds; none may kill the node
            if not self._stopping.is_set():
                self.error = f"could not announce {self.broker_id} on the LAN: {exc}"
                log.error("%s", self.error)

    def _on_change(self, zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        from zeroconf import ServiceStateChange

        if self._stopping.is_set():
            return
        instance = name[: -len(service_type) - 1] if name.endswith(service_type) else name
        if instance == self.broker_id:
            return
        try:
            if state_change is ServiceStateChange.Removed:
                self._emit({"event": "lost", "id": instance})
                return
            info = zeroconf.get_service_info(service_type, name, timeout=_INFO_TIMEOUT_MS)
            if info is None:
                log.debug("no records for %s in time", name)
                return
            peer = parse_txt(info.properties or {})
            if peer is None or peer["id"] == self.broker_id:
                return
            peer["event"] = "found"
            peer["updated"] = state_change is ServiceStateChange.Updated
            self._emit(peer)
        except Exception:  # a bad record or a closing zeroconf must not kill its thread
            if not self._stopping.is_set():
                log.exception("discovery handler failed for %s", name)

    def stop(self, timeout: float = 3.0) -> None:
        """Send goodbye (unregister) and leave multicast; bounded."""
        self._stopping.set()
        zc = self._zc
        if zc is None:
            return
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            if self._browser is not None:
                self._browser.cancel()
            if self.announced.is_set():
                zc.unregister_service(self._info)
        except Exception as exc:
            log.warning("discovery goodbye failed: %s", exc)
        finally:
            zc.close()
            self._zc = None
