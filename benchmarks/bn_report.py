"""The single-node benchmark's report: each run as it ends (on stderr), the cProfile
tables of a profiled run, and the closing summary: its figures, taken from the runs, each
against its target of issue 2, and the table that prints them."""

from __future__ import annotations

import os
import pstats
import sys
import time
from typing import Any

from bn_cpu import _cpu_ticks, _machine_load
from bn_settings import TARGET_P99_MS, TARGET_RATE, TARGET_RATIO, log
from bn_stats import _median_run

Row = tuple[str, str, str, str]  # figure, measured, target, result


def _fmt_rate(r: float) -> str:
    return f"{r:,.0f} msg/s"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _print_run(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {_fmt_rate(r['delivered_rate'])}; "
        f"publisher sent at {_fmt_rate(r['publish_rate'])}"
    )
    extra = f"    cpu s: pub {r['pub_cpu_s']:.2f}, sub {r['sub_cpu_s']:.2f}"
    u = r["cpu_us_per_msg"]
    if r.get("rate") is None:  # throughput runs: the CPU budget per message
        log(
            f"    CPU per message: pub {u['pub']:.2f} us, "
            + (f"node/relay {u['mid']:.2f} us, " if "mid_cpu_pct" in r else "")
            + f"sub {u['sub']:.2f} us, total {u['total']:.2f} us "
            f"(=> at most {2e6 / u['total'] if u['total'] else 0:,.0f} msg/s on 2 free cores)"
        )
    if "thread_cpu_us_per_msg" in r:
        t = r["thread_cpu_us_per_msg"]
        log(
            f"    of which the Python threads (publish() caller, node loop, client thread): "
            f"pub {t['pub']:.2f} us, node {t['mid']:.2f} us, sub {t['sub']:.2f} us; the rest "
            "is libzmq I/O threads"
        )
    if "mid_cpu_pct" in r:
        extra += f", node/relay {r['mid_cpu_pct']:.0f}% of a core"
    if "node_received" in r:
        extra += (
            f"; node counters: received {r['node_received']:,}, delivered "
            f"{r['node_delivered']:,}, dropped {r['node_dropped'] or 0}"
        )
    extra += (
        f"; machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )
    log(extra)
    if "latency" in r:
        lat = r["latency"]
        log(
            f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
            f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, p99.9 {lat['p999_ms']:.3f}, "
            f"max {lat['max_ms']:.3f}, mean {lat['mean_ms']:.3f} ms"
        )
    for key in ("hop1_publish_to_node", "hop2_node_to_callback"):
        if key in r:
            h = r[key]
            log(
                f"    {key} (CLOCK_REALTIME, split at the node's receive stamp): "
                f"p50 {h['p50_ms']:.3f} ms, p99 {h['p99_ms']:.3f}, max {h['max_ms']:.3f}"
            )


def _print_profiles(profile_dir: str, top: int) -> None:
    for role in ("node", "publisher", "subscriber"):
        path = os.path.join(profile_dir, f"{role}.prof")
        if not os.path.exists(path):
            log(f"(no profile for {role})")
            continue
        print(f"\n==== cProfile: {role} (sorted by tottime, top {top}) ====")
        st = pstats.Stats(path, stream=sys.stdout)
        st.strip_dirs().sort_stats("tottime").print_stats(top)


def _rates(rates: list[float]) -> str:
    return "runs: " + ", ".join(f"{r:,.0f}" for r in rates)


def _cpu_sum(us: dict[str, float]) -> str:
    """CPU us/msg of publisher, node (or relay) and subscriber, as "pub + mid + sub"."""
    return " + ".join(f"{us[k]:.1f}" for k in ("pub", "mid", "sub"))


def _throughput_rows(s: dict[str, Any], ok: dict[str, bool]) -> list[Row]:
    zl = s["zero_loss_rate"]
    zl_text = f"{_fmt_rate(zl)}, 0 lost" if zl is not None else "no run without loss"
    rows = [
        ("(a) raw pyzmq PUB->SUB delivered", _fmt_rate(s["a_raw_rate"]), "ceiling", "-"),
        ("", _rates(s["a_raw_rates"]), f"lost {s['a_raw_lost']:,}", ""),
        ("ref raw pyzmq via Python relay", _fmt_rate(s["relay_rate"]), "reference", "-"),
        ("", _rates(s["relay_rates"]), f"lost {s['relay_lost']:,}", ""),
        (
            "(b) zbroker 1 node delivered",
            _fmt_rate(s["b_rate"]),
            ">= 150,000 msg/s",
            _verdict(ok["b_rate"]),
        ),
        ("", _rates(s["b_rates"]), f"node {s['b_node_cpu_pct']:.0f}% of a core", ""),
        (
            "    machine during median (b) run",
            f"steal {s['b_steal_pct']:.1f}%",
            f"other procs {s['b_other_cores']:.2f} cores",
            "",
        ),
        ("    lost in (b) (published - delivered)", f"{s['b_lost']:,}", "0", ""),
        (
            "    CPU us/msg pub + node + sub",
            _cpu_sum(s["b_cpu_us_per_msg"]) + f" = {s['b_cpu_us_per_msg']['total']:.1f}",
            "relay ref: "
            + _cpu_sum(s["relay_cpu_us_per_msg"])
            + f" = {s['relay_cpu_us_per_msg']['total']:.1f}",
            "",
        ),
        (
            "      of which Python threads",
            _cpu_sum(s["b_thread_cpu_us_per_msg"]),
            "(rest: libzmq I/O threads)",
            "",
        ),
        ("(c) b / a", f"{s['c_ratio']:.3f}", ">= 0.15", _verdict(ok["c_ratio"])),
        (
            "    zbroker rate with zero loss",
            zl_text,
            "0 lost at >= 150,000 msg/s",
            _verdict(ok["zero_loss"]),
        ),
    ]
    for rate, got, lost in s["paced"]:
        rows.append((f"    paced run at {rate:,.0f} msg/s", _fmt_rate(got), f"lost {lost:,}", ""))
    return rows


def _latency_rows(s: dict[str, Any], ok: dict[str, bool]) -> list[Row]:
    return [
        ("(d) p50 publish->callback @2,000 msg/s", f"{s['d_p50_ms']:.3f} ms", "-", "-"),
        (
            "    p99 publish->callback @2,000 msg/s",
            f"{s['d_p99_ms']:.3f} ms",
            "<= 1.5 ms",
            _verdict(ok["d_p99"]),
        ),
        ("    lost in (d)", f"{s['d_lost']:,}", "-", ""),
        (
            "    machine during (d)",
            f"steal {s['d_steal_pct']:.1f}%",
            f"other procs {s['d_other_cores']:.2f} cores",
            "",
        ),
        (
            "    hop publish->node p50 / p99",
            f"{s['d_hop1_p50_ms']:.3f} / {s['d_hop1_p99_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "    hop node->callback p50 / p99",
            f"{s['d_hop2_p50_ms']:.3f} / {s['d_hop2_p99_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "ref raw PUB->SUB p50 / p99",
            f"{s['raw_p50_ms']:.3f} / {s['raw_p99_ms']:.3f} ms",
            "reference",
            "-",
        ),
        (
            "ref raw via relay p50 / p99",
            f"{s['relay_p50_ms']:.3f} / {s['relay_p99_ms']:.3f} ms",
            "reference",
            "-",
        ),
    ]


def _latency_figures(result: dict[str, Any]) -> dict[str, Any]:
    """(d) and the references' latency: p50 / p99, loss, and the two hops of (d)."""
    d = result["d_latency"]
    lat = d["latency"]
    return {
        "d_p50_ms": lat.get("p50_ms"),
        "d_p99_ms": lat.get("p99_ms", float("inf")),
        "d_lost": d["lost"],
        "d_hop1_p50_ms": d["hop1_publish_to_node"].get("p50_ms"),
        "d_hop1_p99_ms": d["hop1_publish_to_node"].get("p99_ms"),
        "d_hop2_p50_ms": d["hop2_node_to_callback"].get("p50_ms"),
        "d_hop2_p99_ms": d["hop2_node_to_callback"].get("p99_ms"),
        "raw_p50_ms": result["raw_latency"]["latency"].get("p50_ms"),
        "raw_p99_ms": result["raw_latency"]["latency"].get("p99_ms"),
        "relay_p50_ms": result["relay_latency"]["latency"].get("p50_ms"),
        "relay_p99_ms": result["relay_latency"]["latency"].get("p99_ms"),
    }


def build_summary(
    result: dict[str, Any], ticks_begin: tuple[int, int, int], t_begin: float
) -> dict[str, Any]:
    """Every figure of the summary table, and whether each meets its target."""
    a = _median_run(result["a_raw"])["delivered_rate"]
    flood = _median_run(result["b_flood"])
    b = flood["delivered_rate"]
    relay_run = _median_run(result["ref_relay"])
    paced = result["b_paced"]
    flood_lost = sum(r["lost"] for r in result["b_flood"])
    if flood_lost == 0:
        zero_loss_rate: float | None = b
    else:
        ok_paced = [r["delivered_rate"] for r in paced if r["lost"] == 0]
        zero_loss_rate = max(ok_paced) if ok_paced else None
    summary = {
        "a_raw_rate": a,
        "a_raw_rates": [r["delivered_rate"] for r in result["a_raw"]],
        "a_raw_lost": sum(r["lost"] for r in result["a_raw"]),
        "relay_rate": relay_run["delivered_rate"],
        "relay_rates": [r["delivered_rate"] for r in result["ref_relay"]],
        "relay_lost": sum(r["lost"] for r in result["ref_relay"]),
        "b_rate": b,
        "b_rates": [r["delivered_rate"] for r in result["b_flood"]],
        "b_lost": flood_lost,
        "b_node_cpu_pct": flood["mid_cpu_pct"],
        "b_cpu_us_per_msg": flood["cpu_us_per_msg"],
        "b_thread_cpu_us_per_msg": flood["thread_cpu_us_per_msg"],
        "relay_cpu_us_per_msg": relay_run["cpu_us_per_msg"],
        "b_steal_pct": flood["steal_pct"],
        "b_other_cores": flood["other_cores"],
        "d_steal_pct": result["d_latency"]["steal_pct"],
        "d_other_cores": result["d_latency"]["other_cores"],
        "c_ratio": b / a if a else 0.0,
        "zero_loss_rate": zero_loss_rate,
        "paced": [(r["rate"], r["delivered_rate"], r["lost"]) for r in paced],
        **_latency_figures(result),
        **{
            k: v
            for k, v in _machine_load(
                ticks_begin, _cpu_ticks(), time.monotonic() - t_begin, 0.0
            ).items()
            if k != "other_cores"
        },
        "elapsed_s": time.monotonic() - t_begin,
    }
    summary["pass"] = {
        "b_rate": b >= TARGET_RATE,
        "c_ratio": summary["c_ratio"] >= TARGET_RATIO,
        "zero_loss": zero_loss_rate is not None and zero_loss_rate >= TARGET_RATE,
        "d_p99": summary["d_p99_ms"] <= TARGET_P99_MS,
    }
    return summary


def print_summary(result: dict[str, Any]) -> None:
    s, m, ok = result["summary"], result["machine"], result["summary"]["pass"]
    rows = _throughput_rows(s, ok) + _latency_rows(s, ok)
    print()
    print("=" * 110)
    print("zbroker single-node benchmark: summary")
    print(f"date      {m['date']}")
    print(
        f"machine   nproc {m['nproc']} (usable {m['cpus_usable']}), {m['cpu_model']}, "
        f"{m['os']}, load avg at start {m['loadavg_at_start']}, "
        f"during the run: CPU steal {s['steal_pct']:.1f}%, all processes kept "
        f"{s['busy_cores']:.2f} of {m['nproc']} cores busy on average"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, "
        f"msgpack {m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} "
        f"({m.get('sources', 'checkout')})"
    )
    print(
        f"run       {result['command']}: {result['messages']:,} messages of "
        f"{result['payload_bytes']} B per throughput run, median of {result['repeat']}; "
        f"latency {result['latency_rate']:,.0f} msg/s for {result['latency_seconds']:g} s; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 110)
    print(f"{'figure':<42}{'measured':<36}{'target':<28}result")
    for name, val, target, verdict in rows:
        print(f"{name:<42}{val:<36}{target:<28}{verdict}".rstrip())
    print("=" * 110)
