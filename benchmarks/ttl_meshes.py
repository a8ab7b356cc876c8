"""Random meshes with a per-link ttl on some links: copies that meet and are dropped.

Runs the routing simulator (real routing engines, no sockets) over random connected
meshes of 5-9 nodes, a ttl of 1-3 on about 30 % of the links, subscribers on a random
subset of nodes, and every node publishing once. It counts, per mesh, the copies a node's
dedupe dropped (where two copies of one message met) and the subscribers a publisher's
table names that got nothing, once with the plans' crossing check (routing/meets.py) and
once without it, side by side. Deliveries are checked at most once per subscriber.

    .venv/bin/python benchmarks/ttl_meshes.py --meshes 300
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from typing import Any

import zbroker.routing.routes as routes
from zbroker.routing import LinkOptions
from zbroker.routing.meets import untangle
from zbroker.sim import Network


def mesh(seed: int) -> Network:
    rnd = random.Random(seed)
    n = rnd.randint(5, 9)
    nodes = [f"N{i}" for i in range(n)]
    net = Network(seed=seed)
    for x in nodes:
        net.add_node(x)
    edges = {(nodes[rnd.randrange(i)], nodes[i]) for i in range(1, n)}  # connected
    for _ in range(n):
        a, b = rnd.sample(nodes, 2)
        if (b, a) not in edges:
            edges.add((a, b))
    for a, b in sorted(edges):
        ttl = rnd.choice([1, 2, 3]) if rnd.random() < 0.3 else None
        net.add_link(a, b, options=LinkOptions(ttl=ttl) if ttl else LinkOptions())
    for x in rnd.sample(nodes, rnd.randint(2, n)):
        net.subscribe(x, "T.>")
    net.run()
    return net


def measure(meshes: int) -> dict[str, int]:
    out = Counter[str]()
    for seed in range(meshes):
        net = mesh(seed)
        for p, node in net.nodes.items():
            known = {str(e["origin"]) for e in node.engine.interest() if e["pattern"] == "T.>"}
            m = net.publish(p, "T.1")
            net.run()
            got = Counter(d.node for d in net.deliveries if d.msg_id == m)
            assert all(n == 1 for n in got.values()), (seed, p, got)
            out["named"] += len(known)
            out["missed"] += sum(1 for o in known if not got[o])
        out["met"] += net.stats.duplicates_dropped
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--meshes", type=int, default=300)
    args = ap.parse_args()
    # routes imports untangle from meets (not re-exported): swapped where routes looks it up
    names = vars(routes)
    rows: dict[str, dict[str, int]] = {}
    for name, fn in (("without the check", None), ("with the check", untangle)):
        names["untangle"] = fn or _never
        rows[name] = measure(args.meshes)
    names["untangle"] = untangle
    print(f"{args.meshes} meshes; every node publishes once")
    print(f"{'':20} {'copies met':>11} {'named':>7} {'missed':>7}")
    for name, r in rows.items():
        print(f"{name:20} {r['met']:>11} {r['named']:>7} {r['missed']:>7}")
    print("(missed also counts subscribers beyond a message's ttl: what the ttl is for)")


def _never(*_: Any) -> list[str]:
    return []


if __name__ == "__main__":
    main()
