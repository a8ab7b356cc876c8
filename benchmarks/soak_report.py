"""What ``soak.py`` prints: a line per sample while the load runs, and the summary at
the end (machine and run, the RSS series and verdict, the persistent check, the counters of
every role and node)."""

from __future__ import annotations

from typing import Any

import bench_node as bn
from soak_roles import NODE_IDS

log = bn.log


SAMPLE_HEADER = (
    f"{'t s':>6} {'A MB':>7} {'B MB':>7} {'C MB':>7}  {'A recv/s':>9} {'C deliv/s':>9} "
    f"{'sub recv/s':>10} {'confirm/s':>9} {'durable':>8} {'C stored':>8} "
    f"{'drops A/B/C':>12} {'other cores':>11}"
)


def print_sample(s: dict[str, Any], prev: dict[str, Any] | None) -> None:
    dt = s["t"] - (prev["t"] if prev else 0.0)

    def rate(key: str, sub: str | None = None) -> str:
        if prev is None or dt <= 0:
            return "-"
        cur = s[key] if sub is None else s[key].get(sub)
        old = prev[key] if sub is None else prev[key].get(sub)
        if cur is None or old is None:
            return "?"
        return f"{(cur - old) / dt:,.0f}"

    drops = "/".join(str(s[k].get("dropped", "?")) for k in ("A", "B", "C"))
    other = "-"
    if prev is not None:
        load = bn._machine_load(prev["ticks"], s["ticks"], dt, 0.0)
        other = f"{load['busy_cores']:.2f} busy"
    r = s["rss_mb"]
    log(
        f"{s['t']:>6.0f} {r['A']:>7.1f} {r['B']:>7.1f} {r['C']:>7.1f}  "
        f"{rate('A', 'received'):>9} {rate('C', 'delivered'):>9} {rate('sub_received'):>10} "
        f"{rate('confirmed'):>9} {s['durable_delivered']:>8,} "
        f"{s['C'].get('durable_depth', '?'):>8} {drops:>12} {other:>11}"
    )


def print_summary(result: dict[str, Any]) -> None:
    print()
    print("=" * 110)
    _print_run(result)
    print("-" * 110)
    _print_rss(result)
    print("-" * 110)
    _print_persistent(result)
    print("-" * 110)
    _print_counters(result)
    _print_nodes(result)
    print("=" * 110)


def _print_run(result: dict[str, Any]) -> None:
    m, a = result["machine"], result["args"]
    print("zbroker soak test: summary")
    print(f"date      {m['date']}")
    ml = result["machine_load"]
    print(
        f"machine   nproc {m['nproc']}, {m['cpu_model']}, {m['os']}, load avg at start "
        f"{m['loadavg_at_start']}; during the load period: steal {ml['steal_pct']:.1f}%, "
        f"all processes kept {ml['busy_cores']:.2f} of {m['nproc']} cores busy"
    )
    print(
        f"software  Python {m['python']}, pyzmq {m['pyzmq']}, libzmq {m['libzmq']}, msgpack "
        f"{m['msgpack']}; zbroker sources sha256 {m['zbroker_src_sha256']} ({m['sources']})"
    )
    print(
        f"run       {result['command']}: {a['minutes']:g} min, non-persistent "
        f"{a['rate']:,.0f} msg/s on A (= {a['fraction']:g} x peak {a['peak']:,.0f}), "
        f"{a['subscribers']} churning subscribers on C every {a['churn_s']:g} s, persistent "
        f"{a['persistent_rate']:,.0f} msg/s confirm on {a['persistent_node']} "
        f"({a['persistent_threads']} threads), "
        f"durable credit {a['credit']}, "
        f"restart every {a['durable_restart_s']:g} s; elapsed {result['elapsed_s']:.0f} s"
    )


def _print_rss(result: dict[str, Any]) -> None:
    rss = result["rss"]
    print("RSS series (MB), every sample:")
    print(f"  {'t s':>6} {'A':>7} {'B':>7} {'C':>7}")
    for s in result["samples"]:
        r = s["rss_mb"]
        print(f"  {s['t']:>6.0f} {r['A']:>7.1f} {r['B']:>7.1f} {r['C']:>7.1f}")
    print(
        f"RSS growth from t={rss['baseline_t']:.0f} s (minute 1) to t={rss['end_t']:.0f} s, "
        f"bound {rss['bound_mb']:g} MB per node:"
    )
    for k, v in rss["nodes"].items():
        slope = "-" if v["slope_mb_per_min"] is None else f"{v['slope_mb_per_min']:+.2f} MB/min"
        print(
            f"  node {k}: start {v['start_mb']:.1f}, at minute 1 {v['baseline_mb']:.1f}, end "
            f"{v['end_mb']:.1f}, max {v['max_mb']:.1f} MB; growth {v['growth_mb']:+.1f} MB "
            f"(fit {slope}) {bn._verdict(v['ok'])}"
        )
    print(f"  RSS verdict: {bn._verdict(rss['ok'])}")


def _print_persistent(result: dict[str, Any]) -> None:
    p = result["persistent"]
    print("persistent publishes (confirm=True) -> durable subscription on C:")
    pp = result["ppub"]
    print(
        f"  attempted {p['attempted']:,} in {pp['elapsed_s']:.1f} s "
        f"({p['attempted'] / pp['elapsed_s'] if pp['elapsed_s'] else 0:,.0f} msg/s, "
        f"{pp['threads']} threads), confirmed {p['confirmed']:,}, failed {p['failed']:,}"
        f"{' ' + str(pp['errors']) if pp['errors'] else ''} (of which delivered "
        f"{p['failed_but_delivered']:,}); confirm latency ms {_fmt_q(pp['lat_ms'])}, "
        f"max behind schedule {pp['max_late_s']:.2f} s"
    )
    subs = result["durable_subscribers"]
    print(
        f"  durable subscribers: {len(subs)} generations ({sum(1 for s in subs if s['killed'])}"
        f" SIGKILLed, {sum(1 for s in subs if not s['killed'])} closed); drained "
        f"{_fmt_s(result['drain_after_load_s'])} after the load stopped; left stored "
        f"{[d['stored'] for d in result['durable_final']]}"
    )
    print(
        f"  delivered {p['delivered_total']:,} ({p['distinct_delivered']:,} distinct): "
        f"extra copies {p['extra_copies']:,}, flagged redelivered {p['flagged_redelivered']:,}"
        f" (first copy already flagged: {p['first_copy_flagged']:,}), unflagged duplicates "
        f"{p['unflagged_duplicates']:,}, lines cut by SIGKILL {p['cut_lines']}"
    )
    print(
        f"  lost confirmed messages: {p['lost_confirmed']:,} {p['lost_examples'] or ''}; "
        f"unexpected indices {p['unexpected_index']}"
    )
    print(
        f"  persistent verdict (no loss, exactly once modulo flagged redeliveries): "
        f"{bn._verdict(p['ok'])}"
    )


def _print_counters(result: dict[str, Any]) -> None:
    print("counters:")
    sent = sum(x["sent"] for x in result["publishers"])
    print(
        f"  publishers on A: sent {sent:,} ("
        + ", ".join(
            f"{x['rate']:,.0f} msg/s, max late {x['max_late_s']:.2f} s, errors "
            f"{x['errors'] or 0}, lost its node {x['lost_node']} times"
            for x in result["publishers"]
        )
        + ")"
    )
    nf = result["nodes_final"]
    a_recv = nf[NODE_IDS[0]]["counters"]["received"]
    c_deliv = nf[NODE_IDS[2]]["counters"]["delivered"]
    c_pers = result["persistent"]["attempted"]
    print(
        f"  non-persistent: sent {sent:,}, A received {a_recv:,}, C delivered "
        f"{c_deliv:,} (C's deliveries count non-persistent only: persistent ones go to the "
        f"durable), sent - received at A = {sent - a_recv:,}, sent - delivered at C = "
        f"{sent - c_deliv:,}; chain idle "
        f"{_fmt_s(result['chain_idle_after_s'])} after the publishers stopped; "
        f"persistent attempted {c_pers:,}"
    )
    ch = result["churn"]
    print(
        f"  churning subscribers: {ch['clients']} clients opened in all ({ch['opened']} "
        f"opened, {ch['closed']} closed, {ch['closed_unsub']} of them after unsubscribe()), "
        f"received {ch['received']:,}, missed (gaps) {ch['missed']:,}, errors "
        f"{ch['errors'] or 0}, slowest open {ch['max_open_s']:.3f} s, slowest close "
        f"{ch['max_close_s']:.3f} s, clients lost their node {ch['lost_node']} times"
    )
    subs = result["durable_subscribers"]
    print(
        f"  client 'lost node' events (heartbeat timeouts): persistent publisher "
        f"{result['ppub']['lost_node']}, durable subscribers closed cleanly "
        f"{sum(s_.get('lost_node', 0) for s_ in subs if not s_['killed'])} (killed ones "
        "cannot report)"
    )


def _print_nodes(result: dict[str, Any]) -> None:
    for name, nd in result["nodes_final"].items():
        c = nd["counters"]
        links = "; ".join(
            f"{ln['name']}<->{ln['peer']} {ln['state']} in {ln['msgs_in']:,} out "
            f"{ln['msgs_out']:,} drops {ln['drops']}"
            for ln in nd["links"]
        )
        print(
            f"  {name}: received {c['received']:,}, forwarded {c['forwarded']:,}, delivered "
            f"{c['delivered']:,}, durable stored {c.get('durable_stored', 0):,} / delivered "
            f"{c.get('durable_delivered', 0):,}, duplicates {c['duplicates']}, links_down "
            f"{c['links_down']}, dropped {c['dropped'] or 0}"
        )
        print(f"      links: {links}")
    print(
        "  node CPU during the load: "
        + ", ".join(f"{k} {v:.0f}% of a core" for k, v in result["node_cpu_pct"].items())
    )


def _fmt_q(q: dict[str, float]) -> str:
    if not q:
        return "-"
    return f"p50 {q['p50']:.2f}, p99 {q['p99']:.2f}, p99.9 {q['p999']:.2f}, max {q['max']:.2f}"


def _fmt_s(x: float | None) -> str:
    return "never (timeout)" if x is None else f"{x:.1f} s"
