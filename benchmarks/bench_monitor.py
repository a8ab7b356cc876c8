#!/usr/bin/env python3
"""The monitor's costs (issue 17): scrape time of a big node, and throughput with the
monitor on but unscraped vs off, side by side.

    .venv/bin/python benchmarks/bench_monitor.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_monitor.py --quick    # smoke run

(a) Scrape: node A (in-thread, monitor on) with 100 links (4 peer nodes each dial it 25
    times) and 10,000 interest entries (each peer subscribes 100 patterns, advertised on
    each of its 25 links). Times ``GET /metrics`` (target < 50 ms), ``/api/status``,
    ``/api/routes`` and ``/api/graph`` over many scrapes: median and worst, once the
    snapshot is warm (a scrape reads the newest snapshot; the loop refreshes it every
    ``interval`` while someone reads).
(b) Throughput: the node in its own process (spawn), a publisher and a subscriber client
    here; N 100-byte messages flooded, delivered messages/s from first send to last
    receive. Rounds alternate monitor off / on (never scraped) / on and scraped every
    0.5 s, and the medians are printed side by side with their ratios.

Everything binds 127.0.0.1; the node process is stopped by PID in a ``finally``.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import snapshot_sources

TARGET_SCRAPE_MS = 50.0


def _get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        size = len(resp.read())
    return (time.perf_counter() - t0) * 1000, size


def scrape_bench(scrapes: int) -> dict[str, Any]:
    from zbroker import Broker, Client
    from zbroker.config import LinkConfig, MonitorConfig

    brokers: list[Broker] = []
    clients: list[Client] = []
    try:
        a = Broker(host="127.0.0.1", port=0, broker_id="A",
                   monitor=MonitorConfig(listen="127.0.0.1:0")).start()  # fmt: skip
        brokers.append(a)
        for p in range(4):
            links = tuple(LinkConfig(name=f"l{p}-{i}", uri=a.endpoint) for i in range(25))
            peer = Broker(host="127.0.0.1", port=0, broker_id=f"P{p}", links=links).start()
            brokers.append(peer)
            client = Client(peer.endpoint)
            clients.append(client)
            for k in range(100):
                client.subscribe(f"P{p}.{k}.>", lambda msg: None)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st = a.status()
            up = sum(1 for link in st["links"] if link["state"] == "up")
            if up == 100 and st["interest"]["entries"] >= 10_000:
                break
            time.sleep(0.2)
        st = a.status()
        url = st["monitor"]["url"]
        out: dict[str, Any] = {
            "links_up": sum(1 for link in st["links"] if link["state"] == "up"),
            "interest_entries": st["interest"]["entries"],
            "routes": st["interest"]["routes"],
        }
        for path in ("/metrics", "/api/status", "/api/routes", "/api/graph"):
            _get(url + path)  # warm: the first read waits for a fresh snapshot
            times, size = [], 0
            for _ in range(scrapes):
                ms, size = _get(url + path)
                times.append(ms)
            out[path] = {
                "median_ms": round(statistics.median(times), 2),
                "max_ms": round(max(times), 2),
                "bytes": size,
            }
        return out
    finally:
        for client in clients:
            client.close()
        for broker in reversed(brokers):
            broker.stop()


def node_main(monitor: bool, data_dir: str, conn: Any, stop: Any) -> None:
    from zbroker import Broker

    options: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "data_dir": data_dir}
    if monitor:
        options["monitor"] = "127.0.0.1:0"
    broker = Broker(**options).start()
    conn.send((broker.endpoint, broker.status().get("monitor", {}).get("url")))
    stop.wait(600)
    broker.stop()


def throughput_round(monitor: bool, n: int, scraped: bool = False) -> float:
    from zbroker import Client

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    stop = ctx.Event()
    with tempfile.TemporaryDirectory() as tmp:
        proc = ctx.Process(target=node_main, args=(monitor, tmp, child, stop), daemon=True)
        proc.start()
        try:
            endpoint, url = parent.recv()
            done = threading.Event()
            if scraped:
                threading.Thread(target=_scraper, args=(url, done), daemon=True).start()
            got = [0, 0.0]

            def on_msg(msg: Any) -> None:
                got[0] += 1
                if got[0] == n:
                    got[1] = time.perf_counter()
                    done.set()

            with Client(endpoint) as sub, Client(endpoint) as pub:
                sub.subscribe("bench.>", on_msg)
                while not pub.routes("bench.x"):
                    time.sleep(0.01)
                payload = b"x" * 100
                t0 = time.perf_counter()
                for _ in range(n):
                    pub.publish("bench.x", payload)
                if not done.wait(120):
                    raise RuntimeError(f"only {got[0]} of {n} messages arrived")
                return n / (got[1] - t0)
        finally:
            stop.set()
            proc.join(15)
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, 9)


def _scraper(url: str, done: threading.Event) -> None:
    """Scrapes /metrics every 0.5 s (twice as often as a 1 s Prometheus job) until done."""
    while not done.wait(0.5):
        _get(url + "/metrics")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    snapshot_sources()
    logging.basicConfig(level=logging.ERROR)  # links going down at the end are expected
    scrapes, n, rounds = (20, 50_000, 2) if args.quick else (100, 200_000, 3)
    print("(a) scrape of a node with 100 links and 10,000 interest entries")
    res = scrape_bench(scrapes)
    print(
        f"    links up {res['links_up']}, interest entries {res['interest_entries']}, "
        f"best routes {res['routes']}; {scrapes} scrapes each"
    )
    for path in ("/metrics", "/api/status", "/api/routes", "/api/graph"):
        r = res[path]
        print(
            f"    {path:<12} median {r['median_ms']:7.2f} ms  max {r['max_ms']:7.2f} ms  "
            f"{r['bytes']:>8} bytes"
        )
    ok = res["/metrics"]["median_ms"] < TARGET_SCRAPE_MS
    print(f"    /metrics target < {TARGET_SCRAPE_MS:g} ms: {'met' if ok else 'NOT met'}")
    print(f"(b) throughput, {n} x 100-byte messages, {rounds} rounds each (alternating)")
    runs: dict[str, list[float]] = {"off": [], "on": [], "scraped": []}
    for _ in range(rounds):
        runs["off"].append(throughput_round(False, n))
        runs["on"].append(throughput_round(True, n))
        runs["scraped"].append(throughput_round(True, n, scraped=True))
    med = {k: statistics.median(v) for k, v in runs.items()}
    for key, name in (
        ("off", "monitor off            "),
        ("on", "monitor on, unscraped  "),
        ("scraped", "on, scraped every 0.5 s"),
    ):
        rates = " ".join(f"{r:,.0f}" for r in runs[key])
        print(f"    {name}: {rates}  median {med[key]:,.0f}/s")
    print(
        f"    unscraped / off = {med['on'] / med['off']:.3f}   "
        f"scraped / off = {med['scraped'] / med['off']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
