#!/usr/bin/env python3
"""Compare two checkouts of zbroker on this machine, alternating them in one sitting.

    python3 benchmarks/bench_compare.py --a ../zbroker-old --b .            # 5 pairs, ~3 min
    python3 benchmarks/bench_compare.py --a ../zbroker-old --b . --quick    # smoke, ~25 s
    python3 benchmarks/bench_compare.py --a OLD --b NEW --pairs 7 --json    # JSON on stdout

Each DIR is a checkout with its own virtualenv, ``DIR/.venv/bin/python``, in which zbroker
is installed (editable or not: the sources measured are always ``DIR/zbroker`` and
``DIR/cli``). Per pair the two trees run one after the other, A then B in even pairs and
B then A in odd ones, so slow drift of the machine's load falls on both alike. One run of
a tree is one child process, started with that tree's python and with the tree as its
working directory; it copies the tree's sources (``_common.snapshot_sources(DIR)``) and
imports zbroker from that copy only, then measures, every role in its own process on
127.0.0.1, 100-byte payloads (another size with ``--size``):

* one node: flood throughput at the subscriber (msg/s, lost), CPU per message of the
  three processes, and p50/p99 publish -> callback at 2,000 msg/s;
* the 3-node chain A -> B -> C (publisher on A, subscriber on C): the same figures, with
  the nodes' counters checked against what the clients saw.

The measurement code is this checkout's ``bench_node.py`` / ``bench_network.py``
(``run_zb``, ``start_chain``, ``run_chain``), the same for both trees: only zbroker differs.
The result: each run, then per tree the median over pairs, the ratio of the medians B/A
and the median of the per-pair ratios, and the regression check of issue 13 (throughput
within 3 %, latency no worse). Every child is stopped by its PID when the comparison ends,
fails or is interrupted; the children stop their own processes the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: the payload size for bench_node, in the environment of every process of a run
PAYLOAD_ENV = "ZBROKER_BENCH_PAYLOAD"

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT_S = 420.0  # one tree's run; a full one takes about 18 s
THROUGHPUT_TOLERANCE = 0.97  # issue 13: within 3 % of the old code

# (key, label, higher is better?) of the figures compared
FIGURES = (
    ("node_rate", "one node, msg/s", True),
    ("node_cpu_us", "one node, CPU us/msg (3 procs)", False),
    ("node_p50_ms", "one node, p50 ms @2k/s", False),
    ("node_p99_ms", "one node, p99 ms @2k/s", False),
    ("chain_rate", "chain, msg/s", True),
    ("chain_cpu_us", "chain, CPU us/msg (5 procs)", False),
    ("chain_p50_ms", "chain, p50 ms @2k/s", False),
    ("chain_p99_ms", "chain, p99 ms @2k/s", False),
)


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


# -- child: one tree, one run -----------------------------------------------------------------


def _flood_figures(prefix: str, r: dict[str, Any], nodes_us: float) -> dict[str, Any]:
    return {
        f"{prefix}_rate": r["delivered_rate"],
        f"{prefix}_lost": r["lost"],
        f"{prefix}_cpu_us": r["cpu_us_per_msg"]["total"],
        f"{prefix}_nodes_us": nodes_us,
        f"{prefix}_steal_pct": r["steal_pct"],
    }


def _latency_figures(prefix: str, r: dict[str, Any]) -> dict[str, Any]:
    lat = r["latency"]
    return {
        f"{prefix}_p50_ms": lat.get("p50_ms", float("nan")),
        f"{prefix}_p99_ms": lat.get("p99_ms", float("nan")),
        f"{prefix}_lat_lost": r["lost"],
    }


def _node_figures(ctx: Any, tmp: str, stop: Any, n: int, n_lat: int) -> dict[str, Any]:
    """One node: a flood, then a latency run; then the node is stopped by its PID."""
    import bench_node as bn

    from zbroker import Client

    proc, endpoint, conn = bn._start_node(ctx, tmp, stop, False)
    client = Client(endpoint)
    try:
        r = bn.run_zb(ctx, endpoint, proc.pid, conn, client, "flood", n)
        out = _flood_figures("node", r, r["cpu_us_per_msg"]["mid"])
        r = bn.run_zb(ctx, endpoint, proc.pid, conn, client, "latency", n_lat, bn.LATENCY_RATE)
        out.update(_latency_figures("node", r))
    finally:
        client.close()
    stop.set()
    bn._stop_procs([proc])
    return out


def child_main(tree: Path, n: int, lat_s: float) -> dict[str, Any]:
    """Measure ``tree``'s zbroker once: one node, then the chain. Runs in the tree's python."""
    sys.path.insert(0, str(HERE))
    from _common import end_on_signals, snapshot_sources

    src = snapshot_sources(tree)  # before anything imports zbroker; checks the origin
    import multiprocessing as mp
    import shutil
    import tempfile

    import bench_network as bnet
    import bench_node as bn

    end_on_signals(None, "comparison")  # SIGTERM runs the finally blocks: stop every child
    n_lat = int(bn.LATENCY_RATE * lat_s) + bn.LATENCY_LEAD_IN
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-cmpbench-")
    stops = [ctx.Event(), ctx.Event()]
    digest = f"{bn.source_digest()} ({bn.compiled_state()})"
    out: dict[str, Any] = {"digest": digest, "sources": src}
    nodes: list[dict[str, Any]] = []
    try:
        out.update(_node_figures(ctx, tmp, stops[0], n, n_lat))
        nodes, _ = bnet.start_chain(ctx, tmp, stops[1])
        r = bnet.run_chain(ctx, nodes, "flood", n)
        us = r["cpu_us_per_msg"]
        out.update(_flood_figures("chain", r, sum(us[nm] for nm in bnet.CHAIN_IDS)))
        out["chain_counters_ok"] = r["counter_check"]["ok"]
        r = bnet.run_chain(ctx, nodes, "latency", n_lat, bn.LATENCY_RATE, keep_samples=True)
        out.update(_latency_figures("chain", r))
        out["chain_lat_ns"] = r.get("lat_ns", [])
        bnet.stop_nodes(nodes, stops[1])
        nodes = []
    finally:
        if nodes:
            bnet.stop_nodes(nodes, stops[1])
        for ev in stops:
            ev.set()
        for p in bn._PROCS:
            if p.is_alive():
                bn._stop_procs([p], 5.0)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- parent: alternate the trees --------------------------------------------------------------


def _git_state(tree: Path) -> str:
    """Commit of the tree, '+dirty' when zbroker/ or cli/ differ from it."""

    def git(*a: str) -> str:
        r = subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "no git"
    return head + ("+dirty" if git("status", "--porcelain", "--", "zbroker", "cli") else "")


def run_tree(tree: Path, n: int, lat_s: float, size: int, verbose: bool) -> dict[str, Any]:
    """One child run of ``tree``; stopped by PID if it overruns or we are interrupted."""
    python = tree / ".venv" / "bin" / "python"
    cmd = [str(python), str(Path(__file__).resolve()), "--child", str(tree)]
    cmd += ["--messages", str(n), "--latency-seconds", str(lat_s)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env[PAYLOAD_ENV] = str(size)  # bench_node reads it in every process the run spawns
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if verbose else subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            log(f"  stopping child {proc.pid} (SIGTERM)")
            proc.terminate()  # by PID; its SIGTERM handler stops its own children
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    if proc.returncode != 0:
        tail = "\n".join((stderr or "").splitlines()[-30:])
        raise RuntimeError(f"run of {tree} failed (exit {proc.returncode}):\n{tail}")
    res: dict[str, Any] = json.loads(stdout)
    return res


def _run_line(label: str, r: dict[str, Any]) -> str:
    return (
        f"  {label:>8}: node {r['node_rate']:>9,.0f} msg/s lost {r['node_lost']:,}, "
        f"{r['node_cpu_us']:.1f} us/msg, p50/p99 {r['node_p50_ms']:.3f}/{r['node_p99_ms']:.3f}"
        f" ms | chain {r['chain_rate']:>9,.0f} msg/s lost {r['chain_lost']:,}, "
        f"{r['chain_cpu_us']:.1f} us/msg, p50/p99 {r['chain_p50_ms']:.3f}/"
        f"{r['chain_p99_ms']:.3f} ms | steal {max(r['node_steal_pct'], r['chain_steal_pct']):.1f}%"
    )


def _pct(sorted_ns: list[int], p: float) -> float:
    i = min(len(sorted_ns) - 1, max(0, -(-len(sorted_ns) * p // 100) - 1))
    return sorted_ns[int(i)] / 1e6 if sorted_ns else float("nan")


def summarise(labels: tuple[str, str], runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over pairs, ratio of medians B/A, median of the per-pair ratios B/A."""
    a, b = (runs[lb] for lb in labels)
    rows = {}
    for key, _, _ in FIGURES:
        ma = statistics.median(r[key] for r in a)
        mb = statistics.median(r[key] for r in b)
        pair = [rb[key] / ra[key] for ra, rb in zip(a, b, strict=True) if ra[key]]
        rows[key] = {
            labels[0]: ma,
            labels[1]: mb,
            "ratio_of_medians": mb / ma if ma else float("nan"),
            "median_pair_ratio": statistics.median(pair) if pair else float("nan"),
        }
    pooled = {}
    for lb in labels:
        ns = sorted(x for r in runs[lb] for x in r.pop("chain_lat_ns", []))
        pooled[lb] = {"samples": len(ns), "p50_ms": _pct(ns, 50), "p99_ms": _pct(ns, 99)}
    lost = {lb: sum(r["node_lost"] + r["chain_lost"] for r in runs[lb]) for lb in labels}
    lat_lost = {
        lb: sum(r["node_lat_lost"] + r["chain_lat_lost"] for r in runs[lb]) for lb in labels
    }
    checks_ok = {lb: all(r["chain_counters_ok"] for r in runs[lb]) for lb in labels}
    verdict = {
        "throughput_within_3pct": all(
            rows[k]["median_pair_ratio"] >= THROUGHPUT_TOLERANCE
            for k in ("node_rate", "chain_rate")
        ),
        "latency_no_worse": all(
            rows[k][labels[1]] <= rows[k][labels[0]]
            for k in ("node_p50_ms", "node_p99_ms", "chain_p50_ms", "chain_p99_ms")
        ),
        "no_loss": not any(lost.values()) and not any(lat_lost.values()),
        "chain_counters_ok": all(checks_ok.values()),
    }
    return {
        "figures": rows,
        "pooled_chain_latency": pooled,
        "lost": lost,
        "latency_lost": lat_lost,
        "verdict": verdict,
    }


def print_report(result: dict[str, Any]) -> None:
    la, lb = result["labels"]
    s = result["summary"]
    n = result["pairs"]
    print(f"\n==== zbroker {lb} vs {la}: {n} alternated pairs ({result['date']}) ====")
    for lab in (la, lb):
        t = result["trees"][lab]
        print(f"{lab}: {t['dir']} at {t['git']}, sources sha256 {', '.join(t['digests'])}")
    print(
        f"{result['messages']:,} messages per flood, {result['latency_seconds']:g} s per "
        f"latency run at 2,000 msg/s; machine: {result['machine']}"
    )
    print(f"\n{'figure (median over pairs)':<32}{la:>12}{lb:>12}{'B/A':>8}{'pair B/A':>10}")
    for key, name, _ in FIGURES:
        row = s["figures"][key]
        fmt = "{:>12,.0f}" if key.endswith("rate") else "{:>12.3f}"
        print(
            f"{name:<32}{fmt.format(row[la])}{fmt.format(row[lb])}"
            f"{row['ratio_of_medians']:>8.3f}{row['median_pair_ratio']:>10.3f}"
        )
    for lab in (la, lb):
        p = s["pooled_chain_latency"][lab]
        print(
            f"chain latency pooled, {lab}: {p['samples']:,} samples, p50 {p['p50_ms']:.3f} ms, "
            f"p99 {p['p99_ms']:.3f} ms"
        )
    print(f"lost in floods: {s['lost']}; in latency runs: {s['latency_lost']}")
    v = s["verdict"]
    print(
        f"\nthroughput {lb}/{la} within 3 % (median pair ratio >= {THROUGHPUT_TOLERANCE}): "
        f"{'PASS' if v['throughput_within_3pct'] else 'FAIL'}; latency p50/p99 no worse "
        f"(medians): {'PASS' if v['latency_no_worse'] else 'FAIL'}; no loss: "
        f"{'PASS' if v['no_loss'] else 'FAIL'}; chain counters consistent: "
        f"{'PASS' if v['chain_counters_ok'] else 'FAIL'}"
    )


def _machine() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs {cpu}, load at start {load}"


def compare(args: argparse.Namespace) -> dict[str, Any]:
    trees = {args.label_a: Path(args.a).resolve(), args.label_b: Path(args.b).resolve()}
    for lab, tree in trees.items():
        if not (tree / ".venv" / "bin" / "python").exists() or not (tree / "zbroker").is_dir():
            raise SystemExit(f"{lab}: {tree} needs zbroker/ and .venv/bin/python")
    labels = (args.label_a, args.label_b)
    result: dict[str, Any] = {
        "labels": list(labels),
        "pairs": args.pairs,
        "messages": args.messages,
        "latency_seconds": args.latency_seconds,
        "payload_bytes": args.size,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": _machine(),
        "command": " ".join(["python3", *sys.argv]),
        "trees": {lab: {"dir": str(t), "git": _git_state(t)} for lab, t in trees.items()},
    }
    runs: dict[str, list[dict[str, Any]]] = {lab: [] for lab in labels}
    for i in range(args.pairs):
        order = labels if i % 2 == 0 else labels[::-1]
        log(f"pair {i + 1}/{args.pairs}: {order[0]} then {order[1]}")
        for lab in order:
            t0 = time.monotonic()
            r = run_tree(trees[lab], args.messages, args.latency_seconds, args.size, args.verbose)
            r["order"], r["pair"], r["wall_s"] = order.index(lab), i + 1, time.monotonic() - t0
            runs[lab].append(r)
            log(_run_line(lab, r))
    for lab in labels:
        digests = sorted({r["digest"] for r in runs[lab]})
        if len(digests) > 1:
            log(f"WARNING: {lab}'s sources changed during the comparison: {digests}")
        result["trees"][lab]["digests"] = digests
    result["summary"] = summarise(labels, runs)
    result["runs"] = runs
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--a", help="checkout A (the reference), with A/.venv/bin/python")
    ap.add_argument("--b", help="checkout B (the candidate), with B/.venv/bin/python")
    ap.add_argument("--label-a", default="old")
    ap.add_argument("--label-b", default="new")
    ap.add_argument("--pairs", type=int, default=None, help="alternated pairs (default 5)")
    ap.add_argument("--messages", "-n", type=int, default=None, help="per flood (200,000)")
    ap.add_argument("--latency-seconds", type=float, default=None, help="per run (5)")
    ap.add_argument("--size", type=int, default=100, help="flood payload bytes (100)")
    ap.add_argument("--quick", action="store_true", help="smoke: 2 pairs, 20,000 msgs, 1 s")
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument("--verbose", action="store_true", help="show the children's logs")
    ap.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    q = args.quick
    args.pairs = args.pairs or (2 if q else 5)
    args.messages = args.messages or (20_000 if q else 200_000)
    args.latency_seconds = args.latency_seconds or (1.0 if q else 5.0)
    if args.child:
        print(json.dumps(child_main(Path(args.child), args.messages, args.latency_seconds)))
        return 0
    if not args.a or not args.b or args.pairs < 1:
        ap.error("--a DIR and --b DIR are required, --pairs at least 1")
    if args.label_a == args.label_b:
        ap.error("--label-a and --label-b must differ")

    from _common import end_on_signals  # (this script's directory is on sys.path)

    end_on_signals(None, "comparison")  # SIGTERM: run_tree's finally stops the running child
    try:
        result = compare(args)
    except KeyboardInterrupt as exc:  # the running child was stopped in run_tree
        log(f"interrupted ({exc}): no result")
        return 130
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
