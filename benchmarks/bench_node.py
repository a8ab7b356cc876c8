#!/usr/bin/env python3
"""Single-node benchmark (issue 2): raw pyzmq ceiling vs. one zbroker node.

    .venv/bin/python benchmarks/bench_node.py            # full run (about 40 s)
    .venv/bin/python benchmarks/bench_node.py --quick    # smoke run (about 10 s)
    .venv/bin/python benchmarks/bench_node.py --json     # machine-readable result on stdout
    .venv/bin/python benchmarks/bench_node.py --profile  # cProfile one zbroker flood run

Measures, in one run, with every role in its own process (multiprocessing "spawn"):

(a) raw pyzmq PUB -> SUB throughput, 100-byte payload, one frame per message: the ceiling.
(b) zbroker: publisher process (``Client.publish``) -> node process (``zbroker.Broker``)
    -> subscriber process (``Client.subscribe`` with a counting callback); delivered
    messages/s and lost = published - delivered. If a flood run loses messages, paced runs
    look for a rate with zero loss.
(c) b / a.
(d) one-hop latency publish() -> callback through the node at 2,000 msg/s
    (``--latency-rate``) for 5 s; the timestamp travels in the payload
    (``time.perf_counter_ns``: CLOCK_MONOTONIC on Linux, one clock for every process on
    the machine). A second stamp (CLOCK_REALTIME) splits it at the node's receive time
    (``Message.timestamp``) into publish->node and node->callback.

References (no target): raw pyzmq PUSH -> Python relay process (PULL -> PUB) -> SUB, the
same three-process topology as (b) with no per-message work in the middle, for throughput
and latency; raw PUB -> SUB latency at the same rate.

Throughput runs are repeated (``--repeat``, default 3) and the median counts. The window
is from the publisher's first measured send to the subscriber's last receive. For each
throughput run the script also prints CPU time per message of every process (all
threads, from /proc) and, for zbroker, of the Python threads alone (the node loop via
``Broker.call``, the client thread from inside the callback, the publishing thread), and
the machine's load during the run (steal, cores used by other processes): on a shared
2-core machine other processes change every figure.

Every socket binds/connects on 127.0.0.1 only. Every child process is stopped by its PID
in a ``finally`` block (SIGTERM/SIGINT/the overall deadline included); each child also
exits on its own if its parent goes away or a hard deadline passes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import platform
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

import msgpack
import zmq

HOST = "127.0.0.1"
#: payload bytes; bench_compare.py --size sets another for every process of a run
PAYLOAD_SIZE = int(os.environ.get("ZBROKER_BENCH_PAYLOAD", "100"))
TOPIC = "BENCH.DATA"
WARM_TOPIC = "BENCH.WARM"
STOP_TOPIC = "BENCH.STOP"
HWM = 100_000  # zbroker's DEFAULT_HWM, used for the raw sockets too
WARMUP = 1_000  # messages sent (on a separate topic / shape) before any measured run
LATENCY_LEAD_IN = 100  # first latency messages not counted (connection/cache warm-up)
IDLE_END_S = 3.0  # subscriber gives up this long after the publisher finished
CHILD_DEADLINE_S = 240.0  # a child process never lives longer than this
RUN_DEADLINE_S = 300  # the whole benchmark (SIGALRM in the parent)

TARGET_RATE = 150_000.0
TARGET_RATIO = 0.15
TARGET_P99_MS = 1.5
LATENCY_RATE = 2_000.0

_PROCS: list[mp.process.BaseProcess] = []


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


# -- helpers shared by the children ---------------------------------------------------------


def _guard_child() -> None:
    """Exit this child if the parent disappears or the hard deadline passes."""
    parent = os.getppid()
    end = time.monotonic() + CHILD_DEADLINE_S

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent or time.monotonic() > end:
                os._exit(3)

    threading.Thread(target=watch, daemon=True, name="bench-guard").start()


def _pace(i: int, t0: int, interval_ns: float) -> None:
    """Sleep until message ``i``'s slot (absolute schedule: no drift)."""
    delay = t0 + i * interval_ns - time.perf_counter_ns()
    if delay > 0:
        time.sleep(delay / 1e9)


def _latency_payload(seq: int, size: int) -> bytes:
    """perf_counter_ns (end-to-end clock), seq, time_ns (to split the hops at the node's
    CLOCK_REALTIME receive stamp), zero padding to ``size``."""
    wall = time.time_ns()
    return (
        time.perf_counter_ns().to_bytes(8, "little")
        + seq.to_bytes(8, "little")
        + wall.to_bytes(8, "little")
        + bytes(size - 24)
    )


# -- raw pyzmq roles ------------------------------------------------------------------------


def raw_pub(
    q: Any,
    sub_ready: Any,
    started: Any,
    sub_done: Any,
    mode: str,
    n: int,
    rate: float,
    relay_port: int | None,
) -> None:
    """PUB bound on a free port (direct), or PUSH connected to the relay's PULL."""
    _guard_child()
    ctx = zmq.Context()
    if relay_port is None:
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, HWM)
        port = sock.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
        q.put(("port", port))
    else:
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.connect(f"tcp://{HOST}:{relay_port}")
    sock.setsockopt(zmq.LINGER, 1000)
    end = time.monotonic() + 30
    while not sub_ready.wait(0.001):  # slow joiner: short frames until the SUB sees one
        sock.send(b"W")
        if time.monotonic() > end:
            q.put(("pub", {"error": "subscriber never joined"}))
            return
    time.sleep(0.2)  # let the warm-up frames drain
    send = sock.send
    started.set()
    cpu0 = time.process_time()
    t0 = time.perf_counter_ns()
    if mode == "flood":
        payload = b"M" * PAYLOAD_SIZE
        for _ in range(n):
            send(payload)
    else:  # latency: paced, timestamp in the payload
        interval = 1e9 / rate
        for i in range(n):
            _pace(i, t0, interval)
            send(_latency_payload(i, PAYLOAD_SIZE))
    t1 = time.perf_counter_ns()
    cpu1 = time.process_time()
    q.put(("pub", {"sent": n, "t_start": t0, "t_end": t1, "cpu_s": cpu1 - cpu0}))
    sub_done.wait(60)
    sock.close()
    ctx.term()


def raw_sub(
    q: Any, port: int, sub_ready: Any, pub_done: Any, sub_done: Any, mode: str, n: int
) -> None:
    _guard_child()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://{HOST}:{port}")
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.recv()  # a warm-up frame: the subscription is in place
    sub_ready.set()
    sock.setsockopt(zmq.RCVTIMEO, int(IDLE_END_S * 1000))
    recv = sock.recv
    perf = time.perf_counter_ns
    size = PAYLOAD_SIZE
    count = 0
    t_last = 0
    lats: list[int] = []
    cpu0 = time.process_time()
    deadline = time.monotonic() + CHILD_DEADLINE_S - 30
    while count < n:
        try:
            if mode == "flood":
                while count < n:
                    m = recv()
                    if len(m) != size:
                        continue
                    count += 1
                    if not count & 255:
                        t_last = perf()
                t_last = perf()
            else:
                while count < n:
                    m = recv()
                    now = perf()
                    if len(m) != size:
                        continue
                    count += 1
                    t_last = now
                    if int.from_bytes(m[8:16], "little") >= LATENCY_LEAD_IN:
                        lats.append(now - int.from_bytes(m[:8], "little"))
        except zmq.Again:
            if pub_done.is_set() or time.monotonic() > deadline:
                break
    cpu1 = time.process_time()
    sub_done.set()
    q.put(("sub", {"received": count, "t_last": t_last, "cpu_s": cpu1 - cpu0, "lat_ns": lats}))
    sock.close()
    ctx.term()


def drain_loop(sock: Any, handle: Any, stop: Any, poll_ms: int, idle: tuple[Any, ...] = ()) -> None:
    """Until ``stop`` is set: wait for ``sock`` to be readable, then hand each frame it
    holds to ``handle`` (at most 512 per wake-up). The bare relays' loop and the
    reference subscriber's: nothing else per frame. ``idle``: sockets polled beside
    ``sock`` that never get input (``latency_parts.py``: what polling several costs)."""
    recv, noblock, again = sock.recv, zmq.NOBLOCK, zmq.Again
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    for other in idle:
        poller.register(other, zmq.POLLIN)
    while not stop.is_set():
        if not poller.poll(poll_ms):
            continue
        for _ in range(512):
            try:
                frame = recv(noblock)
            except again:
                break
            handle(frame)


def relay_main(q: Any, stop: Any) -> None:
    """Reference forwarder, same topology as a node: PULL -> PUB in one Python loop.

    No decoding, routing or re-encoding: what a Python hop costs with nothing else to do.
    """
    _guard_child()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, HWM)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, HWM)
    for sock in (pull, pub):
        sock.setsockopt(zmq.LINGER, 0)
    in_port = pull.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    out_port = pub.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    q.put(("relay", {"in_port": in_port, "out_port": out_port}))
    drain_loop(pull, pub.send, stop, 200)
    pull.close()
    pub.close()
    ctx.term()


# -- zbroker roles --------------------------------------------------------------------------


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
    import cProfile

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
    prof = cProfile.Profile() if profile_out else None
    try:
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
    finally:
        broker.stop()


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
        warm = b"W" * PAYLOAD_SIZE
        for _ in range(WARMUP):
            publish(WARM_TOPIC, warm)
        end = time.monotonic() + 30
        markers = 0
        while True:  # end-of-warm-up markers until one arrives (some may be dropped)
            publish(WARM_TOPIC, b"E")
            markers += 1
            if warm_done.wait(0.01):
                break
            if time.monotonic() > end:
                q.put(("pub", {"error": "warm-up messages never arrived"}))
                return
        prof = cProfile.Profile() if profile_out else None
        started.set()
        if prof is not None:
            prof.enable()
        cpu0 = time.process_time()
        th0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
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

    from zbroker import Client, Message

    client = Client(endpoint)
    prof = cProfile.Profile() if profile_out else None
    all_in = threading.Event()
    stopped = threading.Event()
    warm = [0]
    st = [0, 0]  # delivered, perf_counter_ns of the last delivery
    lats: list[int] = []
    hop1: list[int] = []  # publish -> node receive stamp (msg.timestamp), CLOCK_REALTIME
    hop2: list[int] = []  # node receive stamp -> callback
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

    th = [0, 0]  # client thread CPU at the first and the last delivery

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

    try:
        client.subscribe(WARM_TOPIC, on_warm)
        client.subscribe(STOP_TOPIC, on_stop)
        client.subscribe(TOPIC, on_latency if mode == "latency" else on_data)
        sub_ready.set()
        cpu0 = time.process_time()
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
                    "warm_received": warm[0],
                    "t_last": st[1],
                    "cpu_s": cpu1 - cpu0,
                    "lat_ns": lats,
                    "hop1_ns": hop1,
                    "hop2_ns": hop2,
                    "thread_cpu_s": (th[1] - th[0]) / 1e9 * n / (n - 1) if th[1] else None,
                },
            )
        )
    finally:
        client.close()


# -- parent: orchestration ------------------------------------------------------------------


def _start(ctx: Any, target: Any, *args: Any) -> Any:
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    _PROCS.append(p)
    return p


class _Inbox:
    """Results from children, tagged by role; they may arrive in any order."""

    def __init__(self, q: Any) -> None:
        self.q = q
        self.stash: dict[str, Any] = {}

    def get(self, key: str, timeout: float) -> Any:
        end = time.monotonic() + timeout
        while key not in self.stash:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no '{key}' result from a child within {timeout:g} s")
            try:
                tag, value = self.q.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self.stash[tag] = value
        return self.stash.pop(key)


def _stop_procs(procs: list[Any], timeout: float = 10.0) -> None:
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            log(f"  process {p.pid} still running: SIGTERM")
            p.terminate()  # by PID
            p.join(3)
        if p.is_alive():
            p.kill()
            p.join(2)


def _cpu_seconds(pid: int | str) -> float:
    """CPU time (user + system, all threads) a process has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _thread_cpu_seconds(pid: int, tid: int) -> float:
    """CPU time (user + system) one thread of a process has used so far (clock ticks)."""
    return _cpu_seconds(f"{pid}/task/{tid}")


def _cpu_ticks() -> tuple[int, int, int]:
    """(steal, busy, total) jiffies of the whole machine, from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return v[7], v[0] + v[1] + v[2] + v[5] + v[6], sum(v)
    except (OSError, IndexError, ValueError):
        return 0, 0, 0


def _machine_load(
    t0: tuple[int, int, int], t1: tuple[int, int, int], wall_s: float, ours_s: float
) -> dict[str, float]:
    """Steal %, and how many cores everything / everything but this benchmark kept busy."""
    total = t1[2] - t0[2]
    hz = os.sysconf("SC_CLK_TCK")
    busy_cores = (t1[1] - t0[1]) / hz / wall_s if wall_s > 0 else 0.0
    return {
        "steal_pct": 100.0 * (t1[0] - t0[0]) / total if total > 0 else 0.0,
        "busy_cores": busy_cores,
        "other_cores": max(0.0, busy_cores - ours_s / wall_s) if wall_s > 0 else 0.0,
    }


def _lat_stats(lat_ns: list[int]) -> dict[str, Any]:
    if not lat_ns:
        return {"samples": 0}
    s = sorted(lat_ns)

    def pct(p: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))] / 1e6

    return {
        "samples": len(s),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "p999_ms": pct(99.9),
        "max_ms": s[-1] / 1e6,
        "mean_ms": sum(s) / len(s) / 1e6,
    }


def wake_probe(seconds: float = 3.0, rate: float = 2_000.0) -> dict[str, Any]:
    """How late this machine wakes a sleeping thread: one thread sleeps to an absolute
    schedule of ``rate`` wake-ups per second (the latency runs' rate) and records how late
    each wake-up came, with no other work of ours running. Every hop of a message is such a
    wake-up (by a socket, not a timer, but on the same vCPUs), so a run whose probe shows
    millisecond lateness cannot show a sub-millisecond p99 through five processes."""
    n = int(seconds * rate)
    interval = 1e9 / rate
    late: list[int] = []
    t0 = time.perf_counter_ns()
    for i in range(n):
        target = t0 + int(i * interval)
        delay = target - time.perf_counter_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        late.append(time.perf_counter_ns() - target)
    st = _lat_stats(late)
    st["over_1ms"] = sum(1 for x in late if x > 1_000_000)
    return st


def _summarise(pub: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    sent, got = pub["sent"], sub["received"]
    window = (sub["t_last"] - pub["t_start"]) / 1e9 if got else float("nan")
    send_s = (pub["t_end"] - pub["t_start"]) / 1e9
    return {
        "published": sent,
        "delivered": got,
        "lost": sent - got,
        "delivered_rate": got / window if got and window > 0 else 0.0,
        "publish_rate": sent / send_s if send_s > 0 else 0.0,
        "window_s": window,
        "pub_cpu_s": pub["cpu_s"],
        "sub_cpu_s": sub["cpu_s"],
    }


def _per_msg(res: dict[str, Any], mid_cpu_s: float) -> dict[str, float]:
    """CPU microseconds per published message (all threads of each process)."""
    n = max(1, res["published"])
    out = {
        "pub": 1e6 * res["pub_cpu_s"] / n,
        "mid": 1e6 * mid_cpu_s / n,
        "sub": 1e6 * res["sub_cpu_s"] / n,
    }
    out["total"] = out["pub"] + out["mid"] + out["sub"]
    return out


def run_raw(
    ctx: Any,
    mode: str,
    n: int,
    rate: float = 0.0,
    relay: dict[str, Any] | None = None,
    keep_samples: bool = False,
) -> dict[str, Any]:
    """Raw pyzmq: PUB -> SUB directly, or PUSH -> relay process -> SUB when ``relay``
    (``relay["pids"]``, when given, lists every relay process of a chain of them).
    ``keep_samples``: a latency run's every latency (ns) in ``lat_ns``, to pool runs."""
    q = ctx.Queue()
    inbox = _Inbox(q)
    sub_ready, started, pub_done, sub_done = (ctx.Event() for _ in range(4))
    relay_in = relay["in_port"] if relay else None
    pub = _start(ctx, raw_pub, q, sub_ready, started, sub_done, mode, n, rate, relay_in)
    procs = [pub]
    try:
        port = relay["out_port"] if relay else inbox.get("port", 30)
        sub = _start(ctx, raw_sub, q, port, sub_ready, pub_done, sub_done, mode, n)
        procs.append(sub)
        if not started.wait(60):
            raise TimeoutError("raw publisher never started")
        ticks0 = _cpu_ticks()
        mids = relay.get("pids", [relay["pid"]]) if relay else []
        pids = [pub.pid, sub.pid, *mids]
        ours0 = sum(_cpu_seconds(p) for p in pids)
        mid0 = sum(_cpu_seconds(p) for p in mids)
        wall0 = time.monotonic()
        pub_res = inbox.get("pub", 120)
        if "error" in pub_res:
            raise RuntimeError(f"raw publisher: {pub_res['error']}")
        pub_done.set()
        sub_res = inbox.get("sub", 120)
        ticks1, wall1 = _cpu_ticks(), time.monotonic()
        ours1 = sum(_cpu_seconds(p) for p in pids)
        mid1 = sum(_cpu_seconds(p) for p in mids)
    finally:
        pub_done.set()
        sub_done.set()
        _stop_procs(procs)
    res = _summarise(pub_res, sub_res)
    res.update(_machine_load(ticks0, ticks1, wall1 - wall0, ours1 - ours0))
    if relay:
        res["mid_cpu_pct"] = 100 * (mid1 - mid0) / (wall1 - wall0) if wall1 > wall0 else 0.0
    res["cpu_us_per_msg"] = _per_msg(res, mid1 - mid0)
    if mode == "latency":
        res["rate"] = rate
        res["latency"] = _lat_stats(sub_res["lat_ns"])
        if keep_samples:
            res["lat_ns"] = sub_res["lat_ns"]
    return res


def _node_counters(client: Any) -> dict[str, Any]:
    c = client.status()["counters"]
    return {"received": c["received"], "delivered": c["delivered"], "dropped": c["dropped"]}


def _node_thread_cpu(conn: Any) -> float:
    conn.send("thread_cpu")
    if not conn.poll(10):
        return float("nan")
    return float(conn.recv()) / 1e9


def run_zb(
    ctx: Any,
    endpoint: str,
    node_pid: int,
    node_conn: Any,
    status_client: Any,
    mode: str,
    n: int,
    rate: float = 0.0,
    profile_dir: str | None = None,
) -> dict[str, Any]:
    q = ctx.Queue()
    inbox = _Inbox(q)
    sub_ready, warm_done, started, pub_done, sub_done = (ctx.Event() for _ in range(5))
    before = _node_counters(status_client)
    pprof = os.path.join(profile_dir, "publisher.prof") if profile_dir else None
    sprof = os.path.join(profile_dir, "subscriber.prof") if profile_dir else None
    sub = _start(ctx, zb_sub, q, endpoint, sub_ready, warm_done, pub_done, sub_done, mode, n, sprof)
    pub = _start(
        ctx, zb_pub, q, endpoint, sub_ready, warm_done, started, sub_done, mode, n, rate, pprof
    )
    procs = [sub, pub]
    try:
        if not started.wait(60):
            raise TimeoutError("zbroker publisher never started")
        ticks0 = _cpu_ticks()
        ours0 = sum(_cpu_seconds(p) for p in (pub.pid, sub.pid, node_pid))
        nth0 = _node_thread_cpu(node_conn)
        cpu0, wall0 = _cpu_seconds(node_pid), time.monotonic()
        pub_res = inbox.get("pub", 180)
        if "error" in pub_res:
            raise RuntimeError(f"zbroker publisher: {pub_res['error']}")
        pub_done.set()
        sub_res = inbox.get("sub", 120)
        cpu1, wall1 = _cpu_seconds(node_pid), time.monotonic()
        nth1 = _node_thread_cpu(node_conn)
        ticks1 = _cpu_ticks()
        ours1 = sum(_cpu_seconds(p) for p in (pub.pid, sub.pid, node_pid))
    finally:
        pub_done.set()
        sub_done.set()
        _stop_procs(procs)
    after = _node_counters(status_client)
    res = _summarise(pub_res, sub_res)
    res.update(_machine_load(ticks0, ticks1, wall1 - wall0, ours1 - ours0))
    res["mid_cpu_pct"] = 100 * (cpu1 - cpu0) / (wall1 - wall0) if wall1 > wall0 else 0.0
    res["cpu_us_per_msg"] = _per_msg(res, cpu1 - cpu0)
    if mode == "flood":
        nmsg = max(1, res["published"])
        sub_th = sub_res.get("thread_cpu_s")
        res["thread_cpu_us_per_msg"] = {
            "pub": 1e6 * pub_res["thread_cpu_s"] / nmsg,
            "mid": 1e6 * (nth1 - nth0) / nmsg,
            "sub": 1e6 * sub_th / nmsg if sub_th else float("nan"),
        }
    res["node_received"] = after["received"] - before["received"]
    res["node_delivered"] = after["delivered"] - before["delivered"]
    res["node_dropped"] = {
        k: v - before["dropped"].get(k, 0)
        for k, v in after["dropped"].items()
        if v - before["dropped"].get(k, 0)
    }
    if mode != "flood":
        res["rate"] = rate
    if mode == "latency":
        res["latency"] = _lat_stats(sub_res["lat_ns"])
        res["hop1_publish_to_node"] = _lat_stats(sub_res["hop1_ns"])
        res["hop2_node_to_callback"] = _lat_stats(sub_res["hop2_ns"])
    return res


def source_digest() -> str:
    """sha256 (12 hex digits) of the zbroker sources in use: ties figures to a code state."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("zbroker")
    if spec is None or spec.origin is None:
        return "unknown"
    root = Path(spec.origin).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "zbroker_src_sha256": source_digest(),
        "zbroker_compiled": compiled_state(),
    }


def compiled_state() -> str:
    """How many of zbroker's compiled modules (zbroker/_compiled.py) run compiled here."""
    import importlib

    try:
        from zbroker import _compiled
    except ImportError:  # a tree from before the compiled modules
        return "no compiled modules"
    for name in _compiled.COMPILED:
        importlib.import_module(name)
    done = sum(_compiled.loaded().values())
    pure = f" ({_compiled.ENV})" if _compiled.pure_python() else ""
    return f"{done} of {len(_compiled.COMPILED)} compiled{pure}"


def _fmt_rate(r: float) -> str:
    return f"{r:,.0f} msg/s"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _print_run(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {_fmt_rate(r['delivered_rate'])}; "
        f"publisher sent at {_fmt_rate(r['publish_rate'])}"
    )
    extra = f"    cpu s: pub {r['pub_cpu_s']:.2f}, sub {r['sub_cpu_s']:.2f}"
    u = r["cpu_us_per_msg"]
    if r.get("rate") is None:  # throughput runs: the CPU budget per message
        log(
            f"    CPU per message: pub {u['pub']:.2f} us, "
            + (f"node/relay {u['mid']:.2f} us, " if "mid_cpu_pct" in r else "")
            + f"sub {u['sub']:.2f} us, total {u['total']:.2f} us "
            f"(=> at most {2e6 / u['total'] if u['total'] else 0:,.0f} msg/s on 2 free cores)"
        )
    if "thread_cpu_us_per_msg" in r:
        t = r["thread_cpu_us_per_msg"]
        log(
            f"    of which the Python threads (publish() caller, node loop, client thread): "
            f"pub {t['pub']:.2f} us, node {t['mid']:.2f} us, sub {t['sub']:.2f} us; the rest "
            "is libzmq I/O threads"
        )
    if "mid_cpu_pct" in r:
        extra += f", node/relay {r['mid_cpu_pct']:.0f}% of a core"
    if "node_received" in r:
        extra += (
            f"; node counters: received {r['node_received']:,}, delivered "
            f"{r['node_delivered']:,}, dropped {r['node_dropped'] or 0}"
        )
    extra += (
        f"; machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )
    log(extra)
    if "latency" in r:
        lat = r["latency"]
        log(
            f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
            f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, p99.9 {lat['p999_ms']:.3f}, "
            f"max {lat['max_ms']:.3f}, mean {lat['mean_ms']:.3f} ms"
        )
    for key in ("hop1_publish_to_node", "hop2_node_to_callback"):
        if key in r:
            h = r[key]
            log(
                f"    {key} (CLOCK_REALTIME, split at the node's receive stamp): "
                f"p50 {h['p50_ms']:.3f} ms, p99 {h['p99_ms']:.3f}, max {h['max_ms']:.3f}"
            )


def _print_profiles(profile_dir: str, top: int) -> None:
    for role in ("node", "publisher", "subscriber"):
        path = os.path.join(profile_dir, f"{role}.prof")
        if not os.path.exists(path):
            log(f"(no profile for {role})")
            continue
        print(f"\n==== cProfile: {role} (sorted by tottime, top {top}) ====")
        st = pstats.Stats(path, stream=sys.stdout)
        st.strip_dirs().sort_stats("tottime").print_stats(top)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median delivered rate (lower median for an even count)."""
    ordered = sorted(runs, key=lambda r: r["delivered_rate"])
    return ordered[(len(ordered) - 1) // 2]


def _start_node(ctx: Any, tmp: str, stop: Any, profile: bool) -> tuple[Any, str, Any]:
    """(process, endpoint, pipe for thread-CPU queries) of a node in its own process.

    Retried: with port 0 a start could fail when PORT+1 or PORT+2 was taken (the
    unbind(str(last_endpoint)) bug in Node._bind_ports, since fixed there); a fresh attempt
    picks a new random port, which costs nothing when the first one works."""
    nprof = os.path.join(tmp, "node.prof") if profile else None
    for attempt in range(1, 4):
        nq = ctx.Queue()
        mine, theirs = ctx.Pipe()
        data_dir = os.path.join(tmp, f"node{attempt}")
        node = _start(ctx, node_main, nq, data_dir, stop, nprof, theirs)
        info = _Inbox(nq).get("node", 30)
        if "error" not in info:
            return node, info["endpoint"], mine
        log(f"  node start failed (attempt {attempt}/3): {info['error']}")
        _stop_procs([node], 5)
    raise RuntimeError("the zbroker node did not start in 3 attempts")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--messages", "-n", type=int, default=200_000, help="messages per throughput run"
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="throughput runs of each kind; the median counts"
    )
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: 20,000 messages, 1 repeat, 1 s latency"
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument("--latency-seconds", type=float, default=5.0)
    ap.add_argument(
        "--latency-rate",
        type=float,
        default=LATENCY_RATE,
        help=f"msg/s of the latency runs (default {LATENCY_RATE:,.0f})",
    )
    ap.add_argument(
        "--profile", action="store_true", help="only one zbroker flood run, under cProfile"
    )
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    args = ap.parse_args(argv)
    if not args.no_snapshot:
        from _common import snapshot_sources

        snapshot_sources()
    n = 20_000 if args.quick and args.messages == 200_000 else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    lat_s = 1.0 if args.quick else args.latency_seconds
    lat_rate = args.latency_rate
    n_lat = int(lat_rate * lat_s) + LATENCY_LEAD_IN

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"benchmark exceeded {RUN_DEADLINE_S} s")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGTERM, on_term)  # run the finally block: stop every child
    signal.alarm(RUN_DEADLINE_S)

    info = machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    result: dict[str, Any] = {
        "machine": info,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "messages": n,
        "repeat": repeat,
        "payload_bytes": PAYLOAD_SIZE,
        "latency_rate": lat_rate,
        "latency_seconds": lat_s,
    }
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-bench-")
    stop_event = ctx.Event()
    status_client = None
    t_begin = time.monotonic()
    ticks_begin = _cpu_ticks()
    paced: list[dict[str, Any]] = []
    try:
        log(
            f"zbroker single-node benchmark: {n:,} messages of {PAYLOAD_SIZE} B"
            + ("" if args.profile else f" x {repeat}")
        )
        log(f"  {info}")
        if args.profile:
            node, endpoint, nconn = _start_node(ctx, tmp, stop_event, True)
            from zbroker import Client

            status_client = Client(endpoint)
            log(f"node pid {node.pid} at {endpoint}; zbroker flood under cProfile ...")
            prof_run = run_zb(
                ctx, endpoint, node.pid, nconn, status_client, "flood", n, profile_dir=tmp
            )
            _print_run("zbroker flood (profiled: slower than normal)", prof_run)
            status_client.close()
            status_client = None
            stop_event.set()
            _stop_procs([node])
            _print_profiles(tmp, args.profile_top)
            return 0

        result["a_raw"] = []
        for i in range(repeat):
            log(f"(a) raw pyzmq PUB -> SUB, flood, run {i + 1}/{repeat} ...")
            result["a_raw"].append(run_raw(ctx, "flood", n))
            _print_run("raw", result["a_raw"][-1])

        rq = ctx.Queue()
        relay_proc = _start(ctx, relay_main, rq, stop_event)
        relay = dict(_Inbox(rq).get("relay", 30), pid=relay_proc.pid)
        result["ref_relay"] = []
        for i in range(repeat):
            log(f"(ref) raw pyzmq PUSH -> Python relay -> SUB, flood, run {i + 1}/{repeat} ...")
            result["ref_relay"].append(run_raw(ctx, "flood", n, relay=relay))
            _print_run("relay", result["ref_relay"][-1])

        node, endpoint, nconn = _start_node(ctx, tmp, stop_event, False)
        from zbroker import Client

        status_client = Client(endpoint)
        log(f"node pid {node.pid} at {endpoint}")
        result["b_flood"] = []
        for i in range(repeat):
            log(f"(b) zbroker one node, flood, run {i + 1}/{repeat} ...")
            result["b_flood"].append(
                run_zb(ctx, endpoint, node.pid, nconn, status_client, "flood", n)
            )
            _print_run("zbroker", result["b_flood"][-1])

        flood = _median_run(result["b_flood"])
        if any(r["lost"] for r in result["b_flood"]):
            rates: list[float] = []
            if flood["delivered_rate"] >= TARGET_RATE:
                rates.append(TARGET_RATE)
            rates += [flood["delivered_rate"] * f for f in (0.9, 0.6, 0.3)]
            for rate in rates[:3]:
                log(f"(b) a flood run lost messages: paced run at {_fmt_rate(rate)} ...")
                pr = run_zb(ctx, endpoint, node.pid, nconn, status_client, "paced", n, rate)
                paced.append(pr)
                _print_run(f"zbroker paced {rate:,.0f}", pr)
                if pr["lost"] == 0:
                    break
        result["b_paced"] = paced

        log(f"latency at {lat_rate:,.0f} msg/s for {lat_s:g} s: raw PUB -> SUB ...")
        result["raw_latency"] = run_raw(ctx, "latency", n_lat, lat_rate)
        _print_run("raw latency", result["raw_latency"])
        log("  ... raw relay ...")
        result["relay_latency"] = run_raw(ctx, "latency", n_lat, lat_rate, relay=relay)
        _print_run("relay latency", result["relay_latency"])
        log("(d) ... zbroker ...")
        result["d_latency"] = run_zb(
            ctx, endpoint, node.pid, nconn, status_client, "latency", n_lat, lat_rate
        )
        _print_run("zbroker latency", result["d_latency"])
    finally:
        signal.alarm(0)
        if status_client is not None:
            status_client.close()
        stop_event.set()
        for p in _PROCS:
            if p.is_alive():
                _stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)

    a_run = _median_run(result["a_raw"])
    a, b = a_run["delivered_rate"], flood["delivered_rate"]
    relay_run = _median_run(result["ref_relay"])
    flood_lost = sum(r["lost"] for r in result["b_flood"])
    if flood_lost == 0:
        zero_loss_rate: float | None = b
    else:
        ok_paced = [r["delivered_rate"] for r in paced if r["lost"] == 0]
        zero_loss_rate = max(ok_paced) if ok_paced else None
    lat = result["d_latency"]["latency"]
    p99 = lat.get("p99_ms", float("inf"))
    summary = {
        "a_raw_rate": a,
        "a_raw_rates": [r["delivered_rate"] for r in result["a_raw"]],
        "a_raw_lost": sum(r["lost"] for r in result["a_raw"]),
        "relay_rate": relay_run["delivered_rate"],
        "relay_rates": [r["delivered_rate"] for r in result["ref_relay"]],
        "relay_lost": sum(r["lost"] for r in result["ref_relay"]),
        "b_rate": b,
        "b_rates": [r["delivered_rate"] for r in result["b_flood"]],
        "b_lost": flood_lost,
        "b_node_cpu_pct": flood["mid_cpu_pct"],
        "b_cpu_us_per_msg": flood["cpu_us_per_msg"],
        "b_thread_cpu_us_per_msg": flood["thread_cpu_us_per_msg"],
        "relay_cpu_us_per_msg": relay_run["cpu_us_per_msg"],
        "b_steal_pct": flood["steal_pct"],
        "b_other_cores": flood["other_cores"],
        "d_steal_pct": result["d_latency"]["steal_pct"],
        "d_other_cores": result["d_latency"]["other_cores"],
        "c_ratio": b / a if a else 0.0,
        "zero_loss_rate": zero_loss_rate,
        "paced": [(r["rate"], r["delivered_rate"], r["lost"]) for r in paced],
        "d_p50_ms": lat.get("p50_ms"),
        "d_p99_ms": p99,
        "d_lost": result["d_latency"]["lost"],
        "d_hop1_p50_ms": result["d_latency"]["hop1_publish_to_node"].get("p50_ms"),
        "d_hop1_p99_ms": result["d_latency"]["hop1_publish_to_node"].get("p99_ms"),
        "d_hop2_p50_ms": result["d_latency"]["hop2_node_to_callback"].get("p50_ms"),
        "d_hop2_p99_ms": result["d_latency"]["hop2_node_to_callback"].get("p99_ms"),
        "raw_p50_ms": result["raw_latency"]["latency"].get("p50_ms"),
        "raw_p99_ms": result["raw_latency"]["latency"].get("p99_ms"),
        "relay_p50_ms": result["relay_latency"]["latency"].get("p50_ms"),
        "relay_p99_ms": result["relay_latency"]["latency"].get("p99_ms"),
        **{
            k: v
            for k, v in _machine_load(
                ticks_begin, _cpu_ticks(), time.monotonic() - t_begin, 0.0
            ).items()
            if k != "other_cores"
        },
        "elapsed_s": time.monotonic() - t_begin,
    }
    summary["pass"] = {
        "b_rate": b >= TARGET_RATE,
        "c_ratio": summary["c_ratio"] >= TARGET_RATIO,
        "zero_loss": zero_loss_rate is not None and zero_loss_rate >= TARGET_RATE,
        "d_p99": p99 <= TARGET_P99_MS,
    }
    result["summary"] = summary
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0


def _rates(rates: list[float]) -> str:
    return "runs: " + ", ".join(f"{r:,.0f}" for r in rates)


def print_summary(result: dict[str, Any]) -> None:
    s, m, ok = result["summary"], result["machine"], result["summary"]["pass"]
    zl = s["zero_loss_rate"]
    zl_text = f"{_fmt_rate(zl)}, 0 lost" if zl is not None else "no run without loss"
    rows = [
        ("(a) raw pyzmq PUB->SUB delivered", _fmt_rate(s["a_raw_rate"]), "ceiling", "-"),
        ("", _rates(s["a_raw_rates"]), f"lost {s['a_raw_lost']:,}", ""),
        ("ref raw pyzmq via Python relay", _fmt_rate(s["relay_rate"]), "reference", "-"),
        ("", _rates(s["relay_rates"]), f"lost {s['relay_lost']:,}", ""),
        (
            "(b) zbroker 1 node delivered",
            _fmt_rate(s["b_rate"]),
            ">= 150,000 msg/s",
            _verdict(ok["b_rate"]),
        ),
        ("", _rates(s["b_rates"]), f"node {s['b_node_cpu_pct']:.0f}% of a core", ""),
        (
            "    machine during median (b) run",
            f"steal {s['b_steal_pct']:.1f}%",
            f"other procs {s['b_other_cores']:.2f} cores",
            "",
        ),
        ("    lost in (b) (published - delivered)", f"{s['b_lost']:,}", "0", ""),
        (
            "    CPU us/msg pub + node + sub",
            " + ".join(f"{s['b_cpu_us_per_msg'][k]:.1f}" for k in ("pub", "mid", "sub"))
            + f" = {s['b_cpu_us_per_msg']['total']:.1f}",
            "relay ref: "
            + " + ".join(f"{s['relay_cpu_us_per_msg'][k]:.1f}" for k in ("pub", "mid", "sub"))
            + f" = {s['relay_cpu_us_per_msg']['total']:.1f}",
            "",
        ),
        (
            "      of which Python threads",
            " + ".join(f"{s['b_thread_cpu_us_per_msg'][k]:.1f}" for k in ("pub", "mid", "sub")),
            "(rest: libzmq I/O threads)",
            "",
        ),
        ("(c) b / a", f"{s['c_ratio']:.3f}", ">= 0.15", _verdict(ok["c_ratio"])),
        (
            "    zbroker rate with zero loss",
            zl_text,
            "0 lost at >= 150,000 msg/s",
            _verdict(ok["zero_loss"]),
        ),
    ]
    for rate, got, lost in s["paced"]:
        rows.append((f"    paced run at {rate:,.0f} msg/s", _fmt_rate(got), f"lost {lost:,}", ""))
    rows += [
        ("(d) p50 publish->callback @2,000 msg/s", f"{s['d_p50_ms']:.3f} ms", "-", "-"),
        (
            "    p99 publish->callback @2,000 msg/s",
            f"{s['d_p99_ms']:.3f} ms",
            "<= 1.5 ms",
            _verdict(ok["d_p99"]),
        ),
        ("    lost in (d)", f"{s['d_lost']:,}", "-", ""),
        (
            "    machine during (d)",
            f"steal {s['d_steal_pct']:.1f}%",
            f"other procs {s['d_other_cores']:.2f} cores",
            "",
        ),
        (
            "    hop publish->node p50 / p99",
            f"{s['d_hop1_p50_ms']:.3f} / {s['d_hop1_p99_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "    hop node->callback p50 / p99",
            f"{s['d_hop2_p50_ms']:.3f} / {s['d_hop2_p99_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "ref raw PUB->SUB p50 / p99",
            f"{s['raw_p50_ms']:.3f} / {s['raw_p99_ms']:.3f} ms",
            "reference",
            "-",
        ),
        (
            "ref raw via relay p50 / p99",
            f"{s['relay_p50_ms']:.3f} / {s['relay_p99_ms']:.3f} ms",
            "reference",
            "-",
        ),
    ]
    print()
    print("=" * 110)
    print("zbroker single-node benchmark: summary")
    print(f"date      {m['date']}")
    print(
        f"machine   nproc {m['nproc']} (usable {m['cpus_usable']}), {m['cpu_model']}, "
        f"{m['os']}, load avg at start {m['loadavg_at_start']}, "
        f"during the run: CPU steal {s['steal_pct']:.1f}%, all processes kept "
        f"{s['busy_cores']:.2f} of {m['nproc']} cores busy on average"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, "
        f"msgpack {m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} "
        f"({m.get('sources', 'checkout')})"
    )
    print(
        f"run       {result['command']}: {result['messages']:,} messages of "
        f"{result['payload_bytes']} B per throughput run, median of {result['repeat']}; "
        f"latency {result['latency_rate']:,.0f} msg/s for {result['latency_seconds']:g} s; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 110)
    print(f"{'figure':<42}{'measured':<36}{'target':<28}result")
    for name, val, target, verdict in rows:
        print(f"{name:<42}{val:<36}{target:<28}{verdict}".rstrip())
    print("=" * 110)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
