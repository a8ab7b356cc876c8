"""One measured run, driven from the parent: start its children (raw pyzmq or zbroker
roles), wait for their results, read the CPU they and the machine used meanwhile, and
return the run's figures; and the single node the zbroker runs go through."""

from __future__ import annotations

import os
import time
from typing import Any

from bn_cpu import _cpu_seconds, _cpu_ticks, _machine_load
from bn_procs import _Inbox, _start, _stop_procs
from bn_raw_roles import raw_pub, raw_sub
from bn_settings import log
from bn_stats import _lat_stats, _per_msg, _summarise
from bn_zb_roles import node_main, zb_pub, zb_sub


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


def _node_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the node's counters say it received, delivered and dropped during a run."""
    return {
        "node_received": after["received"] - before["received"],
        "node_delivered": after["delivered"] - before["delivered"],
        "node_dropped": {
            k: v - before["dropped"].get(k, 0)
            for k, v in after["dropped"].items()
            if v - before["dropped"].get(k, 0)
        },
    }


def _thread_per_msg(
    res: dict[str, Any], pub_res: dict[str, Any], sub_res: dict[str, Any], node_s: float
) -> dict[str, float]:
    """CPU microseconds per published message of the Python threads alone: the publishing
    thread, the node loop (``node_s``), the subscriber's client thread."""
    nmsg = max(1, res["published"])
    sub_th = sub_res.get("thread_cpu_s")
    return {
        "pub": 1e6 * pub_res["thread_cpu_s"] / nmsg,
        "mid": 1e6 * node_s / nmsg,
        "sub": 1e6 * sub_th / nmsg if sub_th else float("nan"),
    }


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
        res["thread_cpu_us_per_msg"] = _thread_per_msg(res, pub_res, sub_res, nth1 - nth0)
    res.update(_node_deltas(before, after))
    if mode != "flood":
        res["rate"] = rate
    if mode == "latency":
        res["latency"] = _lat_stats(sub_res["lat_ns"])
        res["hop1_publish_to_node"] = _lat_stats(sub_res["hop1_ns"])
        res["hop2_node_to_callback"] = _lat_stats(sub_res["hop2_ns"])
    return res


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
