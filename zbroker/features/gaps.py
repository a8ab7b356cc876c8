"""Gap notices: subscribers are told when a link dies upstream of them.

Messages that are not persistent cross links once (MSGS, no acknowledgement). A link that
dies without a goodbye — its peer killed, stopped, or cut off — may have swallowed what was
sent in its last moments; the sender counts what it sent after the peer's last sign of life
(``dropped.link_died``, in the link table), but the subscribers that missed them are
elsewhere. This feature tells them, as Diffusion tells its clients of a lost session:

* where the link died, every local subscription the link could have served (its filters
  allow the pattern) gets a *gap notice* (a delivery frame whose body is a map,
  :mod:`zbroker.wire.gaps`; the client calls ``Subscription.on_gap``);
* a ``GAP`` frame goes to every other link that is up, and each node that takes it does the
  same with its own subscribers and links: the notice reaches the subscribers downstream.
  ``path`` (the nodes it crossed) and the ``(node, n)`` of each notice seen stop it from
  looping in a mesh.

A notice says "messages may be missing", not how many: neither end of a dead link can
know. Persistent messages need none (store-and-forward resends them); a link closed with a
goodbye (its node stopping) loses nothing in flight, so it is not noticed.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..links.state import Link, LinkState
from ..node import Feature
from ..node.context import Context
from ..node.events import LinkWentDown, NodeEvent
from ..routing.filters import LinkFilter
from ..wire.frames import GAP
from ..wire.gaps import GAP_PATH_MAX, check_gap, encode_gap

__all__ = ["GapNotices"]

log = logging.getLogger("zbroker.node")

#: notices remembered by (node, n), so one that comes back over another path stops
SEEN_MAX = 4096


class GapNotices(Feature):
    name = "gaps"

    def __init__(self) -> None:
        self._n = 0
        self._going: dict[tuple[str, str], Link] = {}
        self._seen: collections.OrderedDict[tuple[str, int], None] = collections.OrderedDict()
        self.stats = {"link_deaths": 0, "received": 0, "forwarded": 0, "patterns_told": 0}

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx

    def link_frames(self) -> Mapping[int, Callable[[Link, list[Any]], int]]:
        return {GAP: self._on_gap}

    def link_down(self, link: Link, now: float) -> None:
        # the event (next) says whether it was up and why; the link may have left the
        # table by then (an accepted one does), so it is kept here until then
        self._going[(link.name, link.peer)] = link

    def on_events(self, events: list[NodeEvent]) -> None:
        for ev in events:
            if isinstance(ev, LinkWentDown):
                link = self._going.pop((ev.link, ev.peer), None)
                if link is not None and not ev.clean:
                    self._link_died(ev, link)
        self._going.clear()

    def _link_died(self, ev: LinkWentDown, link: Link) -> None:
        ctx = self._ctx
        self._n += 1
        info = {
            "node": ctx.broker_id,
            "n": self._n,
            "link": ev.link,
            "peer": ev.peer,
            "reason": ev.reason[:256],
            "path": [ctx.broker_id],
        }
        self._remember((ctx.broker_id, self._n))
        self.stats["link_deaths"] += 1
        if link.can_receive:
            self._tell(link, info)
        self._pass_on(info, came_from=link)

    def _on_gap(self, link: Link, value: list[Any]) -> int:
        info = check_gap(value)
        self.stats["received"] += 1
        key = (info["node"], info["n"])
        if key in self._seen or self._ctx.broker_id in info["path"]:
            return 0
        self._remember(key)
        self._tell(link, info)
        if len(info["path"]) < GAP_PATH_MAX:
            self._pass_on({**info, "path": [*info["path"], self._ctx.broker_id]}, came_from=link)
        return 0

    def _tell(self, link: Link, info: dict[str, Any]) -> None:
        """Notify local subscribers whose interest ``link`` could have served."""
        allows = LinkFilter(link.options.include, link.options.exclude).allows_pattern
        said = {k: info[k] for k in ("node", "link", "peer", "reason")}
        told = self._ctx.notify_subscribers(allows, said)
        self.stats["patterns_told"] += told
        if told:
            log.warning(
                "told subscribers of %d pattern(s): link %s of %s to %s died (%s); messages "
                "in flight may be lost",
                told,
                info["link"],
                info["node"],
                info["peer"],
                info["reason"],
            )

    def _pass_on(self, info: dict[str, Any], came_from: Link) -> None:
        frame = encode_gap(info)
        now = time.monotonic()
        for out in self._ctx.links.all():
            if (
                out is came_from
                or out.state is not LinkState.UP
                or not out.can_send
                or out.peer in info["path"]
            ):
                continue
            if self._ctx.links.send(out, frame, now):
                self.stats["forwarded"] += 1

    def _remember(self, key: tuple[str, int]) -> None:
        self._seen[key] = None
        if len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)

    def status(self, out: dict[str, Any]) -> None:
        out["gaps"] = dict(self.stats)
