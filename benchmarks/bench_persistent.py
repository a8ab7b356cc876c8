#!/usr/bin/env python3
"""Persistent publish and durable subscriptions through one node (issue 5).

    .venv/bin/python benchmarks/bench_persistent.py            # full run (about 1-2 minutes)
    .venv/bin/python benchmarks/bench_persistent.py --quick    # smoke run (about 30 s)
    .venv/bin/python benchmarks/bench_persistent.py --json     # result as JSON on stdout
    .venv/bin/python benchmarks/bench_persistent.py --profile  # (b) once, node + publisher
                                                               # under cProfile (--profile c:
                                                               # (c) once)

Measures, in one run, with every role in its own process (multiprocessing "spawn"), all on
127.0.0.1, 100-byte payloads:

(a) reference: non-persistent ``Client.publish`` -> node -> ``Client.subscribe`` callback,
    flood, exactly as ``bench_node.py`` (b) (its roles and node are reused).
(b) persistent publishes (``publish(..., persistent=True)``, a Future of the node's
    confirmation) through one node whose retention rule ``PERSIST.>`` covers the topic, so
    every message is written to the node's SQLite store before it is confirmed. The
    publisher keeps a sliding window of W outstanding Futures (``--window``, default 1,000):
    once W are outstanding it waits for the oldest. Confirmed msg/s = N / (last confirmation
    - first publish). Target: >= 20,000 msg/s. Checked against the node: every confirmation
    carries a retention sequence, and the store's row count grew by N.
(c) the same with a durable subscriber attached (``subscribe(..., durable=NAME,
    credit=1000)``) in its own process: confirmed msg/s, delivered msg/s (N / (last
    delivery - first publish)), and the exact count: N published, N delivered (each index
    once), none redelivered, nothing left stored afterwards.
(d) a durable subscriber away, then returning: the subscription is created and detached,
    N messages are published persistently (confirmed), the node reports N stored; a new
    subscriber process attaches and the time from its ``subscribe()`` call to the N-th
    delivery is the drain time.

For each run the script prints CPU time per message of every process (from /proc) and of
the node's own thread, and the machine's load (steal, cores used by other processes).
Throughput runs (a)-(c) are repeated (``--repeat``, default 3) and the median counts.

Every socket is on 127.0.0.1. Every child process is stopped by its PID in a ``finally``
block (SIGTERM/SIGINT/the overall deadline included); each child also exits on its own if
its parent goes away or its deadline passes.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers
from _common import end_on_signals, snapshot_sources
from persist_report import print_drain, print_persistent, print_profiles, print_summary, summarize
from persist_roles import PAYLOAD_SIZE, RETAIN_PATTERN
from persist_runs import RUN_DEADLINE_S, run_drain, run_persistent, start_pnode

log = bn.log
DEFAULT_WINDOW = 1_000
DEFAULT_CREDIT = 1_000


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", "-n", type=int, default=100_000, help="messages per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs of (a), (b), (c); median counts")
    ap.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help="outstanding persistent publishes (Futures) per publisher",
    )
    ap.add_argument("--credit", type=int, default=DEFAULT_CREDIT, help="durable subscriber credit")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10,000 messages, 1 repeat")
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument(
        "--profile",
        nargs="?",
        const="b",
        choices=("b", "c"),
        default=None,
        help="only (b) (or --profile c: only (c)), once, with the node thread and "
        "the publisher's main thread under cProfile",
    )
    ap.add_argument("--profile-top", type=int, default=30)
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    return ap


def _profile_run(ctx: Any, tmp: str, stop: Any, args: argparse.Namespace, n: int) -> None:
    """``--profile``: (b) or (c) once, the node thread and the publisher under cProfile."""
    from zbroker import Client

    durable = args.profile == "c"
    node = start_pnode(ctx, tmp, stop, tmp)
    status = Client(node["endpoint"])
    try:
        log(f"node pid {node['pid']} at {node['endpoint']}; ({args.profile}) under cProfile")
        tag = "C" if durable else "B"
        r = run_persistent(ctx, node, status, tag, n, args.window, args.credit, durable, tmp)
        print_persistent(f"({args.profile}) profiled: slower than normal", r)
    finally:
        status.close()
    stop.set()
    bn._stop_procs([node["proc"]])
    print_profiles(tmp, args.profile_top)


def _reference(ctx: Any, tmp: str, ref_stop: Any, n: int, repeat: int) -> list[dict[str, Any]]:
    """(a): non-persistent, through ``bench_node``'s node and roles, ``repeat`` times."""
    from zbroker import Client

    ref_node, ref_ep, ref_conn = bn._start_node(ctx, tmp, ref_stop, False)
    ref_status = Client(ref_ep)
    runs: list[dict[str, Any]] = []
    try:
        log(f"reference node pid {ref_node.pid} at {ref_ep}")
        for i in range(repeat):
            log(f"(a) non-persistent publish -> node -> subscriber, flood, run {i + 1}/{repeat}")
            runs.append(bn.run_zb(ctx, ref_ep, ref_node.pid, ref_conn, ref_status, "flood", n))
            bn._print_run("zbroker", runs[-1])
    finally:
        ref_status.close()
    ref_stop.set()
    bn._stop_procs([ref_node])
    return runs


def _persistent(
    ctx: Any, tmp: str, stop: Any, args: argparse.Namespace, n: int, repeat: int
) -> dict[str, Any]:
    """(b), (c) and (d) on one persistent node; the node's state at the end."""
    from zbroker import Client

    out: dict[str, Any] = {"b_persistent": [], "c_durable": []}
    node = start_pnode(ctx, tmp, stop, None)
    status = Client(node["endpoint"])
    try:
        log(f"persistent node pid {node['pid']} at {node['endpoint']}, retain {RETAIN_PATTERN}")
        for i in range(repeat):
            log(f"(b) persistent publish, window {args.window:,}, run {i + 1}/{repeat} ...")
            r = run_persistent(ctx, node, status, f"B{i + 1}", n, args.window, args.credit, False)
            out["b_persistent"].append(r)
            print_persistent("(b)", r)
        for i in range(repeat):
            log(f"(c) persistent publish + durable subscriber attached, run {i + 1}/{repeat} ...")
            r = run_persistent(ctx, node, status, f"C{i + 1}", n, args.window, args.credit, True)
            out["c_durable"].append(r)
            print_persistent("(c)", r)
        log(f"(d) durable subscriber away, {n:,} messages stored, then returning ...")
        out["d_drain"] = run_drain(ctx, node, status, n, args.window, args.credit)
        print_drain(out["d_drain"])
        st = status.status()
    finally:
        status.close()
    out["node_final"] = {
        "counters": st["counters"],
        "store": st["store"],
        "durables": st["durables"],
    }
    try:
        out["store_file_bytes"] = sum(
            os.path.getsize(p) for p in Path(node["store"]).parent.glob("store.sqlite3*")
        )
    except OSError:
        out["store_file_bytes"] = None
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.no_snapshot:
        snapshot_sources()
    n = 10_000 if args.quick and args.messages == 100_000 else args.messages
    repeat = 1 if args.quick else max(1, args.repeat)
    end_on_signals(RUN_DEADLINE_S)
    info = bn.machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    result: dict[str, Any] = {
        "machine": info,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "messages": n,
        "repeat": repeat,
        "window": args.window,
        "credit": args.credit,
        "payload_bytes": PAYLOAD_SIZE,
    }
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-bench-persist-")
    ref_stop, stop = ctx.Event(), ctx.Event()
    t_begin = time.monotonic()
    ticks_begin = bn._cpu_ticks()
    try:
        log(
            f"zbroker persistent benchmark: {n:,} messages of {PAYLOAD_SIZE} B x {repeat}, "
            f"window {args.window:,}, credit {args.credit:,}"
        )
        log(f"  {info}")
        if args.profile:
            _profile_run(ctx, tmp, stop, args, n)
            return 0
        result["a_ref"] = _reference(ctx, tmp, ref_stop, n, repeat)
        result.update(_persistent(ctx, tmp, stop, args, n, repeat))
    finally:
        signal.alarm(0)
        ref_stop.set()
        stop.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)
    result["summary"] = summarize(result, n, t_begin, ticks_begin)
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
