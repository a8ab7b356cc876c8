"""The inspection methods of :class:`~.api.Client`: a node's status, interest table and
peers, each one control request (with security on, for a client key with ``monitor``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import wire
from ..topics import validate_pattern


class InspectMethods:
    """What a node says of itself; mixed into :class:`~.api.Client`."""

    request: Callable[..., dict[str, Any]]

    def status(self) -> dict[str, Any]:
        """The node's status (see :meth:`zbroker.Broker.status`)."""
        return self.request(wire.STATUS)

    def routes(self, pattern: str | None = None) -> list[dict[str, Any]]:
        """The node's interest table (best entry per pattern and origin): pattern, origin,
        path, hops, next-hop link (None = local). ``pattern`` keeps overlapping ones."""
        if pattern is not None:
            validate_pattern(pattern)
        body = self.request(wire.ROUTES, {"pattern": pattern} if pattern else {})
        routes: list[dict[str, Any]] = body.get("routes", [])
        return routes

    def peers(self) -> list[dict[str, Any]]:
        """The node's peers: id, found_by (mdns/config/inbound), state, endpoint, links."""
        peers: list[dict[str, Any]] = self.request(wire.PEERS).get("peers", [])
        return peers
