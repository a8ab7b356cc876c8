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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import _check_patterns, validate_broker_id
from .errors import ConfigError
from .routing import LinkOptions
from .sim import Network
from .topics import validate_pattern, validate_topic

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


def _opt(table: dict[str, Any], where: str) -> LinkOptions:
    known = {"from", "to", "name", "duplex", "ttl", "conduit", "include", "exclude", "static"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    ttl = table.get("ttl", LinkOptions().ttl)
    if type(ttl) is not int or not 1 <= ttl <= 255:
        raise ConfigError(f"{where}: ttl {ttl!r} is not an integer in 1..255")
    return LinkOptions(
        ttl=ttl,
        conduit=bool(table.get("conduit", True)),
        include=_check_patterns(table.get("include", []), f"{where}: include"),
        exclude=_check_patterns(table.get("exclude", []), f"{where}: exclude"),
        static=_check_patterns(table.get("static", []), f"{where}: static"),
    )


def load_topology(path: str | Path) -> dict[str, Any]:
    import tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read topology: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"simulation", "node", "link", "publish", "random"}
    if unknown:
        raise ConfigError(f"{p}: unknown table(s) {', '.join(sorted(unknown))}")
    data["_source"] = str(p)
    return data


def _random_topology(
    net: Network, spec: dict[str, Any], rng: random.Random, src: str
) -> tuple[list[tuple[str, str]], list[str]]:
    n = int(spec.get("nodes", 10))
    if n < 1:
        raise ConfigError(f"{src}: [random] nodes must be >= 1")
    ids = [f"n{i:03d}" for i in range(n)]
    for i in ids:
        net.add_node(i)
    edges: set[tuple[str, str]] = set()
    for k in range(1, n):
        a, b = ids[k], ids[rng.randrange(k)]
        edges.add((a, b))
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
    segs = list(spec.get("segments", ["A", "B", "C", "D"]))
    subs = []
    for _ in range(int(spec.get("subscriptions", 0))):
        depth = rng.randint(1, 3)
        parts = [rng.choice([*segs, "*"]) for _ in range(depth)]
        if rng.random() < 0.3:
            parts.append(">")
        subs.append((rng.choice(ids), ".".join(parts)))
    pubs = []
    for _ in range(int(spec.get("publishes", 100))):
        pubs.append(".".join(rng.choice(segs) for _ in range(rng.randint(1, 4))))
    return subs, pubs


def _rss() -> int:
    """Resident set size in bytes (Linux /proc; 0 elsewhere). Cheap, unlike tracemalloc,
    which would slow the simulation it measures severalfold."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_simulation(topology: dict[str, Any]) -> SimulationReport:
    """Build the network, converge, publish, and measure."""
    src = topology.get("_source", "topology")
    sim = topology.get("simulation", {})
    seed = int(sim.get("seed", 0))
    lo, hi = sim.get("delay_ms", [1, 5])
    rng = random.Random(seed)
    t0 = time.perf_counter()
    net = Network(seed=seed, delay=(lo / 1000.0, hi / 1000.0))
    for i, node in enumerate(topology.get("node", [])):
        validate_broker_id(node.get("id"), f"{src}: node #{i + 1} id")
        net.add_node(node["id"])
    for i, link in enumerate(topology.get("link", [])):
        where = f"{src}: link #{i + 1}"
        for end in ("from", "to"):
            if link.get(end) not in net.nodes:
                raise ConfigError(f"{where}: {end} {link.get(end)!r} is not a declared node")
        net.add_link(
            link["from"],
            link["to"],
            link.get("name"),
            duplex=bool(link.get("duplex", True)),
            options=_opt(link, where),
        )
    subs: list[tuple[str, str]] = []
    pubs_by_node: list[tuple[str, str]] = []
    for node in topology.get("node", []):
        for pattern in node.get("subscribe", []):
            validate_pattern(pattern)
            subs.append((node["id"], pattern))
    random_topics: list[str] = []
    if "random" in topology:
        rsubs, random_topics = _random_topology(net, topology["random"], rng, src)
        subs.extend(rsubs)
    for i, pub in enumerate(topology.get("publish", [])):
        if pub.get("node") not in net.nodes:
            raise ConfigError(f"{src}: publish #{i + 1}: node {pub.get('node')!r} is not declared")
        validate_topic(pub.get("topic"))
        pubs_by_node.extend([(pub["node"], pub["topic"])] * int(pub.get("count", 1)))
    node_ids = sorted(net.nodes)
    pubs_by_node.extend((rng.choice(node_ids), t) for t in random_topics)
    if not node_ids:
        raise ConfigError(f"{src}: no nodes")

    net.run()  # links up
    before = _rss()
    for node_id, pattern in subs:
        net.subscribe(node_id, pattern)
    start = net.now
    net.run()
    converged = max(0.0, net.stats.last_advert_at - start)
    after = _rss()
    entries = net.interest_entries()
    adverts = net.stats.advert_frames
    frames_before = net.stats.message_frames

    expected = 0
    non_shortest = 0
    dists: dict[str, dict[str, int]] = {}
    for node_id, topic in pubs_by_node:
        first = len(net.deliveries)
        net.publish(node_id, topic)
        expected += len(net.expected_deliveries(node_id, topic))
        net.run()
        dist = dists.get(node_id) or dists.setdefault(node_id, net.distances(node_id))
        for d in net.deliveries[first:]:
            if d.hops != dist.get(d.node, -1):
                non_shortest += 1
    per_msg = Counter((d.node, d.subscriber, d.msg_id) for d in net.deliveries)
    duplicates = sum(n - 1 for n in per_msg.values() if n > 1)
    delivered = len(per_msg)
    hops = [d.hops for d in net.deliveries]
    frames = net.stats.message_frames - frames_before
    return SimulationReport(
        nodes=len(net.nodes),
        links=len(net.links),
        subscriptions=len(subs),
        convergence_time=converged,
        advert_frames=adverts,
        interest_entries=entries,
        bytes_per_entry=(after - before) / entries if entries else 0.0,
        publishes=len(pubs_by_node),
        message_frames=frames,
        frames_per_publish=frames / len(pubs_by_node) if pubs_by_node else 0.0,
        deliveries=len(net.deliveries),
        expected=expected,
        duplicates=duplicates,
        lost=max(0, expected - delivered),
        mean_hops=sum(hops) / len(hops) if hops else 0.0,
        max_hops=max(hops, default=0),
        non_shortest=non_shortest,
        wall_seconds=time.perf_counter() - t0,
    )
