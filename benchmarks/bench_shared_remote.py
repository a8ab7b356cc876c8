#!/usr/bin/env python3
"""Shared durables with consumers on several nodes (issue 14), in one run.

    .venv/bin/python benchmarks/bench_shared_remote.py            # full run
    .venv/bin/python benchmarks/bench_shared_remote.py --quick    # smoke run

Nodes are ``zbroker start`` processes on 127.0.0.1 (discovery off) in a chain A - B - C;
the durable's home is A, the publisher is on A; the clients run in this process. 100-byte
payloads, persistent publishes, credit 200 per consumer.

(a) 3 consumers on ONE node (A), beside (b) 3 consumers on 3 nodes (one each on A, B,
    C: B and C are network consumers of A's durable), in the same run: messages confirmed
    and consumed per second, from the first publish until the consumers together have
    every message (target for (b) >= 20,000);
(c) a consumer moves: A holds a backlog of 10,000 messages when its last consumer leaves,
    and a consumer attaches on C: the time from the leave to C having consumed all 10,000
    (the issue's target: redistribution_delay (1 s) + 1 s; C's node consumes A's one
    queue at once over the network, before any move);
(d) the home moves: as (c), but C's consumer takes 0.5 ms per message, so after
    redistribution_delay (1 s) most of the backlog is still on A and moves to C with the
    durable: the seconds until A holds nothing, how many messages moved, and the seconds
    until C's consumer has them all.

Every node process is stopped by its PID in a ``finally`` block.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_queues import PAYLOAD, Counter, Nodes, free_ports, wait_for

from zbroker import Client


def members(client: Client, name: str) -> dict[str, int]:
    rows = [r for r in client.status()["queues"] if r.get("name") == name]
    return dict(rows[0]["members"]) if rows else {}


def consume_rate(pub: Client, consumers: list[Counter], n: int, topic: str) -> float:
    """Confirmed and consumed msg/s: from the first publish until all ``n`` are consumed."""
    for k in consumers:
        k.n = 0
    t0 = time.perf_counter()
    futs = [pub.publish(topic, PAYLOAD, persistent=True) for _ in range(n)]
    for f in futs:
        f.result(120)
    wait_for(lambda: sum(k.n for k in consumers) >= n, 120)
    return n / (time.perf_counter() - t0)


def shared(eps: list[str], pub_ep: str, name: str, n: int) -> tuple[float, list[int]]:
    clients = [Client(ep) for ep in eps]
    pub = Client(pub_ep)
    try:
        ks = []
        for c in clients:
            k = Counter()
            c.subscribe(f"{name}.>", k, durable=name, shared=True, credit=200)
            ks.append(k)
        wait_for(lambda: sum(members(pub, name).values()) == len(eps))
        consume_rate(pub, ks, n // 10, f"{name}.x")  # warm-up
        rate = consume_rate(pub, ks, n, f"{name}.x")
        return rate, [k.n for k in ks]
    finally:
        for c in [*clients, pub]:
            c.close()


def leave_a(on_a: Client, on_c: Client, name: str, n: int) -> tuple[Counter, float]:
    """A holds durable ``name`` with a backlog of ``n`` and one consumer, which leaves:
    the consumer's counter (what it took before) and the time it left."""
    on_a.subscribe(f"{name}.>", Counter(), durable=name, shared=True).unsubscribe()
    wait_for(lambda: members(on_a, name) == {"A": 0})
    futs = [on_a.publish(f"{name}.x", PAYLOAD, persistent=True) for _ in range(n)]
    for f in futs:
        f.result(120)
    wait_for(lambda: any(r["pattern"] == f"$ZB.DURABLE.{name}" for r in on_c.routes()))
    stay = Counter()
    sub = on_a.subscribe(f"{name}.>", stay, durable=name, shared=True, credit=1)
    t0 = time.perf_counter()
    sub.unsubscribe()  # A's last consumer leaves with the backlog there
    return stay, t0


def move(a: str, c: str, n: int) -> float:
    """Seconds from the last consumer leaving A (backlog ``n``) to C having consumed it."""
    with Client(a) as on_a, Client(c) as on_c:
        stay, t0 = leave_a(on_a, on_c, "mv", n)
        k = Counter()
        on_c.subscribe("mv.>", k, durable="mv", shared=True, credit=200)
        wait_for(lambda: k.n + stay.n >= n, 120)
        return time.perf_counter() - t0


class Slow(Counter):
    def __call__(self, msg: object) -> None:
        time.sleep(0.0005)
        super().__call__(msg)


def rehome(a: str, c: str, n: int) -> tuple[float, int, float]:
    """(d): seconds to A holding nothing, messages moved, seconds to all consumed."""
    with Client(a) as on_a, Client(c) as on_c:
        stay, t0 = leave_a(on_a, on_c, "rh", n)
        k = Slow()
        on_c.subscribe("rh.>", k, durable="rh", shared=True, credit=50)
        wait_for(lambda: not any(d["name"] == "rh" for d in on_a.status()["durables"]), 120)
        moved_at = time.perf_counter() - t0
        wait_for(lambda: k.n + stay.n >= n, 120)
        done = time.perf_counter() - t0
        return moved_at, on_a.status()["counters"]["durable_redistributed"], done


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 3_000 if args.quick else 30_000
    backlog = 1_000 if args.quick else 10_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-shared-remote-"))
    nodes = Nodes(tmp)
    try:
        pa, pb, pc = free_ports(3)
        a = nodes.start("A", pa)
        b = nodes.start("B", pb, dial=pa)
        c = nodes.start("C", pc, dial=pb)
        one, split1 = shared([a, a, a], a, "one", n)
        three, split3 = shared([a, b, c], a, "three", n)
        print(
            f"(a) 3 consumers on one node:  {one:9,.0f} confirmed msg/s consumed  shares {split1}"
        )
        print(
            f"(b) 3 consumers on 3 nodes:   {three:9,.0f} confirmed msg/s consumed  "
            f"shares A/B/C {split3}  ratio to (a) {three / one:.2f} (target >= 20,000)"
        )
        secs = move(a, c, backlog)
        print(
            f"(c) last consumer leaves A with {backlog:,} stored, a consumer attaches on C: "
            f"all consumed in {secs:.2f} s (target <= 2 s)"
        )
        moved_at, moved, done = rehome(a, c, backlog)
        print(
            f"(d) the same with a consumer on C taking 0.5 ms/message: A held nothing after "
            f"{moved_at:.2f} s ({moved:,} messages moved to C), all consumed in {done:.2f} s"
        )
    finally:
        nodes.stop()


if __name__ == "__main__":
    main()
