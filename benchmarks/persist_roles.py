"""The child processes of ``bench_persistent.py``: the persistent node, the persistent
publisher (a window of confirmation Futures) and the durable subscriber.

Each ``*_main`` is a multiprocessing target (spawn): it starts a guard that ends the child
if its parent goes away or its deadline passes, and reports on the result queue under its
role's tag. ``zbroker`` is imported inside each target, never at module level: the parent
imports this module before it takes its copy of the sources
(``_common.snapshot_sources``).
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_node as bn
from bn_child import guard as _guard

HOST = bn.HOST
PAYLOAD_SIZE = bn.PAYLOAD_SIZE
RETAIN_PATTERN = "PERSIST.>"
WARM_TOPIC = "PERSIST.WARM"
WARMUP = 2_000  # persistent messages before a measured run (connections, caches, SQLite)
CONFIRM_TIMEOUT_S = 30.0  # one Future; the run fails beyond it
IDLE_END_S = 10.0  # a durable subscriber gives up this long after its last delivery


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


def _new_stats() -> dict[str, Any]:
    """What :func:`_windowed` counts."""
    return {"confirmed": 0, "not_retained": 0, "out_of_order": 0, "last_seq": 0, "errors": {}}


def _measured(
    client: Any, topic: str, n: int, window: int, started: Any, profile_out: str | None
) -> dict[str, Any]:
    """The measured run: its counts, its times and its CPU (the process's, the thread's)."""
    import cProfile

    stats = _new_stats()
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
    return {
        "sent": n,
        "t_start": t0,
        "t_end": t1,
        "cpu_s": cpu1 - cpu0,
        "thread_cpu_s": (th1 - th0) / 1e9,
        **{k: v for k, v in stats.items() if k != "last_seq"},
    }


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
    from zbroker import Client

    events = _watch_client(f"publisher {tag}")
    client = Client(endpoint)
    try:
        warm = _new_stats()
        _windowed(client, WARM_TOPIC, WARMUP, window, warm)
        if warm["confirmed"] != WARMUP:
            q.put((tag, {"error": f"warm-up: {warm}"}))
            return
        warmed.set()
        if not go.wait(120):
            q.put((tag, {"error": "never told to start"}))
            return
        res = _measured(client, topic, n, window, started, profile_out)
        q.put((tag, {**res, "lost_node": events.lost_node}))
    finally:
        client.close()


def _counter(n: int) -> tuple[dict[str, int], threading.Event, Callable[[Any], None]]:
    """A durable subscriber's count of ``n`` messages by the index in their payload: the
    counts, an event set once each has arrived, and the callback that counts."""
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

    def on_msg(msg: Any) -> None:
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

    return st, all_in, on_msg


def _await_all(
    all_in: threading.Event, st: dict[str, int], pub_done: Any, deadline_s: float
) -> None:
    """Until all arrived, or nothing came for ``IDLE_END_S`` once the publisher is done, or
    the deadline (less 30 s) passes."""
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
    from zbroker import Client

    events = _watch_client(f"durable subscriber {tag}")
    client = Client(endpoint)
    st, all_in, on_msg = _counter(n)
    perf = time.perf_counter_ns
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
        _await_all(all_in, st, pub_done, deadline_s)
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
