#!/usr/bin/env python3
"""Network-of-brokers benchmark (issue 3): a 3-node chain against one node and raw pyzmq.

    .venv/bin/python benchmarks/bench_network.py            # full run (about 2 minutes)
    .venv/bin/python benchmarks/bench_network.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_network.py --json     # machine-readable result on stdout
    .venv/bin/python benchmarks/bench_network.py --profile  # cProfile one chain flood run

Measures, in one run, with 100-byte payloads, Python clients (``zbroker.Client``) and every
role in its own process (multiprocessing "spawn"), all on 127.0.0.1:

(a) raw pyzmq PUB -> SUB throughput: the ceiling (as ``bench_node.py`` (a)).
(b) one node: publisher -> node -> subscriber, delivered msg/s and lost (as
    ``bench_node.py`` (b)).
(c) a 3-node chain A -> B -> C. Each node is a ``zbroker.Broker`` in its own process on
    its own data directory; B dials A and C dials B with duplex links (what
    ``zbroker start --peer`` configures). The publisher is a client of A, the subscriber a
    client of C. Before anything is published the script waits for the links to be up and
    then polls ``Client(A).routes()`` until C's interest in every benchmark topic is in A's
    table. Delivered msg/s, exact lost count (published - delivered, after the subscriber
    has drained), checked against every node's status counters (A received, A/B forwarded,
    C delivered, drops, link counters). If a flood run loses messages, paced runs look for
    a rate with zero loss.
(d) p50/p99 publish -> callback latency at 2,000 msg/s for 5 s, through one node and
    through the chain (timestamp in the payload, ``time.perf_counter_ns``: one clock for
    every process on the machine).
(m) the machine's own wake-up lateness, measured just before the chain's latency run: a
    thread sleeping to a 2,000-per-second schedule for 3 s, nothing else of ours running
    (``bench_node.wake_probe``). It tells a reader whether the VM itself stalled threads.
(e) the simulator: ``zbroker simulate config/topologies/mesh200.toml --json`` run as a
    subprocess and timed; its figures are printed.

Throughput runs are repeated (``--repeat``, default 3) and the median counts. Every child
process is stopped by its PID in a ``finally`` block (SIGTERM, SIGINT and the overall
deadline included); each child also exits on its own if its parent goes away.

The roles, the measurement windows and the CPU/load accounting are those of
``bench_node.py``, imported from it, so the one-node figures of both scripts are the same
measurement.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers
from _common import REPO, snapshot_sources

log = bn.log
HOST = bn.HOST
ROOT = REPO

CHAIN_TARGET_RATE = 120_000.0
CHAIN_TARGET_P99_MS = 3.0
AIM_RATE = 260_000.0  # the project's aim (info only)
AIM_P99_MS = 0.6
SIM_TARGET_S = 60.0
SIM_TIMEOUT_S = 240.0
DEFAULT_TOPOLOGY = "config/topologies/mesh200.toml"
RUN_DEADLINE_S = 600  # the whole benchmark, simulator included (SIGALRM in the parent)
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
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    sub_ready, go, warm_done, started, pub_done, sub_done = (ctx.Event() for _ in range(6))
    before = [_status(nd["client"]) for nd in nodes]
    pprof = os.path.join(profile_dir, "publisher.prof") if profile_dir else None
    sprof = os.path.join(profile_dir, "subscriber.prof") if profile_dir else None
    sub = bn._start(
        ctx, bn.zb_sub, q, c["endpoint"], sub_ready, warm_done, pub_done, sub_done, mode, n, sprof
    )
    # the publisher's "subscriber ready" is ours to give: only once A has C's interest
    pub = bn._start(
        ctx, bn.zb_pub, q, a["endpoint"], go, warm_done, started, sub_done, mode, n, rate, pprof
    )
    procs = [sub, pub]
    pids = [pub.pid, sub.pid] + [nd["pid"] for nd in nodes]
    try:
        if not sub_ready.wait(60):
            raise TimeoutError("subscriber on C never subscribed")
        c_id = c["id"]

        def converged() -> bool:
            have = {r["pattern"] for r in a["client"].routes() if r["origin"] == c_id and r["link"]}
            return all(t in have for t in TOPICS)

        conv_s = _wait(converged, CONVERGE_TIMEOUT_S, "C's interest at A", step=0.005)
        routes_at_a = [r for r in a["client"].routes() if r["pattern"] == bn.TOPIC]
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
        bn._stop_procs(procs)
    # The subscriber has gone: wait until A no longer routes C's interest, so the next
    # run's convergence check cannot be satisfied by this run's stale entries.
    withdraw_s = _wait(
        lambda: not any(r["origin"] == c["id"] and r["link"] for r in a["client"].routes()),
        CONVERGE_TIMEOUT_S,
        "withdrawal of C's interest at A",
    )
    after = [_status(nd["client"]) for nd in nodes]
    res = bn._summarise(pub_res, sub_res)
    res.update(bn._machine_load(ticks0, ticks1, wall1 - wall0, ours1 - ours0))
    res["converge_s"] = conv_s
    res["withdraw_s"] = withdraw_s
    res["route_at_a"] = routes_at_a
    nmsg = max(1, res["published"])
    wall = wall1 - wall0
    names = [nd["name"] for nd in nodes]
    res["cpu_us_per_msg"] = {
        "pub": 1e6 * pub_res["cpu_s"] / nmsg,
        **{nm: 1e6 * (c1 - c0) / nmsg for nm, c0, c1 in zip(names, cpu0, cpu1, strict=True)},
        "sub": 1e6 * sub_res["cpu_s"] / nmsg,
    }
    res["cpu_us_per_msg"]["total"] = sum(res["cpu_us_per_msg"].values())
    res["node_cpu_pct"] = {
        nm: 100 * (c1 - c0) / wall if wall > 0 else 0.0
        for nm, c0, c1 in zip(names, cpu0, cpu1, strict=True)
    }
    if mode == "flood":
        sub_th = sub_res.get("thread_cpu_s")
        res["thread_cpu_us_per_msg"] = {
            "pub": 1e6 * pub_res["thread_cpu_s"] / nmsg,
            **{nm: 1e6 * (t1 - t0) / nmsg for nm, t0, t1 in zip(names, th0, th1, strict=True)},
            "sub": 1e6 * sub_th / nmsg if sub_th else float("nan"),
        }
    res["warm_sent"] = pub_res.get("warm_sent", 0)
    res["warm_received"] = sub_res.get("warm_received", 0)
    deltas = {nm: _status_delta(b, af) for nm, b, af in zip(names, before, after, strict=True)}
    res["counters"] = deltas
    # a profiled subscriber publishes one stop marker on C (bench_node.zb_sub), which C
    # delivers to it locally: one delivery at C that no other counter sees
    res["counter_check"] = _check_counters(res, deltas, names, local_at_c=1 if sprof else 0)
    if mode != "flood":
        res["rate"] = rate
    if mode == "latency":
        res["latency"] = bn._lat_stats(sub_res["lat_ns"])
        res["hop1_publish_to_node"] = bn._lat_stats(sub_res["hop1_ns"])
        res["hop2_node_to_callback"] = bn._lat_stats(sub_res["hop2_ns"])
        if keep_samples:
            res["lat_ns"] = sub_res["lat_ns"]
    return res


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


def _print_chain_run(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {bn._fmt_rate(r['delivered_rate'])}; "
        f"publisher sent at {bn._fmt_rate(r['publish_rate'])}; "
        f"C's interest reached A {1000 * r['converge_s']:.0f} ms after the subscriber's "
        "subscriptions were confirmed"
    )
    u = r["cpu_us_per_msg"]
    if r.get("rate") is None:
        log(
            "    CPU per message: "
            + ", ".join(f"{k} {v:.2f} us" for k, v in u.items() if k != "total")
            + f", total {u['total']:.2f} us"
        )
    if "thread_cpu_us_per_msg" in r:
        t = r["thread_cpu_us_per_msg"]
        log(
            "    of which the Python threads: "
            + ", ".join(f"{k} {v:.2f} us" for k, v in t.items())
            + "; the rest is libzmq I/O threads"
        )
    log(
        "    nodes' CPU: "
        + ", ".join(f"{k} {v:.0f}% of a core" for k, v in r["node_cpu_pct"].items())
        + f"; machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )
    chk = r["counter_check"]
    log(
        "    node counters "
        + ("agree" if chk["ok"] else "DISAGREE")
        + ": "
        + "; ".join(f"{k}: {x:,} vs {y:,}" for k, (x, y) in chk["pairs"].items())
        + f"; drops {chk['drops'] or 0}, link drops {chk['link_drops']}, links down "
        f"{chk['links_down']}, duplicates {chk['duplicates']}"
    )
    if "latency" in r:
        lat = r["latency"]
        log(
            f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
            f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, p99.9 {lat['p999_ms']:.3f}, "
            f"max {lat['max_ms']:.3f}, mean {lat['mean_ms']:.3f} ms"
        )
        for key, label in (
            ("hop1_publish_to_node", "publish -> A"),
            ("hop2_node_to_callback", "A -> callback on C"),
        ):
            h = r[key]
            log(
                f"    {label} (CLOCK_REALTIME, split at A's receive stamp): "
                f"p50 {h['p50_ms']:.3f} ms, p99 {h['p99_ms']:.3f}, max {h['max_ms']:.3f}"
            )


# -- reference: the same five-process pipeline with bare Python relays -------------------


def relay_hop_main(q: Any, stop: Any, tag: str, upstream_port: int | None, idle: int = 0) -> None:
    """One hop of the reference chain: PULL (first hop) or SUB (connected to the previous
    hop's PUB) -> PUB, in one Python loop; no decoding, routing or re-encoding. ``idle``:
    that many bound DEALER sockets polled beside the input, never sent to."""
    bn._guard_child()
    import zmq

    ctx = zmq.Context()
    if upstream_port is None:
        inp = ctx.socket(zmq.PULL)
        inp.setsockopt(zmq.RCVHWM, bn.HWM)
        in_port = inp.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    else:
        inp = ctx.socket(zmq.SUB)
        inp.setsockopt(zmq.RCVHWM, bn.HWM)
        inp.setsockopt(zmq.SUBSCRIBE, b"")
        inp.connect(f"tcp://{HOST}:{upstream_port}")
        in_port = upstream_port
    out = ctx.socket(zmq.PUB)
    out.setsockopt(zmq.SNDHWM, bn.HWM)
    for sock in (inp, out):
        sock.setsockopt(zmq.LINGER, 0)
    out_port = out.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    others = tuple(ctx.socket(zmq.DEALER) for _ in range(idle))
    for sock in others:
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    q.put((tag, {"in_port": in_port, "out_port": out_port}))
    bn.drain_loop(inp, out.send, stop, 200, others)
    for sock in (inp, out, *others):
        sock.close()
    ctx.term()


def start_relay_chain(ctx: Any, stop: Any, hops: int = 3, idle: int = 0) -> dict[str, Any]:
    """``hops`` relays in a line (each SUB to the previous one's PUB): the first one's
    PULL port, the last one's PUB port, their processes and PIDs in order. ``idle``: the
    idle sockets each relay polls beside its input (:func:`relay_hop_main`)."""
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    procs: list[Any] = []
    upstream: int | None = None
    first_in = 0
    for i in range(hops):
        procs.append(bn._start(ctx, relay_hop_main, q, stop, f"hop{i}", upstream, idle))
        info = inbox.get(f"hop{i}", 30)
        if i == 0:
            first_in = info["in_port"]
        upstream = info["out_port"]
    assert upstream is not None
    pids = [p.pid for p in procs]
    return {"in_port": first_in, "out_port": upstream, "pid": pids[0], "pids": pids, "procs": procs}


def _print_relay_run(name: str, r: dict[str, Any]) -> None:
    u = r["cpu_us_per_msg"]
    cpu = (
        ""
        if "latency" in r
        else f"CPU per message pub {u['pub']:.2f} + 3 relays {u['mid']:.2f} + sub "
        f"{u['sub']:.2f} us; "
    )
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {bn._fmt_rate(r['delivered_rate'])}; {cpu}other "
        f"processes {r['other_cores']:.2f} cores"
    )
    if "latency" in r:
        lat = r["latency"]
        log(
            f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
            f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, max {lat['max_ms']:.3f} ms"
        )


# -- the simulator --------------------------------------------------------------------------


def _zbroker_exe() -> str:
    exe = Path(sys.executable).parent / "zbroker"
    if exe.exists():
        return str(exe)
    found = shutil.which("zbroker")
    if found is None:
        raise RuntimeError("the zbroker command is not installed next to this Python")
    return found


def run_simulator(topology: str) -> dict[str, Any]:
    """``zbroker simulate TOPOLOGY --json`` as a subprocess, timed; stopped by PID."""
    cmd = [_zbroker_exe(), "simulate", topology, "--json"]
    shown = f"zbroker simulate {topology} --json"
    log(f"(e) {shown} (cwd {ROOT}) ...")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak_rss = 0
    try:
        out, err = proc.communicate(timeout=SIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"command": shown, "error": f"did not finish within {SIM_TIMEOUT_S:g} s"}
    finally:
        if proc.poll() is None:
            proc.terminate()  # by PID
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    wall = time.perf_counter() - t0
    try:
        import resource

        peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    except (ImportError, OSError):
        pass
    if proc.returncode != 0:
        return {
            "command": shown,
            "error": f"exit status {proc.returncode}: {err.strip()[-500:]}",
            "wall_s": wall,
        }
    try:
        report = json.loads(out)
    except ValueError:
        return {"command": shown, "error": f"not JSON: {out[:200]!r}", "wall_s": wall}
    return {"command": shown, "wall_s": wall, "max_child_rss_bytes": peak_rss, "report": report}


# -- main -----------------------------------------------------------------------------------


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return bn._median_run(runs)


def _zero_loss_rate(floods: list[dict[str, Any]], paced: list[dict[str, Any]]) -> float | None:
    if not any(r["lost"] for r in floods):
        return float(_median(floods)["delivered_rate"])
    ok = [r["delivered_rate"] for r in paced if r["lost"] == 0]
    return max(ok) if ok else None


def _paced_rates(flood_rate: float, target: float) -> list[float]:
    rates = [target] if flood_rate >= target else []
    rates += [flood_rate * f for f in (0.9, 0.6, 0.3)]
    return rates[:3]


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
        "--quick",
        action="store_true",
        help="smoke run: 20,000 messages, 1 repeat, 1 s latency (simulator still runs)",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument("--latency-seconds", type=float, default=5.0)
    ap.add_argument(
        "--topology", default=DEFAULT_TOPOLOGY, help="simulator topology (relative to the repo)"
    )
    ap.add_argument("--no-sim", action="store_true", help="skip (e), the simulator")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="only one chain flood run, with cProfile in every node thread and client",
    )
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    args = ap.parse_args(argv)
    if not args.no_snapshot:
        snapshot_sources()
    n = 20_000 if args.quick and args.messages == 200_000 else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    lat_s = 1.0 if args.quick else args.latency_seconds
    n_lat = int(bn.LATENCY_RATE * lat_s) + bn.LATENCY_LEAD_IN

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
        "payload_bytes": bn.PAYLOAD_SIZE,
        "latency_rate": bn.LATENCY_RATE,
        "latency_seconds": lat_s,
    }
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-netbench-")
    stops: list[Any] = []
    nodes: list[dict[str, Any]] = []
    one: dict[str, Any] | None = None
    t_begin = time.monotonic()
    ticks_begin = bn._cpu_ticks()
    try:
        log(f"zbroker network benchmark: {n:,} messages of {bn.PAYLOAD_SIZE} B x {repeat}")
        log(f"  {info}")
        if args.profile:
            stop = ctx.Event()
            stops.append(stop)
            log("chain A -> B -> C with cProfile in every node thread ...")
            nodes, _ = start_chain(ctx, tmp, stop, prof_dir=tmp)
            r = run_chain(ctx, nodes, "flood", n, profile_dir=tmp)
            _print_chain_run("chain flood (profiled: slower than normal)", r)
            stop_nodes(nodes, stop)
            nodes = []
            for role in (*(f"node-{nm}" for nm in CHAIN_IDS), "publisher", "subscriber"):
                path = os.path.join(tmp, f"{role}.prof")
                if not os.path.exists(path):
                    log(f"(no profile for {role})")
                    continue
                print(f"\n==== cProfile: {role} (sorted by tottime, top {args.profile_top}) ====")
                st = pstats.Stats(path, stream=sys.stdout)
                st.strip_dirs().sort_stats("tottime").print_stats(args.profile_top)
            return 0

        # (a) raw ceiling
        result["a_raw"] = []
        for i in range(repeat):
            log(f"(a) raw pyzmq PUB -> SUB, flood, run {i + 1}/{repeat} ...")
            result["a_raw"].append(bn.run_raw(ctx, "flood", n))
            bn._print_run("raw", result["a_raw"][-1])

        # (b) + (d) one node
        stop1 = ctx.Event()
        stops.append(stop1)
        node_proc, endpoint, nconn = bn._start_node(ctx, tmp, stop1, False)
        from zbroker import Client

        one = {"proc": node_proc, "client": Client(endpoint)}
        log(f"one node: pid {node_proc.pid} at {endpoint}")
        result["b_flood"] = []
        for i in range(repeat):
            log(f"(b) one node, flood, run {i + 1}/{repeat} ...")
            result["b_flood"].append(
                bn.run_zb(ctx, endpoint, node_proc.pid, nconn, one["client"], "flood", n)
            )
            bn._print_run("one node", result["b_flood"][-1])
        result["b_paced"] = []
        if any(r["lost"] for r in result["b_flood"]):
            for rate in _paced_rates(_median(result["b_flood"])["delivered_rate"], 150_000.0):
                log(f"(b) a flood run lost messages: paced run at {bn._fmt_rate(rate)} ...")
                pr = bn.run_zb(ctx, endpoint, node_proc.pid, nconn, one["client"], "paced", n, rate)
                result["b_paced"].append(pr)
                bn._print_run(f"one node paced {rate:,.0f}", pr)
                if pr["lost"] == 0:
                    break
        log(f"(d) one node, latency at {bn.LATENCY_RATE:,.0f} msg/s for {lat_s:g} s ...")
        result["d_one_latency"] = bn.run_zb(
            ctx, endpoint, node_proc.pid, nconn, one["client"], "latency", n_lat, bn.LATENCY_RATE
        )
        bn._print_run("one node latency", result["d_one_latency"])
        one["client"].close()
        stop1.set()
        bn._stop_procs([node_proc])
        one = None

        # (c) + (d) chain
        stop3 = ctx.Event()
        stops.append(stop3)
        log("(c) chain A -> B -> C ...")
        nodes, chain_info = start_chain(ctx, tmp, stop3)
        result["chain_setup"] = chain_info
        result["c_flood"] = []
        for i in range(repeat):
            log(f"(c) chain, flood, run {i + 1}/{repeat} ...")
            result["c_flood"].append(run_chain(ctx, nodes, "flood", n))
            _print_chain_run("chain", result["c_flood"][-1])
        result["c_paced"] = []
        if any(r["lost"] for r in result["c_flood"]):
            # pace from the runs that lost nothing, if any; else from the best lossy run
            clean = [r for r in result["c_flood"] if not r["lost"]]
            base = (
                _median(clean)["delivered_rate"]
                if clean
                else max(r["delivered_rate"] for r in result["c_flood"])
            )
            for rate in _paced_rates(base, CHAIN_TARGET_RATE):
                log(f"(c) a flood run lost messages: paced run at {bn._fmt_rate(rate)} ...")
                pr = run_chain(ctx, nodes, "paced", n, rate)
                result["c_paced"].append(pr)
                _print_chain_run(f"chain paced {rate:,.0f}", pr)
                if pr["lost"] == 0:
                    break
        log("(m) the machine's own wake-up lateness (a sleeping thread, nothing else of ours) ...")
        result["m_wake"] = bn.wake_probe(1.0 if args.quick else 3.0, bn.LATENCY_RATE)
        log(f"(d) chain, latency at {bn.LATENCY_RATE:,.0f} msg/s for {lat_s:g} s ...")
        result["d_chain_latency"] = run_chain(ctx, nodes, "latency", n_lat, bn.LATENCY_RATE)
        _print_chain_run("chain latency", result["d_chain_latency"])
        result["chain_final_status"] = {nd["name"]: _status(nd["client"]) for nd in nodes}
        stop_nodes(nodes, stop3)
        nodes = []

        # reference: the same five processes with bare Python relays in place of nodes
        stop_r = ctx.Event()
        stops.append(stop_r)
        relays = start_relay_chain(ctx, stop_r)
        result["ref_relay3"] = []
        for i in range(repeat):
            log(f"(ref) raw pyzmq through 3 Python relay processes, flood, run {i + 1}/{repeat}")
            result["ref_relay3"].append(bn.run_raw(ctx, "flood", n, relay=relays))
            _print_relay_run("3 relays", result["ref_relay3"][-1])
        log("(ref) ... latency through the 3 relays ...")
        result["ref_relay3_latency"] = bn.run_raw(
            ctx, "latency", n_lat, bn.LATENCY_RATE, relay=relays
        )
        _print_relay_run("3 relays latency", result["ref_relay3_latency"])
        stop_r.set()
        bn._stop_procs(relays["procs"])

        # (e) simulator: alone on the machine as far as this script goes
        if not args.no_sim:
            result["e_sim"] = run_simulator(args.topology)
            if "error" in result["e_sim"]:
                log(f"  simulator: {result['e_sim']['error']}")
            else:
                log(
                    f"  simulator finished in {result['e_sim']['wall_s']:.1f} s: "
                    f"{json.dumps(result['e_sim']['report'])}"
                )
    finally:
        signal.alarm(0)
        if one is not None:
            try:
                one["client"].close()
            except Exception as exc:
                log(f"  closing the one-node status client: {exc}")
        if nodes:
            stop_nodes(nodes, stops[-1])
        for ev in stops:
            ev.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)

    result["summary"] = summarise(result, ticks_begin, t_begin)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_summary(result)
    return 0


def summarise(result: dict[str, Any], ticks_begin: Any, t_begin: float) -> dict[str, Any]:
    a = _median(result["a_raw"])
    b = _median(result["b_flood"])
    c = _median(result["c_flood"])
    c_zero = _zero_loss_rate(result["c_flood"], result["c_paced"])
    # CPU per message only means something for a run that delivered everything
    clean = [r for r in result["c_flood"] if r["lost"] == 0]
    clean_paced = [r for r in result["c_paced"] if r["lost"] == 0]
    if clean:
        c_ref, c_ref_label = _median(clean), "median loss-free flood run"
    elif clean_paced:
        c_ref, c_ref_label = clean_paced[0], f"paced run at {clean_paced[0]['rate']:,.0f} msg/s"
    else:
        c_ref, c_ref_label = c, "median flood run (it lost messages)"
    b_zero = _zero_loss_rate(result["b_flood"], result["b_paced"])
    d1 = result["d_one_latency"]
    d3 = result["d_chain_latency"]
    c_p99 = d3["latency"].get("p99_ms", float("inf"))
    s: dict[str, Any] = {
        "a_raw_rate": a["delivered_rate"],
        "a_raw_rates": [r["delivered_rate"] for r in result["a_raw"]],
        "a_raw_lost": sum(r["lost"] for r in result["a_raw"]),
        "b_rate": b["delivered_rate"],
        "b_rates": [r["delivered_rate"] for r in result["b_flood"]],
        "b_lost": sum(r["lost"] for r in result["b_flood"]),
        "b_zero_loss_rate": b_zero,
        "b_cpu_us_per_msg": b["cpu_us_per_msg"],
        "b_thread_cpu_us_per_msg": b["thread_cpu_us_per_msg"],
        "b_other_cores": b["other_cores"],
        "c_rate": c["delivered_rate"],
        "c_rates": [r["delivered_rate"] for r in result["c_flood"]],
        "c_lost_per_run": [r["lost"] for r in result["c_flood"]],
        "c_lost": sum(r["lost"] for r in result["c_flood"]),
        "c_published": sum(r["published"] for r in result["c_flood"]),
        "c_zero_loss_rate": c_zero,
        "c_paced": [(r["rate"], r["delivered_rate"], r["lost"]) for r in result["c_paced"]],
        "c_counters_ok": all(r["counter_check"]["ok"] for r in result["c_flood"]),
        "c_counts_agree": [
            all(x == y for x, y in r["counter_check"]["pairs"].values()) for r in result["c_flood"]
        ],
        "c_links_down": [sum(r["counter_check"]["links_down"].values()) for r in result["c_flood"]],
        "c_drops": [r["counter_check"]["drops"] for r in result["c_flood"]],
        "c_ref_run": c_ref_label,
        "c_cpu_us_per_msg": c_ref["cpu_us_per_msg"],
        "c_thread_cpu_us_per_msg": c_ref.get("thread_cpu_us_per_msg"),
        "c_node_cpu_pct": c_ref["node_cpu_pct"],
        "c_other_cores": c_ref["other_cores"],
        "c_steal_pct": c_ref["steal_pct"],
        "c_converge_ms": [1000 * r["converge_s"] for r in result["c_flood"]],
        "c_over_b": c["delivered_rate"] / b["delivered_rate"] if b["delivered_rate"] else 0.0,
        "c_over_a": c["delivered_rate"] / a["delivered_rate"] if a["delivered_rate"] else 0.0,
        "d_one_p50_ms": d1["latency"].get("p50_ms"),
        "d_one_p99_ms": d1["latency"].get("p99_ms"),
        "d_one_lost": d1["lost"],
        "d_one_other_cores": d1["other_cores"],
        "d_chain_p50_ms": d3["latency"].get("p50_ms"),
        "d_chain_p99_ms": c_p99,
        "d_chain_lost": d3["lost"],
        "d_chain_other_cores": d3["other_cores"],
        "d_chain_hop1_p50_ms": d3["hop1_publish_to_node"].get("p50_ms"),
        "d_chain_hop1_p99_ms": d3["hop1_publish_to_node"].get("p99_ms"),
        "d_chain_hop2_p50_ms": d3["hop2_node_to_callback"].get("p50_ms"),
        "d_chain_hop2_p99_ms": d3["hop2_node_to_callback"].get("p99_ms"),
        "d_chain_counters_ok": d3["counter_check"]["ok"],
    }
    if result.get("ref_relay3"):
        r3 = _median(result["ref_relay3"])
        s["relay3_rate"] = r3["delivered_rate"]
        s["relay3_rates"] = [r["delivered_rate"] for r in result["ref_relay3"]]
        s["relay3_lost"] = sum(r["lost"] for r in result["ref_relay3"])
        s["relay3_cpu_us_per_msg"] = r3["cpu_us_per_msg"]
        lat3 = result["ref_relay3_latency"]["latency"]
        s["relay3_p50_ms"] = lat3.get("p50_ms")
        s["relay3_p99_ms"] = lat3.get("p99_ms")
        s["relay3_latency_other_cores"] = result["ref_relay3_latency"]["other_cores"]
    wake = result.get("m_wake")
    if wake:
        s["m_wake_p50_ms"] = wake["p50_ms"]
        s["m_wake_p99_ms"] = wake["p99_ms"]
        s["m_wake_p999_ms"] = wake["p999_ms"]
        s["m_wake_over_1ms"] = wake["over_1ms"]
        s["m_wake_samples"] = wake["samples"]
    sim = result.get("e_sim")
    if sim is not None:
        s["e_wall_s"] = sim.get("wall_s")
        s["e_error"] = sim.get("error")
        s["e_report"] = sim.get("report")
        s["e_peak_rss_bytes"] = sim.get("max_child_rss_bytes")
    load = bn._machine_load(ticks_begin, bn._cpu_ticks(), time.monotonic() - t_begin, 0.0)
    s["steal_pct"] = load["steal_pct"]
    s["busy_cores"] = load["busy_cores"]
    s["elapsed_s"] = time.monotonic() - t_begin
    s["pass"] = {
        "chain_rate_zero_loss": c_zero is not None and c_zero >= CHAIN_TARGET_RATE,
        "chain_p99": c_p99 <= CHAIN_TARGET_P99_MS,
        "sim_under_60s": None  # not run (--no-sim)
        if sim is None
        else "error" not in sim and sim.get("wall_s", float("inf")) < SIM_TARGET_S,
    }
    s["aim"] = {
        "rate": c_zero is not None and c_zero >= AIM_RATE,
        "p99": c_p99 <= AIM_P99_MS,
    }
    return s


def _us(d: dict[str, float], keys: tuple[str, ...]) -> str:
    return " + ".join(f"{d[k]:.1f}" for k in keys)


def print_summary(result: dict[str, Any]) -> None:
    s, m = result["summary"], result["machine"]
    ok, aim = s["pass"], s["aim"]
    fr, v = bn._fmt_rate, bn._verdict
    chain_keys = ("pub", *CHAIN_IDS, "sub")
    cz = s["c_zero_loss_rate"]
    cz_text = f"{fr(cz)}, 0 lost" if cz is not None else "no run without loss"
    rows: list[tuple[str, str, str, str]] = [
        ("(a) raw pyzmq PUB->SUB delivered", fr(s["a_raw_rate"]), "ceiling", "-"),
        ("", bn._rates(s["a_raw_rates"]), f"lost {s['a_raw_lost']:,}", ""),
        ("(b) one node delivered", fr(s["b_rate"]), "reference", "-"),
        ("", bn._rates(s["b_rates"]), f"lost {s['b_lost']:,}", ""),
        (
            "    CPU us/msg pub + node + sub",
            _us(s["b_cpu_us_per_msg"], ("pub", "mid", "sub"))
            + f" = {s['b_cpu_us_per_msg']['total']:.1f}",
            "Python threads: " + _us(s["b_thread_cpu_us_per_msg"], ("pub", "mid", "sub")),
            "",
        ),
        ("(c) chain A->B->C delivered", fr(s["c_rate"]), "", ""),
        ("", bn._rates(s["c_rates"]), f"lost {s['c_lost']:,}", ""),
        (
            "    chain lost (published - delivered)",
            " / ".join(f"{x:,}" for x in s["c_lost_per_run"]),
            f"of {s['c_published']:,} published",
            "",
        ),
        (
            "    chain rate with zero loss",
            cz_text,
            ">= 120,000 msg/s, 0 lost",
            v(ok["chain_rate_zero_loss"]),
        ),
    ]
    for rate, got, lost in s["c_paced"]:
        rows.append((f"    paced run at {rate:,.0f} msg/s", fr(got), f"lost {lost:,}", ""))
    th = s["c_thread_cpu_us_per_msg"]
    rows += [
        (
            "    node counts = client counts",
            " / ".join("yes" if x else "NO" for x in s["c_counts_agree"]),
            "per flood run (see log)",
            "",
        ),
        (
            "    links declared down (A+B+C)",
            " / ".join(str(x) for x in s["c_links_down"]),
            "per flood run; 0 expected",
            "",
        ),
        (
            "    CPU us/msg pub + A + B + C + sub",
            _us(s["c_cpu_us_per_msg"], chain_keys) + f" = {s['c_cpu_us_per_msg']['total']:.1f}",
            s["c_ref_run"],
            "",
        ),
        (
            "      of which Python threads",
            _us(th, chain_keys) if th else "n/a (paced run)",
            "",
            "",
        ),
        (
            "    node CPU A / B / C (% of a core)",
            " / ".join(f"{s['c_node_cpu_pct'][k]:.0f}" for k in CHAIN_IDS),
            f"other procs {s['c_other_cores']:.2f} cores",
            "",
        ),
        ("    chain / one node", f"{s['c_over_b']:.3f}", "", ""),
        (
            "    interest C -> A visible after",
            " / ".join(f"{x:.0f}" for x in s["c_converge_ms"]) + " ms",
            "routes() polled on A",
            "",
        ),
        (
            "(d) one node p50 / p99 @2,000 msg/s",
            f"{s['d_one_p50_ms']:.3f} / {s['d_one_p99_ms']:.3f} ms",
            f"lost {s['d_one_lost']:,}",
            "-",
        ),
        (
            "(d) chain p50 @2,000 msg/s",
            f"{s['d_chain_p50_ms']:.3f} ms",
            f"lost {s['d_chain_lost']:,}",
            "",
        ),
        (
            "    chain p99 @2,000 msg/s",
            f"{s['d_chain_p99_ms']:.3f} ms",
            "<= 3 ms",
            v(ok["chain_p99"]),
        ),
        (
            "    publish->A / A->callback p50",
            f"{s['d_chain_hop1_p50_ms']:.3f} / {s['d_chain_hop2_p50_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "    publish->A / A->callback p99",
            f"{s['d_chain_hop1_p99_ms']:.3f} / {s['d_chain_hop2_p99_ms']:.3f} ms",
            f"other procs {s['d_chain_other_cores']:.2f} cores",
            "",
        ),
    ]
    if "m_wake_p99_ms" in s:
        rows.append(
            (
                "(m) machine wake lateness p50/p99/99.9",
                f"{s['m_wake_p50_ms']:.3f} / {s['m_wake_p99_ms']:.3f} / "
                f"{s['m_wake_p999_ms']:.3f} ms",
                f"{s['m_wake_over_1ms']} of {s['m_wake_samples']:,} over 1 ms",
                "",
            )
        )
    if "relay3_rate" in s:
        u3 = s["relay3_cpu_us_per_msg"]
        rows += [
            ("ref raw pyzmq via 3 Python relays", fr(s["relay3_rate"]), "reference", "-"),
            ("", bn._rates(s["relay3_rates"]), f"lost {s['relay3_lost']:,}", ""),
            (
                "    CPU us/msg pub + 3 relays + sub",
                f"{u3['pub']:.1f} + {u3['mid']:.1f} + {u3['sub']:.1f} = {u3['total']:.1f}",
                "",
                "",
            ),
            (
                "    p50 / p99 @2,000 msg/s",
                f"{s['relay3_p50_ms']:.3f} / {s['relay3_p99_ms']:.3f} ms",
                f"other procs {s['relay3_latency_other_cores']:.2f} cores",
                "",
            ),
        ]
    if "e_wall_s" in s:
        if s.get("e_error"):
            rows.append(("(e) simulator", s["e_error"][:60], "< 60 s", "FAIL"))
        else:
            r = s["e_report"]
            rows += [
                (
                    "(e) simulator wall time",
                    f"{s['e_wall_s']:.1f} s",
                    "< 60 s",
                    v(ok["sim_under_60s"]),
                ),
                (
                    "    network",
                    f"{r['nodes']} nodes, {r['links']} links",
                    f"{r['subscriptions']:,} subscriptions",
                    "",
                ),
                (
                    "    convergence time (virtual)",
                    f"{1000 * r['convergence_time']:.1f} ms",
                    "",
                    "",
                ),
                ("    advertisement frames", f"{r['advert_frames']:,}", "", ""),
                ("    interest entries", f"{r['interest_entries']:,}", "", ""),
                (
                    "    memory per entry",
                    f"{r['bytes_per_entry']:.0f} B",
                    "RSS growth / entries",
                    "",
                ),
                (
                    "    frames per publish",
                    f"{r['frames_per_publish']:.2f}",
                    f"{r['publishes']} publishes",
                    "",
                ),
                ("    duplicates / lost", f"{r['duplicates']:,} / {r['lost']:,}", "0 / 0", ""),
                (
                    "    deliveries / expected",
                    f"{r['deliveries']:,} / {r['expected']:,}",
                    f"mean hops {r['mean_hops']:.2f}",
                    "",
                ),
                ("    simulator's own wall_seconds", f"{r['wall_seconds']:.1f} s", "", ""),
            ]
    rows += [
        (
            "aim (info): chain rate, 0 lost",
            cz_text,
            ">= 260,000 msg/s",
            "met" if aim["rate"] else "not met",
        ),
        (
            "aim (info): chain p99",
            f"{s['d_chain_p99_ms']:.3f} ms",
            "<= 0.6 ms",
            "met" if aim["p99"] else "not met",
        ),
    ]
    print()
    print("=" * 112)
    print("zbroker network benchmark (issue 3): summary")
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
        f"({m['sources']})"
    )
    print(
        f"run       {result['command']}: {result['messages']:,} messages of "
        f"{result['payload_bytes']} B per throughput run, median of {result['repeat']}; "
        f"latency {result['latency_rate']:,.0f} msg/s for {result['latency_seconds']:g} s; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 112)
    print(f"{'figure':<42}{'measured':<36}{'target':<28}result")
    for name, val, target, verdict in rows:
        print(f"{name:<42}{val:<36}{target:<28}{verdict}".rstrip())
    print("=" * 112)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
