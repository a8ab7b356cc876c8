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
* **missing topic**: a handler (another client of the node, answering ``proceed`` at
  once) on ``MISS.>``; K (default 1,000) fetches of topics that do not exist, one after
  the other: round trip p50/p99, beside the same fetch of a branch with no handler.
* **catch-up**: a second node S replicating ``PRICE.>`` from the first (P); S stopped
  (SIGSTOP) while C (default 20,000) of P's topics change, then continued: time from
  SIGCONT to S ``in sync`` again (it includes noticing the cut: heartbeat timeout 1 s),
  and the rate of topics caught up.

Usage::

    python benchmarks/bench_state.py [--n 100000] [--m 5000] [--k 1000] [--c 20000]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import snapshot_sources

snapshot_sources()

from zbroker import Client, wire  # noqa: E402

#: client heartbeat timeout: a snapshot of 100,000 topics holds the node's loop (and the
#: late client's thread, delivering them) for a second or more on a loaded machine
HB = 30.0


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_node(data: Path, port: int, config: Path | None = None) -> subprocess.Popen[bytes]:
    args = ["--config", str(config)] if config else ["--port", str(port), "--data-dir", str(data)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "zbroker", "start", *args],
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


def bulk_set(client: Client, n: int, prefix: str = "", payload: bytes = b"x" * 32) -> float:
    t0 = time.perf_counter()
    window = []
    for i in range(n):
        topic = f"{prefix}.{i}" if prefix else f"PRICE.{i % 100}.{i}"
        window.append(client._submit(wire.STATE_SET, _body(topic, payload)))
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

    late = Client(client.address, timeout=120.0, heartbeat_timeout=HB)
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


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def missing_part(client: Client, k: int) -> None:
    handler = Client(client.address, timeout=10.0)
    handler.on_missing_topic("MISS.>", lambda notice: "proceed")
    rows = []
    for branch in ("MISS", "NOHANDLER"):
        samples = []
        for i in range(k):
            t0 = time.perf_counter()
            client.fetch(f"{branch}.{i}")
            samples.append(time.perf_counter() - t0)
        rows.append((branch, pct(samples, 0.5) * 1e3, pct(samples, 0.99) * 1e3))
    handler.close()
    print(f"fetch of a missing topic ({k:,} one after the other), ms:")
    for branch, p50, p99 in rows:
        what = "handler asked (proceed)" if branch == "MISS" else "no handler"
        print(f"  {what:<24} p50 {p50:.2f}  p99 {p99:.2f}")


SECONDARY = """
[node]
id = "S"
host = "127.0.0.1"
port = {port}
data_dir = "{data}"

[[link]]
name = "fan"
uri = "tcp://127.0.0.1:{primary}"
replicate = ["CATCH.>"]
heartbeat_interval = 0.2
heartbeat_timeout = 1.0
reconnect_initial_delay = 0.05
reconnect_max_delay = 0.2
"""


def catchup_part(client: Client, tmp: Path, primary: int, c: int) -> None:
    port = primary + 10
    cfg = tmp / "s.toml"
    cfg.write_text(SECONDARY.format(port=port, data=tmp / "S", primary=primary))
    proc = start_node(tmp / "S", port, cfg)
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout=30.0) as s:

            def replication() -> dict[str, object]:
                rep: dict[str, object] = s.status()["replication"]["fan"]
                return rep

            for i in range(c):
                client._submit(wire.STATE_SET, _body(f"CATCH.{i}", b"0"))
            client.request(wire.PING)
            deadline = time.monotonic() + 60
            while replication()["state"] != "in sync" or replication()["topics"] != c:
                if time.monotonic() > deadline:
                    raise SystemExit(f"S did not replicate {c} topics: {replication()}")
                time.sleep(0.05)
            proc.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            bulk_set(client, c, prefix="CATCH", payload=b"1")
            # a cut both sides notice (heartbeat timeout 1 s), not a pause TCP absorbs
            time.sleep(max(0.0, stopped + 2.5 - time.monotonic()))
            syncs = replication_syncs = 0
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 120
            while True:
                rep = replication()
                if time.monotonic() > deadline:
                    raise SystemExit(f"S did not catch up: {rep}")
                replication_syncs = int(str(rep["syncs"]))
                if rep["state"] == "in sync" and replication_syncs >= 2:
                    break
                time.sleep(0.01)
            took = time.perf_counter() - t0
            syncs = replication_syncs
            assert all(m.payload == b"1" for m in s.fetch("CATCH.>"))
        print(
            f"catch-up after a cut: {c:,} changed topics in sync {took:.2f} s after SIGCONT "
            f"({c / took:,.0f} topics/s, syncs {syncs}, cut noticed by heartbeat)"
        )
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(30)


def _body(topic: str, payload: bytes) -> dict[str, object]:
    return {"topic": topic, "payload": payload, "fmt": 0, "headers": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--m", type=int, default=5_000)
    ap.add_argument("--k", type=int, default=1_000)
    ap.add_argument("--c", type=int, default=20_000)
    ap.add_argument("--port", type=int, default=17310)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        data = Path(tmp) / "node"
        proc = start_node(data, args.port)
        try:
            with Client(
                f"tcp://127.0.0.1:{args.port}", timeout=60.0, heartbeat_timeout=HB
            ) as client:
                snapshot_part(client, proc.pid, data, args.n)
                cost_part(client, args.m)
                missing_part(client, args.k)
                catchup_part(client, Path(tmp), args.port, args.c)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
