#!/usr/bin/env python3
"""Persistent publish and durable subscriptions through one node (issue 5).

    .venv/bin/python benchmarks/bench_persistent.py            # full run (about 1-2 minutes)
    .venv/bin/python benchmarks/bench_persistent.py --quick    # smoke run (about 30 s)
    .venv/bin/python benchmarks/bench_persistent.py --json     # result as JSON on stdout
    .venv/bin/python benchmarks/bench_persistent.py --profile  # (b) once, node + publisher
                                                               # under cProfile (--profile c:
                                                               # (c) once)

Measures, in one run, with every role in its own process (multiprocessing "spawn"), all on
127.0.0.1, 100-byte payloads:

(a) reference: non-persistent ``Client.publish`` -> node -> ``Client.subscribe`` callback,
    flood, exactly as ``bench_node.py`` (b) (its roles and node are reused).
(b) persistent publishes (``publish(..., persistent=True)``, a Future of the node's
    confirmation) through one node whose retention rule ``PERSIST.>`` covers the topic, so
    every message is written to the node's SQLite store before it is confirmed. The
    publisher keeps a sliding window of W outstanding Futures (``--window``, default 1,000):
    once W are outstanding it waits for the oldest. Confirmed msg/s = N / (last confirmation
    - first publish). Target: >= 20,000 msg/s. Checked against the node: every confirmation
    carries a retention sequence, and the store's row count grew by N.
(c) the same with a durable subscriber attached (``subscribe(..., durable=NAME,
    credit=1000)``) in its own process: confirmed msg/s, delivered msg/s (N / (last
    delivery - first publish)), and the exact count: N published, N delivered (each index
    once), none redelivered, nothing left stored afterwards.
(d) a durable subscriber away, then returning: the subscription is created and detached,
    N messages are published persistently (confirmed), the node reports N stored; a new
    subscriber process attaches and the time from its ``subscribe()`` call to the N-th
    delivery is the drain time.

For each run the script prints CPU time per message of every process (from /proc) and of
the node's own thread, and the machine's load (steal, cores used by other processes).
Throughput runs (a)-(c) are repeated (``--repeat``, default 3) and the median counts.

Every socket is on 127.0.0.1. Every child process is stopped by its PID in a ``finally``
block (SIGTERM/SIGINT/the overall deadline included); each child also exits on its own if
its parent goes away or its deadline passes.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing as mp
import os
import pstats
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers
from _common import snapshot_sources

log = bn.log
HOST = bn.HOST
PAYLOAD_SIZE = bn.PAYLOAD_SIZE
RETAIN_PATTERN = "PERSIST.>"
WARM_TOPIC = "PERSIST.WARM"
TARGET_CONFIRMED = 20_000.0
DEFAULT_WINDOW = 1_000
DEFAULT_CREDIT = 1_000
WARMUP = 2_000  # persistent messages before a measured run (connections, caches, SQLite)
CONFIRM_TIMEOUT_S = 30.0  # one Future; the run fails beyond it
IDLE_END_S = 10.0  # a durable subscriber gives up this long after its last delivery
RUN_DEADLINE_S = 900  # the whole benchmark (SIGALRM in the parent)


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

    threading.Thread(target=watch, daemon=True, name="bench-guard").start()


class _ClientEvents(logging.Handler):
    """Counts a client's "lost node" warnings (heartbeat timeout: the client drops its
    connections to the node and reconnects) and prints every warning with the role."""

    def __init__(self, role: str) -> None:
        super().__init__(logging.WARNING)
        self.role = role
        self.lost_node = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text.startswith("lost node"):
            self.lost_node += 1
        if record.exc_info:  # e.g. "client thread crashed": the traceback says where
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        print(f"  [{self.role} pid {os.getpid()}] {text}", file=sys.stderr, flush=True)


def _watch_client(role: str) -> _ClientEvents:
    handler = _ClientEvents(role)
    logging.getLogger("zbroker.client").addHandler(handler)
    return handler


def pnode_main(
    q: Any, data_dir: str, stop: Any, deadline_s: float, profile_out: str | None
) -> None:
    """A node (``zbroker.Broker``, port 0) retaining ``PERSIST.>`` until ``stop`` is set."""
    _guard(deadline_s)
    import cProfile

    from zbroker import Broker
    from zbroker.config import RetainRule

    try:
        broker = Broker(
            host=HOST, port=0, data_dir=Path(data_dir), retain=(RetainRule(RETAIN_PATTERN),)
        ).start()
    except Exception as exc:
        q.put(("node", {"error": f"{type(exc).__name__}: {exc}"}))
        return
    prof = cProfile.Profile() if profile_out else None
    try:
        if prof is not None:
            broker.call(lambda node: prof.enable())  # the node thread only
        q.put(
            (
                "node",
                {
                    "endpoint": broker.endpoint,
                    "node_tid": broker.call(lambda node: threading.get_native_id()),
                    "store": str(Path(data_dir) / "store.sqlite3"),
                },
            )
        )
        while not stop.wait(0.2):
            pass
        if prof is not None and profile_out:
            broker.call(lambda node: prof.disable())
            prof.dump_stats(profile_out)
    finally:
        broker.stop()


def _payload(i: int) -> bytes:
    """The message index (8 bytes, little-endian), zero padding to PAYLOAD_SIZE."""
    return i.to_bytes(8, "little") + bytes(PAYLOAD_SIZE - 8)


def _windowed(client: Any, topic: str, n: int, window: int, stats: dict[str, Any]) -> None:
    """Publish ``n`` persistent messages keeping at most ``window`` Futures outstanding."""
    publish = client.publish
    win: collections.deque[Any] = collections.deque()
    pop = win.popleft

    def settle(fut: Any) -> None:
        try:
            reply = fut.result(CONFIRM_TIMEOUT_S)
        except Exception as exc:
            key = type(exc).__name__
            stats["errors"][key] = stats["errors"].get(key, 0) + 1
            return
        stats["confirmed"] += 1
        if reply.get("retained_seq") is None:
            stats["not_retained"] += 1
        seq = reply["id"][2]
        if seq <= stats["last_seq"]:
            stats["out_of_order"] += 1
        stats["last_seq"] = seq

    for i in range(n):
        win.append(publish(topic, _payload(i), persistent=True))
        if len(win) >= window:
            settle(pop())
    while win:
        settle(pop())


def ppub_main(
    q: Any,
    endpoint: str,
    tag: str,
    topic: str,
    n: int,
    window: int,
    warmed: Any,
    go: Any,
    started: Any,
    deadline_s: float,
    profile_out: str | None,
) -> None:
    """Persistent publisher: a warm-up (then ``warmed`` is set), then, once ``go`` is set,
    ``n`` messages with a window of Futures."""
    _guard(deadline_s)
    import cProfile

    from zbroker import Client

    events = _watch_client(f"publisher {tag}")
    client = Client(endpoint)
    try:
        warm: dict[str, Any] = {
            "confirmed": 0,
            "not_retained": 0,
            "out_of_order": 0,
            "last_seq": 0,
            "errors": {},
        }
        _windowed(client, WARM_TOPIC, WARMUP, window, warm)
        if warm["confirmed"] != WARMUP:
            q.put((tag, {"error": f"warm-up: {warm}"}))
            return
        warmed.set()
        if not go.wait(120):
            q.put((tag, {"error": "never told to start"}))
            return
        stats: dict[str, Any] = {
            "confirmed": 0,
            "not_retained": 0,
            "out_of_order": 0,
            "last_seq": 0,
            "errors": {},
        }
        prof = cProfile.Profile() if profile_out else None
        started.set()
        if prof is not None:
            prof.enable()
        cpu0, th0 = time.process_time(), time.thread_time_ns()
        t0 = time.perf_counter_ns()
        _windowed(client, topic, n, window, stats)
        t1 = time.perf_counter_ns()
        cpu1, th1 = time.process_time(), time.thread_time_ns()
        if prof is not None and profile_out:
            prof.disable()
            prof.dump_stats(profile_out)
        q.put(
            (
                tag,
                {
                    "sent": n,
                    "t_start": t0,
                    "t_end": t1,
                    "cpu_s": cpu1 - cpu0,
                    "thread_cpu_s": (th1 - th0) / 1e9,
                    "lost_node": events.lost_node,
                    **{k: v for k, v in stats.items() if k != "last_seq"},
                },
            )
        )
    finally:
        client.close()


def dsub_main(
    q: Any,
    endpoint: str,
    tag: str,
    name: str,
    pattern: str,
    n: int,
    credit: int,
    ready: Any,
    pub_done: Any,
    deadline_s: float,
) -> None:
    """Durable subscriber: ``n`` = 0 creates the subscription and detaches at once;
    otherwise counts deliveries (by the index in the payload) until all ``n`` arrived."""
    _guard(deadline_s)
    from zbroker import Client, Message

    events = _watch_client(f"durable subscriber {tag}")
    client = Client(endpoint)
    seen = bytearray(max(1, n))
    st = {
        "delivered": 0,
        "unique": 0,
        "duplicates": 0,
        "redelivered": 0,
        "out_of_range": 0,
        "out_of_order": 0,
        "last_index": -1,
        "t_first": 0,
        "t_last": 0,
    }
    all_in = threading.Event()
    perf = time.perf_counter_ns

    def on_msg(msg: Message) -> None:
        now = perf()
        st["delivered"] += 1
        if st["delivered"] == 1:
            st["t_first"] = now
        st["t_last"] = now
        if msg.redelivered:
            st["redelivered"] += 1
        i = int.from_bytes(msg.payload[:8], "little")
        if not 0 <= i < n:
            st["out_of_range"] += 1
            return
        if i < st["last_index"]:
            st["out_of_order"] += 1
        st["last_index"] = i
        if seen[i]:
            st["duplicates"] += 1
        else:
            seen[i] = 1
            st["unique"] += 1
            if st["unique"] == n:
                all_in.set()

    try:
        cpu0 = time.process_time()
        t_sub = perf()
        sub = client.subscribe(pattern, on_msg, durable=name, credit=credit)
        t_subscribed = perf()
        info = dict(client.durable_info.get(name, {}))
        if n == 0:
            sub.unsubscribe()  # detach: the node keeps storing for the next attach
            q.put((tag, {"info": info}))
            return
        ready.set()
        seen_count, seen_at = -1, time.monotonic()
        end = time.monotonic() + deadline_s - 30
        while not all_in.wait(0.05):
            now = time.monotonic()
            if st["delivered"] != seen_count:
                seen_count, seen_at = st["delivered"], now
            elif pub_done.is_set() and now - seen_at > IDLE_END_S:
                break
            if now > end:
                break
        cpu1 = time.process_time()
        time.sleep(0.2)  # the last acknowledgements leave before the close
        q.put(
            (
                tag,
                {
                    **st,
                    "t_subscribe": t_sub,
                    "t_subscribed": t_subscribed,
                    "cpu_s": cpu1 - cpu0,
                    "missed": client.missed,
                    "info": info,
                    "lost_node": events.lost_node,
                    # False: the client thread died (deliveries and acks stopped)
                    "client_thread_alive": client._thread.is_alive(),
                },
            )
        )
    finally:
        client.close()


# -- parent -----------------------------------------------------------------------------------


def _start_pnode(ctx: Any, tmp: str, stop: Any, profile_dir: str | None) -> dict[str, Any]:
    prof = os.path.join(profile_dir, "node.prof") if profile_dir else None
    for attempt in range(1, 4):
        q = ctx.Queue()
        data_dir = os.path.join(tmp, f"pnode{attempt}")
        proc = bn._start(ctx, pnode_main, q, data_dir, stop, RUN_DEADLINE_S + 60, prof)
        info = bn._Inbox(q).get("node", 30)
        if "error" not in info:
            return {"proc": proc, "pid": proc.pid, **info}
        log(f"  node start failed (attempt {attempt}/3): {info['error']}")
        bn._stop_procs([proc], 5)
    raise RuntimeError("the persistent node did not start in 3 attempts")


def _counters(client: Any, name: str | None = None) -> dict[str, Any]:
    st = client.status()
    c = st["counters"]
    out = {
        "received": c["received"],
        "delivered": c["delivered"],
        "durable_stored": c.get("durable_stored", 0),
        "durable_delivered": c.get("durable_delivered", 0),
        "dropped": dict(c["dropped"]),
        "retained_rows": st["store"]["retained_rows"] if st.get("store") else 0,
        "store_last_seq": st["store"]["last_seq"] if st.get("store") else 0,
    }
    if name is not None:
        out["durable"] = next((d for d in st.get("durables", []) if d["name"] == name), None)
    return out


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out = {
        k: after[k] - before[k]
        for k in (
            "received",
            "delivered",
            "durable_stored",
            "durable_delivered",
            "retained_rows",
            "store_last_seq",
        )
    }
    out["dropped"] = {
        k: v - before["dropped"].get(k, 0)
        for k, v in after["dropped"].items()
        if v - before["dropped"].get(k, 0)
    }
    return out


class _Meter:
    """CPU of the given processes and of the node thread, and the machine's load."""

    def __init__(self, pids: dict[str, int], node: dict[str, Any]) -> None:
        self.pids, self.node = pids, node
        self.ticks0 = bn._cpu_ticks()
        self.wall0 = time.monotonic()
        self.cpu0 = {k: bn._cpu_seconds(p) for k, p in pids.items()}
        self.th0 = bn._thread_cpu_seconds(node["pid"], node["node_tid"])

    def stop(self, n: int) -> dict[str, Any]:
        wall = time.monotonic() - self.wall0
        cpu = {k: bn._cpu_seconds(p) - self.cpu0[k] for k, p in self.pids.items()}
        th = bn._thread_cpu_seconds(self.node["pid"], self.node["node_tid"]) - self.th0
        load = bn._machine_load(self.ticks0, bn._cpu_ticks(), wall, sum(cpu.values()))
        per = {k: 1e6 * v / max(1, n) for k, v in cpu.items()}
        per["total"] = sum(per.values())
        return {
            "cpu_us_per_msg": per,
            "node_thread_us_per_msg": 1e6 * th / max(1, n),
            "node_cpu_pct": 100 * cpu.get("node", 0.0) / wall if wall > 0 else 0.0,
            **load,
        }


def _wait_warm(warmed: Any, inbox: Any) -> None:
    """Wait for a publisher's warm-up (or raise the error it reported)."""
    end = time.monotonic() + 120
    while not warmed.wait(0.2):
        err = inbox.stash.get("pub")
        if err is None:
            try:
                tag, value = inbox.q.get_nowait()
                inbox.stash[tag] = value
                err = inbox.stash.get("pub")
            except queue.Empty:
                pass
        if err is not None and "error" in err:
            raise RuntimeError(f"persistent publisher: {err['error']}")
        if time.monotonic() > end:
            raise TimeoutError("persistent publisher: no warm-up within 120 s")


def run_persistent(
    ctx: Any,
    node: dict[str, Any],
    status: Any,
    tag: str,
    n: int,
    window: int,
    credit: int,
    durable: bool,
    profile_dir: str | None = None,
) -> dict[str, Any]:
    """(b) without a durable subscriber, (c) with one attached (fresh name and topic)."""
    topic = f"PERSIST.{tag}.DATA"
    name = f"bench-{tag.lower()}"
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    warmed, go, started, ready, pub_done = (ctx.Event() for _ in range(5))
    procs = []
    deadline = RUN_DEADLINE_S
    pprof = os.path.join(profile_dir, "publisher.prof") if profile_dir else None
    try:
        pub = bn._start(
            ctx,
            ppub_main,
            q,
            node["endpoint"],
            "pub",
            topic,
            n,
            window,
            warmed,
            go,
            started,
            deadline,
            pprof,
        )
        procs.append(pub)
        pids = {"pub": pub.pid, "node": node["pid"]}
        if durable:
            sub = bn._start(
                ctx,
                dsub_main,
                q,
                node["endpoint"],
                "sub",
                name,
                f"PERSIST.{tag}.>",
                n,
                credit,
                ready,
                pub_done,
                deadline,
            )
            procs.append(sub)
            pids["sub"] = sub.pid
            if not ready.wait(60):
                raise TimeoutError("durable subscriber not ready")
        _wait_warm(warmed, inbox)
        before = _counters(status, name if durable else None)
        go.set()
        if not started.wait(120):
            raise TimeoutError("persistent publisher never started")
        meter = _Meter(pids, node)
        pub_res = inbox.get("pub", deadline)
        if "error" in pub_res:
            raise RuntimeError(f"persistent publisher: {pub_res['error']}")
        pub_done.set()
        sub_res = inbox.get("sub", deadline) if durable else None
        load = meter.stop(n)
    finally:
        go.set()
        pub_done.set()
        bn._stop_procs(procs)
    after = _counters(status, name if durable else None)
    confirm_s = (pub_res["t_end"] - pub_res["t_start"]) / 1e9
    res: dict[str, Any] = {
        "published": n,
        "window": window,
        "confirmed": pub_res["confirmed"],
        "errors": pub_res["errors"],
        "not_retained": pub_res["not_retained"],
        "confirm_out_of_order": pub_res["out_of_order"],
        "confirm_s": confirm_s,
        "confirmed_rate": pub_res["confirmed"] / confirm_s if confirm_s > 0 else 0.0,
        "pub_thread_us_per_msg": 1e6 * pub_res["thread_cpu_s"] / max(1, n),
        "pub_lost_node": pub_res["lost_node"],
        "node": _delta(before, after),
        **load,
    }
    if durable and sub_res is not None:
        window_s = (sub_res["t_last"] - pub_res["t_start"]) / 1e9 if sub_res["t_last"] else 0.0
        res.update(
            credit=credit,
            delivered=sub_res["delivered"],
            unique=sub_res["unique"],
            duplicates=sub_res["duplicates"],
            redelivered=sub_res["redelivered"],
            out_of_order=sub_res["out_of_order"],
            out_of_range=sub_res["out_of_range"],
            lost=n - sub_res["unique"],
            sub_lost_node=sub_res["lost_node"],
            sub_thread_alive=sub_res["client_thread_alive"],
            delivered_s=window_s,
            delivered_rate=sub_res["delivered"] / window_s if window_s > 0 else 0.0,
            left_stored=(after.get("durable") or {}).get("stored"),
        )
        res["deleted_after"] = status.delete_durable(name)
    return res


def run_drain(
    ctx: Any, node: dict[str, Any], status: Any, n: int, window: int, credit: int
) -> dict[str, Any]:
    """(d): create + detach a durable subscription, publish n persistently, then time a
    returning subscriber's drain of the n stored messages."""
    name, pattern, topic = "bench-d", "PERSIST.D.>", "PERSIST.D.DATA"
    deadline = RUN_DEADLINE_S
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    warmed, go, started, ready, pub_done = (ctx.Event() for _ in range(5))
    procs = []
    try:
        creator = bn._start(
            ctx,
            dsub_main,
            q,
            node["endpoint"],
            "create",
            name,
            pattern,
            0,
            credit,
            ready,
            pub_done,
            deadline,
        )
        procs.append(creator)
        created = inbox.get("create", 60)
        bn._stop_procs([creator])
        away = _counters(status, name)["durable"]
        log(f"  durable {name!r} created and detached: {away}")
        pub = bn._start(
            ctx,
            ppub_main,
            q,
            node["endpoint"],
            "pub",
            topic,
            n,
            window,
            warmed,
            go,
            started,
            deadline,
            None,
        )
        procs.append(pub)
        _wait_warm(warmed, inbox)
        go.set()
        pub_res = inbox.get("pub", deadline)
        if "error" in pub_res:
            raise RuntimeError(f"persistent publisher: {pub_res['error']}")
        bn._stop_procs([pub])
        stored = _counters(status, name)
        log(f"  {pub_res['confirmed']:,} confirmed; node reports {stored['durable']}")
        pub_done.set()
        sub = bn._start(
            ctx,
            dsub_main,
            q,
            node["endpoint"],
            "sub",
            name,
            pattern,
            n,
            credit,
            ready,
            pub_done,
            deadline,
        )
        procs.append(sub)
        meter = _Meter({"node": node["pid"]}, node)
        sub_res = inbox.get("sub", deadline)
        load = meter.stop(n)
        # the subscriber's own CPU from its subscribe() call on (its start-up excluded)
        per = load["cpu_us_per_msg"]
        per["sub"] = 1e6 * sub_res["cpu_s"] / max(1, n)
        per["total"] = per["node"] + per["sub"]
    finally:
        go.set()
        pub_done.set()
        bn._stop_procs(procs)
    after = _counters(status, name)
    confirm_s = (pub_res["t_end"] - pub_res["t_start"]) / 1e9
    drain_s = (sub_res["t_last"] - sub_res["t_subscribe"]) / 1e9 if sub_res["t_last"] else 0.0
    res = {
        "published": n,
        "credit": credit,
        "created": created["info"],
        "confirmed": pub_res["confirmed"],
        "errors": pub_res["errors"],
        "confirmed_rate_detached": pub_res["confirmed"] / confirm_s if confirm_s > 0 else 0.0,
        "stored_before_return": (stored.get("durable") or {}).get("stored"),
        "open_reply": sub_res["info"],
        "delivered": sub_res["delivered"],
        "unique": sub_res["unique"],
        "duplicates": sub_res["duplicates"],
        "redelivered": sub_res["redelivered"],
        "out_of_order": sub_res["out_of_order"],
        "lost": n - sub_res["unique"],
        "sub_lost_node": sub_res["lost_node"],
        "sub_thread_alive": sub_res["client_thread_alive"],
        "pub_lost_node": pub_res["lost_node"],
        "subscribe_call_s": (sub_res["t_subscribed"] - sub_res["t_subscribe"]) / 1e9,
        "first_delivery_s": (sub_res["t_first"] - sub_res["t_subscribe"]) / 1e9
        if sub_res["t_first"]
        else None,
        "drain_s": drain_s,
        "drain_rate": sub_res["delivered"] / drain_s if drain_s > 0 else 0.0,
        "left_stored": (after.get("durable") or {}).get("stored"),
        **load,
    }
    res["deleted_after"] = status.delete_durable(name)
    return res


def _median(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def _cpu_text(r: dict[str, Any]) -> str:
    u = r["cpu_us_per_msg"]
    parts = " + ".join(f"{k} {v:.1f}" for k, v in u.items() if k != "total")
    return f"{parts} = {u['total']:.1f} us/msg (node thread {r['node_thread_us_per_msg']:.1f})"


def _load_text(r: dict[str, Any]) -> str:
    return (
        f"machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )


def _print_persistent(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: confirmed {r['confirmed']:,}/{r['published']:,} in {r['confirm_s']:.3f} s "
        f"-> {bn._fmt_rate(r['confirmed_rate'])} (window {r['window']:,}); errors "
        f"{r['errors'] or 0}, confirmations without a retention seq {r['not_retained']}; "
        f"the publisher's client lost its node {r['pub_lost_node']} times"
    )
    nd = r["node"]
    log(
        f"    node: received {nd['received']:,}, retained rows +{nd['retained_rows']:,}, "
        f"durable stored {nd['durable_stored']:,}, durable delivered "
        f"{nd['durable_delivered']:,}, dropped {nd['dropped'] or 0}"
    )
    if "delivered" in r:
        log(
            f"    durable subscriber (credit {r['credit']:,}): delivered {r['delivered']:,} "
            f"({r['unique']:,} distinct, not delivered {r['lost']:,}, duplicates "
            f"{r['duplicates']:,}, redelivered {r['redelivered']:,}, out of order "
            f"{r['out_of_order']:,}) in {r['delivered_s']:.3f} s -> "
            f"{bn._fmt_rate(r['delivered_rate'])}; left stored {r['left_stored']}, deleted "
            f"afterwards {r['deleted_after']}; its client lost the node {r['sub_lost_node']} "
            f"times, client thread alive at the end: {r['sub_thread_alive']}"
        )
    log(f"    CPU: {_cpu_text(r)}; publisher thread {r['pub_thread_us_per_msg']:.1f} us/msg")
    log(f"    {_load_text(r)}")


def _print_drain(r: dict[str, Any]) -> None:
    log(
        f"  (d) detached: {r['confirmed']:,}/{r['published']:,} confirmed at "
        f"{bn._fmt_rate(r['confirmed_rate_detached'])}; stored before the return "
        f"{r['stored_before_return']}"
    )
    log(
        f"    returning subscriber (credit {r['credit']:,}): subscribe() "
        f"{r['subscribe_call_s']:.3f} s, first delivery after "
        f"{r['first_delivery_s'] or float('nan'):.3f} s, "
        f"{r['delivered']:,} delivered ({r['unique']:,} distinct, not delivered {r['lost']:,}, "
        f"duplicates {r['duplicates']:,}, redelivered {r['redelivered']:,}) in "
        f"{r['drain_s']:.3f} s -> {bn._fmt_rate(r['drain_rate'])}; left stored "
        f"{r['left_stored']}; its client lost the node {r['sub_lost_node']} times, client "
        f"thread alive at the end: {r['sub_thread_alive']}"
    )
    log(f"    CPU: {_cpu_text(r)}")
    log(f"    {_load_text(r)}")


def _print_profiles(profile_dir: str, top: int) -> None:
    for role in ("node", "publisher"):
        path = os.path.join(profile_dir, f"{role}.prof")
        if not os.path.exists(path):
            log(f"(no profile for {role})")
            continue
        print(f"\n==== cProfile: {role} (sorted by tottime, top {top}) ====")
        st = pstats.Stats(path, stream=sys.stdout)
        st.strip_dirs().sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", "-n", type=int, default=100_000, help="messages per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs of (a), (b), (c); median counts")
    ap.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help="outstanding persistent publishes (Futures) per publisher",
    )
    ap.add_argument("--credit", type=int, default=DEFAULT_CREDIT, help="durable subscriber credit")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10,000 messages, 1 repeat")
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument(
        "--profile",
        nargs="?",
        const="b",
        choices=("b", "c"),
        default=None,
        help="only (b) (or --profile c: only (c)), once, with the node thread and "
        "the publisher's main thread under cProfile",
    )
    ap.add_argument("--profile-top", type=int, default=30)
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    args = ap.parse_args(argv)
    if not args.no_snapshot:
        snapshot_sources()
    n = 10_000 if args.quick and args.messages == 100_000 else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"benchmark exceeded {RUN_DEADLINE_S} s")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)
    signal.alarm(RUN_DEADLINE_S)

    info = bn.machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    result: dict[str, Any] = {
        "machine": info,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "messages": n,
        "repeat": repeat,
        "window": args.window,
        "credit": args.credit,
        "payload_bytes": PAYLOAD_SIZE,
    }
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-bench-persist-")
    ref_stop, stop = ctx.Event(), ctx.Event()
    status = ref_status = None
    t_begin = time.monotonic()
    ticks_begin = bn._cpu_ticks()
    try:
        log(
            f"zbroker persistent benchmark: {n:,} messages of {PAYLOAD_SIZE} B x {repeat}, "
            f"window {args.window:,}, credit {args.credit:,}"
        )
        log(f"  {info}")
        from zbroker import Client

        if args.profile:
            durable = args.profile == "c"
            node = _start_pnode(ctx, tmp, stop, tmp)
            status = Client(node["endpoint"])
            log(f"node pid {node['pid']} at {node['endpoint']}; ({args.profile}) under cProfile")
            tag = "C" if durable else "B"
            r = run_persistent(ctx, node, status, tag, n, args.window, args.credit, durable, tmp)
            _print_persistent(f"({args.profile}) profiled: slower than normal", r)
            status.close()
            status = None
            stop.set()
            bn._stop_procs([node["proc"]])
            _print_profiles(tmp, args.profile_top)
            return 0

        ref_node, ref_ep, ref_conn = bn._start_node(ctx, tmp, ref_stop, False)
        ref_status = Client(ref_ep)
        log(f"reference node pid {ref_node.pid} at {ref_ep}")
        result["a_ref"] = []
        for i in range(repeat):
            log(f"(a) non-persistent publish -> node -> subscriber, flood, run {i + 1}/{repeat}")
            result["a_ref"].append(
                bn.run_zb(ctx, ref_ep, ref_node.pid, ref_conn, ref_status, "flood", n)
            )
            bn._print_run("zbroker", result["a_ref"][-1])
        ref_status.close()
        ref_status = None
        ref_stop.set()
        bn._stop_procs([ref_node])

        node = _start_pnode(ctx, tmp, stop, None)
        status = Client(node["endpoint"])
        log(f"persistent node pid {node['pid']} at {node['endpoint']}, retain {RETAIN_PATTERN}")
        result["b_persistent"] = []
        for i in range(repeat):
            log(f"(b) persistent publish, window {args.window:,}, run {i + 1}/{repeat} ...")
            r = run_persistent(ctx, node, status, f"B{i + 1}", n, args.window, args.credit, False)
            result["b_persistent"].append(r)
            _print_persistent("(b)", r)
        result["c_durable"] = []
        for i in range(repeat):
            log(f"(c) persistent publish + durable subscriber attached, run {i + 1}/{repeat} ...")
            r = run_persistent(ctx, node, status, f"C{i + 1}", n, args.window, args.credit, True)
            result["c_durable"].append(r)
            _print_persistent("(c)", r)
        log(f"(d) durable subscriber away, {n:,} messages stored, then returning ...")
        result["d_drain"] = run_drain(ctx, node, status, n, args.window, args.credit)
        _print_drain(result["d_drain"])
        st = status.status()
        result["node_final"] = {
            "counters": st["counters"],
            "store": st["store"],
            "durables": st["durables"],
        }
        try:
            result["store_file_bytes"] = sum(
                os.path.getsize(p) for p in Path(node["store"]).parent.glob("store.sqlite3*")
            )
        except OSError:
            result["store_file_bytes"] = None
    finally:
        signal.alarm(0)
        for c in (status, ref_status):
            if c is not None:
                c.close()
        ref_stop.set()
        stop.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)

    a = bn._median_run(result["a_ref"])
    b = _median(result["b_persistent"], "confirmed_rate")
    c = _median(result["c_durable"], "delivered_rate")
    d = result["d_drain"]
    c_runs = result["c_durable"]
    summary = {
        "a_rate": a["delivered_rate"],
        "a_rates": [r["delivered_rate"] for r in result["a_ref"]],
        "a_lost": sum(r["lost"] for r in result["a_ref"]),
        "a_cpu_us_per_msg": a["cpu_us_per_msg"],
        "b_rate": b["confirmed_rate"],
        "b_rates": [r["confirmed_rate"] for r in result["b_persistent"]],
        "b_unconfirmed": sum(r["published"] - r["confirmed"] for r in result["b_persistent"]),
        "b_not_retained": sum(r["not_retained"] for r in result["b_persistent"]),
        "b_retained_rows": [r["node"]["retained_rows"] for r in result["b_persistent"]],
        "b_cpu_us_per_msg": b["cpu_us_per_msg"],
        "b_node_thread_us_per_msg": b["node_thread_us_per_msg"],
        "b_pub_thread_us_per_msg": b["pub_thread_us_per_msg"],
        "b_node_cpu_pct": b["node_cpu_pct"],
        "b_other_cores": b["other_cores"],
        "b_steal_pct": b["steal_pct"],
        "c_confirmed_rate": c["confirmed_rate"],
        "c_confirmed_rates": [r["confirmed_rate"] for r in c_runs],
        "c_rate": c["delivered_rate"],
        "c_rates": [r["delivered_rate"] for r in c_runs],
        "c_published": sum(r["published"] for r in c_runs),
        "c_confirmed": sum(r["confirmed"] for r in c_runs),
        "c_delivered": sum(r["delivered"] for r in c_runs),
        "c_unique": sum(r["unique"] for r in c_runs),
        "c_lost": sum(r["lost"] for r in c_runs),
        "c_duplicates": sum(r["duplicates"] for r in c_runs),
        "c_redelivered": sum(r["redelivered"] for r in c_runs),
        "c_left_stored": [r["left_stored"] for r in c_runs],
        "c_cpu_us_per_msg": c["cpu_us_per_msg"],
        "c_node_thread_us_per_msg": c["node_thread_us_per_msg"],
        "c_other_cores": c["other_cores"],
        "d_stored": d["stored_before_return"],
        "d_drain_s": d["drain_s"],
        "d_drain_rate": d["drain_rate"],
        "d_first_delivery_s": d["first_delivery_s"],
        "d_delivered": d["delivered"],
        "d_lost": d["lost"],
        "d_left_stored": d["left_stored"],
        "d_sub_thread_alive": d["sub_thread_alive"],
        "lost_node_events": sum(r["pub_lost_node"] for r in result["b_persistent"])
        + sum(r["pub_lost_node"] + r["sub_lost_node"] for r in c_runs)
        + d["pub_lost_node"]
        + d["sub_lost_node"],
        "dead_client_threads": sum(1 for r in c_runs if not r["sub_thread_alive"])
        + (0 if d["sub_thread_alive"] else 1),
        "d_duplicates": d["duplicates"],
        "d_redelivered": d["redelivered"],
        "d_confirmed_rate_detached": d["confirmed_rate_detached"],
        "d_cpu_us_per_msg": d["cpu_us_per_msg"],
        "d_node_thread_us_per_msg": d["node_thread_us_per_msg"],
        "d_other_cores": d["other_cores"],
        **{
            k: v
            for k, v in bn._machine_load(
                ticks_begin, bn._cpu_ticks(), time.monotonic() - t_begin, 0.0
            ).items()
            if k != "other_cores"
        },
        "elapsed_s": time.monotonic() - t_begin,
    }
    c_exact = (
        summary["c_unique"] == summary["c_published"]
        and summary["c_delivered"] == summary["c_published"]
        and summary["c_redelivered"] == 0
    )
    d_exact = d["unique"] == n and d["delivered"] == n and d["redelivered"] == 0
    summary["pass"] = {
        "b_rate": summary["b_rate"] >= TARGET_CONFIRMED
        and summary["b_unconfirmed"] == 0
        and summary["b_not_retained"] == 0,
        "c_exact": c_exact,
        "d_exact": d_exact,
    }
    result["summary"] = summary
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0


def _rates(rates: list[float]) -> str:
    return "runs: " + ", ".join(f"{r:,.0f}" for r in rates)


def _cpu_line(u: dict[str, float], thread: float) -> str:
    parts = " + ".join(f"{v:.1f}" for k, v in u.items() if k != "total")
    return f"{parts} = {u['total']:.1f} (node thread {thread:.1f})"


def print_summary(result: dict[str, Any]) -> None:
    s, m, ok = result["summary"], result["machine"], result["summary"]["pass"]
    n = result["messages"]
    v = bn._verdict
    rows = [
        ("(a) non-persistent, 1 node, delivered", bn._fmt_rate(s["a_rate"]), "reference", "-"),
        ("", _rates(s["a_rates"]), f"lost {s['a_lost']:,}", ""),
        (
            "    CPU us/msg pub + node + sub",
            " + ".join(f"{s['a_cpu_us_per_msg'][k]:.1f}" for k in ("pub", "mid", "sub"))
            + f" = {s['a_cpu_us_per_msg']['total']:.1f}",
            "",
            "",
        ),
        (
            "(b) persistent, retained, confirmed",
            bn._fmt_rate(s["b_rate"]),
            f">= {TARGET_CONFIRMED:,.0f} msg/s",
            v(ok["b_rate"]),
        ),
        ("", _rates(s["b_rates"]), f"window {result['window']:,}", ""),
        (
            "    unconfirmed / no retention seq",
            f"{s['b_unconfirmed']:,} / {s['b_not_retained']:,}",
            "0 / 0",
            "",
        ),
        (
            "    retained rows added per run",
            ", ".join(f"{x:,}" for x in s["b_retained_rows"]),
            f"{n:,} each",
            "",
        ),
        (
            "    CPU us/msg pub + node",
            _cpu_line(s["b_cpu_us_per_msg"], s["b_node_thread_us_per_msg"]),
            f"node {s['b_node_cpu_pct']:.0f}% of a core",
            "",
        ),
        (
            "    machine during median (b) run",
            f"steal {s['b_steal_pct']:.1f}%",
            f"other procs {s['b_other_cores']:.2f} cores",
            "",
        ),
        ("(c) + durable subscriber: confirmed", bn._fmt_rate(s["c_confirmed_rate"]), "-", "-"),
        ("", _rates(s["c_confirmed_rates"]), "", ""),
        ("    durable delivered", bn._fmt_rate(s["c_rate"]), f"credit {result['credit']:,}", "-"),
        ("", _rates(s["c_rates"]), "", ""),
        (
            "    published / delivered / distinct",
            f"{s['c_published']:,} / {s['c_delivered']:,} / {s['c_unique']:,}",
            "all equal",
            "",
        ),
        (
            "    not delivered / duplicates / redelivered",
            f"{s['c_lost']:,} / {s['c_duplicates']:,} / {s['c_redelivered']:,}",
            "0 / 0 / 0",
            v(ok["c_exact"]),
        ),
        ("    left stored after the runs", ", ".join(str(x) for x in s["c_left_stored"]), "0", ""),
        (
            "    CPU us/msg pub + node + sub",
            _cpu_line(s["c_cpu_us_per_msg"], s["c_node_thread_us_per_msg"]),
            f"other procs {s['c_other_cores']:.2f} cores",
            "",
        ),
        ("(d) stored while away", f"{s['d_stored']}", f"{n:,}", ""),
        ("    time to drain on return", f"{s['d_drain_s']:.3f} s", "-", "-"),
        ("    drain rate", bn._fmt_rate(s["d_drain_rate"]), "-", "-"),
        (
            "    first delivery after subscribe()",
            f"{s['d_first_delivery_s']:.3f} s" if s["d_first_delivery_s"] is not None else "none",
            "-",
            "",
        ),
        (
            "    delivered / not delivered / dup / redel.",
            f"{s['d_delivered']:,} / {s['d_lost']:,} / {s['d_duplicates']:,} / "
            f"{s['d_redelivered']:,}",
            f"{n:,} / 0 / 0 / 0",
            v(ok["d_exact"]),
        ),
        ("    left stored after the drain", f"{s['d_left_stored']}", "0", ""),
        (
            "    confirmed rate while detached",
            bn._fmt_rate(s["d_confirmed_rate_detached"]),
            "-",
            "",
        ),
        (
            "    CPU us/msg node + sub (drain)",
            _cpu_line(s["d_cpu_us_per_msg"], s["d_node_thread_us_per_msg"]),
            f"other procs {s['d_other_cores']:.2f} cores",
            "",
        ),
    ]
    rows.append(
        (
            "clients that lost their node",
            f"{s['lost_node_events']} times (heartbeat timeout)",
            "0 on a free machine",
            "",
        )
    )
    rows.append(("clients whose thread died", f"{s['dead_client_threads']}", "0", ""))
    print()
    print("=" * 126)
    print("zbroker persistent publish / durable subscription benchmark: summary")
    print(f"date      {m['date']}")
    print(
        f"machine   nproc {m['nproc']} (usable {m['cpus_usable']}), {m['cpu_model']}, "
        f"{m['os']}, load avg at start {m['loadavg_at_start']}, during the run: CPU steal "
        f"{s['steal_pct']:.1f}%, all processes kept {s['busy_cores']:.2f} of {m['nproc']} "
        "cores busy on average"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, "
        f"msgpack {m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} "
        f"({m.get('sources', 'checkout')})"
    )
    print(
        f"run       {result['command']}: {n:,} messages of {result['payload_bytes']} B per "
        f"run, median of {result['repeat']}; window {result['window']:,}, credit "
        f"{result['credit']:,}; store file at the end {result.get('store_file_bytes')} B; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 126)
    print(f"{'figure':<46}{'measured':<48}{'target':<26}result")
    for name, val, target, verdict in rows:
        print(f"{name:<46}{val:<48}{target:<26}{verdict}".rstrip())
    print("=" * 126)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
