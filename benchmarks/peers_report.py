"""``bench_peers``' tables: the systems side by side per row (medians over rounds and
zbroker's ratio to each peer) and, with --profile, CPU us per message per process."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

from peers_harness import SYSTEMS

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
