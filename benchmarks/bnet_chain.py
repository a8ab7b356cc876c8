"""The network benchmark's 3-node chain A -> B -> C: starting its nodes, one measured run
through it (publisher on A, subscriber on C) and the check of the nodes' counters against
what the clients saw.

``bench_network`` re-exports the names other benchmarks use (``bnet.start_chain``,
``bnet.run_chain``, ``bnet.stop_nodes``, ``bnet._start_node``, ``bnet.CHAIN_IDS``).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers

log = bn.log

CONVERGE_TIMEOUT_S = 30.0
CHAIN_IDS = ("bench-A", "bench-B", "bench-C")
TOPICS = (bn.TOPIC, bn.WARM_TOPIC, bn.STOP_TOPIC)


# -- nodes ----------------------------------------------------------------------------------


def _start_node(
    ctx: Any,
    tmp: str,
    stop: Any,
    name: str,
    peers: tuple[str, ...],
    prof_dir: str | None,
    gc_tuned: bool = True,
) -> dict[str, Any]:
    """A node in its own process (retried with a fresh process and port if it fails)."""
    prof = os.path.join(prof_dir, f"node-{name}.prof") if prof_dir else None
    for attempt in range(1, 4):
        q = ctx.Queue()
        mine, theirs = ctx.Pipe()
        data_dir = os.path.join(tmp, f"{name}-{attempt}")
        proc = bn._start(ctx, bn.node_main, q, data_dir, stop, prof, theirs, name, peers, gc_tuned)
        info = bn._Inbox(q).get("node", 30)
        if "error" not in info:
            return {"name": name, "proc": proc, "pid": proc.pid, "conn": mine, **info}
        log(f"  node {name} start failed (attempt {attempt}/3): {info['error']}")
        bn._stop_procs([proc], 5)
    raise RuntimeError(f"node {name} did not start in 3 attempts")


def _status(client: Any) -> dict[str, Any]:
    st = client.status()
    c = st["counters"]
    return {
        "received": c["received"],
        "forwarded": c["forwarded"],
        "delivered": c["delivered"],
        "duplicates": c["duplicates"],
        "links_down": c["links_down"],
        "dropped": dict(c["dropped"]),
        "links": {
            f"{ln['name']}<->{ln['peer']}": {
                "state": ln["state"],
                "msgs_in": ln["msgs_in"],
                "msgs_out": ln["msgs_out"],
                "drops": ln["drops"],
            }
            for ln in st["links"]
        },
    }


def _status_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: after[k] - before[k]
        for k in ("received", "forwarded", "delivered", "duplicates", "links_down")
    }
    out["dropped"] = {
        k: v - before["dropped"].get(k, 0)
        for k, v in after["dropped"].items()
        if v - before["dropped"].get(k, 0)
    }
    links = {}
    for name, ln in after["links"].items():
        b = before["links"].get(name, {"msgs_in": 0, "msgs_out": 0, "drops": 0})
        links[name] = {
            "state": ln["state"],
            **{k: ln[k] - b[k] for k in ("msgs_in", "msgs_out", "drops")},
        }
    out["links"] = links
    return out


def _wait(pred: Any, timeout: float, what: str, step: float = 0.05) -> float:
    """Poll ``pred()`` until true; return the seconds it took (raise on timeout)."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(step)


def start_chain(
    ctx: Any, tmp: str, stop: Any, prof_dir: str | None = None, gc_tuned: bool = True
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Nodes A, B, C; B dials A, C dials B (duplex). Returns (nodes, info) once the links
    are up on both ends; each node dict gets a status client under "client". The nodes'
    garbage collectors are tuned as ``zbroker start`` tunes its own unless ``gc_tuned``
    is False."""
    from zbroker import Client

    nodes: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for name in CHAIN_IDS:
        peers = (nodes[-1]["endpoint"],) if nodes else ()
        nodes.append(_start_node(ctx, tmp, stop, name, peers, prof_dir, gc_tuned))
        nodes[-1]["client"] = Client(nodes[-1]["endpoint"])
        log(
            f"  node {name} pid {nodes[-1]['pid']} at {nodes[-1]['endpoint']}"
            + (f", dials {peers[0]}" if peers else "")
        )

    def links_up() -> bool:
        want = {0: 1, 1: 2, 2: 1}  # A: from B; B: to A and from C; C: to B
        for i, node in enumerate(nodes):
            links = node["client"].status()["links"]
            if sum(1 for ln in links if ln["state"] == "up") != want[i]:
                return False
        return True

    up_s = _wait(links_up, 30, "chain links up")
    info = {"start_s": time.monotonic() - t0, "links_up_s": up_s}
    log(f"  chain links up {up_s:.2f} s after the last node started")
    return nodes, info


def stop_nodes(nodes: list[dict[str, Any]], stop: Any) -> None:
    for node in nodes:
        client = node.pop("client", None)
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # never let a close error keep a process alive
                log(f"  closing the status client of {node['name']}: {exc}")
    stop.set()
    bn._stop_procs([n["proc"] for n in nodes])


# -- one chain run --------------------------------------------------------------------------


@dataclass
class _Window:
    """What one run's clients reported, and what /proc said at either end of its window."""

    pub: dict[str, Any]
    sub: dict[str, Any]
    conv_s: float
    routes_at_a: list[dict[str, Any]]
    wall: float
    ticks: tuple[Any, Any]
    ours_s: float
    cpu: tuple[list[float], list[float]]
    threads: tuple[list[float], list[float]]


def run_chain(
    ctx: Any,
    nodes: list[dict[str, Any]],
    mode: str,
    n: int,
    rate: float = 0.0,
    profile_dir: str | None = None,
    keep_samples: bool = False,
) -> dict[str, Any]:
    """Publisher on A, subscriber on C; like ``bench_node.run_zb`` with two endpoints.
    ``keep_samples``: a latency run's every latency (ns) in ``lat_ns``, to pool runs."""
    a, c = nodes[0], nodes[-1]
    before = [_status(nd["client"]) for nd in nodes]
    sprof = os.path.join(profile_dir, "subscriber.prof") if profile_dir else None
    w = _run_clients(ctx, nodes, mode, n, rate, profile_dir)
    # The subscriber has gone: wait until A no longer routes C's interest, so the next
    # run's convergence check cannot be satisfied by this run's stale entries.
    withdraw_s = _wait(
        lambda: not any(r["origin"] == c["id"] and r["link"] for r in a["client"].routes()),
        CONVERGE_TIMEOUT_S,
        "withdrawal of C's interest at A",
    )
    after = [_status(nd["client"]) for nd in nodes]
    res = bn._summarise(w.pub, w.sub)
    res.update(bn._machine_load(w.ticks[0], w.ticks[1], w.wall, w.ours_s))
    res["converge_s"] = w.conv_s
    res["withdraw_s"] = withdraw_s
    res["route_at_a"] = w.routes_at_a
    names = [nd["name"] for nd in nodes]
    _cpu_figures(res, w, names, mode)
    res["warm_sent"] = w.pub.get("warm_sent", 0)
    res["warm_received"] = w.sub.get("warm_received", 0)
    deltas = {nm: _status_delta(b, af) for nm, b, af in zip(names, before, after, strict=True)}
    res["counters"] = deltas
    # a profiled subscriber publishes one stop marker on C (bench_node.zb_sub), which C
    # delivers to it locally: one delivery at C that no other counter sees
    res["counter_check"] = _check_counters(res, deltas, names, local_at_c=1 if sprof else 0)
    if mode != "flood":
        res["rate"] = rate
    if mode == "latency":
        res["latency"] = bn._lat_stats(w.sub["lat_ns"])
        res["hop1_publish_to_node"] = bn._lat_stats(w.sub["hop1_ns"])
        res["hop2_node_to_callback"] = bn._lat_stats(w.sub["hop2_ns"])
        if keep_samples:
            res["lat_ns"] = w.sub["lat_ns"]
    return res


def _run_clients(
    ctx: Any,
    nodes: list[dict[str, Any]],
    mode: str,
    n: int,
    rate: float,
    profile_dir: str | None,
) -> _Window:
    """Subscriber on C, publisher on A once A has C's interest; /proc around the run."""
    a, c = nodes[0], nodes[-1]
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    sub_ready, go, warm_done, started, pub_done, sub_done = (ctx.Event() for _ in range(6))
    pprof = os.path.join(profile_dir, "publisher.prof") if profile_dir else None
    sprof = os.path.join(profile_dir, "subscriber.prof") if profile_dir else None
    sub = bn._start(
        ctx, bn.zb_sub, q, c["endpoint"], sub_ready, warm_done, pub_done, sub_done, mode, n, sprof
    )
    # the publisher's "subscriber ready" is ours to give: only once A has C's interest
    pub = bn._start(
        ctx, bn.zb_pub, q, a["endpoint"], go, warm_done, started, sub_done, mode, n, rate, pprof
    )
    pids = [pub.pid, sub.pid] + [nd["pid"] for nd in nodes]
    try:
        if not sub_ready.wait(60):
            raise TimeoutError("subscriber on C never subscribed")
        conv_s, routes_at_a = _converge(a, c["id"])
        go.set()
        if not started.wait(60):
            raise TimeoutError("zbroker publisher never started")
        # all from /proc, never a call into a node loop (which may be busy for a while)
        wall0, ticks0 = time.monotonic(), bn._cpu_ticks()
        ours0 = sum(bn._cpu_seconds(p) for p in pids)
        cpu0 = [bn._cpu_seconds(nd["pid"]) for nd in nodes]
        th0 = [bn._thread_cpu_seconds(nd["pid"], nd["node_tid"]) for nd in nodes]
        pub_res = inbox.get("pub", 180)
        if "error" in pub_res:
            raise RuntimeError(f"zbroker publisher: {pub_res['error']}")
        pub_done.set()
        sub_res = inbox.get("sub", 180)
        wall1, ticks1 = time.monotonic(), bn._cpu_ticks()
        cpu1 = [bn._cpu_seconds(nd["pid"]) for nd in nodes]
        th1 = [bn._thread_cpu_seconds(nd["pid"], nd["node_tid"]) for nd in nodes]
        ours1 = sum(bn._cpu_seconds(p) for p in pids)
    finally:
        go.set()
        pub_done.set()
        sub_done.set()
        bn._stop_procs([sub, pub])
    return _Window(
        pub_res,
        sub_res,
        conv_s,
        routes_at_a,
        wall1 - wall0,
        (ticks0, ticks1),
        ours1 - ours0,
        cpu=(cpu0, cpu1),
        threads=(th0, th1),
    )


def _converge(a: dict[str, Any], c_id: str) -> tuple[float, list[dict[str, Any]]]:
    """Wait until A routes C's interest in every benchmark topic over its link: the
    seconds it took, and A's routes for the measured topic."""

    def converged() -> bool:
        have = {r["pattern"] for r in a["client"].routes() if r["origin"] == c_id and r["link"]}
        return all(t in have for t in TOPICS)

    conv_s = _wait(converged, CONVERGE_TIMEOUT_S, "C's interest at A", step=0.005)
    return conv_s, [r for r in a["client"].routes() if r["pattern"] == bn.TOPIC]


def _cpu_figures(res: dict[str, Any], w: _Window, names: list[str], mode: str) -> None:
    """CPU us per message by process (and, for a flood run, by Python thread), and each
    node's share of a core over the window."""
    nmsg = max(1, res["published"])
    cpu0, cpu1 = w.cpu
    res["cpu_us_per_msg"] = {
        "pub": 1e6 * w.pub["cpu_s"] / nmsg,
        **{nm: 1e6 * (c1 - c0) / nmsg for nm, c0, c1 in zip(names, cpu0, cpu1, strict=True)},
        "sub": 1e6 * w.sub["cpu_s"] / nmsg,
    }
    res["cpu_us_per_msg"]["total"] = sum(res["cpu_us_per_msg"].values())
    res["node_cpu_pct"] = {
        nm: 100 * (c1 - c0) / w.wall if w.wall > 0 else 0.0
        for nm, c0, c1 in zip(names, cpu0, cpu1, strict=True)
    }
    if mode == "flood":
        th0, th1 = w.threads
        sub_th = w.sub.get("thread_cpu_s")
        res["thread_cpu_us_per_msg"] = {
            "pub": 1e6 * w.pub["thread_cpu_s"] / nmsg,
            **{nm: 1e6 * (t1 - t0) / nmsg for nm, t0, t1 in zip(names, th0, th1, strict=True)},
            "sub": 1e6 * sub_th / nmsg if sub_th else float("nan"),
        }


def _check_counters(
    res: dict[str, Any], d: dict[str, dict[str, Any]], names: list[str], local_at_c: int = 0
) -> dict[str, Any]:
    """Compare the nodes' counters with what the clients saw (warm-up included: the
    counters cannot tell the warm-up topic from the measured one). ``local_at_c``:
    messages published on C itself (and delivered there) during the run."""
    a, b, c = (d[nm] for nm in names)
    sent = res["published"] + res["warm_sent"]
    got = res["delivered"] + res["warm_received"]
    drops = {nm: d[nm]["dropped"] for nm in names if d[nm]["dropped"]}
    link_drops = sum(ln["drops"] for nm in names for ln in d[nm]["links"].values())
    checks = {
        "A received = published (incl. warm-up)": (a["received"], sent),
        "A forwarded = A received": (a["forwarded"], a["received"]),
        "B forwarded = A forwarded": (b["forwarded"], a["forwarded"]),
        "C delivered = B forwarded": (c["delivered"] - local_at_c, b["forwarded"]),
        "subscriber received = C delivered": (got, c["delivered"] - local_at_c),
    }
    ok = all(x == y for x, y in checks.values()) and not drops and not link_drops
    ok = ok and not any(d[nm]["links_down"] for nm in names)
    return {
        "ok": ok,
        "pairs": {k: list(v) for k, v in checks.items()},
        "drops": drops,
        "link_drops": link_drops,
        "links_down": {nm: d[nm]["links_down"] for nm in names},
        "duplicates": {nm: d[nm]["duplicates"] for nm in names},
    }
