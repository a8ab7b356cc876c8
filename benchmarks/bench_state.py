"""Topics with state: the snapshot of many stateful topics to a late subscriber, and the
cost of ``set`` against ``publish``.

One ``zbroker start`` process on 127.0.0.1 (its own data directory) and one client.

* **snapshot**: N topics (default 100,000) set (requests pipelined, 500 in flight), then a
  late ``subscribe(">")`` on them: time until ``subscribe`` returned with every value
  delivered (``Subscription.snapshot`` set), and memory per topic: the store's file (WAL
  checkpointed) and the node's RSS growth over the sets, each divided by N.
* **set vs publish**: M (default 5,000) ``set`` calls one after the other (each returns
  once the node stored the value), M confirmed persistent publishes one after the other,
  and M plain publishes (fire and forget, then a PING round trip); per-operation time
  of each, and the ratios, from the same run.

Usage::

    python benchmarks/bench_state.py [--n 100000] [--m 5000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import snapshot_sources

snapshot_sources()

from zbroker import Client, wire  # noqa: E402


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_node(data: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbroker", "start", "--port", str(port), "--data-dir", str(data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with Client(f"tcp://127.0.0.1:{port}", timeout=1.0):
                return proc
        except Exception:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("node did not start")


def bulk_set(client: Client, n: int) -> float:
    t0 = time.perf_counter()
    window = []
    for i in range(n):
        body = {"topic": f"PRICE.{i % 100}.{i}", "payload": b"x" * 32, "fmt": 0, "headers": None}
        window.append(client._submit(wire.STATE_SET, body))
        if len(window) >= 500:
            for fut in window:
                fut.result(60)
            window = []
    for fut in window:
        fut.result(60)
    return time.perf_counter() - t0


def snapshot_part(client: Client, pid: int, data: Path, n: int) -> None:
    rss0 = rss_kb(pid)
    took = bulk_set(client, n)
    print(f"set {n:,} topics (500 in flight): {took:.2f} s, {n / took:,.0f}/s")
    rss1 = rss_kb(pid)
    got = 0

    def count(msg: object) -> None:
        nonlocal got
        got += 1

    late = Client(client.address, timeout=120.0)
    t0 = time.perf_counter()
    sub = late.subscribe(">", count)
    took = time.perf_counter() - t0
    assert sub.snapshot.is_set() and got == n, (got, n)
    late.close()
    store = sum(p.stat().st_size for p in data.glob("store.sqlite3*"))
    per = took / n * 1e6
    print(f"snapshot of {n:,} topics to a late subscriber: {took:.2f} s ({per:.1f} us/topic)")
    ram = (rss1 - rss0) * 1024 / n
    print(f"memory per topic: store {store / n:.0f} B (file and WAL), node RSS {ram:.0f} B")


def cost_part(client: Client, m: int) -> None:
    t0 = time.perf_counter()
    for i in range(m):
        client.set(f"COST.{i % 50}", b"x" * 32)
    t_set = (time.perf_counter() - t0) / m
    t0 = time.perf_counter()
    for i in range(m):
        client.publish(f"COST.{i % 50}", b"x" * 32, persistent=True, confirm=True)
    t_pers = (time.perf_counter() - t0) / m
    t0 = time.perf_counter()
    for i in range(m):
        client.publish(f"COST.{i % 50}", b"x" * 32)
    client.request(wire.PING)
    t_pub = (time.perf_counter() - t0) / m
    print(f"per operation ({m:,} each, one after the other):")
    print(
        f"  set {t_set * 1e6:.0f} us | persistent publish, confirmed {t_pers * 1e6:.0f} us"
        f" | publish {t_pub * 1e6:.1f} us"
    )
    print(
        f"  set / publish = {t_set / t_pub:.0f}x,"
        f" set / confirmed persistent publish = {t_set / t_pers:.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--m", type=int, default=5_000)
    ap.add_argument("--port", type=int, default=17310)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        data = Path(tmp) / "node"
        proc = start_node(data, args.port)
        try:
            with Client(f"tcp://127.0.0.1:{args.port}", timeout=60.0) as client:
                snapshot_part(client, proc.pid, data, args.n)
                cost_part(client, args.m)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
