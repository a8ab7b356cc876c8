"""Plan a network before deploying it: run a topology file through the simulator.

``zbroker simulate TOPOLOGY.toml`` loads a topology (explicit nodes and links, or a random
one), lets interest converge, publishes, and reports: convergence time, advertisement
frames, messages per link per publish, hops per delivery, duplicates delivered (must be 0),
messages lost, and memory per interest entry. File format::

    [simulation]
    seed = 1
    delay_ms = [1, 5]            # per-frame link delay, uniform in this range

    [[node]]
    id = "A"
    subscribe = ["PRICE.>"]      # local subscriptions (one subscriber each)

    [[link]]
    from = "A"                   # the dialer
    to = "B"                     # the acceptor
    duplex = true                # also: ttl, conduit, include, exclude, static

    [[publish]]
    node = "A"
    topic = "PRICE.STOCK.IBM"
    count = 10

    [random]                     # instead of (or besides) [[node]]/[[link]]
    nodes = 200
    extra_links = 200            # links added to a random spanning tree
    subscriptions = 10000
    publishes = 200
    segments = ["A", "B", "C", "D"]
"""

from __future__ import annotations

import os
import random
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .names import validate_broker_id
from .sim import Network
from .topics import validate_pattern, validate_topic
from .topology import checked, flag, int_in, link_options, load_topology, table, tables

__all__ = ["SimulationReport", "load_topology", "run_simulation"]


@dataclass(frozen=True, slots=True)
class SimulationReport:
    nodes: int
    links: int
    subscriptions: int
    convergence_time: float  # virtual seconds
    advert_frames: int
    interest_entries: int
    bytes_per_entry: float
    memory_method: str  # "traced" (tracemalloc) or "rss" (resident set growth)
    publishes: int
    message_frames: int
    frames_per_publish: float
    deliveries: int
    expected: int
    duplicates: int
    lost: int
    mean_hops: float
    max_hops: int
    non_shortest: int
    wall_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def run_simulation(
    topology: dict[str, Any], observe: Callable[[Network], None] | None = None
) -> SimulationReport:
    """Build the network, converge, publish, and measure; ``observe`` sees the network
    at the end (``--svg`` draws it)."""
    t0 = time.perf_counter()
    net, subs, pubs = _build(topology)
    net.run()  # links up
    conv = _converge(net, subs)
    traffic = _publish(net, pubs)
    per_msg = Counter((d.node, d.subscriber, d.msg_id) for d in net.deliveries)
    hops = [d.hops for d in net.deliveries]
    if observe is not None:
        observe(net)
    return SimulationReport(
        nodes=len(net.nodes),
        links=len(net.links),
        subscriptions=len(subs),
        convergence_time=conv.time,
        advert_frames=conv.advert_frames,
        interest_entries=conv.entries,
        bytes_per_entry=conv.bytes_per_entry,
        memory_method=conv.memory_method,
        publishes=len(pubs),
        message_frames=traffic.message_frames,
        frames_per_publish=traffic.message_frames / len(pubs) if pubs else 0.0,
        deliveries=len(net.deliveries),
        expected=traffic.expected,
        duplicates=sum(n - 1 for n in per_msg.values() if n > 1),
        lost=max(0, traffic.expected - len(per_msg)),
        mean_hops=sum(hops) / len(hops) if hops else 0.0,
        max_hops=max(hops, default=0),
        non_shortest=traffic.non_shortest,
        wall_seconds=time.perf_counter() - t0,
    )


# -- setup: the topology file into a network ----------------------------------------------


def _build(
    topology: dict[str, Any],
) -> tuple[Network, list[tuple[str, str]], list[tuple[str, str]]]:
    """The network (declared nodes and links, then the [random] part), the subscriptions to
    make once its links are up, as (node, pattern), and the messages to publish after
    convergence, as (node, topic)."""
    src = topology.get("_source", "topology")
    sim = table(topology.get("simulation", {}), f"{src}: [simulation]", {"seed", "delay_ms"})
    seed = int_in(sim.get("seed", 0), f"{src}: simulation.seed", 0, 2**63)
    delay = sim.get("delay_ms", [1, 5])
    if (
        not isinstance(delay, list)
        or len(delay) != 2
        or not all(type(d) in (int, float) and d >= 0 for d in delay)
        or delay[0] > delay[1]
    ):
        raise ConfigError(f"{src}: simulation.delay_ms: {delay!r} is not [low, high] milliseconds")
    lo, hi = delay
    rng = random.Random(seed)
    net = Network(seed=seed, delay=(lo / 1000.0, hi / 1000.0))
    subs = _add_nodes(net, topology, src)
    _add_links(net, topology, src)
    random_topics: list[str] = []
    if "random" in topology:
        rsubs, random_topics = _random_topology(net, topology["random"], rng, src)
        subs.extend(rsubs)
    pubs = _declared_publishes(net, topology, src)
    node_ids = sorted(net.nodes)
    if not node_ids:
        raise ConfigError(f"{src}: no nodes (declare [[node]] tables or a [random] table)")
    pubs.extend((rng.choice(node_ids), t) for t in random_topics)
    return net, subs, pubs


def _add_nodes(net: Network, topology: dict[str, Any], src: str) -> list[tuple[str, str]]:
    """Add the [[node]] tables; their subscriptions, as (node, pattern)."""
    subs: list[tuple[str, str]] = []
    for i, node in enumerate(tables(topology.get("node", []), f"{src}: [[node]]")):
        where = f"{src}: node #{i + 1}"
        table(node, where, {"id", "subscribe"})
        node_id = checked(validate_broker_id, node.get("id"), f"{where}: id")
        if node_id in net.nodes:
            raise ConfigError(f"{where}: node {node_id!r} is declared twice")
        net.add_node(node_id)
        patterns = node.get("subscribe", [])
        if not isinstance(patterns, list):
            raise ConfigError(f"{where}: subscribe must be a list of patterns")
        for pattern in patterns:
            subs.append((node_id, checked(validate_pattern, pattern, f"{where}: subscribe")))
    return subs


def _add_links(net: Network, topology: dict[str, Any], src: str) -> None:
    """Add the [[link]] tables, between declared nodes."""
    for i, link in enumerate(tables(topology.get("link", []), f"{src}: [[link]]")):
        where = f"{src}: link #{i + 1}"
        options = link_options(link, where)
        for end in ("from", "to"):
            if link.get(end) not in net.nodes:
                raise ConfigError(f"{where}: {end} {link.get(end)!r} is not a declared node")
        name = link.get("name")
        if name is not None:
            checked(validate_broker_id, name, f"{where}: name")
        if (name or f"{link['from']}-{link['to']}") in net.links:
            raise ConfigError(
                f"{where}: a link named {name or link['from'] + '-' + link['to']!r} exists"
            )
        net.add_link(
            link["from"],
            link["to"],
            name,
            duplex=flag(link.get("duplex", True), f"{where}: duplex"),
            options=options,
        )


def _declared_publishes(net: Network, topology: dict[str, Any], src: str) -> list[tuple[str, str]]:
    """The [[publish]] tables, one (node, topic) per message."""
    out: list[tuple[str, str]] = []
    for i, pub in enumerate(tables(topology.get("publish", []), f"{src}: [[publish]]")):
        where = f"{src}: publish #{i + 1}"
        table(pub, where, {"node", "topic", "count"})
        if pub.get("node") not in net.nodes:
            raise ConfigError(f"{where}: node {pub.get('node')!r} is not declared")
        topic = checked(validate_topic, pub.get("topic"), f"{where}: topic")
        count = int_in(pub.get("count", 1), f"{where}: count", 1, 10_000_000)
        out.extend([(pub["node"], topic)] * count)
    return out


def _random_topology(
    net: Network, spec: dict[str, Any], rng: random.Random, src: str
) -> tuple[list[tuple[str, str]], list[str]]:
    where = f"{src}: [random]"
    table(spec, where, {"nodes", "extra_links", "subscriptions", "publishes", "segments"})
    n = int_in(spec.get("nodes", 10), f"{where} nodes", 1, 100_000)
    for key in ("extra_links", "subscriptions", "publishes"):
        if key in spec:
            int_in(spec[key], f"{where} {key}", 0, 10_000_000)
    segments = spec.get("segments", ["A", "B", "C", "D"])
    if not isinstance(segments, list) or not segments:
        raise ConfigError(f"{where} segments must be a non-empty list")
    for seg in segments:
        checked(validate_topic, seg, f"{where} segments")
        if "." in seg:
            raise ConfigError(f"{where} segments: {seg!r} is not a single segment")
    ids = [f"n{i:03d}" for i in range(n)]
    for i in ids:
        net.add_node(i)
    edges = {(ids[k], ids[rng.randrange(k)]) for k in range(1, n)}  # a spanning tree
    extra = int(spec.get("extra_links", n))
    tries = 0
    while extra > 0 and tries < extra * 20 and n > 2:
        tries += 1
        a, b = rng.sample(ids, 2)
        if (a, b) in edges or (b, a) in edges:
            continue
        edges.add((a, b))
        extra -= 1
    for a, b in sorted(edges):
        net.add_link(a, b)
    subs = []
    for _ in range(int(spec.get("subscriptions", 0))):
        depth = rng.randint(1, 3)
        parts = [rng.choice([*segments, "*"]) for _ in range(depth)]
        if rng.random() < 0.3:
            parts.append(">")
        subs.append((rng.choice(ids), ".".join(parts)))
    pubs = [
        ".".join(rng.choice(segments) for _ in range(rng.randint(1, 4)))
        for _ in range(int(spec.get("publishes", 100)))
    ]
    return subs, pubs


# -- running: convergence, then traffic ---------------------------------------------------


#: subscriptions x nodes (bounding the interest entries) up to which memory is traced
_TRACE_AT_MOST = 200_000


@dataclass(frozen=True, slots=True)
class _Convergence:
    time: float  # virtual seconds from the first subscription to the last advertisement
    advert_frames: int
    entries: int
    bytes_per_entry: float
    memory_method: str


@dataclass(frozen=True, slots=True)
class _Traffic:
    message_frames: int
    expected: int
    non_shortest: int


def _converge(net: Network, subs: list[tuple[str, str]]) -> _Convergence:
    """Subscribe, run until no advertisement is in flight, and measure the tables."""
    # A small network's tables fit in memory the process already has, so its RSS does not
    # grow (it printed 0 bytes per entry): trace allocations there. A large one is measured
    # by RSS growth, since tracing would slow the simulation it measures severalfold.
    traced = len(subs) * len(net.nodes) <= _TRACE_AT_MOST
    if traced:
        tracemalloc.start()
    before = _memory(traced)
    for node_id, pattern in subs:
        net.subscribe(node_id, pattern)
    start = net.now
    net.run()
    converged = max(0.0, net.stats.last_advert_at - start)
    after = _memory(traced)
    if traced:
        tracemalloc.stop()
    entries = net.interest_entries()
    return _Convergence(
        time=converged,
        advert_frames=net.stats.advert_frames,
        entries=entries,
        bytes_per_entry=(after - before) / entries if entries else 0.0,
        memory_method="traced" if traced else "rss",
    )


def _memory(traced: bool) -> int:
    """Bytes traced since tracemalloc started, or else the resident set size (0 off Linux)."""
    if traced:
        return tracemalloc.get_traced_memory()[0]
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _publish(net: Network, pubs: list[tuple[str, str]]) -> _Traffic:
    """Publish one message at a time, each run to the end: the frames they took, the
    deliveries expected, and those that did not come by a shortest path."""
    frames_before = net.stats.message_frames
    expected = 0
    non_shortest = 0
    dists: dict[tuple[str, str], dict[str, int]] = {}
    for node_id, topic in pubs:
        first = len(net.deliveries)
        net.publish(node_id, topic)
        expected += len(net.expected_deliveries(node_id, topic))
        net.run()
        key = (node_id, topic)
        dist = dists.get(key) or dists.setdefault(key, net.distances(node_id, topic))
        for d in net.deliveries[first:]:
            if d.hops != dist.get(d.node, -1):
                non_shortest += 1
    return _Traffic(net.stats.message_frames - frames_before, expected, non_shortest)
