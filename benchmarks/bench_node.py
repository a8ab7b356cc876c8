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
import json
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The benchmark's parts live in the bn_* modules; the names other benchmarks use as
# ``bench_node.NAME`` are re-exported here (``_PROCS`` is the one registry, not a copy).
from bn_child import _guard_child as _guard_child
from bn_child import _latency_payload as _latency_payload
from bn_child import _pace as _pace
from bn_cpu import _cpu_seconds as _cpu_seconds
from bn_cpu import _cpu_ticks as _cpu_ticks
from bn_cpu import _machine_load as _machine_load
from bn_cpu import _thread_cpu_seconds as _thread_cpu_seconds
from bn_machine import compiled_state as compiled_state
from bn_machine import machine_info as machine_info
from bn_machine import source_digest as source_digest
from bn_procs import _PROCS as _PROCS
from bn_procs import _Inbox as _Inbox
from bn_procs import _start as _start
from bn_procs import _stop_procs as _stop_procs
from bn_raw_roles import drain_loop as drain_loop
from bn_raw_roles import raw_pub as raw_pub
from bn_raw_roles import raw_sub as raw_sub
from bn_raw_roles import relay_main as relay_main
from bn_report import _fmt_rate as _fmt_rate
from bn_report import _print_profiles as _print_profiles
from bn_report import _print_run as _print_run
from bn_report import _rates as _rates
from bn_report import _verdict as _verdict
from bn_report import build_summary
from bn_report import print_summary as print_summary
from bn_runs import _node_counters as _node_counters
from bn_runs import _node_thread_cpu as _node_thread_cpu
from bn_runs import _start_node as _start_node
from bn_runs import run_raw as run_raw
from bn_runs import run_zb as run_zb
from bn_settings import CHILD_DEADLINE_S as CHILD_DEADLINE_S
from bn_settings import HOST as HOST
from bn_settings import HWM as HWM
from bn_settings import IDLE_END_S as IDLE_END_S
from bn_settings import LATENCY_LEAD_IN as LATENCY_LEAD_IN
from bn_settings import LATENCY_RATE as LATENCY_RATE
from bn_settings import PAYLOAD_SIZE as PAYLOAD_SIZE
from bn_settings import RUN_DEADLINE_S as RUN_DEADLINE_S
from bn_settings import STOP_TOPIC as STOP_TOPIC
from bn_settings import TARGET_P99_MS as TARGET_P99_MS
from bn_settings import TARGET_RATE as TARGET_RATE
from bn_settings import TARGET_RATIO as TARGET_RATIO
from bn_settings import TOPIC as TOPIC
from bn_settings import WARM_TOPIC as WARM_TOPIC
from bn_settings import WARMUP as WARMUP
from bn_settings import log as log
from bn_stats import _lat_stats as _lat_stats
from bn_stats import _median_run as _median_run
from bn_stats import _per_msg as _per_msg
from bn_stats import _summarise as _summarise
from bn_stats import wake_probe as wake_probe
from bn_zb_roles import node_main as node_main
from bn_zb_roles import zb_pub as zb_pub
from bn_zb_roles import zb_sub as zb_sub

ZbRun = Callable[..., dict[str, Any]]  # run_zb on the benchmark's node: (mode, n, rate)


@dataclass
class _Session:
    """What every run of one benchmark shares, and what its end stops and removes."""

    ctx: Any
    tmp: str
    stop: Any
    client: Any = None  # the status client of the node, while one is open
    # the parent's end of the node's pipe, held until the end: the node's loop ends with
    # an EOFError if it is closed (collected) while the node still runs
    node_conn: Any = None


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
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
    return ap.parse_args(argv)


def _profile_run(s: _Session, n: int, top: int) -> None:
    """``--profile``: one zbroker flood with every role under cProfile, then the tables."""
    node, endpoint, nconn = _start_node(s.ctx, s.tmp, s.stop, True)
    s.node_conn = nconn
    from zbroker import Client

    s.client = Client(endpoint)
    log(f"node pid {node.pid} at {endpoint}; zbroker flood under cProfile ...")
    prof_run = run_zb(s.ctx, endpoint, node.pid, nconn, s.client, "flood", n, profile_dir=s.tmp)
    _print_run("zbroker flood (profiled: slower than normal)", prof_run)
    s.client.close()
    s.client = None
    s.stop.set()
    _stop_procs([node])
    _print_profiles(s.tmp, top)


def _raw_runs(s: _Session, result: dict[str, Any], n: int, repeat: int) -> dict[str, Any]:
    """(a) raw PUB -> SUB floods, then the reference relay's; returns the relay, which
    stays up for the latency runs."""
    ctx = s.ctx
    result["a_raw"] = []
    for i in range(repeat):
        log(f"(a) raw pyzmq PUB -> SUB, flood, run {i + 1}/{repeat} ...")
        result["a_raw"].append(run_raw(ctx, "flood", n))
        _print_run("raw", result["a_raw"][-1])

    rq = ctx.Queue()
    relay_proc = _start(ctx, relay_main, rq, s.stop)
    relay = dict(_Inbox(rq).get("relay", 30), pid=relay_proc.pid)
    result["ref_relay"] = []
    for i in range(repeat):
        log(f"(ref) raw pyzmq PUSH -> Python relay -> SUB, flood, run {i + 1}/{repeat} ...")
        result["ref_relay"].append(run_raw(ctx, "flood", n, relay=relay))
        _print_run("relay", result["ref_relay"][-1])
    return relay


def _zb_floods(s: _Session, result: dict[str, Any], n: int, repeat: int) -> ZbRun:
    """(b) zbroker floods through one node, and paced runs when a flood lost messages;
    returns how to run more on that node."""
    node, endpoint, nconn = _start_node(s.ctx, s.tmp, s.stop, False)
    s.node_conn = nconn
    from zbroker import Client

    s.client = status_client = Client(endpoint)
    log(f"node pid {node.pid} at {endpoint}")

    def zb(mode: str, count: int, rate: float = 0.0) -> dict[str, Any]:
        return run_zb(s.ctx, endpoint, node.pid, nconn, status_client, mode, count, rate)

    result["b_flood"] = []
    for i in range(repeat):
        log(f"(b) zbroker one node, flood, run {i + 1}/{repeat} ...")
        result["b_flood"].append(zb("flood", n))
        _print_run("zbroker", result["b_flood"][-1])

    flood = _median_run(result["b_flood"])
    paced: list[dict[str, Any]] = []
    if any(r["lost"] for r in result["b_flood"]):
        rates: list[float] = []
        if flood["delivered_rate"] >= TARGET_RATE:
            rates.append(TARGET_RATE)
        rates += [flood["delivered_rate"] * f for f in (0.9, 0.6, 0.3)]
        for rate in rates[:3]:
            log(f"(b) a flood run lost messages: paced run at {_fmt_rate(rate)} ...")
            pr = zb("paced", n, rate)
            paced.append(pr)
            _print_run(f"zbroker paced {rate:,.0f}", pr)
            if pr["lost"] == 0:
                break
    result["b_paced"] = paced
    return zb


def _measure(
    s: _Session, result: dict[str, Any], n: int, repeat: int, lat_rate: float, lat_s: float
) -> None:
    """Every run of the benchmark, in order: throughput (a), ref, (b), then latency."""
    n_lat = int(lat_rate * lat_s) + LATENCY_LEAD_IN
    relay = _raw_runs(s, result, n, repeat)
    zb = _zb_floods(s, result, n, repeat)
    log(f"latency at {lat_rate:,.0f} msg/s for {lat_s:g} s: raw PUB -> SUB ...")
    result["raw_latency"] = run_raw(s.ctx, "latency", n_lat, lat_rate)
    _print_run("raw latency", result["raw_latency"])
    log("  ... raw relay ...")
    result["relay_latency"] = run_raw(s.ctx, "latency", n_lat, lat_rate, relay=relay)
    _print_run("relay latency", result["relay_latency"])
    log("(d) ... zbroker ...")
    result["d_latency"] = zb("latency", n_lat, lat_rate)
    _print_run("zbroker latency", result["d_latency"])


def _end_session(s: _Session) -> None:
    """Close the status client, stop every child by PID, remove the run's files."""
    if s.client is not None:
        s.client.close()
    s.stop.set()
    for p in _PROCS:
        if p.is_alive():
            _stop_procs([p], 5.0)
    shutil.rmtree(s.tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    from _common import end_on_signals, snapshot_sources

    if not args.no_snapshot:
        snapshot_sources()
    n = 20_000 if args.quick and args.messages == 200_000 else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    lat_s = 1.0 if args.quick else args.latency_seconds
    lat_rate = args.latency_rate
    end_on_signals(RUN_DEADLINE_S)

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
    session = _Session(ctx, tempfile.mkdtemp(prefix="zbroker-bench-"), ctx.Event())
    t_begin = time.monotonic()
    ticks_begin = _cpu_ticks()
    try:
        log(
            f"zbroker single-node benchmark: {n:,} messages of {PAYLOAD_SIZE} B"
            + ("" if args.profile else f" x {repeat}")
        )
        log(f"  {info}")
        if args.profile:
            _profile_run(session, n, args.profile_top)
            return 0
        _measure(session, result, n, repeat, lat_rate, lat_s)
    finally:
        signal.alarm(0)
        _end_session(session)

    result["summary"] = build_summary(result, ticks_begin, t_begin)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
