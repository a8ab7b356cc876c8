"""The network benchmark's summary: the figures (a)-(e) distilled from every run's result,
and the targets they are judged against (``bench_network`` re-exports the targets, e.g.
``bnet.CHAIN_TARGET_P99_MS``)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # medians and the machine's load

CHAIN_TARGET_RATE = 120_000.0
CHAIN_TARGET_P99_MS = 3.0
AIM_RATE = 260_000.0  # the project's aim (info only)
AIM_P99_MS = 0.6
SIM_TARGET_S = 60.0


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return bn._median_run(runs)


def _zero_loss_rate(floods: list[dict[str, Any]], paced: list[dict[str, Any]]) -> float | None:
    if not any(r["lost"] for r in floods):
        return float(_median(floods)["delivered_rate"])
    ok = [r["delivered_rate"] for r in paced if r["lost"] == 0]
    return max(ok) if ok else None


def summarise(result: dict[str, Any], ticks_begin: Any, t_begin: float) -> dict[str, Any]:
    s = _one_node_figures(result)
    s.update(_chain_figures(result))
    s.update(_latency_figures(result))
    s.update(_reference_figures(result))
    load = bn._machine_load(ticks_begin, bn._cpu_ticks(), time.monotonic() - t_begin, 0.0)
    s["steal_pct"] = load["steal_pct"]
    s["busy_cores"] = load["busy_cores"]
    s["elapsed_s"] = time.monotonic() - t_begin
    c_zero, c_p99 = s["c_zero_loss_rate"], s["d_chain_p99_ms"]
    sim = result.get("e_sim")
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


def _one_node_figures(result: dict[str, Any]) -> dict[str, Any]:
    """(a) the raw pyzmq ceiling and (b) one node."""
    a = _median(result["a_raw"])
    b = _median(result["b_flood"])
    return {
        "a_raw_rate": a["delivered_rate"],
        "a_raw_rates": [r["delivered_rate"] for r in result["a_raw"]],
        "a_raw_lost": sum(r["lost"] for r in result["a_raw"]),
        "b_rate": b["delivered_rate"],
        "b_rates": [r["delivered_rate"] for r in result["b_flood"]],
        "b_lost": sum(r["lost"] for r in result["b_flood"]),
        "b_zero_loss_rate": _zero_loss_rate(result["b_flood"], result["b_paced"]),
        "b_cpu_us_per_msg": b["cpu_us_per_msg"],
        "b_thread_cpu_us_per_msg": b["thread_cpu_us_per_msg"],
        "b_other_cores": b["other_cores"],
    }


def _chain_reference_run(result: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The chain run whose CPU figures count, and what it is: CPU per message only means
    something for a run that delivered everything."""
    clean = [r for r in result["c_flood"] if r["lost"] == 0]
    clean_paced = [r for r in result["c_paced"] if r["lost"] == 0]
    if clean:
        return _median(clean), "median loss-free flood run"
    if clean_paced:
        return clean_paced[0], f"paced run at {clean_paced[0]['rate']:,.0f} msg/s"
    return _median(result["c_flood"]), "median flood run (it lost messages)"


def _chain_figures(result: dict[str, Any]) -> dict[str, Any]:
    """(c) the chain A -> B -> C."""
    a = _median(result["a_raw"])
    b = _median(result["b_flood"])
    c = _median(result["c_flood"])
    floods = result["c_flood"]
    c_ref, c_ref_label = _chain_reference_run(result)
    return {
        "c_rate": c["delivered_rate"],
        "c_rates": [r["delivered_rate"] for r in floods],
        "c_lost_per_run": [r["lost"] for r in floods],
        "c_lost": sum(r["lost"] for r in floods),
        "c_published": sum(r["published"] for r in floods),
        "c_zero_loss_rate": _zero_loss_rate(floods, result["c_paced"]),
        "c_paced": [(r["rate"], r["delivered_rate"], r["lost"]) for r in result["c_paced"]],
        "c_counters_ok": all(r["counter_check"]["ok"] for r in floods),
        "c_counts_agree": [
            all(x == y for x, y in r["counter_check"]["pairs"].values()) for r in floods
        ],
        "c_links_down": [sum(r["counter_check"]["links_down"].values()) for r in floods],
        "c_drops": [r["counter_check"]["drops"] for r in floods],
        "c_ref_run": c_ref_label,
        "c_cpu_us_per_msg": c_ref["cpu_us_per_msg"],
        "c_thread_cpu_us_per_msg": c_ref.get("thread_cpu_us_per_msg"),
        "c_node_cpu_pct": c_ref["node_cpu_pct"],
        "c_other_cores": c_ref["other_cores"],
        "c_steal_pct": c_ref["steal_pct"],
        "c_converge_ms": [1000 * r["converge_s"] for r in floods],
        "c_over_b": c["delivered_rate"] / b["delivered_rate"] if b["delivered_rate"] else 0.0,
        "c_over_a": c["delivered_rate"] / a["delivered_rate"] if a["delivered_rate"] else 0.0,
    }


def _latency_figures(result: dict[str, Any]) -> dict[str, Any]:
    """(d) latency through one node and through the chain."""
    d1 = result["d_one_latency"]
    d3 = result["d_chain_latency"]
    return {
        "d_one_p50_ms": d1["latency"].get("p50_ms"),
        "d_one_p99_ms": d1["latency"].get("p99_ms"),
        "d_one_lost": d1["lost"],
        "d_one_other_cores": d1["other_cores"],
        "d_chain_p50_ms": d3["latency"].get("p50_ms"),
        "d_chain_p99_ms": d3["latency"].get("p99_ms", float("inf")),
        "d_chain_lost": d3["lost"],
        "d_chain_other_cores": d3["other_cores"],
        "d_chain_hop1_p50_ms": d3["hop1_publish_to_node"].get("p50_ms"),
        "d_chain_hop1_p99_ms": d3["hop1_publish_to_node"].get("p99_ms"),
        "d_chain_hop2_p50_ms": d3["hop2_node_to_callback"].get("p50_ms"),
        "d_chain_hop2_p99_ms": d3["hop2_node_to_callback"].get("p99_ms"),
        "d_chain_counters_ok": d3["counter_check"]["ok"],
    }


def _reference_figures(result: dict[str, Any]) -> dict[str, Any]:
    """The relay line, (m) the machine's wake-up lateness and (e) the simulator, for
    those that ran."""
    s: dict[str, Any] = {}
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
    return s
