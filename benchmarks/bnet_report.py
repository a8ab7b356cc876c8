"""What the network benchmark prints: each run's log lines (stderr) and the summary table
(stdout), one row per figure with its target and verdict."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # log, rate and verdict formats
from bnet_chain import CHAIN_IDS

log = bn.log

Row = tuple[str, str, str, str]  # figure, measured, target, result

# -- each run's log lines -------------------------------------------------------------------


def _print_chain_run(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {bn._fmt_rate(r['delivered_rate'])}; "
        f"publisher sent at {bn._fmt_rate(r['publish_rate'])}; "
        f"C's interest reached A {1000 * r['converge_s']:.0f} ms after the subscriber's "
        "subscriptions were confirmed"
    )
    u = r["cpu_us_per_msg"]
    if r.get("rate") is None:
        log(
            "    CPU per message: "
            + ", ".join(f"{k} {v:.2f} us" for k, v in u.items() if k != "total")
            + f", total {u['total']:.2f} us"
        )
    if "thread_cpu_us_per_msg" in r:
        t = r["thread_cpu_us_per_msg"]
        log(
            "    of which the Python threads: "
            + ", ".join(f"{k} {v:.2f} us" for k, v in t.items())
            + "; the rest is libzmq I/O threads"
        )
    log(
        "    nodes' CPU: "
        + ", ".join(f"{k} {v:.0f}% of a core" for k, v in r["node_cpu_pct"].items())
        + f"; machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )
    chk = r["counter_check"]
    log(
        "    node counters "
        + ("agree" if chk["ok"] else "DISAGREE")
        + ": "
        + "; ".join(f"{k}: {x:,} vs {y:,}" for k, (x, y) in chk["pairs"].items())
        + f"; drops {chk['drops'] or 0}, link drops {chk['link_drops']}, links down "
        f"{chk['links_down']}, duplicates {chk['duplicates']}"
    )
    if "latency" in r:
        _print_chain_latency(r)


def _print_chain_latency(r: dict[str, Any]) -> None:
    lat = r["latency"]
    log(
        f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
        f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, p99.9 {lat['p999_ms']:.3f}, "
        f"max {lat['max_ms']:.3f}, mean {lat['mean_ms']:.3f} ms"
    )
    for key, label in (
        ("hop1_publish_to_node", "publish -> A"),
        ("hop2_node_to_callback", "A -> callback on C"),
    ):
        h = r[key]
        log(
            f"    {label} (CLOCK_REALTIME, split at A's receive stamp): "
            f"p50 {h['p50_ms']:.3f} ms, p99 {h['p99_ms']:.3f}, max {h['max_ms']:.3f}"
        )


def _print_relay_run(name: str, r: dict[str, Any]) -> None:
    u = r["cpu_us_per_msg"]
    cpu = (
        ""
        if "latency" in r
        else f"CPU per message pub {u['pub']:.2f} + 3 relays {u['mid']:.2f} + sub "
        f"{u['sub']:.2f} us; "
    )
    log(
        f"  {name}: delivered {r['delivered']:,}/{r['published']:,} (lost {r['lost']:,}) "
        f"in {r['window_s']:.3f} s -> {bn._fmt_rate(r['delivered_rate'])}; {cpu}other "
        f"processes {r['other_cores']:.2f} cores"
    )
    if "latency" in r:
        lat = r["latency"]
        log(
            f"    latency over {lat['samples']:,} samples: p50 {lat['p50_ms']:.3f} ms, "
            f"p90 {lat['p90_ms']:.3f}, p99 {lat['p99_ms']:.3f}, max {lat['max_ms']:.3f} ms"
        )


# -- the summary table ----------------------------------------------------------------------


def _us(d: dict[str, float], keys: tuple[str, ...]) -> str:
    return " + ".join(f"{d[k]:.1f}" for k in keys)


def _zero_loss_text(s: dict[str, Any]) -> str:
    cz = s["c_zero_loss_rate"]
    return f"{bn._fmt_rate(cz)}, 0 lost" if cz is not None else "no run without loss"


def print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    rows = _one_node_rows(s) + _chain_rate_rows(s) + _chain_cost_rows(s) + _latency_rows(s)
    if "m_wake_p99_ms" in s:
        rows.append(
            (
                "(m) machine wake lateness p50/p99/99.9",
                f"{s['m_wake_p50_ms']:.3f} / {s['m_wake_p99_ms']:.3f} / "
                f"{s['m_wake_p999_ms']:.3f} ms",
                f"{s['m_wake_over_1ms']} of {s['m_wake_samples']:,} over 1 ms",
                "",
            )
        )
    if "relay3_rate" in s:
        rows += _relay_rows(s)
    if "e_wall_s" in s:
        rows += _sim_rows(s)
    rows += _aim_rows(s)
    _print_header(result)
    print(f"{'figure':<42}{'measured':<36}{'target':<28}result")
    for name, val, target, verdict in rows:
        print(f"{name:<42}{val:<36}{target:<28}{verdict}".rstrip())
    print("=" * 112)


def _print_header(result: dict[str, Any]) -> None:
    s, m = result["summary"], result["machine"]
    print()
    print("=" * 112)
    print("zbroker network benchmark (issue 3): summary")
    print(f"date      {m['date']}")
    print(
        f"machine   nproc {m['nproc']} (usable {m['cpus_usable']}), {m['cpu_model']}, "
        f"{m['os']}, load avg at start {m['loadavg_at_start']}, during the run: CPU steal "
        f"{s['steal_pct']:.1f}%, all processes kept {s['busy_cores']:.2f} of {m['nproc']} "
        "cores busy on average"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, "
        f"msgpack {m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} "
        f"({m['sources']})"
    )
    print(
        f"run       {result['command']}: {result['messages']:,} messages of "
        f"{result['payload_bytes']} B per throughput run, median of {result['repeat']}; "
        f"latency {result['latency_rate']:,.0f} msg/s for {result['latency_seconds']:g} s; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 112)


def _one_node_rows(s: dict[str, Any]) -> list[Row]:
    """(a) the raw ceiling and (b) one node."""
    fr = bn._fmt_rate
    return [
        ("(a) raw pyzmq PUB->SUB delivered", fr(s["a_raw_rate"]), "ceiling", "-"),
        ("", bn._rates(s["a_raw_rates"]), f"lost {s['a_raw_lost']:,}", ""),
        ("(b) one node delivered", fr(s["b_rate"]), "reference", "-"),
        ("", bn._rates(s["b_rates"]), f"lost {s['b_lost']:,}", ""),
        (
            "    CPU us/msg pub + node + sub",
            _us(s["b_cpu_us_per_msg"], ("pub", "mid", "sub"))
            + f" = {s['b_cpu_us_per_msg']['total']:.1f}",
            "Python threads: " + _us(s["b_thread_cpu_us_per_msg"], ("pub", "mid", "sub")),
            "",
        ),
    ]


def _chain_rate_rows(s: dict[str, Any]) -> list[Row]:
    """(c) the chain's delivered rate, its losses and its paced runs."""
    fr = bn._fmt_rate
    rows: list[Row] = [
        ("(c) chain A->B->C delivered", fr(s["c_rate"]), "", ""),
        ("", bn._rates(s["c_rates"]), f"lost {s['c_lost']:,}", ""),
        (
            "    chain lost (published - delivered)",
            " / ".join(f"{x:,}" for x in s["c_lost_per_run"]),
            f"of {s['c_published']:,} published",
            "",
        ),
        (
            "    chain rate with zero loss",
            _zero_loss_text(s),
            ">= 120,000 msg/s, 0 lost",
            bn._verdict(s["pass"]["chain_rate_zero_loss"]),
        ),
    ]
    for rate, got, lost in s["c_paced"]:
        rows.append((f"    paced run at {rate:,.0f} msg/s", fr(got), f"lost {lost:,}", ""))
    return rows


def _chain_cost_rows(s: dict[str, Any]) -> list[Row]:
    """(c) the chain's counter checks, CPU and interest propagation."""
    chain_keys = ("pub", *CHAIN_IDS, "sub")
    th = s["c_thread_cpu_us_per_msg"]
    return [
        (
            "    node counts = client counts",
            " / ".join("yes" if x else "NO" for x in s["c_counts_agree"]),
            "per flood run (see log)",
            "",
        ),
        (
            "    links declared down (A+B+C)",
            " / ".join(str(x) for x in s["c_links_down"]),
            "per flood run; 0 expected",
            "",
        ),
        (
            "    CPU us/msg pub + A + B + C + sub",
            _us(s["c_cpu_us_per_msg"], chain_keys) + f" = {s['c_cpu_us_per_msg']['total']:.1f}",
            s["c_ref_run"],
            "",
        ),
        (
            "      of which Python threads",
            _us(th, chain_keys) if th else "n/a (paced run)",
            "",
            "",
        ),
        (
            "    node CPU A / B / C (% of a core)",
            " / ".join(f"{s['c_node_cpu_pct'][k]:.0f}" for k in CHAIN_IDS),
            f"other procs {s['c_other_cores']:.2f} cores",
            "",
        ),
        ("    chain / one node", f"{s['c_over_b']:.3f}", "", ""),
        (
            "    interest C -> A visible after",
            " / ".join(f"{x:.0f}" for x in s["c_converge_ms"]) + " ms",
            "routes() polled on A",
            "",
        ),
    ]


def _latency_rows(s: dict[str, Any]) -> list[Row]:
    """(d) latency through one node and through the chain."""
    return [
        (
            "(d) one node p50 / p99 @2,000 msg/s",
            f"{s['d_one_p50_ms']:.3f} / {s['d_one_p99_ms']:.3f} ms",
            f"lost {s['d_one_lost']:,}",
            "-",
        ),
        (
            "(d) chain p50 @2,000 msg/s",
            f"{s['d_chain_p50_ms']:.3f} ms",
            f"lost {s['d_chain_lost']:,}",
            "",
        ),
        (
            "    chain p99 @2,000 msg/s",
            f"{s['d_chain_p99_ms']:.3f} ms",
            "<= 3 ms",
            bn._verdict(s["pass"]["chain_p99"]),
        ),
        (
            "    publish->A / A->callback p50",
            f"{s['d_chain_hop1_p50_ms']:.3f} / {s['d_chain_hop2_p50_ms']:.3f} ms",
            "diagnostic",
            "",
        ),
        (
            "    publish->A / A->callback p99",
            f"{s['d_chain_hop1_p99_ms']:.3f} / {s['d_chain_hop2_p99_ms']:.3f} ms",
            f"other procs {s['d_chain_other_cores']:.2f} cores",
            "",
        ),
    ]


def _relay_rows(s: dict[str, Any]) -> list[Row]:
    """The reference line of three bare Python relays."""
    u3 = s["relay3_cpu_us_per_msg"]
    return [
        ("ref raw pyzmq via 3 Python relays", bn._fmt_rate(s["relay3_rate"]), "reference", "-"),
        ("", bn._rates(s["relay3_rates"]), f"lost {s['relay3_lost']:,}", ""),
        (
            "    CPU us/msg pub + 3 relays + sub",
            f"{u3['pub']:.1f} + {u3['mid']:.1f} + {u3['sub']:.1f} = {u3['total']:.1f}",
            "",
            "",
        ),
        (
            "    p50 / p99 @2,000 msg/s",
            f"{s['relay3_p50_ms']:.3f} / {s['relay3_p99_ms']:.3f} ms",
            f"other procs {s['relay3_latency_other_cores']:.2f} cores",
            "",
        ),
    ]


def _sim_rows(s: dict[str, Any]) -> list[Row]:
    """(e) the simulator's wall time and its report."""
    if s.get("e_error"):
        return [("(e) simulator", s["e_error"][:60], "< 60 s", "FAIL")]
    r = s["e_report"]
    return [
        (
            "(e) simulator wall time",
            f"{s['e_wall_s']:.1f} s",
            "< 60 s",
            bn._verdict(s["pass"]["sim_under_60s"]),
        ),
        (
            "    network",
            f"{r['nodes']} nodes, {r['links']} links",
            f"{r['subscriptions']:,} subscriptions",
            "",
        ),
        ("    convergence time (virtual)", f"{1000 * r['convergence_time']:.1f} ms", "", ""),
        ("    advertisement frames", f"{r['advert_frames']:,}", "", ""),
        ("    interest entries", f"{r['interest_entries']:,}", "", ""),
        ("    memory per entry", f"{r['bytes_per_entry']:.0f} B", "RSS growth / entries", ""),
        (
            "    frames per publish",
            f"{r['frames_per_publish']:.2f}",
            f"{r['publishes']} publishes",
            "",
        ),
        ("    duplicates / lost", f"{r['duplicates']:,} / {r['lost']:,}", "0 / 0", ""),
        (
            "    deliveries / expected",
            f"{r['deliveries']:,} / {r['expected']:,}",
            f"mean hops {r['mean_hops']:.2f}",
            "",
        ),
        ("    simulator's own wall_seconds", f"{r['wall_seconds']:.1f} s", "", ""),
    ]


def _aim_rows(s: dict[str, Any]) -> list[Row]:
    """The project's aim, for information."""
    aim = s["aim"]
    return [
        (
            "aim (info): chain rate, 0 lost",
            _zero_loss_text(s),
            ">= 260,000 msg/s",
            "met" if aim["rate"] else "not met",
        ),
        (
            "aim (info): chain p99",
            f"{s['d_chain_p99_ms']:.3f} ms",
            "<= 0.6 ms",
            "met" if aim["p99"] else "not met",
        ),
    ]
