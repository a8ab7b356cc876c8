"""A deterministic network simulator: many routing engines in one process.

Because the routing engine is sans-IO, the simulator runs exactly the code a node runs,
wired by in-memory links with a configurable delay, under a seeded random generator and a
virtual clock. Use it to plan a network before deploying it (``zbroker simulate``) and in
tests to check routing properties over many topologies.

    net = Network(seed=1)
    for n in "ABC":
        net.add_node(n)
    net.add_link("A", "B"); net.add_link("B", "C")
    net.subscribe("C", "PRICE.>")
    net.run()                      # until no frame is in flight (converged)
    net.publish("A", "PRICE.IBM")
    net.run()
    assert net.deliveries_of("C") == ...

Links are FIFO per direction (like TCP); frames are Python tuples (the node's codec is
tested on its own).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any

from .routing import (
    AdvertIn,
    DedupeWindow,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    RoutingEngine,
)
from .routing.filters import LinkFilter
from .routing.selection import Selective
from .selectors import Selector
from .selectors import selector as compile_selector
from .simtypes import Delivery, MsgId, SimLink, SimStats
from .topics import match

__all__ = ["Delivery", "Network", "SimLink", "SimStats"]


class _SimNode:
    def __init__(
        self,
        broker_id: str,
        incarnation: int,
        local: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
    ) -> None:
        self.id = broker_id
        self.incarnation = incarnation
        self.engine = RoutingEngine(broker_id, local_branches=local, host_branches=hosts)
        self.dedupe = DedupeWindow()
        self.seq = 0
        self.subs: dict[int, str] = {}  # subscriber id -> pattern
        self.selectors: dict[int, Selector] = {}  # subscriber id -> its selector, if any
        self.refs: Counter[str] = Counter()
        self.alive = True
        self.flush_pending = False
        self.adv_depth = 0  # the deepest advertisement received since the last flush


def _selected(node: _SimNode, pattern: str) -> frozenset[str] | None:
    """The selectors behind a node's interest in ``pattern`` (None: a subscriber wants
    everything), as a node's local interest says them (engine rule 7)."""
    texts = set()
    for sid, p in node.subs.items():
        if p == pattern:
            if sid not in node.selectors:
                return None
            texts.add(node.selectors[sid].text)
    return frozenset(texts) if texts else None


class Network:
    """N engines wired by in-memory links; deterministic under ``seed``."""

    def __init__(
        self,
        seed: int = 0,
        delay: tuple[float, float] = (0.001, 0.005),
        batch_window: float = 0.0005,
    ) -> None:
        self.rng = random.Random(seed)
        self.delay = delay
        # a node flushes interest changes at the end of a poll pass: changes within this
        # window (virtual seconds) leave in one advertisement frame per link
        self.batch_window = batch_window
        self.now = 0.0
        self.nodes: dict[str, _SimNode] = {}
        self.links: dict[str, SimLink] = {}
        self.stats = SimStats()
        self.deliveries: list[Delivery] = []
        self.published: list[tuple[str, str, MsgId]] = []  # (node, topic, id)
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._tie = itertools.count()
        self._sub_ids = itertools.count(1)
        self._incarnations: Counter[str] = Counter()

    # -- topology -------------------------------------------------------------------------

    def add_node(
        self,
        broker_id: str,
        local_branches: tuple[str, ...] = (),
        host_branches: tuple[str, ...] = (),
    ) -> None:
        """Add a node (``local_branches``: patterns whose topics never leave it;
        ``host_branches``: the branches it hosts)."""
        if broker_id in self.nodes and self.nodes[broker_id].alive:
            raise ValueError(f"node {broker_id} exists")
        self._incarnations[broker_id] += 1
        inc = self._incarnations[broker_id]
        self.nodes[broker_id] = _SimNode(broker_id, inc, local_branches, host_branches)
        for link in self.links.values():
            if broker_id in (link.dialer, link.acceptor) and link.up:
                self._bring_up(link)

    def host(self, broker_id: str, branch: str, *, flood: bool = False) -> None:
        """The node hosts (``flood``: floods) ``branch`` from now on."""
        node = self.nodes[broker_id]
        (node.engine.add_flood if flood else node.engine.add_host)(branch)
        self._schedule_flush(node)

    def remove_node(self, broker_id: str) -> None:
        """The node dies: every link to it goes down; its subscriptions vanish with it."""
        node = self.nodes[broker_id]
        node.alive = False
        for link in self.links.values():
            if broker_id in (link.dialer, link.acceptor):
                self._take_down(link)

    def add_link(
        self,
        dialer: str,
        acceptor: str,
        name: str | None = None,
        *,
        duplex: bool = True,
        options: LinkOptions | None = None,
    ) -> str:
        name = name or f"{dialer}-{acceptor}"
        if name in self.links:
            raise ValueError(f"link {name} exists")
        link = SimLink(name, dialer, acceptor, duplex, options or LinkOptions())
        self.links[name] = link
        self._bring_up(link)
        return name

    def set_link(self, name: str, up: bool) -> None:
        """Cut (``up=False``) or restore a link."""
        link = self.links[name]
        link.up = up
        if up:
            self._bring_up(link)
        else:
            self._take_down(link)

    def remove_link(self, name: str) -> None:
        self.set_link(name, False)
        del self.links[name]

    def _alive(self, n: str) -> bool:
        return n in self.nodes and self.nodes[n].alive

    def _bring_up(self, link: SimLink) -> None:
        if not (link.up and self._alive(link.dialer) and self._alive(link.acceptor)):
            return
        d, a = self.nodes[link.dialer], self.nodes[link.acceptor]
        link.epoch += 1
        d.engine.handle(
            LinkUp(
                link=link.name,
                peer=a.id,
                can_send=True,
                can_receive=link.duplex,
                options=link.options,
            )
        )
        a.engine.handle(
            LinkUp(
                link=link.name,
                peer=d.id,
                can_send=link.duplex,
                can_receive=True,
                options=link.options,
            )
        )
        self._schedule_flush(d)
        self._schedule_flush(a)

    def _take_down(self, link: SimLink) -> None:
        for end in (link.dialer, link.acceptor):
            if self._alive(end):
                node = self.nodes[end]
                if link.name in node.engine.links:
                    node.engine.handle(LinkDown(link=link.name))
                    self._schedule_flush(node)
        link.last_arrival.clear()

    # -- subscriptions and publishing ----------------------------------------------------

    def subscribe(self, node_id: str, pattern: str, selector: str | None = None) -> int:
        node = self.nodes[node_id]
        sid = next(self._sub_ids)
        node.subs[sid] = pattern
        node.refs[pattern] += 1
        if selector is not None:
            node.selectors[sid] = compile_selector(selector)
        if node.refs[pattern] == 1 or node.selectors:
            node.engine.handle(LocalSubscribe(pattern=pattern, selectors=_selected(node, pattern)))
            self._schedule_flush(node)
        return sid

    def unsubscribe(self, node_id: str, sid: int) -> None:
        node = self.nodes[node_id]
        pattern = node.subs.pop(sid)
        node.refs[pattern] -= 1
        had = node.selectors.pop(sid, None) is not None
        if node.refs[pattern] == 0:
            del node.refs[pattern]
            node.engine.handle(LocalUnsubscribe(pattern=pattern))
            self._schedule_flush(node)
        elif had or node.selectors:
            node.engine.handle(LocalSubscribe(pattern=pattern, selectors=_selected(node, pattern)))
            self._schedule_flush(node)

    def publish(self, node_id: str, topic: str, headers: dict[str, Any] | None = None) -> MsgId:
        node = self.nodes[node_id]
        node.seq += 1
        msg_id = (node.id, node.incarnation, node.seq)
        self.published.append((node_id, topic, msg_id))
        self._route(node, topic, msg_id, (), None, fresh=True, headers=headers)
        return msg_id

    # -- the event loop -------------------------------------------------------------------

    def run(self, until: float | None = None, max_events: int = 50_000_000) -> float:
        """Process events until none is left (or virtual time ``until``); return the time."""
        n = 0
        while self._queue and n < max_events:
            t, _, fn = self._queue[0]
            if until is not None and t > until:
                break
            heapq.heappop(self._queue)
            self.now = t
            fn()
            n += 1
        self.stats.events += n
        if until is not None:
            self.now = max(self.now, until)
        return self.now

    def _send(self, link: SimLink, src: str, frame: tuple[Any, ...]) -> None:
        dst = link.acceptor if src == link.dialer else link.dialer
        direction = f"{src}>{dst}"
        lo, hi = self.delay
        at = max(self.now + self.rng.uniform(lo, hi), link.last_arrival.get(direction, 0.0))
        link.last_arrival[direction] = at
        epoch = link.epoch

        def arrive() -> None:
            if (
                link.up
                and link.epoch == epoch
                and self._alive(dst)
                and link.name in self.nodes[dst].engine.links
            ):
                self._receive(self.nodes[dst], link, frame)

        heapq.heappush(self._queue, (at, next(self._tie), arrive))

    def _schedule_flush(self, node: _SimNode) -> None:
        if node.flush_pending:
            return
        node.flush_pending = True

        def flush() -> None:
            node.flush_pending = False
            if node.alive:
                self._flush(node)

        heapq.heappush(self._queue, (self.now + self.batch_window, next(self._tie), flush))

    def _flush(self, node: _SimNode) -> None:
        depth, node.adv_depth = node.adv_depth + 1, 0  # (the rounds of SimStats)
        for action in node.engine.flush():
            self.stats.advert(depth)
            frame = ("adv", action.full, action.entries, action.selectors, depth)
            self._send(self.links[action.link], node.id, frame)

    def _receive(self, node: _SimNode, link: SimLink, frame: tuple[Any, ...]) -> None:
        if frame[0] == "adv":
            self.stats.last_advert_at = self.now
            node.adv_depth = max(node.adv_depth, frame[4])
            ev = AdvertIn(link=link.name, full=frame[1], entries=frame[2], selectors=frame[3])
            node.engine.handle(ev)
            self._schedule_flush(node)
        else:
            _, topic, msg_id, path, targets, headers = frame
            self._route(node, topic, msg_id, path, targets, fresh=False, headers=headers)

    def _route(
        self,
        node: _SimNode,
        topic: str,
        msg_id: MsgId,
        path: tuple[str, ...],
        targets: tuple[str, ...] | None,
        *,
        fresh: bool,
        headers: dict[str, Any] | None = None,
    ) -> None:
        if node.id in path:
            self.stats.loops_dropped += 1
            return
        if not fresh and node.dedupe.seen(*msg_id):
            self.stats.duplicates_dropped += 1
            return
        local, sends = node.engine.route(topic, path, targets)
        if isinstance(sends, Selective):
            sends = sends.pick(headers)  # rule 7: targets no selector accepts are dropped
        for pattern in local:
            for sid, p in node.subs.items():
                if p == pattern and (sid not in node.selectors or node.selectors[sid](headers)):
                    self.deliveries.append(
                        Delivery(node.id, sid, pattern, topic, msg_id, len(path), path)
                    )
        new_path = (*path, node.id)
        for link_id, branch, copies in sends:
            link = self.links[link_id]
            peer = link.acceptor if link.dialer == node.id else link.dialer
            for _ in range(copies):
                self.stats.message_frames += 1
                self.stats.crossings[(msg_id, link_id, f"{node.id}>{peer}")] += 1
                self._send(link, node.id, ("msg", topic, msg_id, new_path, branch, headers))

    # -- analysis ------------------------------------------------------------------------

    def distances(self, source: str, topic: str | None = None) -> dict[str, int]:
        """Hop distances from ``source`` over live links in the direction messages flow.

        With ``topic``: only over links whose filters let it cross and within each link's
        ttl (a message may cross a link as its hop number h if h <= ttl).
        """
        adj: dict[str, list[tuple[str, SimLink]]] = {}
        for link in self.links.values():
            if not (link.up and self._alive(link.dialer) and self._alive(link.acceptor)):
                continue
            adj.setdefault(link.dialer, []).append((link.acceptor, link))
            if link.duplex:
                adj.setdefault(link.acceptor, []).append((link.dialer, link))
        dist = {source: 0}
        todo = deque([source])
        while todo:
            n = todo.popleft()
            hops = dist[n] + 1
            for m, link in adj.get(n, ()):
                if m in dist:
                    continue
                if topic is not None:
                    f = LinkFilter(link.options.include, link.options.exclude)
                    if hops > link.options.ttl or not f.allows_topic(topic):
                        continue
                dist[m] = hops
                todo.append(m)
        return dist

    def expected_deliveries(
        self, source: str, topic: str, headers: dict[str, Any] | None = None
    ) -> set[tuple[str, int]]:
        """(node, subscriber) pairs that should receive a message published at ``source``:
        subscribers matching ``topic`` (whose selector, if any, accepts ``headers``) on
        nodes it can reach through the links' filters and within their ttls."""
        reach = self.distances(source, topic)
        return {
            (n, sid)
            for n in reach
            for sid, pattern in self.nodes[n].subs.items()
            if self.nodes[n].alive and match(pattern, topic)
            if sid not in self.nodes[n].selectors or self.nodes[n].selectors[sid](headers)
        }

    def interest_entries(self) -> int:
        return sum(n.engine.entry_count() for n in self.nodes.values() if n.alive)

    def best_entries(self) -> Iterable[tuple[str, dict[str, object]]]:
        for n in self.nodes.values():
            if n.alive:
                for e in n.engine.interest():
                    yield n.id, e
