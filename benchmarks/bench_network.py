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
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers
from _common import REPO, end_on_signals, snapshot_sources

# the chain, its runs, the relay line, the simulator and the summary live in their own
# modules; what other benchmarks use as ``bnet.NAME`` is re-exported from here
from bnet_chain import CHAIN_IDS as CHAIN_IDS
from bnet_chain import _start_node as _start_node
from bnet_chain import _status
from bnet_chain import _wait as _wait
from bnet_chain import run_chain as run_chain
from bnet_chain import start_chain as start_chain
from bnet_chain import stop_nodes as stop_nodes
from bnet_relays import start_relay_chain as start_relay_chain
from bnet_report import _print_chain_run, _print_relay_run, print_summary
from bnet_sim import DEFAULT_TOPOLOGY, run_simulator
from bnet_summary import CHAIN_TARGET_P99_MS as CHAIN_TARGET_P99_MS
from bnet_summary import CHAIN_TARGET_RATE, _median, summarise

log = bn.log
HOST = bn.HOST
ROOT = REPO

RUN_DEADLINE_S = 600  # the whole benchmark, simulator included (SIGALRM in the parent)


def _paced_rates(flood_rate: float, target: float) -> list[float]:
    rates = [target] if flood_rate >= target else []
    rates += [flood_rate * f for f in (0.9, 0.6, 0.3)]
    return rates[:3]


def _parser() -> argparse.ArgumentParser:
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
    return ap


class _Session:
    """One run of the benchmark: its sizes, and every process and event it started, so
    that whatever happens they are stopped by their PIDs at the end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.n = 20_000 if args.quick and args.messages == 200_000 else args.messages
        self.repeat = 1 if args.quick else max(1, args.repeat)
        self.lat_s = 1.0 if args.quick else args.latency_seconds
        self.n_lat = int(bn.LATENCY_RATE * self.lat_s) + bn.LATENCY_LEAD_IN
        self.quick: bool = args.quick
        self.ctx: Any = mp.get_context("spawn")
        self.tmp = ""
        self.stops: list[Any] = []
        self.nodes: list[dict[str, Any]] = []
        self.one: dict[str, Any] | None = None

    def event(self) -> Any:
        """A stop event, set at the end whatever happens."""
        ev = self.ctx.Event()
        self.stops.append(ev)
        return ev

    def cleanup(self) -> None:
        if self.one is not None:
            try:
                self.one["client"].close()
            except Exception as exc:
                log(f"  closing the one-node status client: {exc}")
        if self.nodes:
            stop_nodes(self.nodes, self.stops[-1])
        for ev in self.stops:
            ev.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.no_snapshot:
        snapshot_sources()
    run = _Session(args)
    end_on_signals(RUN_DEADLINE_S)
    info = bn.machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    result: dict[str, Any] = {
        "machine": info,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "messages": run.n,
        "repeat": run.repeat,
        "payload_bytes": bn.PAYLOAD_SIZE,
        "latency_rate": bn.LATENCY_RATE,
        "latency_seconds": run.lat_s,
    }
    run.tmp = tempfile.mkdtemp(prefix="zbroker-netbench-")
    t_begin = time.monotonic()
    ticks_begin = bn._cpu_ticks()
    try:
        log(f"zbroker network benchmark: {run.n:,} messages of {bn.PAYLOAD_SIZE} B x {run.repeat}")
        log(f"  {info}")
        if args.profile:
            _profile_chain(run, args.profile_top)
            return 0
        _raw_ceiling(run, result)
        _one_node(run, result)
        _chain(run, result)
        _relay_reference(run, result)
        # (e) simulator: alone on the machine as far as this script goes
        if not args.no_sim:
            _simulator(result, args.topology)
    finally:
        signal.alarm(0)
        run.cleanup()
        shutil.rmtree(run.tmp, ignore_errors=True)

    result["summary"] = summarise(result, ticks_begin, t_begin)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_summary(result)
    return 0


def _profile_chain(run: _Session, top: int) -> None:
    """--profile: one chain flood run with cProfile everywhere, then each profile."""
    stop = run.event()
    log("chain A -> B -> C with cProfile in every node thread ...")
    run.nodes, _ = start_chain(run.ctx, run.tmp, stop, prof_dir=run.tmp)
    r = run_chain(run.ctx, run.nodes, "flood", run.n, profile_dir=run.tmp)
    _print_chain_run("chain flood (profiled: slower than normal)", r)
    stop_nodes(run.nodes, stop)
    run.nodes = []
    for role in (*(f"node-{nm}" for nm in CHAIN_IDS), "publisher", "subscriber"):
        path = os.path.join(run.tmp, f"{role}.prof")
        if not os.path.exists(path):
            log(f"(no profile for {role})")
            continue
        print(f"\n==== cProfile: {role} (sorted by tottime, top {top}) ====")
        st = pstats.Stats(path, stream=sys.stdout)
        st.strip_dirs().sort_stats("tottime").print_stats(top)


def _raw_ceiling(run: _Session, result: dict[str, Any]) -> None:
    """(a) raw pyzmq PUB -> SUB: the ceiling."""
    result["a_raw"] = []
    for i in range(run.repeat):
        log(f"(a) raw pyzmq PUB -> SUB, flood, run {i + 1}/{run.repeat} ...")
        result["a_raw"].append(bn.run_raw(run.ctx, "flood", run.n))
        bn._print_run("raw", result["a_raw"][-1])


def _one_node(run: _Session, result: dict[str, Any]) -> None:
    """(b) + (d) one node: flood runs (paced ones if they lost messages), then latency."""
    ctx, n = run.ctx, run.n
    stop1 = run.event()
    node_proc, endpoint, nconn = bn._start_node(ctx, run.tmp, stop1, False)
    from zbroker import Client

    one = run.one = {"proc": node_proc, "client": Client(endpoint)}
    log(f"one node: pid {node_proc.pid} at {endpoint}")
    result["b_flood"] = []
    for i in range(run.repeat):
        log(f"(b) one node, flood, run {i + 1}/{run.repeat} ...")
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
    log(f"(d) one node, latency at {bn.LATENCY_RATE:,.0f} msg/s for {run.lat_s:g} s ...")
    result["d_one_latency"] = bn.run_zb(
        ctx, endpoint, node_proc.pid, nconn, one["client"], "latency", run.n_lat, bn.LATENCY_RATE
    )
    bn._print_run("one node latency", result["d_one_latency"])
    one["client"].close()
    stop1.set()
    bn._stop_procs([node_proc])
    run.one = None


def _chain(run: _Session, result: dict[str, Any]) -> None:
    """(c) + (m) + (d) the chain: flood runs (paced ones if they lost messages), the
    machine's wake-up lateness, then latency."""
    ctx = run.ctx
    stop3 = run.event()
    log("(c) chain A -> B -> C ...")
    run.nodes, chain_info = start_chain(ctx, run.tmp, stop3)
    nodes = run.nodes
    result["chain_setup"] = chain_info
    result["c_flood"] = []
    for i in range(run.repeat):
        log(f"(c) chain, flood, run {i + 1}/{run.repeat} ...")
        result["c_flood"].append(run_chain(ctx, nodes, "flood", run.n))
        _print_chain_run("chain", result["c_flood"][-1])
    result["c_paced"] = []
    if any(r["lost"] for r in result["c_flood"]):
        _chain_paced(run, result)
    log("(m) the machine's own wake-up lateness (a sleeping thread, nothing else of ours) ...")
    result["m_wake"] = bn.wake_probe(1.0 if run.quick else 3.0, bn.LATENCY_RATE)
    log(f"(d) chain, latency at {bn.LATENCY_RATE:,.0f} msg/s for {run.lat_s:g} s ...")
    result["d_chain_latency"] = run_chain(ctx, nodes, "latency", run.n_lat, bn.LATENCY_RATE)
    _print_chain_run("chain latency", result["d_chain_latency"])
    result["chain_final_status"] = {nd["name"]: _status(nd["client"]) for nd in nodes}
    stop_nodes(nodes, stop3)
    run.nodes = []


def _chain_paced(run: _Session, result: dict[str, Any]) -> None:
    """A chain flood run lost messages: paced runs until one loses none."""
    # pace from the runs that lost nothing, if any; else from the best lossy run
    clean = [r for r in result["c_flood"] if not r["lost"]]
    base = (
        _median(clean)["delivered_rate"]
        if clean
        else max(r["delivered_rate"] for r in result["c_flood"])
    )
    for rate in _paced_rates(base, CHAIN_TARGET_RATE):
        log(f"(c) a flood run lost messages: paced run at {bn._fmt_rate(rate)} ...")
        pr = run_chain(run.ctx, run.nodes, "paced", run.n, rate)
        result["c_paced"].append(pr)
        _print_chain_run(f"chain paced {rate:,.0f}", pr)
        if pr["lost"] == 0:
            break


def _relay_reference(run: _Session, result: dict[str, Any]) -> None:
    """Reference: the same five processes with bare Python relays in place of nodes."""
    ctx = run.ctx
    stop_r = run.event()
    relays = start_relay_chain(ctx, stop_r)
    result["ref_relay3"] = []
    for i in range(run.repeat):
        log(f"(ref) raw pyzmq through 3 Python relay processes, flood, run {i + 1}/{run.repeat}")
        result["ref_relay3"].append(bn.run_raw(ctx, "flood", run.n, relay=relays))
        _print_relay_run("3 relays", result["ref_relay3"][-1])
    log("(ref) ... latency through the 3 relays ...")
    result["ref_relay3_latency"] = bn.run_raw(
        ctx, "latency", run.n_lat, bn.LATENCY_RATE, relay=relays
    )
    _print_relay_run("3 relays latency", result["ref_relay3_latency"])
    stop_r.set()
    bn._stop_procs(relays["procs"])


def _simulator(result: dict[str, Any], topology: str) -> None:
    """(e) the simulator, timed."""
    result["e_sim"] = run_simulator(topology)
    if "error" in result["e_sim"]:
        log(f"  simulator: {result['e_sim']['error']}")
    else:
        log(
            f"  simulator finished in {result['e_sim']['wall_s']:.1f} s: "
            f"{json.dumps(result['e_sim']['report'])}"
        )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
