"""The child processes of ``soak.py``: the nodes, the load publishers and the subscribers.

Each ``*_main`` is a multiprocessing target (spawn): it starts a guard that ends the child
if its parent goes away or its deadline passes, does its part until told to stop, and
reports its counters on the result queue under its role's tag. ``zbroker`` is imported
inside each target, never at module level: the parent imports this module before it takes
its copy of the sources (``_common.snapshot_sources``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import bench_node as bn
from bn_child import guard as guard

HOST = bn.HOST
PAYLOAD_SIZE = bn.PAYLOAD_SIZE
NODE_IDS = ("soak-A", "soak-B", "soak-C")
TOPIC = "SOAK.DATA"
PATTERN = "SOAK.>"
PTOPIC = "SOAKP.DATA"
PPATTERN = "SOAKP.>"
DURABLE = "soak-durable"


class _ClientEvents(logging.Handler):
    """Counts a client's "lost node" warnings (a heartbeat timeout or a goodbye: the client
    drops its connections to that node and reconnects) and prints every warning with the
    role's name."""

    def __init__(self, role: str) -> None:
        super().__init__(logging.WARNING)
        self.role = role
        self.lost_node = 0
        self.warnings = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.warnings += 1
        if text.startswith("lost node"):
            self.lost_node += 1
        if record.exc_info:  # e.g. "client thread crashed": the traceback says where
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        print(f"  [{self.role} pid {os.getpid()}] {text}", file=sys.stderr, flush=True)


def watch_client(role: str) -> _ClientEvents:
    handler = _ClientEvents(role)
    logging.getLogger("zbroker.client").addHandler(handler)
    return handler


def node_main(
    q: Any,
    name: str,
    data_dir: str,
    peers: tuple[str, ...],
    stop: Any,
    deadline_s: float,
    profile_out: str | None = None,
) -> None:
    """A node (port 0) dialling ``peers`` (duplex links) until ``stop`` is set, its process
    tuned as ``zbroker start`` tunes its own (collector and allocator: the RSS bound holds
    for what users run); with ``profile_out``, its node thread runs under cProfile (dumped
    there at the end)."""
    guard(deadline_s)
    import cProfile

    from zbroker import Broker, tune_gc, tune_malloc
    from zbroker.config import peer_link

    try:
        broker = Broker(
            host=HOST,
            port=0,
            data_dir=Path(data_dir),
            broker_id=name,
            links=tuple(peer_link(uri) for uri in peers),
        ).start()
    except Exception as exc:
        q.put((name, {"error": f"{type(exc).__name__}: {exc}"}))
        return
    tune_gc()
    tune_malloc()
    prof = cProfile.Profile() if profile_out else None
    try:
        if prof is not None:
            broker.call(lambda node: prof.enable())  # the node thread only
        q.put((name, {"endpoint": broker.endpoint}))
        while not stop.wait(0.2):
            pass
        if prof is not None and profile_out:
            broker.call(lambda node: prof.disable())
            prof.dump_stats(profile_out)
    finally:
        broker.stop()


def _pace(i: int, t0: float, interval: float) -> float:
    """Sleep until slot ``i`` of an absolute schedule; return how late we are (s)."""
    delay = t0 + i * interval - time.monotonic()
    if delay > 0:
        time.sleep(delay)
        return 0.0
    return -delay


def rate_pub_main(
    q: Any, tag: str, endpoint: str, rate: float, stop: Any, go: Any, sent: Any, deadline_s: float
) -> None:
    """Non-persistent publisher at ``rate`` msg/s (absolute schedule, checked every 64)."""
    guard(deadline_s)
    from zbroker import Client

    events = watch_client(tag)
    client = Client(endpoint)
    errors: dict[str, int] = {}
    n = 0
    max_late = 0.0
    try:
        go.wait(60)
        payload = b"S" * PAYLOAD_SIZE
        publish = client.publish
        interval = 1.0 / rate
        t0 = time.monotonic()
        while not stop.is_set():
            late = _pace(n, t0, interval)
            max_late = max(max_late, late)
            for _ in range(64):
                try:
                    publish(TOPIC, payload)
                except Exception as exc:  # PublishTimeout under overload: count, go on
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    continue
                n += 1
            sent.value = n
        elapsed = time.monotonic() - t0
        q.put(
            (
                tag,
                {
                    "sent": n,
                    "elapsed_s": elapsed,
                    "rate": n / elapsed if elapsed else 0.0,
                    "max_late_s": max_late,
                    "errors": errors,
                    "lost_node": events.lost_node,
                    "warnings": events.warnings,
                },
            )
        )
    finally:
        client.close()


class _ConfirmedLoad:
    """``threads`` threads sharing one client, each blocking in ``publish(confirm=True)``
    on its own share of an absolute schedule at ``rate`` in total (thread j publishes
    indices j, j + threads, ...)."""

    def __init__(self, client: Any, rate: float, threads: int, stop: Any, confirmed: Any) -> None:
        self.client, self.rate, self.threads = client, rate, threads
        self.stop, self.confirmed = stop, confirmed
        self.results: list[list[tuple[int, int]]] = [[] for _ in range(threads)]
        self.lats: list[list[float]] = [[] for _ in range(threads)]
        self.errors: dict[str, int] = {}
        self.late = [0.0] * threads
        self.lock = threading.Lock()

    def worker(self, j: int, t0: float) -> None:
        interval = self.threads / self.rate
        k = 0
        while not self.stop.is_set():
            self.late[j] = max(self.late[j], _pace(k, t0 + j / self.rate, interval))
            i = j + k * self.threads
            payload = i.to_bytes(8, "little") + bytes(PAYLOAD_SIZE - 8)
            t = time.perf_counter()
            try:
                self.client.publish(PTOPIC, payload, confirm=True)
                self.lats[j].append(time.perf_counter() - t)
                self.results[j].append((i, 1))
                with self.lock:
                    self.confirmed.value += 1
            except Exception as exc:  # PublishTimeout etc.: unknown whether stored
                with self.lock:
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                self.results[j].append((i, 2))
            k += 1

    def run(self) -> float:
        """Every thread until ``stop`` is set; return the time they took (s)."""
        t0 = time.monotonic()
        workers = [
            threading.Thread(target=self.worker, args=(j, t0), daemon=True)
            for j in range(self.threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.monotonic() - t0

    def state(self) -> bytes:
        """Per index: 0 never attempted, 1 confirmed, 2 failed (unknown whether stored)."""
        top = max((i for r in self.results for i, _ in r), default=-1)
        state = bytearray(top + 1)
        for r in self.results:
            for i, v in r:
                state[i] = v
        return bytes(state)


def persist_pub_main(
    q: Any,
    endpoint: str,
    rate: float,
    threads: int,
    stop: Any,
    go: Any,
    confirmed: Any,
    deadline_s: float,
) -> None:
    """Persistent publishes with ``confirm=True`` at ``rate`` in total, from ``threads``
    threads sharing one client (thread j publishes indices j, j + threads, ...); each payload
    starts with its index. Reports per index: 0 never attempted, 1 confirmed, 2 failed
    (unknown whether stored), and the confirm latency."""
    guard(deadline_s)
    from zbroker import Client

    events = watch_client("ppub")
    client = Client(endpoint)
    load = _ConfirmedLoad(client, rate, threads, stop, confirmed)
    try:
        go.wait(60)
        elapsed = load.run()
        q.put(
            (
                "ppub",
                {
                    "attempted": sum(len(r) for r in load.results),
                    "state": load.state(),
                    "elapsed_s": elapsed,
                    "lat_ms": _quantiles([x for xs in load.lats for x in xs]),
                    "errors": load.errors,
                    "max_late_s": max(load.late),
                    "threads": threads,
                    "lost_node": events.lost_node,
                    "warnings": events.warnings,
                },
            )
        )
    finally:
        client.close()


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)

    def pct(p: float) -> float:
        return 1e3 * s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]

    return {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": 1e3 * s[-1], "n": len(s)}
