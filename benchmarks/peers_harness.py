"""``bench_peers``' harness: one publisher and one subscriber process, the same steps for
every system, only the client calls differ (synchronous clients for zbroker, Zenoh and
the relays; asyncio for NATS), and one run of a case on a started topology. The roles
:func:`pub_main` and :func:`sub_main` are multiprocessing ("spawn") targets, so they live
at module level."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # roles' helpers, /proc accounting, latency statistics
import peer_relays  # the floors' clients: bare PUSH and SUB
from peers_zenoh import _zenoh_config

SYSTEMS = ("zbroker", "zenoh", "nats", "relays", "crelays")
TOPIC = {
    "zbroker": "BENCH.DATA",
    "zenoh": "bench/data",
    "nats": "BENCH.DATA",
    "relays": "BENCH.DATA",
    "crelays": "BENCH.DATA",
}
WARM = {
    "zbroker": "BENCH.WARM",
    "zenoh": "bench/warm",
    "nats": "BENCH.WARM",
    "relays": "BENCH.WARM",
    "crelays": "BENCH.WARM",
}


class _Clock:
    """What the subscriber records; shared by the sync and asyncio callbacks."""

    def __init__(self, n: int, mode: str) -> None:
        self.n, self.mode = n, mode
        self.got = 0
        self.t_last = 0
        self.warm = 0
        self.lats: list[int] = []

    def on_data(self, payload: bytes) -> bool:
        """Count one delivery; True once all ``n`` are in."""
        now = time.perf_counter_ns()
        self.got += 1
        self.t_last = now
        if self.mode == "latency" and int.from_bytes(payload[8:16], "little") >= bn.LATENCY_LEAD_IN:
            self.lats.append(now - int.from_bytes(payload[:8], "little"))
        return self.got == self.n


def _sync_client(system: str, endpoint: str) -> tuple[Any, Any, Any]:
    """(publish(topic, payload), subscribe(topic, callback(bytes)), close()) for the
    systems whose client API is synchronous."""
    if system == "zbroker":
        from zbroker import Client

        client = Client(endpoint)
        return (
            client.publish,
            lambda t, cb: client.subscribe(t, lambda m: cb(m.payload)),
            client.close,
        )
    if system in ("relays", "crelays"):  # (the same clients: bare PUSH and SUB)
        return peer_relays.client(endpoint)
    import zenoh

    session = zenoh.open(_zenoh_config("client", None, [int(endpoint)]))
    pubs: dict[str, Any] = {}
    subs: list[Any] = []

    def publish(key: str, payload: bytes) -> None:
        pub = pubs.get(key)
        if pub is None:
            pub = pubs[key] = session.declare_publisher(
                key, congestion_control=zenoh.CongestionControl.BLOCK
            )
        pub.put(payload)

    def subscribe(key: str, cb: Any) -> None:
        subs.append(session.declare_subscriber(key, lambda s: cb(s.payload.to_bytes())))

    return publish, subscribe, session.close


def pub_main(q: Any, system: str, endpoint: str, ev: dict[str, Any], case: dict[str, Any]) -> None:
    bn._guard_child()
    if system == "nats":
        asyncio.run(_nats_pub(q, endpoint, ev, case))
        return
    publish, _, close = _sync_client(system, endpoint)
    try:
        res = _publish_all(publish, system, ev, case, lambda i, t0, iv: bn._pace(i, t0, iv))
        if res is not None:
            ev["sub_done"].wait(120)
            res["cpu_s"] = time.process_time() - res.pop("cpu0")
            q.put(("pub", res))
    finally:
        close()


def _publish_all(publish: Any, system: str, ev: Any, case: Any, pace: Any) -> Any:
    """Warm-up, then the measured run; the result, or None after an error was reported."""
    if not ev["sub_ready"].wait(60):
        ev["q"].put(("pub", {"error": "subscriber not ready"}))
        return None
    n, size, mode = case["n"], case["size"], case["mode"]
    for _ in range(bn.WARMUP):
        publish(WARM[system], b"W" * size)
    end = time.monotonic() + 60
    while not ev["warm_done"].wait(0.01):
        publish(WARM[system], b"E")
        if time.monotonic() > end:
            ev["q"].put(("pub", {"error": "warm-up messages never arrived"}))
            return None
    ev["started"].set()
    cpu0, t0 = time.process_time(), time.perf_counter_ns()
    topic = TOPIC[system]
    if mode == "flood":
        payload = b"M" * size
        for _ in range(n):
            publish(topic, payload)
    else:
        interval = 1e9 / case["rate"]
        for i in range(n):
            pace(i, t0, interval)
            publish(topic, bn._latency_payload(i, size))
    ev["pub_done"].set()  # the subscriber may stop 3 s after its last message from here on
    return {"sent": n, "t_start": t0, "t_end": time.perf_counter_ns(), "cpu0": cpu0}


def sub_main(q: Any, system: str, endpoint: str, ev: dict[str, Any], case: dict[str, Any]) -> None:
    bn._guard_child()
    if system == "nats":
        asyncio.run(_nats_sub(q, endpoint, ev, case))
        return
    import threading

    _, subscribe, close = _sync_client(system, endpoint)
    clock = _Clock(case["n"], case["mode"])
    all_in = threading.Event()

    def on_warm(payload: bytes) -> None:
        clock.warm += 1
        if payload == b"E":
            ev["warm_done"].set()

    def on_data(payload: bytes) -> None:
        if clock.on_data(payload):
            all_in.set()

    try:
        subscribe(TOPIC[system], on_data)  # data first: its interest is ahead of the markers'
        subscribe(WARM[system], on_warm)
        ev["sub_ready"].set()
        cpu0 = time.process_time()
        _wait_all(clock, ev, lambda: all_in.wait(0.05))
        q.put(("sub", _sub_result(clock, time.process_time() - cpu0)))
        ev["sub_done"].set()
    finally:
        close()


def _wait_all(clock: _Clock, ev: Any, tick: Any) -> None:
    """Until every message is in, or 3 s without one after the publisher finished."""
    seen, seen_at = -1, time.monotonic()
    deadline = time.monotonic() + bn.CHILD_DEADLINE_S - 30
    while not tick():
        now = time.monotonic()
        if clock.got != seen:
            seen, seen_at = clock.got, now
        elif ev["pub_done"].is_set() and now - seen_at > bn.IDLE_END_S:
            return
        if now > deadline:
            return


def _sub_result(clock: _Clock, cpu_s: float) -> dict[str, Any]:
    return {"received": clock.got, "t_last": clock.t_last, "cpu_s": cpu_s, "lat_ns": clock.lats}


async def _nats_pub(q: Any, url: str, ev: Any, case: Any) -> None:
    """The harness's publisher with nats-py (asyncio); same steps as ``_publish_all``."""
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    try:
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, ev["sub_ready"].wait, 60):
            q.put(("pub", {"error": "subscriber not ready"}))
            return
        n, size = case["n"], case["size"]
        for _ in range(bn.WARMUP):
            await nc.publish(WARM["nats"], b"W" * size)
        end = time.monotonic() + 60
        while not ev["warm_done"].is_set():
            await nc.publish(WARM["nats"], b"E")
            await nc.flush()
            await asyncio.sleep(0.01)
            if time.monotonic() > end:
                q.put(("pub", {"error": "warm-up messages never arrived"}))
                return
        ev["started"].set()
        cpu0, t0 = time.process_time(), time.perf_counter_ns()
        topic = TOPIC["nats"]
        if case["mode"] == "flood":
            payload = b"M" * size
            for _ in range(n):
                await nc.publish(topic, payload)
        else:
            interval = 1e9 / case["rate"]
            for i in range(n):
                delay = t0 + i * interval - time.perf_counter_ns()
                if delay > 0:
                    await asyncio.sleep(delay / 1e9)
                await nc.publish(topic, bn._latency_payload(i, size))
        await nc.flush()
        ev["pub_done"].set()
        res = {"sent": n, "t_start": t0, "t_end": time.perf_counter_ns()}
        await loop.run_in_executor(None, ev["sub_done"].wait, 120)
        res["cpu_s"] = time.process_time() - cpu0
        q.put(("pub", res))
    finally:
        await nc.close()


async def _nats_sub(q: Any, url: str, ev: Any, case: Any) -> None:
    import nats

    nc = await nats.connect(url, allow_reconnect=False)
    clock = _Clock(case["n"], case["mode"])
    done = asyncio.Event()

    async def on_warm(msg: Any) -> None:
        clock.warm += 1
        if msg.data == b"E":
            ev["warm_done"].set()

    async def on_data(msg: Any) -> None:
        if clock.on_data(msg.data):
            done.set()

    try:
        # no client-side drops: the pending limits far above a run's volume
        limits, nbytes = 10_000_000, 4 << 30
        await nc.subscribe(
            TOPIC["nats"], cb=on_data, pending_msgs_limit=limits, pending_bytes_limit=nbytes
        )
        await nc.subscribe(
            WARM["nats"], cb=on_warm, pending_msgs_limit=limits, pending_bytes_limit=nbytes
        )
        await nc.flush()
        ev["sub_ready"].set()
        cpu0 = time.process_time()
        seen, seen_at = -1, time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.05)
            now = time.monotonic()
            if clock.got != seen:
                seen, seen_at = clock.got, now
            elif ev["pub_done"].is_set() and now - seen_at > bn.IDLE_END_S:
                break
        q.put(("sub", _sub_result(clock, time.process_time() - cpu0)))
        ev["sub_done"].set()
    finally:
        await nc.close()


def run_case(ctx: Any, system: str, topo: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """One run of ``case`` on a started topology: figures and CPU us/msg per process."""
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    ev = {k: ctx.Event() for k in ("sub_ready", "warm_done", "started", "pub_done", "sub_done")}
    ev["q"] = q
    sub = bn._start(ctx, sub_main, q, system, topo["sub_at"], ev, case)
    pub = bn._start(ctx, pub_main, q, system, topo["pub_at"], ev, case)
    nodes: list[tuple[str, int]] = topo["pids"]
    try:
        if not ev["started"].wait(90):
            raise TimeoutError(f"{system}: the publisher never started")
        cpu0 = [bn._cpu_seconds(pid) for _, pid in nodes]
        pub_res = inbox.get("pub", 240)
        if "error" in pub_res:
            raise RuntimeError(f"{system} publisher: {pub_res['error']}")
        sub_res = inbox.get("sub", 120)
        cpu1 = [bn._cpu_seconds(pid) for _, pid in nodes]
    finally:
        for k in ("started", "pub_done", "sub_done"):
            ev[k].set()
        bn._stop_procs([sub, pub])
    sent, got = pub_res["sent"], sub_res["received"]
    window = (sub_res["t_last"] - pub_res["t_start"]) / 1e9
    per = max(1, got)
    cpu = {"pub": 1e6 * pub_res["cpu_s"] / per}
    cpu.update(
        {nm: 1e6 * (c1 - c0) / per for (nm, _), c0, c1 in zip(nodes, cpu0, cpu1, strict=True)}
    )
    cpu["sub"] = 1e6 * sub_res["cpu_s"] / per
    cpu["total"] = sum(cpu.values())
    res = {
        "sent": sent,
        "delivered": got,
        "lost": sent - got,
        "rate": got / window if got and window > 0 else 0.0,
        "cpu_us_per_msg": cpu,
    }
    if case["mode"] == "latency":
        res["latency"] = bn._lat_stats(sub_res["lat_ns"])
    return res
