"""The zbroker roles of the benchmarks, each run in its own process: the node
(``zbroker.Broker``, tuned as ``zbroker start`` tunes it), the publisher
(``Client.publish``: warm-up, then a flood, a paced run or a latency run) and the
subscriber (``Client.subscribe`` with counting callbacks that also time each latency
message end to end and per hop)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from bn_child import _guard_child, _latency_payload, _pace
from bn_settings import (
    CHILD_DEADLINE_S,
    HOST,
    IDLE_END_S,
    LATENCY_LEAD_IN,
    PAYLOAD_SIZE,
    STOP_TOPIC,
    TOPIC,
    WARM_TOPIC,
    WARMUP,
)

if TYPE_CHECKING:
    import cProfile

    from zbroker import Message


def node_main(
    q: Any,
    data_dir: str,
    stop: Any,
    profile_out: str | None,
    conn: Any,
    broker_id: str | None = None,
    peers: tuple[str, ...] = (),
    gc_tuned: bool = True,
) -> None:
    """A node (``zbroker.Broker``, port 0) in this process until ``stop`` is set, with the
    process tuned as ``zbroker start`` tunes it (``zbroker.tune_gc`` and ``tune_malloc``;
    with ``gc_tuned=False`` as Python and glibc set it, for ``bench_gc.py``).

    ``broker_id`` and ``peers`` (duplex links this node dials, as ``zbroker start --peer``
    makes them) are used by the network benchmark; the single-node runs pass neither."""
    _guard_child()
    import zbroker.process
    from zbroker import Broker, tune_gc
    from zbroker.config import peer_link

    options: dict[str, Any] = {}
    if broker_id is not None:
        options["broker_id"] = broker_id
    if peers:
        options["links"] = tuple(peer_link(uri) for uri in peers)
    try:
        broker = Broker(host=HOST, port=0, data_dir=Path(data_dir), **options).start()
    except Exception as exc:  # reported to the parent, which retries with a new process
        q.put(("node", {"error": f"{type(exc).__name__}: {exc}"}))
        return
    if gc_tuned:  # what `zbroker start` does once its node is up
        tune_gc()
        # (looked up: bench_compare.py runs this file against trees from before it)
        getattr(zbroker.process, "tune_malloc", lambda: None)()
    try:
        _serve_node(broker, q, stop, conn, profile_out)
    finally:
        broker.stop()


def _serve_node(broker: Any, q: Any, stop: Any, conn: Any, profile_out: str | None) -> None:
    """Tell the parent where the started node is, then answer its thread-CPU queries until
    ``stop`` is set; with ``profile_out``, the node thread runs under cProfile meanwhile."""
    import cProfile

    prof = cProfile.Profile() if profile_out else None
    if prof is not None:
        broker.call(lambda node: prof.enable())  # profiles the node thread only
    q.put(
        (
            "node",
            {
                "endpoint": broker.endpoint,
                "ports": broker.ports,
                "id": broker.broker_id,
                # the node thread's kernel id: its CPU time can be read from /proc
                # without a call into a loop that may be busy for a while
                "node_tid": broker.call(lambda node: threading.get_native_id()),
            },
        )
    )
    while not stop.is_set():
        if conn.poll(0.1) and conn.recv() == "thread_cpu":
            # CPU time of the node's own (Python) thread: IO threads excluded
            conn.send(broker.call(lambda node: time.thread_time_ns()))
    if prof is not None and profile_out:
        broker.call(lambda node: prof.disable())
        prof.dump_stats(profile_out)


def _warm_up(publish: Callable[..., Any], warm_done: Any) -> int | None:
    """``WARMUP`` messages on the warm-up topic, then end-of-warm-up markers until the
    subscriber has one (some may be dropped): how many markers that took, or None when
    none arrived within 30 s."""
    warm = b"W" * PAYLOAD_SIZE
    for _ in range(WARMUP):
        publish(WARM_TOPIC, warm)
    end = time.monotonic() + 30
    markers = 0
    while True:
        publish(WARM_TOPIC, b"E")
        markers += 1
        if warm_done.wait(0.01):
            return markers
        if time.monotonic() > end:
            return None


def _publish_all(publish: Callable[..., Any], mode: str, n: int, rate: float, t0: int) -> None:
    """The measured messages: a flood, a paced run (the schedule checked every 64
    messages) or a latency run (every message on its slot, timestamped)."""
    if mode == "flood":
        payload = b"M" * PAYLOAD_SIZE
        for _ in range(n):
            publish(TOPIC, payload)
    elif mode == "paced":
        payload = b"M" * PAYLOAD_SIZE
        interval = 1e9 / rate
        for i in range(n):
            if not i & 63:
                _pace(i, t0, interval)
            publish(TOPIC, payload)
    else:  # latency
        interval = 1e9 / rate
        for i in range(n):
            _pace(i, t0, interval)
            publish(TOPIC, _latency_payload(i, PAYLOAD_SIZE))


def zb_pub(
    q: Any,
    endpoint: str,
    sub_ready: Any,
    warm_done: Any,
    started: Any,
    sub_done: Any,
    mode: str,
    n: int,
    rate: float,
    profile_out: str | None,
) -> None:
    _guard_child()
    import cProfile

    from zbroker import Client

    client = Client(endpoint)
    try:
        if not sub_ready.wait(30):
            q.put(("pub", {"error": "subscriber not ready"}))
            return
        publish = client.publish
        markers = _warm_up(publish, warm_done)
        if markers is None:
            q.put(("pub", {"error": "warm-up messages never arrived"}))
            return
        prof = cProfile.Profile() if profile_out else None
        started.set()
        if prof is not None:
            prof.enable()
        cpu0 = time.process_time()
        th0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        _publish_all(publish, mode, n, rate, t0)
        t1 = time.perf_counter_ns()
        th1 = time.thread_time_ns()
        cpu1 = time.process_time()
        if prof is not None and profile_out:
            prof.disable()
            prof.dump_stats(profile_out)
        q.put(
            (
                "pub",
                {
                    "sent": n,
                    "warm_sent": WARMUP + markers,
                    "t_start": t0,
                    "t_end": t1,
                    "cpu_s": cpu1 - cpu0,
                    "thread_cpu_s": (th1 - th0) / 1e9,
                },
            )
        )
        sub_done.wait(60)
    finally:
        client.close()


class _Tally(NamedTuple):
    """What the subscriber's callbacks record, in lists they update in place."""

    warm: list[int]  # warm-up messages received
    st: list[int]  # delivered, perf_counter_ns of the last delivery
    th: list[int]  # client thread CPU at the first and the last delivery
    lats: list[int]
    hop1: list[int]  # publish -> node receive stamp (msg.timestamp), CLOCK_REALTIME
    hop2: list[int]  # node receive stamp -> callback


class _Callbacks(NamedTuple):
    on_warm: Callable[[Message], None]
    on_stop: Callable[[Message], None]
    on_data: Callable[[Message], None]
    on_latency: Callable[[Message], None]


def _sub_callbacks(
    n: int,
    prof: cProfile.Profile | None,
    warm_done: Any,
    all_in: threading.Event,
    stopped: threading.Event,
) -> tuple[_Tally, _Callbacks]:
    """The subscriber's callbacks (closures over plain lists: a callback runs once per
    message, in the client thread) and the tally they keep."""
    warm = [0]
    st = [0, 0]
    th = [0, 0]
    lats: list[int] = []
    hop1: list[int] = []
    hop2: list[int] = []
    perf = time.perf_counter_ns
    wall = time.time_ns

    def on_warm(msg: Message) -> None:
        warm[0] += 1
        if msg.payload == b"E" and not warm_done.is_set():
            if prof is not None:
                prof.enable()  # runs in the client thread: profiles it from here on
            warm_done.set()

    def on_stop(msg: Message) -> None:
        if prof is not None:
            prof.disable()
        stopped.set()

    def on_data(msg: Message) -> None:
        st[0] += 1
        st[1] = perf()
        if st[0] == 1:
            th[0] = time.thread_time_ns()
        elif st[0] == n:
            th[1] = time.thread_time_ns()
            all_in.set()

    def on_latency(msg: Message) -> None:
        now = perf()
        now_wall = wall()
        st[0] += 1
        st[1] = now
        p = msg.payload
        if int.from_bytes(p[8:16], "little") >= LATENCY_LEAD_IN:
            lats.append(now - int.from_bytes(p[:8], "little"))
            node_ns = int(msg.timestamp * 1e9)
            hop1.append(node_ns - int.from_bytes(p[16:24], "little"))
            hop2.append(now_wall - node_ns)
        if st[0] == n:
            all_in.set()

    tally = _Tally(warm, st, th, lats, hop1, hop2)
    return tally, _Callbacks(on_warm, on_stop, on_data, on_latency)


def _wait_delivered(st: list[int], all_in: threading.Event, pub_done: Any) -> None:
    """Until every message arrived, nothing more arrived for ``IDLE_END_S`` after the
    publisher finished, or this child's deadline nears."""
    seen, seen_at = -1, time.monotonic()
    deadline = time.monotonic() + CHILD_DEADLINE_S - 30
    while not all_in.wait(0.05):
        now = time.monotonic()
        if st[0] != seen:
            seen, seen_at = st[0], now
        elif pub_done.is_set() and now - seen_at > IDLE_END_S:
            break
        if now > deadline:
            break


def zb_sub(
    q: Any,
    endpoint: str,
    sub_ready: Any,
    warm_done: Any,
    pub_done: Any,
    sub_done: Any,
    mode: str,
    n: int,
    profile_out: str | None,
) -> None:
    _guard_child()
    import cProfile

    from zbroker import Client

    client = Client(endpoint)
    prof = cProfile.Profile() if profile_out else None
    all_in = threading.Event()
    stopped = threading.Event()
    tally, cb = _sub_callbacks(n, prof, warm_done, all_in, stopped)
    st, th = tally.st, tally.th
    try:
        client.subscribe(WARM_TOPIC, cb.on_warm)
        client.subscribe(STOP_TOPIC, cb.on_stop)
        client.subscribe(TOPIC, cb.on_latency if mode == "latency" else cb.on_data)
        sub_ready.set()
        cpu0 = time.process_time()
        _wait_delivered(st, all_in, pub_done)
        cpu1 = time.process_time()
        sub_done.set()
        if prof is not None and profile_out:
            client.publish(STOP_TOPIC, b"")  # its callback disables the profiler in-thread
            stopped.wait(5)
            prof.dump_stats(profile_out)
        q.put(
            (
                "sub",
                {
                    "received": st[0],
                    "warm_received": tally.warm[0],
                    "t_last": st[1],
                    "cpu_s": cpu1 - cpu0,
                    "lat_ns": tally.lats,
                    "hop1_ns": tally.hop1,
                    "hop2_ns": tally.hop2,
                    "thread_cpu_s": (th[1] - th[0]) / 1e9 * n / (n - 1) if th[1] else None,
                },
            )
        )
    finally:
        client.close()
