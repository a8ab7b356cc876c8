#!/usr/bin/env python3
"""The publisher alone: CPU per ``Client.publish`` on the publishing thread.

    .venv/bin/python benchmarks/bench_publisher.py                 # this checkout, 5 runs
    .venv/bin/python benchmarks/bench_publisher.py --a OLD --b NEW --pairs 10

In a flood the publishing process is the busiest of the chain (docs/performance.md), and
its cost is the Python work of each ``publish()`` call: what this measures, apart from
the node's. A run is one process that starts a node (``zbroker.Broker``, in its own
process, on 127.0.0.1) and a client of it, publishes 20,000 100-byte messages to warm up,
then ``--rounds`` rounds of ``--messages`` publishes on one topic (no subscriber: the
node takes and counts them), and reports the publishing thread's CPU time per publish
(``time.thread_time``: the client thread's flushes and the node are not in it) and the
rate. Each run's figure is its best round (the least disturbed by other processes).

With ``--a``/``--b`` (checkouts, each with its ``.venv``), runs alternate A, B, B, A, ...
and each pair's B/A ratio of CPU per publish is printed with their median: on a shared
machine only ratios measured side by side mean anything. Every node process is stopped by
its PID in a ``finally``; every socket is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WARM_UP = 20_000
#: the node process: a Broker from the run's checkout, stopped when stdin closes
NODE = """
import sys, tempfile
sys.path.insert(0, sys.argv[1])
from zbroker import Broker
with tempfile.TemporaryDirectory() as tmp:
    b = Broker(host="127.0.0.1", port=0, data_dir=tmp).start()
    print(b.endpoint, flush=True)
    sys.stdin.read()
    b.stop()
"""


def child(tree: Path, n: int, rounds: int, size: int) -> dict[str, Any]:
    """One run, in a process whose ``zbroker`` is ``tree``'s (see main)."""
    import zbroker
    from zbroker import Client

    if not Path(zbroker.__file__ or "").resolve().is_relative_to(tree):
        raise RuntimeError(f"zbroker imported from {zbroker.__file__}, not from {tree}")

    node = subprocess.Popen(
        [sys.executable, "-c", NODE, str(tree)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert node.stdout is not None
        endpoint = node.stdout.readline().decode().strip()
        client = Client(endpoint)
        publish, payload, cpu, rates = client.publish, b"M" * size, [], []
        try:
            for _ in range(WARM_UP):
                publish("bench.publisher", payload)
            for _ in range(rounds):
                t0, w0 = time.thread_time(), time.perf_counter()
                for _ in range(n):
                    publish("bench.publisher", payload)
                t1, w1 = time.thread_time(), time.perf_counter()
                cpu.append((t1 - t0) / n * 1e6)
                rates.append(n / (w1 - w0))
        finally:
            client.close()
    finally:
        _stop(node)
    import zbroker.client.publisher as module

    compiled = not (module.__file__ or "").endswith(".py")
    return {"cpu_us": min(cpu), "rounds_us": cpu, "rate": max(rates), "compiled": compiled}


def _stop(node: subprocess.Popen[bytes]) -> None:
    """Stop the node process by its PID: stdin closed asks it to stop, then SIGKILL."""
    try:
        assert node.stdin is not None
        node.stdin.close()
        node.wait(10)
    except (subprocess.TimeoutExpired, OSError):
        node.kill()
        node.wait(5)


def run(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run in a fresh process of ``tree``'s own Python."""
    python = tree / ".venv" / "bin" / "python"
    cmd = [str(python if python.exists() else sys.executable), __file__, "--child", str(tree)]
    cmd += ["--messages", str(args.messages), "--rounds", str(args.rounds)]
    cmd += ["--size", str(args.size)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"run of {tree} failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _line(label: str, r: dict[str, Any]) -> str:
    rounds = " ".join(f"{c:.3f}" for c in r["rounds_us"])
    kind = "compiled" if r["compiled"] else "PURE PYTHON"
    return f"  {label:>6}: {r['cpu_us']:.3f} µs/publish ({rounds}), {r['rate']:,.0f}/s, {kind}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--a", type=Path, help="checkout A (the reference)")
    ap.add_argument("--b", type=Path, help="checkout B (the candidate)")
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--pairs", type=int, default=5, help="runs (pairs with --a/--b)")
    ap.add_argument("--messages", "-n", type=int, default=100_000, help="per round")
    ap.add_argument("--rounds", type=int, default=5, help="per run (its best counts)")
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--json", action="store_true", help="the result as JSON on stdout")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        sys.path.insert(0, str(args.child))
        print(json.dumps(child(args.child, args.messages, args.rounds, args.size)))
        return 0
    if (args.a is None) != (args.b is None):
        ap.error("--a and --b go together")
    trees = [(args.label_a, args.a), (args.label_b, args.b)] if args.a else [("this", REPO)]
    print(f"publisher alone: {args.messages:,} x {args.rounds} publishes of {args.size} B per run")
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
    for i in range(args.pairs):
        order = trees if i % 2 == 0 else trees[::-1]  # A B, B A, ...: drift hits both
        for label, tree in order:
            r = run(tree.resolve(), args)
            runs[label].append(r)
            print(_line(label, r), flush=True)
    summary: dict[str, Any] = {
        label: statistics.median(r["cpu_us"] for r in rs) for label, rs in runs.items()
    }
    if args.a:
        ratios = [b["cpu_us"] / a["cpu_us"] for a, b in zip(*runs.values(), strict=True)]
        summary["ratios"] = ratios
        summary["ratio_median"] = statistics.median(ratios)
        print(
            f"median µs/publish: {args.label_a} {summary[args.label_a]:.3f}, "
            f"{args.label_b} {summary[args.label_b]:.3f}; pair ratios {args.label_b}/"
            f"{args.label_a}: {' '.join(f'{x:.2f}' for x in ratios)}, "
            f"median {summary['ratio_median']:.3f}"
        )
    else:
        print(f"median µs/publish: {summary['this']:.3f}")
    if args.json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
