#!/usr/bin/env python3
"""Work queues benchmark (issue 14): queue groups beside plain pub/sub, in one run.

    .venv/bin/python benchmarks/bench_queues.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_queues.py --quick    # smoke run

Nodes are ``zbroker start`` processes on 127.0.0.1 (discovery off); the clients run in
this process (one publisher, the consumers' callbacks on their clients' threads), the
same for every figure, so the ratios compare like with like. 100-byte payloads.

(a) one node: plain subscriber vs one queue group member (credit 10,000; group "t",
    default policy local_first), msg/s from the
    first publish to the last message received, and the ratio (target >= 0.8);
(b) a 3-node chain A - B - C, publisher on A, consumer on C: the same pair and ratio;
(c) fairness: ``round_robin`` group with one member on each of A, B, C (credits 10, 100,
    1,000: asymmetric), messages published on A: per-member counts and Jain's index
    (target >= 0.99);
(d) a shared durable subscription, 3 consumers, persistent publishes: confirmed
    messages consumed per second, the consumers on ONE node; consumers on 3 nodes and a
    consumer moving between nodes with a backlog: ``bench_shared_remote.py``.

Every node process is stopped by its PID in a ``finally`` block.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from zbroker import Client

HOST = "127.0.0.1"
PAYLOAD = b"x" * 100


def free_ports(n: int) -> list[int]:
    import socket

    out: list[int] = []
    while len(out) < n:
        with socket.socket() as s:
            s.bind((HOST, 0))
            p = s.getsockname()[1]
        if all(abs(p - q) > 3 for q in out) and p < 65000:
            with socket.socket() as a, socket.socket() as b:
                try:
                    a.bind((HOST, p + 1))
                    b.bind((HOST, p + 2))
                except OSError:
                    continue
            out.append(p)
    return out


class Nodes:
    """``zbroker start`` processes, stopped by PID."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, port: int, dial: int | None = None, policy: str = "") -> str:
        cfg = self.tmp / f"{name}.toml"
        text = f'[node]\nid = "{name}"\nhost = "{HOST}"\nport = {port}\n'
        text += f'data_dir = "{self.tmp / name}"\nlog_level = "warning"\n'
        if policy:
            text += f'[[queue]]\ngroup = "w"\npolicy = "{policy}"\n'
        if dial is not None:
            text += f'[[link]]\nname = "up"\nuri = "tcp://{HOST}:{dial}"\n'
        cfg.write_text(text)
        cmd = [sys.executable, "-m", "zbroker.cli.main", "start", "--config", str(cfg)]
        self.procs.append(subprocess.Popen([*cmd, "--no-discovery"]))
        endpoint = f"tcp://{HOST}:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with Client(endpoint, timeout=1.0):
                    return endpoint
            except Exception:
                time.sleep(0.2)
        raise RuntimeError(f"node {name} did not start")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
        self.procs = []


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.done = threading.Event()
        self.want = 0

    def __call__(self, msg: Any) -> None:
        self.n += 1
        if self.n >= self.want:
            self.done.set()


def wait_for(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("condition not met")
        time.sleep(0.05)


def members(client: Client, group: str = "w") -> dict[str, int]:
    rows = [r for r in client.status()["queues"] if r.get("group") == group]
    return dict(rows[0]["members"]) if rows else {}


def flood(pub: Client, consumers: list[Counter], n: int, topic: str = "b.x") -> float:
    """msg/s from the first publish until the consumers together have ``n``."""
    total = Counter()
    total.want = n
    t0 = time.perf_counter()
    for _ in range(n):
        pub.publish(topic, PAYLOAD)
    deadline = time.monotonic() + 120
    while sum(c.n for c in consumers) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {sum(c.n for c in consumers)} of {n} arrived")
        time.sleep(0.002)
    return n / (time.perf_counter() - t0)


def plain_vs_group(pub_ep: str, sub_ep: str, n: int, far: Client) -> tuple[float, float]:
    with Client(pub_ep) as pub, Client(sub_ep) as sub:
        plain = Counter()
        s = sub.subscribe("b.>", plain)
        wait_for(lambda: any(r["pattern"] == "b.>" for r in far.routes()))
        flood(pub, [plain], n // 10)  # warm-up
        plain.n = 0
        rate_plain = flood(pub, [plain], n)
        s.unsubscribe()
        member = Counter()
        sub.subscribe("b.>", member, queue="t", credit=10_000)
        wait_for(lambda: sum(members(far, "t").values()) == 1)
        flood(pub, [member], n // 10)
        member.n = 0
        rate_group = flood(pub, [member], n)
    return rate_plain, rate_group


def fairness(eps: list[str], n: int) -> tuple[list[int], float]:
    clients = [Client(ep) for ep in eps]
    try:
        counters = []
        for c, credit in zip(clients, (10, 100, 1000), strict=True):
            k = Counter()
            c.subscribe("b.>", k, queue="w", credit=credit)
            counters.append(k)
        wait_for(lambda: sorted(members(clients[0]).items()) == [("A", 1), ("B", 1), ("C", 1)])
        time.sleep(0.3)  # capacity floods every 100 ms
        flood(clients[0], counters, n)
        xs = [k.n for k in counters]
        jain = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
        return xs, jain
    finally:
        for c in clients:
            c.close()


def shared_durable(ep: str, n: int) -> float:
    clients = [Client(ep) for _ in range(4)]
    try:
        ks = []
        for c in clients[1:]:
            k = Counter()
            c.subscribe("d.>", k, durable="billing", shared=True, credit=200)
            ks.append(k)
        pub = clients[0]
        t0 = time.perf_counter()
        futs = [pub.publish("d.x", PAYLOAD, persistent=True) for _ in range(n)]
        for f in futs:
            f.result(120)
        wait_for(lambda: sum(k.n for k in ks) >= n, 120)
        return n / (time.perf_counter() - t0)
    finally:
        for c in clients:
            c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 5_000 if args.quick else 50_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-queues-"))
    nodes = Nodes(tmp)
    try:
        pa, pb, pc = free_ports(3)
        a = nodes.start("A", pa, policy="round_robin")
        b = nodes.start("B", pb, dial=pa, policy="round_robin")
        c = nodes.start("C", pc, dial=pb, policy="round_robin")
        with Client(a) as ca:
            one = plain_vs_group(a, a, n, ca)
            chain = plain_vs_group(a, c, n, ca)
        print(
            f"(a) one node:  plain {one[0]:9,.0f} msg/s   group {one[1]:9,.0f} msg/s   "
            f"ratio {one[1] / one[0]:.2f} (target >= 0.8)"
        )
        print(
            f"(b) chain A-C: plain {chain[0]:9,.0f} msg/s   group {chain[1]:9,.0f} msg/s   "
            f"ratio {chain[1] / chain[0]:.2f} (target >= 0.8)"
        )
        xs, jain = fairness([a, b, c], n // 2)
        print(
            f"(c) round_robin, members on A/B/C with credit 10/100/1000: {xs}  "
            f"Jain {jain:.4f} (target >= 0.99)"
        )
        rate = shared_durable(a, n // 5)
        print(
            f"(d) shared durable, 3 consumers on one node, persistent: {rate:,.0f} "
            "confirmed msg/s consumed (3 nodes: bench_shared_remote.py)"
        )
    finally:
        nodes.stop()


if __name__ == "__main__":
    main()
