#!/usr/bin/env python3
"""Soak test (issue 5): a 3-node chain under steady load for minutes, with churn.

    .venv/bin/python benchmarks/soak.py                  # 10 minutes at 45,000 msg/s
    .venv/bin/python benchmarks/soak.py --minutes 1      # a short run
    .venv/bin/python benchmarks/soak.py --json           # result as JSON on stdout

Nodes A, B, C (``zbroker.Broker``, one process and data directory each, all on 127.0.0.1);
B dials A, C dials B (duplex links, what ``zbroker start --peer`` configures). For
``--minutes`` M:

* non-persistent publishers on A at a fixed total rate: ``--fraction`` (default 0.5) of
  ``--peak`` (default 90,000 msg/s), i.e. 45,000 msg/s; ``--rate`` sets it directly;
* subscribers on C that churn: ``--subscribers`` clients (default 2) in one process, and every
  ``--churn-s`` seconds (default 4) the oldest one goes (alternately ``unsubscribe()`` +
  ``close()``, and ``close()`` alone) and a new client connects and subscribes;
* persistent publishes with ``confirm=True`` on ``--persistent-node`` (default A: stored
  and forwarded over both links; C: one node) (``--persistent-rate``, default 500 msg/s
  in total, from ``--persistent-threads`` threads sharing one client, default 8, each
  blocking in ``publish(confirm=True)``) to a durable subscription on C, whose subscriber
  process restarts every ``--durable-restart-s`` seconds (default 20), alternately closed
  cleanly and SIGKILLed, and stays away ``--durable-away-s`` seconds (default 3) before the
  next one attaches. Each durable subscriber appends every delivery (index, redelivered
  flag) to a file before its callback returns, i.e. before it acknowledges.

Every ``--sample-s`` seconds (default 10) the script samples each node's RSS (VmRSS from
/proc/PID/status) and its counters, and prints them. At the end it checks and prints:

* no lost persistent message: every confirmed message was delivered to the durable
  subscribers, exactly once apart from copies flagged ``redelivered``;
* RSS growth of every node from minute 1 (the first sample at or after min(60 s, half the
  run)) to the end, against ``--rss-bound-mb`` (default 50 MB per node);
* the counters of every node and every client role.

Every child process is stopped by its PID in a ``finally`` block (SIGTERM/SIGINT and the
overall deadline included); each child also exits on its own if its parent goes away or its
deadline passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing as mp
import os
import pstats
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # helpers: machine info, process start/stop, CPU accounting
from _common import snapshot_sources

log = bn.log
HOST = bn.HOST
PAYLOAD_SIZE = bn.PAYLOAD_SIZE
NODE_IDS = ("soak-A", "soak-B", "soak-C")
TOPIC = "SOAK.DATA"
PATTERN = "SOAK.>"
PTOPIC = "SOAKP.DATA"
PPATTERN = "SOAKP.>"
DURABLE = "soak-durable"
DRAIN_TIMEOUT_S = 90.0  # after the load stops: the durable subscriber catches up
SETUP_S = 300.0  # a child's deadline beyond the run's length


# -- children ---------------------------------------------------------------------------------


def _guard(deadline_s: float) -> None:
    """Exit this child if the parent disappears or ``deadline_s`` passes."""
    parent = os.getppid()
    end = time.monotonic() + deadline_s

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent or time.monotonic() > end:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="soak-guard").start()


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


def _watch_client(role: str) -> _ClientEvents:
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
    _guard(deadline_s)
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
    _guard(deadline_s)
    from zbroker import Client

    events = _watch_client(tag)
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


def churn_sub_main(
    q: Any,
    endpoint: str,
    k: int,
    churn_s: float,
    ready: Any,
    stop: Any,
    received: Any,
    deadline_s: float,
) -> None:
    """``k`` subscriber clients on ``PATTERN``; every ``churn_s`` the oldest leaves and a new
    one joins (alternately unsubscribe()+close() and close() alone)."""
    _guard(deadline_s)
    from zbroker import Client

    events = _watch_client("churn")
    counts: list[int] = []  # deliveries per client ever opened
    live: list[tuple[Any, Any, int]] = []  # (client, subscription, index in counts)
    st = {
        "opened": 0,
        "closed": 0,
        "closed_unsub": 0,
        "missed": 0,
        "errors": {},
        "max_open_s": 0.0,
        "max_close_s": 0.0,
    }

    def open_one() -> None:
        idx = len(counts)
        counts.append(0)

        def on_msg(msg: Any, idx: int = idx) -> None:
            counts[idx] += 1

        t = time.monotonic()
        client = Client(endpoint)
        try:
            sub = client.subscribe(PATTERN, on_msg)
        except BaseException:
            client.close()
            raise
        st["max_open_s"] = max(st["max_open_s"], time.monotonic() - t)
        live.append((client, sub, idx))
        st["opened"] += 1

    def close_oldest(unsub: bool) -> None:
        client, sub, _ = live.pop(0)
        t = time.monotonic()
        if unsub:
            sub.unsubscribe()
            st["closed_unsub"] += 1
        st["missed"] += client.missed
        client.close()
        st["max_close_s"] = max(st["max_close_s"], time.monotonic() - t)
        st["closed"] += 1

    try:
        for _ in range(k):
            open_one()
        ready.set()
        next_churn = time.monotonic() + churn_s
        flip = True
        while not stop.wait(0.25):
            received.value = sum(counts)
            if time.monotonic() >= next_churn:
                next_churn += churn_s
                try:
                    close_oldest(flip)
                    flip = not flip
                    open_one()
                except Exception as exc:
                    key = type(exc).__name__
                    st["errors"][key] = st["errors"].get(key, 0) + 1
        received.value = sum(counts)
        while live:
            close_oldest(False)
        q.put(
            (
                "churn",
                {
                    **st,
                    "received": sum(counts),
                    "clients": len(counts),
                    "lost_node": events.lost_node,
                    "warnings": events.warnings,
                },
            )
        )
    finally:
        for client, _, _ in live:
            client.close()


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
    _guard(deadline_s)
    from zbroker import Client

    events = _watch_client("ppub")
    client = Client(endpoint)
    results: list[list[tuple[int, int]]] = [[] for _ in range(threads)]
    lats: list[list[float]] = [[] for _ in range(threads)]
    errors: dict[str, int] = {}
    late = [0.0] * threads
    lock = threading.Lock()

    def worker(j: int, t0: float) -> None:
        interval = threads / rate
        k = 0
        while not stop.is_set():
            late[j] = max(late[j], _pace(k, t0 + j / rate, interval))
            i = j + k * threads
            payload = i.to_bytes(8, "little") + bytes(PAYLOAD_SIZE - 8)
            t = time.perf_counter()
            try:
                client.publish(PTOPIC, payload, confirm=True)
                lats[j].append(time.perf_counter() - t)
                results[j].append((i, 1))
                with lock:
                    confirmed.value += 1
            except Exception as exc:  # PublishTimeout etc.: unknown whether stored
                with lock:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                results[j].append((i, 2))
            k += 1

    try:
        go.wait(60)
        t0 = time.monotonic()
        workers = [
            threading.Thread(target=worker, args=(j, t0), daemon=True) for j in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.monotonic() - t0
        top = max((i for r in results for i, _ in r), default=-1)
        state = bytearray(top + 1)
        for r in results:
            for i, v in r:
                state[i] = v
        q.put(
            (
                "ppub",
                {
                    "attempted": sum(len(r) for r in results),
                    "state": bytes(state),
                    "elapsed_s": elapsed,
                    "lat_ms": _quantiles([x for xs in lats for x in xs]),
                    "errors": errors,
                    "max_late_s": max(late),
                    "threads": threads,
                    "lost_node": events.lost_node,
                    "warnings": events.warnings,
                },
            )
        )
    finally:
        client.close()


def durable_sub_main(
    q: Any,
    gen: int,
    endpoint: str,
    credit: int,
    path: str,
    ready: Any,
    stop: Any,
    delivered: Any,
    deadline_s: float,
) -> None:
    """A durable subscriber: each delivery is appended to ``path`` (index, redelivered)
    before the callback returns. Stops cleanly when ``stop`` is set (or is SIGKILLed)."""
    _guard(deadline_s)
    from zbroker import Client

    # line buffered: a line is written (to the page cache) per delivery, before the ack
    out = Path(path).open("a", buffering=1)  # noqa: SIM115 (closed in the finally below)
    count = [0, 0]

    def on_msg(msg: Any) -> None:
        i = int.from_bytes(msg.payload[:8], "little")
        out.write(f"{i} {1 if msg.redelivered else 0}\n")
        count[0] += 1
        count[1] += bool(msg.redelivered)
        delivered.value += 1

    events = _watch_client(f"dsub{gen}")
    client = Client(endpoint)
    try:
        client.subscribe(PPATTERN, on_msg, durable=DURABLE, credit=credit)
        q.put((f"dsub{gen}-open", client.durable_info.get(DURABLE, {})))
        ready.set()
        while not stop.wait(0.2):
            pass
        q.put(
            (
                f"dsub{gen}",
                {"delivered": count[0], "redelivered": count[1], "lost_node": events.lost_node},
            )
        )
    finally:
        client.close()
        out.close()


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    s = sorted(xs)

    def pct(p: float) -> float:
        return 1e3 * s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]

    return {"p50": pct(50), "p99": pct(99), "p999": pct(99.9), "max": 1e3 * s[-1], "n": len(s)}


# -- parent -----------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return float("nan")


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = mp.get_context("spawn")
        self.tmp = tempfile.mkdtemp(prefix="zbroker-soak-")
        self.q = self.ctx.Queue()
        self.inbox = bn._Inbox(self.q)
        self.node_stop = self.ctx.Event()
        self.load_stop = self.ctx.Event()  # the publishers
        self.churn_stop = self.ctx.Event()  # the churning subscribers, once the chain is idle
        self.go = self.ctx.Event()
        self.deadline = args.minutes * 60 + SETUP_S
        self.nodes: list[dict[str, Any]] = []
        self.clients: dict[str, Any] = {}
        self.dsub: dict[str, Any] | None = None
        self.dsub_gen = 0
        self.dsub_history: list[dict[str, Any]] = []
        self.dsub_delivered = self.ctx.Value("q", 0, lock=False)
        self.profile_path: str | None = None

    # nodes

    def start_nodes(self) -> None:
        from zbroker import Client

        for name in NODE_IDS:
            peers = (self.nodes[-1]["endpoint"],) if self.nodes else ()
            prof = None
            if self.args.profile_node and name.endswith("-" + self.args.profile_node):
                prof = self.profile_path = os.path.join(self.tmp, f"{name}.prof")
            proc = bn._start(
                self.ctx,
                node_main,
                self.q,
                name,
                os.path.join(self.tmp, name),
                peers,
                self.node_stop,
                self.deadline,
                prof,
            )
            info = self.inbox.get(name, 30)
            if "error" in info:
                raise RuntimeError(f"node {name}: {info['error']}")
            self.nodes.append({"name": name, "proc": proc, "pid": proc.pid, **info})
            self.clients[name] = Client(info["endpoint"])
            log(
                f"  node {name} pid {proc.pid} at {info['endpoint']}"
                + (f", dials {peers[0]}" if peers else "")
            )

        def links_up() -> bool:
            want = {0: 1, 1: 2, 2: 1}
            for i, nd in enumerate(self.nodes):
                links = self.clients[nd["name"]].status()["links"]
                if sum(1 for ln in links if ln["state"] == "up") != want[i]:
                    return False
            return True

        _wait(links_up, 30, "chain links up")
        log("  chain links up")

    def status(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.clients[name].status()
        return result

    # the durable subscriber

    def start_dsub(self) -> None:
        self.dsub_gen += 1
        gen = self.dsub_gen
        ready, stop = self.ctx.Event(), self.ctx.Event()
        path = os.path.join(self.tmp, f"durable-{gen}.log")
        proc = bn._start(
            self.ctx,
            durable_sub_main,
            self.q,
            gen,
            self.nodes[2]["endpoint"],
            self.args.credit,
            path,
            ready,
            stop,
            self.dsub_delivered,
            self.deadline,
        )
        if not ready.wait(30):
            raise TimeoutError(f"durable subscriber {gen} not attached within 30 s")
        opened = self.inbox.get(f"dsub{gen}-open", 10)
        self.dsub = {
            "gen": gen,
            "proc": proc,
            "stop": stop,
            "path": path,
            "started": time.monotonic(),
            "open": opened,
        }
        log(
            f"  durable subscriber #{gen} (pid {proc.pid}) attached: stored "
            f"{opened.get('stored')}, created {opened.get('created')}"
        )

    def stop_dsub(self, kill: bool) -> None:
        d = self.dsub
        if d is None:
            return
        self.dsub = None
        proc = d["proc"]
        if kill:
            proc.kill()  # SIGKILL by PID: no DURABLE_CLOSE, unacknowledged in flight
            proc.join(5)
            res: dict[str, Any] = {"killed": True}
        else:
            d["stop"].set()
            res = dict(self.inbox.get(f"dsub{d['gen']}", 30), killed=False)
            bn._stop_procs([proc], 10)
        res.update(
            gen=d["gen"], path=d["path"], open=d["open"], ran_s=time.monotonic() - d["started"]
        )
        self.dsub_history.append(res)
        log(
            f"  durable subscriber #{d['gen']} {'SIGKILLed' if kill else 'closed'} after "
            f"{res['ran_s']:.1f} s"
        )

    # the run

    def run(self) -> dict[str, Any]:
        a = self.args
        result: dict[str, Any] = {}
        log(
            f"soak: chain A-B-C, {a.minutes:g} min, {a.rate:,.0f} msg/s non-persistent on A "
            f"({a.publishers} publisher(s)), {a.subscribers} churning subscribers on C "
            f"(every {a.churn_s:g} s), persistent {a.persistent_rate:,.0f} msg/s on "
            f"{a.persistent_node}, durable "
            f"subscriber restart every {a.durable_restart_s:g} s (away {a.durable_away_s:g} s)"
        )
        self.start_nodes()
        A, C = self.nodes[0]["name"], self.nodes[2]["name"]
        self.start_dsub()
        churn_ready = self.ctx.Event()
        churn_received = self.ctx.Value("q", 0, lock=False)
        churn = bn._start(
            self.ctx,
            churn_sub_main,
            self.q,
            self.nodes[2]["endpoint"],
            a.subscribers,
            a.churn_s,
            churn_ready,
            self.churn_stop,
            churn_received,
            self.deadline,
        )
        if not churn_ready.wait(60):
            raise TimeoutError("churning subscribers not ready")
        _wait(
            lambda: any(
                r["pattern"] == PATTERN for r in self.clients[A].routes() if r["link"] is not None
            ),
            30,
            "C's interest at A",
        )
        sent_vals = [self.ctx.Value("q", 0, lock=False) for _ in range(a.publishers)]
        pubs = [
            bn._start(
                self.ctx,
                rate_pub_main,
                self.q,
                f"pub{i}",
                self.nodes[0]["endpoint"],
                a.rate / a.publishers,
                self.load_stop,
                self.go,
                sent_vals[i],
                self.deadline,
            )
            for i in range(a.publishers)
        ]
        confirmed = self.ctx.Value("q", 0, lock=False)
        ppub = bn._start(
            self.ctx,
            persist_pub_main,
            self.q,
            self.nodes["ABC".index(a.persistent_node)]["endpoint"],
            a.persistent_rate,
            a.persistent_threads,
            self.load_stop,
            self.go,
            confirmed,
            self.deadline,
        )
        pids = {"A": self.nodes[0]["pid"], "B": self.nodes[1]["pid"], "C": self.nodes[2]["pid"]}
        others = {"pubs": [p.pid for p in pubs], "churn": churn.pid, "ppub": ppub.pid}
        time.sleep(2.0)  # clients connected (each waits for go)
        samples: list[dict[str, Any]] = []
        duration = a.minutes * 60
        t0 = time.monotonic()
        ticks0 = bn._cpu_ticks()
        cpu0 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        self.go.set()
        log(f"load started; sampling every {a.sample_s:g} s")
        log(
            f"{'t s':>6} {'A MB':>7} {'B MB':>7} {'C MB':>7}  {'A recv/s':>9} {'C deliv/s':>9} "
            f"{'sub recv/s':>10} {'confirm/s':>9} {'durable':>8} {'C stored':>8} "
            f"{'drops A/B/C':>12} {'other cores':>11}"
        )
        prev: dict[str, Any] | None = None
        next_sample = t0 + a.sample_s
        next_restart = t0 + a.durable_restart_s
        reattach_at: float | None = None
        kill_next = False
        while True:
            now = time.monotonic()
            if now - t0 >= duration:
                break
            if reattach_at is not None and now >= reattach_at:
                self.start_dsub()
                reattach_at = None
                next_restart = time.monotonic() + a.durable_restart_s
            elif reattach_at is None and now >= next_restart:
                self.stop_dsub(kill_next)
                kill_next = not kill_next
                reattach_at = time.monotonic() + a.durable_away_s
            if now >= next_sample:
                next_sample += a.sample_s
                s = self.sample(now - t0, pids, sent_vals, churn_received, confirmed)
                if prev is not None:
                    self.print_sample(s, prev)
                else:
                    self.print_sample(s, None)
                samples.append(s)
                prev = s
            time.sleep(0.1)
        final = self.sample(time.monotonic() - t0, pids, sent_vals, churn_received, confirmed)
        self.print_sample(final, prev)
        samples.append(final)
        ticks1 = bn._cpu_ticks()
        wall = time.monotonic() - t0
        cpu1 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        result["node_cpu_pct"] = {k: 100 * (cpu1[k] - cpu0[k]) / wall for k in pids}
        result["machine_load"] = bn._machine_load(ticks0, ticks1, wall, 0.0)
        log("load period over: stopping the publishers ...")
        self.load_stop.set()
        result["publishers"] = [self.inbox.get(f"pub{i}", 60) for i in range(a.publishers)]
        result["ppub"] = self.inbox.get("ppub", 60)
        bn._stop_procs([*pubs, ppub])

        def chain_idle() -> bool:  # C's link has taken in all that A received
            got = self.status(A)["counters"]["received"]
            links = self.status(C)["links"]
            return sum(ln["msgs_in"] for ln in links) >= got

        try:
            result["chain_idle_after_s"] = _wait(chain_idle, 30, "chain idle", 0.1)
        except TimeoutError as exc:
            result["chain_idle_after_s"] = None
            log(f"  {exc}")
        time.sleep(0.5)  # the last deliveries reach the subscribers
        log("  ... and the churning subscribers")
        self.churn_stop.set()
        result["churn"] = self.inbox.get("churn", 60)
        bn._stop_procs([churn])
        if self.dsub is None:
            self.start_dsub()
        state = result["ppub"]["state"]
        n_confirmed = state.count(1)
        t_drain = time.monotonic()

        def drained() -> bool:
            ds = [d for d in self.status(C)["durables"] if d["name"] == DURABLE]
            return bool(ds) and ds[0]["stored"] == 0 and ds[0]["in_flight"] == 0

        try:
            _wait(drained, DRAIN_TIMEOUT_S, "durable subscription drained", 0.2)
            result["drain_after_load_s"] = time.monotonic() - t_drain
        except TimeoutError as exc:
            result["drain_after_load_s"] = None
            log(f"  {exc}")
        time.sleep(0.5)
        self.stop_dsub(False)
        result["durable_final"] = [d for d in self.status(C)["durables"] if d["name"] == DURABLE]
        result["nodes_final"] = {}
        for nd in self.nodes:
            st = self.status(nd["name"])
            result["nodes_final"][nd["name"]] = {
                "counters": st["counters"],
                "links": [
                    {k: ln[k] for k in ("name", "peer", "state", "msgs_in", "msgs_out", "drops")}
                    for ln in st["links"]
                ],
                "store": st["store"],
            }
        result["samples"] = samples
        result["others_pids"] = others
        result["durable_subscribers"] = [
            {k: v for k, v in h.items() if k != "path"} for h in self.dsub_history
        ]
        result["persistent"] = self.check_persistent(state, n_confirmed)
        result["rss"] = self.rss_verdict(samples, duration)
        return result

    def sample(
        self,
        t: float,
        pids: dict[str, int],
        sent_vals: list[Any],
        churn_received: Any,
        confirmed: Any,
    ) -> dict[str, Any]:
        s: dict[str, Any] = {"t": round(t, 1)}
        s["rss_mb"] = {k: round(rss_mb(p), 1) for k, p in pids.items()}
        s["sent"] = sum(v.value for v in sent_vals)
        s["sub_received"] = churn_received.value
        s["confirmed"] = confirmed.value
        s["durable_delivered"] = self.dsub_delivered.value
        s["ticks"] = bn._cpu_ticks()
        for key, name in zip(("A", "B", "C"), NODE_IDS, strict=True):
            try:
                c = self.status(name)
            except Exception as exc:  # a node too busy to answer: record, go on
                s[key] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            cnt = c["counters"]
            s[key] = {
                "received": cnt["received"],
                "forwarded": cnt["forwarded"],
                "delivered": cnt["delivered"],
                "dropped": sum(cnt["dropped"].values()),
                "links_down": cnt["links_down"],
                "durable_stored": cnt.get("durable_stored", 0),
                "durable_depth": next(
                    (d["stored"] for d in c.get("durables", []) if d["name"] == DURABLE), 0
                ),
            }
        return s

    def print_sample(self, s: dict[str, Any], prev: dict[str, Any] | None) -> None:
        dt = s["t"] - (prev["t"] if prev else 0.0)

        def rate(key: str, sub: str | None = None) -> str:
            if prev is None or dt <= 0:
                return "-"
            cur = s[key] if sub is None else s[key].get(sub)
            old = prev[key] if sub is None else prev[key].get(sub)
            if cur is None or old is None:
                return "?"
            return f"{(cur - old) / dt:,.0f}"

        drops = "/".join(str(s[k].get("dropped", "?")) for k in ("A", "B", "C"))
        other = "-"
        if prev is not None:
            load = bn._machine_load(prev["ticks"], s["ticks"], dt, 0.0)
            other = f"{load['busy_cores']:.2f} busy"
        r = s["rss_mb"]
        log(
            f"{s['t']:>6.0f} {r['A']:>7.1f} {r['B']:>7.1f} {r['C']:>7.1f}  "
            f"{rate('A', 'received'):>9} {rate('C', 'delivered'):>9} {rate('sub_received'):>10} "
            f"{rate('confirmed'):>9} {s['durable_delivered']:>8,} "
            f"{s['C'].get('durable_depth', '?'):>8} {drops:>12} {other:>11}"
        )

    def check_persistent(self, state: bytes, n_confirmed: int) -> dict[str, Any]:
        n = len(state)
        copies = [0] * n
        flagged = [0] * n
        unexpected = 0
        bad_lines = 0
        for h in self.dsub_history:
            with open(h["path"]) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) != 2 or not line.endswith("\n"):
                        bad_lines += 1  # a line cut by SIGKILL: that delivery was not acked
                        continue
                    i, r = int(parts[0]), int(parts[1])
                    if not 0 <= i < n:
                        unexpected += 1
                        continue
                    copies[i] += 1
                    flagged[i] += r
        lost = [i for i in range(n) if state[i] == 1 and copies[i] == 0]
        unflagged_dups = [i for i in range(n) if copies[i] - flagged[i] > 1]
        total = sum(copies)
        res = {
            "attempted": sum(1 for x in state if x),
            "confirmed": n_confirmed,
            "failed": sum(1 for x in state if x == 2),
            "failed_but_delivered": sum(1 for i in range(n) if state[i] == 2 and copies[i]),
            "delivered_total": total,
            "distinct_delivered": sum(1 for c in copies if c),
            "extra_copies": total - sum(1 for c in copies if c),
            "flagged_redelivered": sum(flagged),
            "first_copy_flagged": sum(1 for i in range(n) if copies[i] and copies[i] == flagged[i]),
            "unflagged_duplicates": len(unflagged_dups),
            "lost_confirmed": len(lost),
            "lost_examples": lost[:20],
            "unexpected_index": unexpected,
            "cut_lines": bad_lines,
        }
        res["ok"] = not lost and not unflagged_dups and unexpected == 0
        return res

    def rss_verdict(self, samples: list[dict[str, Any]], duration: float) -> dict[str, Any]:
        base_t = min(60.0, duration / 2)
        base = next((s for s in samples if s["t"] >= base_t), samples[0])
        end = samples[-1]
        out: dict[str, Any] = {
            "baseline_t": base["t"],
            "end_t": end["t"],
            "bound_mb": self.args.rss_bound_mb,
            "nodes": {},
        }
        ok = True
        for k in ("A", "B", "C"):
            series = [s["rss_mb"][k] for s in samples]
            growth = end["rss_mb"][k] - base["rss_mb"][k]
            after = [s for s in samples if s["t"] >= base["t"]]
            slope = None
            if len(after) >= 3 and after[-1]["t"] > after[0]["t"]:
                xs = [s["t"] for s in after]
                ys = [s["rss_mb"][k] for s in after]
                mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
                den = sum((x - mx) ** 2 for x in xs)
                slope = 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den
            node_ok = not math.isnan(growth) and growth <= self.args.rss_bound_mb
            ok = ok and node_ok
            out["nodes"][k] = {
                "start_mb": series[0],
                "baseline_mb": base["rss_mb"][k],
                "end_mb": end["rss_mb"][k],
                "max_mb": max(series),
                "growth_mb": round(growth, 1),
                "slope_mb_per_min": None if slope is None else round(slope, 2),
                "ok": node_ok,
            }
        out["ok"] = ok
        return out

    def close(self) -> None:
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self.clients.clear()
        self.load_stop.set()
        self.churn_stop.set()
        self.go.set()
        if self.dsub is not None:
            self.dsub["stop"].set()
        self.node_stop.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        if self.profile_path and os.path.exists(self.profile_path):
            print(
                f"\n==== cProfile: node {self.args.profile_node}'s node thread, whole run "
                "(sorted by tottime, top 35) ===="
            )
            st = pstats.Stats(self.profile_path, stream=sys.stdout)
            st.strip_dirs().sort_stats("tottime").print_stats(35)
        shutil.rmtree(self.tmp, ignore_errors=True)


def _wait(pred: Any, timeout: float, what: str, step: float = 0.1) -> float:
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(step)


def print_summary(result: dict[str, Any]) -> None:
    m, a = result["machine"], result["args"]
    rss, p = result["rss"], result["persistent"]
    print()
    print("=" * 110)
    print("zbroker soak test: summary")
    print(f"date      {m['date']}")
    ml = result["machine_load"]
    print(
        f"machine   nproc {m['nproc']}, {m['cpu_model']}, {m['os']}, load avg at start "
        f"{m['loadavg_at_start']}; during the load period: steal {ml['steal_pct']:.1f}%, "
        f"all processes kept {ml['busy_cores']:.2f} of {m['nproc']} cores busy"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, msgpack "
        f"{m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} ({m['sources']})"
    )
    print(
        f"run       {result['command']}: {a['minutes']:g} min, non-persistent "
        f"{a['rate']:,.0f} msg/s on A (= {a['fraction']:g} x peak {a['peak']:,.0f}), "
        f"{a['subscribers']} churning subscribers on C every {a['churn_s']:g} s, persistent "
        f"{a['persistent_rate']:,.0f} msg/s confirm on {a['persistent_node']} "
        f"({a['persistent_threads']} threads), "
        f"durable credit {a['credit']}, "
        f"restart every {a['durable_restart_s']:g} s; elapsed {result['elapsed_s']:.0f} s"
    )
    print("-" * 110)
    print("RSS series (MB), every sample:")
    print(f"  {'t s':>6} {'A':>7} {'B':>7} {'C':>7}")
    for s in result["samples"]:
        r = s["rss_mb"]
        print(f"  {s['t']:>6.0f} {r['A']:>7.1f} {r['B']:>7.1f} {r['C']:>7.1f}")
    print(
        f"RSS growth from t={rss['baseline_t']:.0f} s (minute 1) to t={rss['end_t']:.0f} s, "
        f"bound {rss['bound_mb']:g} MB per node:"
    )
    for k, v in rss["nodes"].items():
        slope = "-" if v["slope_mb_per_min"] is None else f"{v['slope_mb_per_min']:+.2f} MB/min"
        print(
            f"  node {k}: start {v['start_mb']:.1f}, at minute 1 {v['baseline_mb']:.1f}, end "
            f"{v['end_mb']:.1f}, max {v['max_mb']:.1f} MB; growth {v['growth_mb']:+.1f} MB "
            f"(fit {slope}) {bn._verdict(v['ok'])}"
        )
    print(f"  RSS verdict: {bn._verdict(rss['ok'])}")
    print("-" * 110)
    print("persistent publishes (confirm=True) -> durable subscription on C:")
    pp = result["ppub"]
    print(
        f"  attempted {p['attempted']:,} in {pp['elapsed_s']:.1f} s "
        f"({p['attempted'] / pp['elapsed_s'] if pp['elapsed_s'] else 0:,.0f} msg/s, "
        f"{pp['threads']} threads), confirmed {p['confirmed']:,}, failed {p['failed']:,}"
        f"{' ' + str(pp['errors']) if pp['errors'] else ''} (of which delivered "
        f"{p['failed_but_delivered']:,}); confirm latency ms {_fmt_q(pp['lat_ms'])}, "
        f"max behind schedule {pp['max_late_s']:.2f} s"
    )
    subs = result["durable_subscribers"]
    print(
        f"  durable subscribers: {len(subs)} generations ({sum(1 for s in subs if s['killed'])}"
        f" SIGKILLed, {sum(1 for s in subs if not s['killed'])} closed); drained "
        f"{_fmt_s(result['drain_after_load_s'])} after the load stopped; left stored "
        f"{[d['stored'] for d in result['durable_final']]}"
    )
    print(
        f"  delivered {p['delivered_total']:,} ({p['distinct_delivered']:,} distinct): "
        f"extra copies {p['extra_copies']:,}, flagged redelivered {p['flagged_redelivered']:,}"
        f" (first copy already flagged: {p['first_copy_flagged']:,}), unflagged duplicates "
        f"{p['unflagged_duplicates']:,}, lines cut by SIGKILL {p['cut_lines']}"
    )
    print(
        f"  lost confirmed messages: {p['lost_confirmed']:,} {p['lost_examples'] or ''}; "
        f"unexpected indices {p['unexpected_index']}"
    )
    print(
        f"  persistent verdict (no loss, exactly once modulo flagged redeliveries): "
        f"{bn._verdict(p['ok'])}"
    )
    print("-" * 110)
    print("counters:")
    sent = sum(x["sent"] for x in result["publishers"])
    print(
        f"  publishers on A: sent {sent:,} ("
        + ", ".join(
            f"{x['rate']:,.0f} msg/s, max late {x['max_late_s']:.2f} s, errors "
            f"{x['errors'] or 0}, lost its node {x['lost_node']} times"
            for x in result["publishers"]
        )
        + ")"
    )
    nf = result["nodes_final"]
    a_recv = nf[NODE_IDS[0]]["counters"]["received"]
    c_deliv = nf[NODE_IDS[2]]["counters"]["delivered"]
    c_pers = result["persistent"]["attempted"]
    print(
        f"  non-persistent: sent {sent:,}, A received {a_recv:,}, C delivered "
        f"{c_deliv:,} (C's deliveries count non-persistent only: persistent ones go to the "
        f"durable), sent - received at A = {sent - a_recv:,}, sent - delivered at C = "
        f"{sent - c_deliv:,}; chain idle "
        f"{_fmt_s(result['chain_idle_after_s'])} after the publishers stopped; "
        f"persistent attempted {c_pers:,}"
    )
    ch = result["churn"]
    print(
        f"  churning subscribers: {ch['clients']} clients opened in all ({ch['opened']} "
        f"opened, {ch['closed']} closed, {ch['closed_unsub']} of them after unsubscribe()), "
        f"received {ch['received']:,}, missed (gaps) {ch['missed']:,}, errors "
        f"{ch['errors'] or 0}, slowest open {ch['max_open_s']:.3f} s, slowest close "
        f"{ch['max_close_s']:.3f} s, clients lost their node {ch['lost_node']} times"
    )
    subs = result["durable_subscribers"]
    print(
        f"  client 'lost node' events (heartbeat timeouts): persistent publisher "
        f"{result['ppub']['lost_node']}, durable subscribers closed cleanly "
        f"{sum(s_.get('lost_node', 0) for s_ in subs if not s_['killed'])} (killed ones "
        "cannot report)"
    )
    for name, nd in result["nodes_final"].items():
        c = nd["counters"]
        links = "; ".join(
            f"{ln['name']}<->{ln['peer']} {ln['state']} in {ln['msgs_in']:,} out "
            f"{ln['msgs_out']:,} drops {ln['drops']}"
            for ln in nd["links"]
        )
        print(
            f"  {name}: received {c['received']:,}, forwarded {c['forwarded']:,}, delivered "
            f"{c['delivered']:,}, durable stored {c.get('durable_stored', 0):,} / delivered "
            f"{c.get('durable_delivered', 0):,}, duplicates {c['duplicates']}, links_down "
            f"{c['links_down']}, dropped {c['dropped'] or 0}"
        )
        print(f"      links: {links}")
    print(
        "  node CPU during the load: "
        + ", ".join(f"{k} {v:.0f}% of a core" for k, v in result["node_cpu_pct"].items())
    )
    print("=" * 110)


def _fmt_q(q: dict[str, float]) -> str:
    if not q:
        return "-"
    return f"p50 {q['p50']:.2f}, p99 {q['p99']:.2f}, p99.9 {q['p999']:.2f}, max {q['max']:.2f}"


def _fmt_s(x: float | None) -> str:
    return "never (timeout)" if x is None else f"{x:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument(
        "--peak", type=float, default=90_000.0, help="peak rate the load is a fraction of (msg/s)"
    )
    ap.add_argument("--fraction", type=float, default=0.5, help="fraction of --peak to publish")
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="non-persistent msg/s on A (default: fraction x peak)",
    )
    ap.add_argument("--publishers", type=int, default=1)
    ap.add_argument("--subscribers", type=int, default=2)
    ap.add_argument("--churn-s", type=float, default=4.0)
    ap.add_argument("--persistent-rate", type=float, default=500.0)
    ap.add_argument(
        "--persistent-node",
        choices=("A", "B", "C"),
        default="A",
        help="node the persistent publisher uses (A: store-and-forward to C)",
    )
    ap.add_argument(
        "--persistent-threads",
        type=int,
        default=8,
        help="threads sharing the persistent publisher's client, each blocking in "
        "publish(confirm=True)",
    )
    ap.add_argument("--credit", type=int, default=100)
    ap.add_argument("--durable-restart-s", type=float, default=20.0)
    ap.add_argument("--durable-away-s", type=float, default=3.0)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--rss-bound-mb", type=float, default=50.0)
    ap.add_argument(
        "--profile-node",
        choices=("A", "B", "C"),
        default=None,
        help="run that node's thread under cProfile (slower) and print the profile",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    args = ap.parse_args(argv)
    if args.rate is None:
        args.rate = args.peak * args.fraction
    if not args.no_snapshot:
        snapshot_sources()
    run_deadline = int(args.minutes * 60 + SETUP_S + DRAIN_TIMEOUT_S)

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"soak exceeded {run_deadline} s")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(run_deadline)
    info = bn.machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    t_begin = time.monotonic()
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        signal.alarm(0)
        soak.close()
    result.update(
        machine=info,
        args=vars(args),
        elapsed_s=time.monotonic() - t_begin,
        command=" ".join([os.path.basename(sys.executable), *sys.argv]),
    )
    for s in result["samples"]:
        s.pop("ticks", None)
    result["ppub"].pop("state", None)
    result["pass"] = {"persistent": result["persistent"]["ok"], "rss": result["rss"]["ok"]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
