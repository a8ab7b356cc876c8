"""What ``bench_persistent.py`` prints and reports: a few lines per run as it ends, the
summary figures (medians, sums, verdicts against the targets) and the summary table, and
the profiles of a ``--profile`` run."""

from __future__ import annotations

import os
import pstats
import sys
import time
from typing import Any

import bench_node as bn
from persist_runs import median_run

log = bn.log
TARGET_CONFIRMED = 20_000.0


def _cpu_text(r: dict[str, Any]) -> str:
    u = r["cpu_us_per_msg"]
    parts = " + ".join(f"{k} {v:.1f}" for k, v in u.items() if k != "total")
    return f"{parts} = {u['total']:.1f} us/msg (node thread {r['node_thread_us_per_msg']:.1f})"


def _load_text(r: dict[str, Any]) -> str:
    return (
        f"machine: steal {r['steal_pct']:.1f}%, busy {r['busy_cores']:.2f} cores, "
        f"other processes {r['other_cores']:.2f} cores"
    )


def print_persistent(name: str, r: dict[str, Any]) -> None:
    log(
        f"  {name}: confirmed {r['confirmed']:,}/{r['published']:,} in {r['confirm_s']:.3f} s "
        f"-> {bn._fmt_rate(r['confirmed_rate'])} (window {r['window']:,}); errors "
        f"{r['errors'] or 0}, confirmations without a retention seq {r['not_retained']}; "
        f"the publisher's client lost its node {r['pub_lost_node']} times"
    )
    nd = r["node"]
    log(
        f"    node: received {nd['received']:,}, retained rows +{nd['retained_rows']:,}, "
        f"durable stored {nd['durable_stored']:,}, durable delivered "
        f"{nd['durable_delivered']:,}, dropped {nd['dropped'] or 0}"
    )
    if "delivered" in r:
        log(
            f"    durable subscriber (credit {r['credit']:,}): delivered {r['delivered']:,} "
            f"({r['unique']:,} distinct, not delivered {r['lost']:,}, duplicates "
            f"{r['duplicates']:,}, redelivered {r['redelivered']:,}, out of order "
            f"{r['out_of_order']:,}) in {r['delivered_s']:.3f} s -> "
            f"{bn._fmt_rate(r['delivered_rate'])}; left stored {r['left_stored']}, deleted "
            f"afterwards {r['deleted_after']}; its client lost the node {r['sub_lost_node']} "
            f"times, client thread alive at the end: {r['sub_thread_alive']}"
        )
    log(f"    CPU: {_cpu_text(r)}; publisher thread {r['pub_thread_us_per_msg']:.1f} us/msg")
    log(f"    {_load_text(r)}")


def print_drain(r: dict[str, Any]) -> None:
    log(
        f"  (d) detached: {r['confirmed']:,}/{r['published']:,} confirmed at "
        f"{bn._fmt_rate(r['confirmed_rate_detached'])}; stored before the return "
        f"{r['stored_before_return']}"
    )
    log(
        f"    returning subscriber (credit {r['credit']:,}): subscribe() "
        f"{r['subscribe_call_s']:.3f} s, first delivery after "
        f"{r['first_delivery_s'] or float('nan'):.3f} s, "
        f"{r['delivered']:,} delivered ({r['unique']:,} distinct, not delivered {r['lost']:,}, "
        f"duplicates {r['duplicates']:,}, redelivered {r['redelivered']:,}) in "
        f"{r['drain_s']:.3f} s -> {bn._fmt_rate(r['drain_rate'])}; left stored "
        f"{r['left_stored']}; its client lost the node {r['sub_lost_node']} times, client "
        f"thread alive at the end: {r['sub_thread_alive']}"
    )
    log(f"    CPU: {_cpu_text(r)}")
    log(f"    {_load_text(r)}")


def print_profiles(profile_dir: str, top: int) -> None:
    for role in ("node", "publisher"):
        path = os.path.join(profile_dir, f"{role}.prof")
        if not os.path.exists(path):
            log(f"(no profile for {role})")
            continue
        print(f"\n==== cProfile: {role} (sorted by tottime, top {top}) ====")
        st = pstats.Stats(path, stream=sys.stdout)
        st.strip_dirs().sort_stats("tottime").print_stats(top)


def summarize(result: dict[str, Any], n: int, t_begin: float, ticks_begin: Any) -> dict[str, Any]:
    """The summary figures of the runs in ``result``, with their verdicts (``pass``)."""
    a = bn._median_run(result["a_ref"])
    b = median_run(result["b_persistent"], "confirmed_rate")
    c = median_run(result["c_durable"], "delivered_rate")
    d = result["d_drain"]
    c_runs = result["c_durable"]
    summary = _summary_abc(result, a, b, c)
    summary.update(
        {
            "d_stored": d["stored_before_return"],
            "d_drain_s": d["drain_s"],
            "d_drain_rate": d["drain_rate"],
            "d_first_delivery_s": d["first_delivery_s"],
            "d_delivered": d["delivered"],
            "d_lost": d["lost"],
            "d_left_stored": d["left_stored"],
            "d_sub_thread_alive": d["sub_thread_alive"],
            "lost_node_events": sum(r["pub_lost_node"] for r in result["b_persistent"])
            + sum(r["pub_lost_node"] + r["sub_lost_node"] for r in c_runs)
            + d["pub_lost_node"]
            + d["sub_lost_node"],
            "dead_client_threads": sum(1 for r in c_runs if not r["sub_thread_alive"])
            + (0 if d["sub_thread_alive"] else 1),
            "d_duplicates": d["duplicates"],
            "d_redelivered": d["redelivered"],
            "d_confirmed_rate_detached": d["confirmed_rate_detached"],
            "d_cpu_us_per_msg": d["cpu_us_per_msg"],
            "d_node_thread_us_per_msg": d["node_thread_us_per_msg"],
            "d_other_cores": d["other_cores"],
            **{
                k: v
                for k, v in bn._machine_load(
                    ticks_begin, bn._cpu_ticks(), time.monotonic() - t_begin, 0.0
                ).items()
                if k != "other_cores"
            },
            "elapsed_s": time.monotonic() - t_begin,
        }
    )
    c_exact = (
        summary["c_unique"] == summary["c_published"]
        and summary["c_delivered"] == summary["c_published"]
        and summary["c_redelivered"] == 0
    )
    d_exact = d["unique"] == n and d["delivered"] == n and d["redelivered"] == 0
    summary["pass"] = {
        "b_rate": summary["b_rate"] >= TARGET_CONFIRMED
        and summary["b_unconfirmed"] == 0
        and summary["b_not_retained"] == 0,
        "c_exact": c_exact,
        "d_exact": d_exact,
    }
    return summary


def _summary_abc(
    result: dict[str, Any], a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]
) -> dict[str, Any]:
    """The summary figures of (a), (b) and (c); ``a``, ``b``, ``c``: their median runs."""
    c_runs = result["c_durable"]
    return {
        "a_rate": a["delivered_rate"],
        "a_rates": [r["delivered_rate"] for r in result["a_ref"]],
        "a_lost": sum(r["lost"] for r in result["a_ref"]),
        "a_cpu_us_per_msg": a["cpu_us_per_msg"],
        "b_rate": b["confirmed_rate"],
        "b_rates": [r["confirmed_rate"] for r in result["b_persistent"]],
        "b_unconfirmed": sum(r["published"] - r["confirmed"] for r in result["b_persistent"]),
        "b_not_retained": sum(r["not_retained"] for r in result["b_persistent"]),
        "b_retained_rows": [r["node"]["retained_rows"] for r in result["b_persistent"]],
        "b_cpu_us_per_msg": b["cpu_us_per_msg"],
        "b_node_thread_us_per_msg": b["node_thread_us_per_msg"],
        "b_pub_thread_us_per_msg": b["pub_thread_us_per_msg"],
        "b_node_cpu_pct": b["node_cpu_pct"],
        "b_other_cores": b["other_cores"],
        "b_steal_pct": b["steal_pct"],
        "c_confirmed_rate": c["confirmed_rate"],
        "c_confirmed_rates": [r["confirmed_rate"] for r in c_runs],
        "c_rate": c["delivered_rate"],
        "c_rates": [r["delivered_rate"] for r in c_runs],
        "c_published": sum(r["published"] for r in c_runs),
        "c_confirmed": sum(r["confirmed"] for r in c_runs),
        "c_delivered": sum(r["delivered"] for r in c_runs),
        "c_unique": sum(r["unique"] for r in c_runs),
        "c_lost": sum(r["lost"] for r in c_runs),
        "c_duplicates": sum(r["duplicates"] for r in c_runs),
        "c_redelivered": sum(r["redelivered"] for r in c_runs),
        "c_left_stored": [r["left_stored"] for r in c_runs],
        "c_cpu_us_per_msg": c["cpu_us_per_msg"],
        "c_node_thread_us_per_msg": c["node_thread_us_per_msg"],
        "c_other_cores": c["other_cores"],
    }


def _rates(rates: list[float]) -> str:
    return "runs: " + ", ".join(f"{r:,.0f}" for r in rates)


def _cpu_line(u: dict[str, float], thread: float) -> str:
    parts = " + ".join(f"{v:.1f}" for k, v in u.items() if k != "total")
    return f"{parts} = {u['total']:.1f} (node thread {thread:.1f})"


def print_summary(result: dict[str, Any]) -> None:
    s, m = result["summary"], result["machine"]
    n = result["messages"]
    rows = [*_rows_ab(result), *_rows_c(result), *_rows_d(result)]
    rows.append(
        (
            "clients that lost their node",
            f"{s['lost_node_events']} times (heartbeat timeout)",
            "0 on a free machine",
            "",
        )
    )
    rows.append(("clients whose thread died", f"{s['dead_client_threads']}", "0", ""))
    print()
    print("=" * 126)
    print("zbroker persistent publish / durable subscription benchmark: summary")
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
        f"({m.get('sources', 'checkout')})"
    )
    print(
        f"run       {result['command']}: {n:,} messages of {result['payload_bytes']} B per "
        f"run, median of {result['repeat']}; window {result['window']:,}, credit "
        f"{result['credit']:,}; store file at the end {result.get('store_file_bytes')} B; "
        f"elapsed {s['elapsed_s']:.1f} s"
    )
    print("-" * 126)
    print(f"{'figure':<46}{'measured':<48}{'target':<26}result")
    for name, val, target, verdict in rows:
        print(f"{name:<46}{val:<48}{target:<26}{verdict}".rstrip())
    print("=" * 126)


def _rows_ab(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    s, ok = result["summary"], result["summary"]["pass"]
    n = result["messages"]
    v = bn._verdict
    return [
        ("(a) non-persistent, 1 node, delivered", bn._fmt_rate(s["a_rate"]), "reference", "-"),
        ("", _rates(s["a_rates"]), f"lost {s['a_lost']:,}", ""),
        (
            "    CPU us/msg pub + node + sub",
            " + ".join(f"{s['a_cpu_us_per_msg'][k]:.1f}" for k in ("pub", "mid", "sub"))
            + f" = {s['a_cpu_us_per_msg']['total']:.1f}",
            "",
            "",
        ),
        (
            "(b) persistent, retained, confirmed",
            bn._fmt_rate(s["b_rate"]),
            f">= {TARGET_CONFIRMED:,.0f} msg/s",
            v(ok["b_rate"]),
        ),
        ("", _rates(s["b_rates"]), f"window {result['window']:,}", ""),
        (
            "    unconfirmed / no retention seq",
            f"{s['b_unconfirmed']:,} / {s['b_not_retained']:,}",
            "0 / 0",
            "",
        ),
        (
            "    retained rows added per run",
            ", ".join(f"{x:,}" for x in s["b_retained_rows"]),
            f"{n:,} each",
            "",
        ),
        (
            "    CPU us/msg pub + node",
            _cpu_line(s["b_cpu_us_per_msg"], s["b_node_thread_us_per_msg"]),
            f"node {s['b_node_cpu_pct']:.0f}% of a core",
            "",
        ),
        (
            "    machine during median (b) run",
            f"steal {s['b_steal_pct']:.1f}%",
            f"other procs {s['b_other_cores']:.2f} cores",
            "",
        ),
    ]


def _rows_c(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    s, ok = result["summary"], result["summary"]["pass"]
    v = bn._verdict
    return [
        ("(c) + durable subscriber: confirmed", bn._fmt_rate(s["c_confirmed_rate"]), "-", "-"),
        ("", _rates(s["c_confirmed_rates"]), "", ""),
        ("    durable delivered", bn._fmt_rate(s["c_rate"]), f"credit {result['credit']:,}", "-"),
        ("", _rates(s["c_rates"]), "", ""),
        (
            "    published / delivered / distinct",
            f"{s['c_published']:,} / {s['c_delivered']:,} / {s['c_unique']:,}",
            "all equal",
            "",
        ),
        (
            "    not delivered / duplicates / redelivered",
            f"{s['c_lost']:,} / {s['c_duplicates']:,} / {s['c_redelivered']:,}",
            "0 / 0 / 0",
            v(ok["c_exact"]),
        ),
        ("    left stored after the runs", ", ".join(str(x) for x in s["c_left_stored"]), "0", ""),
        (
            "    CPU us/msg pub + node + sub",
            _cpu_line(s["c_cpu_us_per_msg"], s["c_node_thread_us_per_msg"]),
            f"other procs {s['c_other_cores']:.2f} cores",
            "",
        ),
    ]


def _rows_d(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    s, ok = result["summary"], result["summary"]["pass"]
    n = result["messages"]
    v = bn._verdict
    return [
        ("(d) stored while away", f"{s['d_stored']}", f"{n:,}", ""),
        ("    time to drain on return", f"{s['d_drain_s']:.3f} s", "-", "-"),
        ("    drain rate", bn._fmt_rate(s["d_drain_rate"]), "-", "-"),
        (
            "    first delivery after subscribe()",
            f"{s['d_first_delivery_s']:.3f} s" if s["d_first_delivery_s"] is not None else "none",
            "-",
            "",
        ),
        (
            "    delivered / not delivered / dup / redel.",
            f"{s['d_delivered']:,} / {s['d_lost']:,} / {s['d_duplicates']:,} / "
            f"{s['d_redelivered']:,}",
            f"{n:,} / 0 / 0 / 0",
            v(ok["d_exact"]),
        ),
        ("    left stored after the drain", f"{s['d_left_stored']}", "0", ""),
        (
            "    confirmed rate while detached",
            bn._fmt_rate(s["d_confirmed_rate_detached"]),
            "-",
            "",
        ),
        (
            "    CPU us/msg node + sub (drain)",
            _cpu_line(s["d_cpu_us_per_msg"], s["d_node_thread_us_per_msg"]),
            f"other procs {s['d_other_cores']:.2f} cores",
            "",
        ),
    ]
