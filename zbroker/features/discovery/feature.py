"""The discovery feature: peers found by mDNS become links, and PEERS says who is known.

Findings arrive from zeroconf's threads on an inproc PULL socket (no other thread ever
touches the node's sockets). Of each discovered pair the node with the lower broker ID
dials one duplex link; a configured or inbound link to the same peer is not doubled. A
discovered peer whose link's heartbeats fail is dropped, and linked again when it
announces itself again (mDNS cannot tell a crash from a pause: the heartbeats decide).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from ... import wire
from ...config.checks import is_tcp_host_port
from ...const import PROTOCOL_VERSION
from ...discovery import Discovery, default_interfaces
from ...errors import ConfigError
from ...links.state import Link, LinkKind, LinkState
from ...names import validate_broker_id
from ...node import Feature, Op, Request, monitored
from ...node.context import Context
from ...node.events import PeerFound, PeerLost
from .peers import describe_peers

__all__ = ["LanDiscovery"]

log = logging.getLogger("zbroker.node")


class LanDiscovery(Feature):
    name = "discovery"

    def __init__(self) -> None:
        self._discovered: dict[str, dict[str, Any]] = {}  # peer id -> mDNS record
        self._discovery: Discovery | None = None
        self._endpoint = f"inproc://zbroker-disc-{uuid.uuid4().hex}"
        self._said: set[tuple[str, tuple[str, ...]]] = set()  # (peer, bad endpoints) logged

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        if not ctx.config.discovery:
            return
        self._in = ctx.zmq_context.socket(zmq.PULL)
        self._in.setsockopt(zmq.LINGER, 0)
        self._in.bind(self._endpoint)
        # every socket in the poller costs each wake-up a check: only when it can speak
        ctx.add_socket(self._in, self._on_findings)

    def ops(self) -> Sequence[Op]:
        return (Op(wire.PEERS, self._peers, monitored("peers")),)

    def start(self, now: float) -> None:
        if not self._ctx.config.discovery:
            return
        push = self._ctx.zmq_context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self._endpoint)
        lock = threading.Lock()
        self._push, self._push_lock = push, lock

        def emit(event: dict[str, Any]) -> None:  # called from zeroconf's threads
            with lock:
                if not push.closed:
                    push.send(msgpack.packb(event))

        cfg = self._ctx.config
        self._discovery = Discovery(
            broker_id=self._ctx.broker_id,
            group=cfg.group,
            port=self._ctx.ports["control"],
            interfaces=list(cfg.interfaces) or default_interfaces(cfg.host),
            emit=emit,
            incarnation=self._ctx.incarnation,
        )
        try:
            self._discovery.start()
        except Exception as exc:  # zeroconf raises several kinds: none may stop the node
            self._discovery.error = f"LAN discovery is off: it failed to start: {exc!r}"
            log.exception("%s", self._discovery.error)

    def stop(self) -> None:
        if self._discovery is not None:
            self._discovery.stop()
            with self._push_lock:
                # every socket of the context must be closed, or Context.term() hangs
                self._push.close(linger=0)

    def close(self) -> None:
        sock = getattr(self, "_in", None)
        if sock is not None:
            sock.close(linger=0)

    # -- findings ---------------------------------------------------------------------------

    def _on_findings(self) -> None:
        now = time.monotonic()
        while True:
            try:
                event = msgpack.unpackb(self._in.recv(zmq.NOBLOCK), raw=False)
            except zmq.Again:
                return
            peer = event.get("id")
            if not isinstance(peer, str):
                continue
            if event.get("event") == "lost":
                self._lost(peer, now)
            else:
                self._found(peer, event, now)

    def _lost(self, peer: str, now: float) -> None:
        if self._discovered.pop(peer, None) is not None:
            log.info("discovered peer %s said goodbye", peer)
            self._ctx.emit(PeerLost(peer=peer))
        for link in list(self._ctx.links.dialers.values()):
            if link.kind is LinkKind.DISCOVERED and link.peer == peer:
                self._ctx.links.remove_discovered(link, now)

    def _found(self, peer: str, event: dict[str, Any], now: float) -> None:
        try:
            validate_broker_id(peer)
        except ConfigError:
            return
        group = self._ctx.config.group
        if event.get("group") != group:
            log.debug("ignoring node %s of group %r", peer, event.get("group"))
            return
        if event.get("version") != PROTOCOL_VERSION:
            log.warning("ignoring node %s: protocol version %r", peer, event.get("version"))
            return
        announced = event.get("endpoints")
        if not isinstance(announced, list):
            announced = []
        # what a link can dial: a malformed endpoint (another program under our service
        # name, a bad TXT record) would be refused by LinkConfig in the loop each time
        endpoints = [e for e in announced if isinstance(e, str) and is_tcp_host_port(e)]
        if len(endpoints) < len(announced):
            self._bad_endpoints(peer, announced)
        if not endpoints:
            return
        if peer not in self._discovered:
            self._ctx.emit(PeerFound(peer=peer, endpoint=endpoints[0]))
        self._discovered[peer] = {"endpoints": endpoints, "since": time.time()}
        self._consider(peer, endpoints, now)

    def _bad_endpoints(self, peer: str, announced: list[Any]) -> None:
        """Say once per peer and set of endpoints which of them cannot be dialled."""
        bad = sorted(repr(e) for e in announced if not (isinstance(e, str) and is_tcp_host_port(e)))
        said = (peer, tuple(bad))
        if said in self._said:
            return
        if len(self._said) >= 1000:
            self._said.clear()
        self._said.add(said)
        log.warning(
            "discovered node %s announces endpoints that cannot be dialled: %s",
            peer,
            ", ".join(bad),
        )

    def _consider(self, peer: str, endpoints: list[str], now: float) -> None:
        """Link to a discovered peer unless it dials us, or a link to it exists already."""
        me = self._ctx.broker_id
        if peer == me or me > peer:
            return  # of a discovered pair, the lower broker ID dials: exactly one link
        links = self._ctx.links
        for other in links.all():
            if other.kind is LinkKind.DISCOVERED:
                continue
            if other.peer == peer and other.state in (LinkState.UP, LinkState.HANDSHAKING):
                return  # configured or inbound link: not doubled
            if other.config is not None and other.config.uri in endpoints:
                return  # a configured link dials this very endpoint
        name = ("mdns-" + peer)[:64]
        link = links.dialers.get(name)
        if link is not None:
            if link.state in (LinkState.UP, LinkState.HANDSHAKING):
                return
            links.close_dialer(link)  # announced again: redial at once
            link.attempts = 0
        else:
            link = links.dialers[name] = self._new_link(name, peer, endpoints[0])
        log.info("discovered %s at %s: linking", peer, endpoints[0])
        self._ctx.dial(link, now)

    def _new_link(self, name: str, peer: str, endpoint: str) -> Link:
        cfg = self._ctx.config.discovered_link(name, endpoint)
        if not cfg.reconnect_max_attempts:
            # an unreachable announcement must not be dialled forever
            cfg = dataclasses.replace(cfg, reconnect_max_attempts=5)
        return Link.dialing(cfg, LinkKind.DISCOVERED, peer)

    def link_down(self, link: Link, now: float) -> None:
        if link.kind is LinkKind.DISCOVERED and not link.retired:
            if self._discovered.pop(link.peer, None) is not None:
                log.info("dropped discovered peer %s: %s", link.peer, link.last_error)

    # -- what is known --------------------------------------------------------------------------

    def _peers(self, req: Request) -> None:
        self._ctx.reply(
            req, wire.PEERS, {"peers": describe_peers(self._discovered, self._ctx.links.all())}
        )

    def status(self, out: dict[str, Any]) -> None:
        d = self._discovery
        out["discovery"] = {
            "enabled": d is not None and d.running,
            "interfaces": d.interfaces if d else [],
            "error": d.error if d else None,
            "peers": len(self._discovered),
        }
