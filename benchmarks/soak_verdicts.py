"""The checks at the end of ``soak.py``: no confirmed persistent message lost, exactly once
apart from flagged redeliveries (from the durable subscribers' delivery files), and each
node's RSS growth from minute 1 against its bound (from the samples)."""

from __future__ import annotations

import math
from typing import Any


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return float("nan")


def _count_deliveries(paths: list[str], n: int) -> tuple[list[int], list[int], int, int]:
    """Copies and flagged copies per index in the delivery files; indices outside the
    range; lines cut short."""
    copies = [0] * n
    flagged = [0] * n
    unexpected = 0
    bad_lines = 0
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 2 or not line.endswith("\n"):
                    bad_lines += 1  # a line cut by SIGKILL: that delivery was not acked
                    continue
                i, r = int(parts[0]), int(parts[1])
                if not 0 <= i < n:
                    unexpected += 1
                    continue
                copies[i] += 1
                flagged[i] += r
    return copies, flagged, unexpected, bad_lines


def check_persistent(paths: list[str], state: bytes, n_confirmed: int) -> dict[str, Any]:
    """``state``: per index, 0 never attempted, 1 confirmed, 2 failed (unknown whether
    stored); ``paths``: every durable subscriber's delivery file, in order."""
    n = len(state)
    copies, flagged, unexpected, bad_lines = _count_deliveries(paths, n)
    lost = [i for i in range(n) if state[i] == 1 and copies[i] == 0]
    unflagged_dups = [i for i in range(n) if copies[i] - flagged[i] > 1]
    total = sum(copies)
    res = {
        "attempted": sum(1 for x in state if x),
        "confirmed": n_confirmed,
        "failed": sum(1 for x in state if x == 2),
        "failed_but_delivered": sum(1 for i in range(n) if state[i] == 2 and copies[i]),
        "delivered_total": total,
        "distinct_delivered": sum(1 for c in copies if c),
        "extra_copies": total - sum(1 for c in copies if c),
        "flagged_redelivered": sum(flagged),
        "first_copy_flagged": sum(1 for i in range(n) if copies[i] and copies[i] == flagged[i]),
        "unflagged_duplicates": len(unflagged_dups),
        "lost_confirmed": len(lost),
        "lost_examples": lost[:20],
        "unexpected_index": unexpected,
        "cut_lines": bad_lines,
    }
    res["ok"] = not lost and not unflagged_dups and unexpected == 0
    return res


def _slope_mb_per_min(after: list[dict[str, Any]], k: str) -> float | None:
    """Least-squares slope of node ``k``'s RSS over the samples ``after`` (MB/min)."""
    if len(after) >= 3 and after[-1]["t"] > after[0]["t"]:
        xs = [s["t"] for s in after]
        ys = [s["rss_mb"][k] for s in after]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        slope: float = 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den
        return slope
    return None


def rss_verdict(samples: list[dict[str, Any]], duration: float, bound_mb: float) -> dict[str, Any]:
    base_t = min(60.0, duration / 2)
    base = next((s for s in samples if s["t"] >= base_t), samples[0])
    end = samples[-1]
    out: dict[str, Any] = {
        "baseline_t": base["t"],
        "end_t": end["t"],
        "bound_mb": bound_mb,
        "nodes": {},
    }
    ok = True
    for k in ("A", "B", "C"):
        series = [s["rss_mb"][k] for s in samples]
        growth = end["rss_mb"][k] - base["rss_mb"][k]
        after = [s for s in samples if s["t"] >= base["t"]]
        slope = _slope_mb_per_min(after, k)
        node_ok = not math.isnan(growth) and growth <= bound_mb
        ok = ok and node_ok
        out["nodes"][k] = {
            "start_mb": series[0],
            "baseline_mb": base["rss_mb"][k],
            "end_mb": end["rss_mb"][k],
            "max_mb": max(series),
            "growth_mb": round(growth, 1),
            "slope_mb_per_min": None if slope is None else round(slope, 2),
            "ok": node_ok,
        }
    out["ok"] = ok
    return out
