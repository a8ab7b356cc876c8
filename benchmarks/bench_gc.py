"""What tuning the garbage collector (``zbroker.tune_gc``, which ``zbroker start`` calls)
does to a 3-node chain under a flood.

    .venv/bin/python benchmarks/bench_gc.py              # 3 rounds of 200,000 messages
    .venv/bin/python benchmarks/bench_gc.py --rounds 1 -n 50000   # smoke run

Each round starts the chain of ``bench_network.py`` (A -> B -> C, publisher on A,
subscriber on C, every role in its own process, 100-byte payloads) twice: once with the
nodes' collectors as Python sets them (threshold 700, nothing frozen) and once tuned as
``zbroker start`` tunes them, in alternating order, so that both see the same machine.
Each chain carries one flood. Printed per run and as medians: delivered msg/s (and lost),
CPU per message of every process, and the collections each node ran during the flood
(from ``status()["gc"]``). Clients are untouched in both modes.

Everything binds and connects on 127.0.0.1; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import end_on_signals, snapshot_sources

MODES = ("python", "tuned")
DEADLINE_S = 900


def log(text: str) -> None:
    print(text, flush=True)


def _cpu(key: str, r: dict[str, Any]) -> float:
    return float(r["cpu_us_per_msg"][key])


def _gcs(name: str, r: dict[str, Any]) -> float:
    return float(sum(r["gc_collections"][name]))


def _collections(nodes: list[dict[str, Any]]) -> list[list[int]]:
    return [nd["client"].status()["gc"]["collections"] for nd in nodes]


def one_run(ctx: Any, tmp: str, mode: str, n: int) -> dict[str, Any]:
    import bench_network as bnw

    stop = ctx.Event()
    nodes: list[dict[str, Any]] = []
    try:
        nodes, _ = bnw.start_chain(ctx, tmp, stop, gc_tuned=mode == "tuned")
        before = _collections(nodes)
        r = bnw.run_chain(ctx, nodes, "flood", n)
        after = _collections(nodes)
        r["gc_collections"] = {
            nd["name"]: [a - b for a, b in zip(af, bf, strict=True)]
            for nd, bf, af in zip(nodes, before, after, strict=True)
        }
        r["gc_threshold"] = nodes[0]["client"].status()["gc"]["threshold"]
        return r
    finally:
        if nodes:
            bnw.stop_nodes(nodes, stop)
        stop.set()


def _run_line(rnd: int, mode: str, r: dict[str, Any]) -> str:
    """One run as it ends: rate, loss, CPU per message, the nodes' collections, steal."""
    cpu = r["cpu_us_per_msg"]
    return (
        f"  round {rnd + 1} {mode:6s} (threshold {r['gc_threshold']}): "
        f"{r['delivered_rate']:,.0f} msg/s, lost {r['lost']}; CPU us/msg "
        + " + ".join(f"{k} {v:.2f}" for k, v in cpu.items() if k != "total")
        + f" = {cpu['total']:.2f}; collections (gen0, gen1, gen2) "
        + ", ".join(f"{k} {tuple(v)}" for k, v in r["gc_collections"].items())
        + f"; steal {r.get('steal_pct', 0):.1f}%"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", "-n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (one per mode)")
    args = ap.parse_args(argv)
    snapshot_sources()
    import bench_node as bn

    end_on_signals(DEADLINE_S)
    info = bn.machine_info()
    log(f"zbroker GC benchmark: chain flood of {args.messages:,} x {args.rounds} per mode")
    log(f"  {info}")
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-gcbench-")
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    try:
        for rnd in range(args.rounds):
            order = MODES if rnd % 2 == 0 else MODES[::-1]
            for mode in order:
                r = one_run(ctx, os.path.join(tmp, f"{mode}-{rnd}"), mode, args.messages)
                results[mode].append(r)
                log(_run_line(rnd, mode, r))
    finally:
        signal.alarm(0)
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)
    log("")
    head = f"median of {args.rounds} runs"
    log(f"{head:28s} {'python':>14s} {'tuned':>14s} {'ratio':>8s}")
    rows: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("delivered msg/s", lambda r: float(r["delivered_rate"]))
    ]
    for key in results["python"][0]["cpu_us_per_msg"]:
        rows.append((f"CPU us/msg {key}", functools.partial(_cpu, key)))
    for name in results["python"][0]["gc_collections"]:
        rows.append((f"{name} collections", functools.partial(_gcs, name)))
    for label, get in rows:
        py = statistics.median(get(r) for r in results["python"])
        tu = statistics.median(get(r) for r in results["tuned"])
        ratio = tu / py if py else float("nan")
        log(f"{label:28s} {py:14,.2f} {tu:14,.2f} {ratio:8.3f}")
    lost = sum(r["lost"] for rs in results.values() for r in rs)
    log(f"lost in all runs: {lost}")
    log(f"finished {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
