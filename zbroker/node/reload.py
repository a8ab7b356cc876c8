"""Reloading the allowlist and client permissions of a running node (security on).

:meth:`Security.reload <zbroker.security.Security.reload>` loads the new rules (or raises
ConfigError with the old ones kept); this module makes the running node obey them at once,
not only at the next connection:

* publishes: the publish PULL's permission filter is made anew (its cache of decisions
  was the old rules');
* subscriptions: a connection holding a pattern the new rules refuse is ended (it may
  reconnect; every subscription it sends again is checked);
* control requests are checked against the permissions at each request already;
* links: a link to a node no longer in the allowlist (or whose key changed) is said
  goodbye to and taken down; the peer cannot link again (its key is refused, and an old
  connection may not handshake); a configured link that had failed for want of a peer's
  key dials again once the key is there.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import wire
from ..errors import ConfigError
from ..links.state import LinkState

if TYPE_CHECKING:
    from .kernel import Node

__all__ = ["reload_security"]

log = logging.getLogger("zbroker.node")


def reload_security(
    node: Node,
    allowlist: Path | None = None,
    clients: Path | dict[str, Any] | None = None,
    *,
    same_sources: bool = True,
) -> dict[str, Any]:
    """Reload (node thread only); returns what changed and what was ended."""
    sec = node.security
    if sec is None:
        raise ConfigError("security is off on this node: there are no permissions to reload")
    change = sec.reload(allowlist, clients, same_sources=same_sources)
    node.register_publish()
    ended = node.secure_subs.revoke() if node.secure_subs is not None else 0
    now = time.monotonic()
    links_ended = 0
    for link in node.links.all():
        if link.peer in change.nodes_removed and link.state is LinkState.UP:
            why = f"peer {link.peer} is no longer in the allowlist"
            node.links.send(link, wire.encode_link(wire.BYE, {"reason": why}), now)
            node.links.down(link, why, now)
            links_ended += 1
        elif (
            link.dialer
            and link.state is LinkState.FAILED
            and link.config is not None
            and (link.config.peer or link.peer) in change.nodes_added
        ):
            link.attempts = 0
            link.state = LinkState.WAITING
            link.deadline = now  # dial at the next tick
    out: dict[str, Any] = {
        **change.summary(),
        "connections_ended": ended,
        "links_ended": links_ended,
        "reloads": sec.reloads,
    }
    log.info("security reloaded: %s", out)
    return out
