"""The figures of a run, from what its children reported: latency percentiles, delivered
and published rates and loss, CPU per message, the median run of a series, and
``wake_probe`` (how late this machine wakes a sleeping thread)."""

from __future__ import annotations

import math
import time
from typing import Any


def _lat_stats(lat_ns: list[int]) -> dict[str, Any]:
    if not lat_ns:
        return {"samples": 0}
    s = sorted(lat_ns)

    def pct(p: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))] / 1e6

    return {
        "samples": len(s),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "p999_ms": pct(99.9),
        "max_ms": s[-1] / 1e6,
        "mean_ms": sum(s) / len(s) / 1e6,
    }


def wake_probe(seconds: float = 3.0, rate: float = 2_000.0) -> dict[str, Any]:
    """How late this machine wakes a sleeping thread: one thread sleeps to an absolute
    schedule of ``rate`` wake-ups per second (the latency runs' rate) and records how late
    each wake-up came, with no other work of ours running. Every hop of a message is such a
    wake-up (by a socket, not a timer, but on the same vCPUs), so a run whose probe shows
    millisecond lateness cannot show a sub-millisecond p99 through five processes."""
    n = int(seconds * rate)
    interval = 1e9 / rate
    late: list[int] = []
    t0 = time.perf_counter_ns()
    for i in range(n):
        target = t0 + int(i * interval)
        delay = target - time.perf_counter_ns()
        if delay > 0:
            time.sleep(delay / 1e9)
        late.append(time.perf_counter_ns() - target)
    st = _lat_stats(late)
    st["over_1ms"] = sum(1 for x in late if x > 1_000_000)
    return st


def _summarise(pub: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    sent, got = pub["sent"], sub["received"]
    window = (sub["t_last"] - pub["t_start"]) / 1e9 if got else float("nan")
    send_s = (pub["t_end"] - pub["t_start"]) / 1e9
    return {
        "published": sent,
        "delivered": got,
        "lost": sent - got,
        "delivered_rate": got / window if got and window > 0 else 0.0,
        "publish_rate": sent / send_s if send_s > 0 else 0.0,
        "window_s": window,
        "pub_cpu_s": pub["cpu_s"],
        "sub_cpu_s": sub["cpu_s"],
    }


def _per_msg(res: dict[str, Any], mid_cpu_s: float) -> dict[str, float]:
    """CPU microseconds per published message (all threads of each process)."""
    n = max(1, res["published"])
    out = {
        "pub": 1e6 * res["pub_cpu_s"] / n,
        "mid": 1e6 * mid_cpu_s / n,
        "sub": 1e6 * res["sub_cpu_s"] / n,
    }
    out["total"] = out["pub"] + out["mid"] + out["sub"]
    return out


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median delivered rate (lower median for an even count)."""
    ordered = sorted(runs, key=lambda r: r["delivered_rate"])
    return ordered[(len(ordered) - 1) // 2]
