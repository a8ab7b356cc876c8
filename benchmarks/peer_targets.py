"""Issue 19's targets, checked round by round on ``bench_peers.py``'s results.

The issue is done when zbroker is ahead of Zenoh on every row in at least 3 of 5
alternated rounds: each throughput row at least ``THROUGHPUT_TARGET`` times Zenoh's
msg/s with nothing lost, and the chain's latency at 2,000 msg/s at or below Zenoh's in
the same round and at most ``LATENCY_TARGET_US`` (p50 300 µs, p99 1 ms). The medians
``bench_peers.py`` prints cannot say that; this module compares the two systems' runs of
the same round (``bench_peers`` appends one run per system, row and round, in round order)
and prints per row each round's ratio, whether it met the target, and the count.
"""

from __future__ import annotations

from typing import Any

#: zbroker's msg/s over Zenoh's, in a round, for a throughput row to count as ahead
THROUGHPUT_TARGET = 1.1
#: the chain's latency at 2,000 msg/s (µs) at most this, and at or below Zenoh's
LATENCY_TARGET_US = {"p50": 300.0, "p99": 1000.0}
PEER = "zenoh"

THROUGHPUT_ROWS = (
    ("node-100", "one node, 100 B"),
    ("node-1024", "one node, 1 KiB"),
    ("chain-100", "3-node chain, 100 B"),
    ("chain-1024", "3-node chain, 1 KiB"),
)


def rounds_needed(rounds: int) -> int:
    """Rounds a row must meet its target in: 3 of 5 (at least 1 of a lone round)."""
    return max(1, -(-rounds * 3 // 5))


def _throughput(zb: dict[str, Any], peer: dict[str, Any]) -> tuple[float, bool]:
    ratio = zb["rate"] / peer["rate"] if peer["rate"] > 0 else 0.0
    return ratio, ratio >= THROUGHPUT_TARGET and zb["lost"] == 0


def _latency(zb: dict[str, Any], peer: dict[str, Any], pct: str) -> tuple[float, bool]:
    mine, theirs = zb["latency"][f"{pct}_ms"] * 1e3, peer["latency"][f"{pct}_ms"] * 1e3
    ratio = theirs / mine if mine > 0 else 0.0  # (as the table: above 1, zbroker ahead)
    ok = mine <= theirs and mine <= LATENCY_TARGET_US[pct] and zb["lost"] == 0
    return ratio, ok


def targets(results: dict[str, Any]) -> list[tuple[str, list[float], list[bool]]]:
    """Per row of the issue: its label, zbroker/Zenoh per round (latency: Zenoh's over
    zbroker's, so above 1 is ahead in both) and whether that round met the target.
    Rounds pair by position: run i of each system is round i."""
    zb, peer = results["zbroker"], results[PEER]
    rows: list[tuple[str, list[float], list[bool]]] = []
    for key, label in THROUGHPUT_ROWS:
        pairs = [_throughput(a, b) for a, b in zip(zb[key], peer[key], strict=True)]
        rows.append((f"{label}, >= {THROUGHPUT_TARGET:g}x, 0 lost", *_split(pairs)))
    for pct, limit in LATENCY_TARGET_US.items():
        runs = zip(zb["chain-lat"], peer["chain-lat"], strict=True)
        pairs = [_latency(a, b, pct) for a, b in runs]
        rows.append((f"chain {pct} <= Zenoh's and <= {limit:,.0f} us", *_split(pairs)))
    return rows


def _split(pairs: list[tuple[float, bool]]) -> tuple[list[float], list[bool]]:
    return [r for r, _ in pairs], [ok for _, ok in pairs]


def print_targets(results: dict[str, Any]) -> bool:
    """Print issue 19's rows round by round; True when every row is met."""
    if "zbroker" not in results or PEER not in results:
        return False
    rows = targets(results)
    n = len(rows[0][1])
    need = rounds_needed(n)
    print(f"\nissue 19's targets against Zenoh, round by round (a row is met in {need} of {n}):")
    width = max(len(label) for label, _, _ in rows)
    met = 0
    for label, ratios, oks in rows:
        cells = " ".join(f"{r:.2f}{'*' if ok else ' '}" for r, ok in zip(ratios, oks, strict=True))
        done = sum(oks) >= need
        met += done
        print(f"  {label:<{width}}  {cells}  {sum(oks)} of {n}: {'met' if done else 'NOT met'}")
    print(f"  (* the round met the row's target) rows met: {met} of {len(rows)}")
    return met == len(rows)
