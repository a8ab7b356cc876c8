#!/usr/bin/env python3
"""Soak test (issue 5): a 3-node chain under steady load for minutes, with churn.

    .venv/bin/python benchmarks/soak.py                  # 10 minutes at 45,000 msg/s
    .venv/bin/python benchmarks/soak.py --minutes 1      # a short run
    .venv/bin/python benchmarks/soak.py --json           # result as JSON on stdout

Nodes A, B, C (``zbroker.Broker``, one process and data directory each, all on 127.0.0.1);
B dials A, C dials B (duplex links, what ``zbroker start --peer`` configures). For
``--minutes`` M:

* non-persistent publishers on A at a fixed total rate: ``--fraction`` (default 0.5) of
  ``--peak`` (default 90,000 msg/s), i.e. 45,000 msg/s; ``--rate`` sets it directly;
* subscribers on C that churn: ``--subscribers`` clients (default 2) in one process, and every
  ``--churn-s`` seconds (default 4) the oldest one goes (alternately ``unsubscribe()`` +
  ``close()``, and ``close()`` alone) and a new client connects and subscribes;
* persistent publishes with ``confirm=True`` on ``--persistent-node`` (default A: stored
  and forwarded over both links; C: one node) (``--persistent-rate``, default 500 msg/s
  in total, from ``--persistent-threads`` threads sharing one client, default 8, each
  blocking in ``publish(confirm=True)``) to a durable subscription on C, whose subscriber
  process restarts every ``--durable-restart-s`` seconds (default 20), alternately closed
  cleanly and SIGKILLed, and stays away ``--durable-away-s`` seconds (default 3) before the
  next one attaches. Each durable subscriber appends every delivery (index, redelivered
  flag) to a file before its callback returns, i.e. before it acknowledges.

Every ``--sample-s`` seconds (default 10) the script samples each node's RSS (VmRSS from
/proc/PID/status) and its counters, and prints them. At the end it checks and prints:

* no lost persistent message: every confirmed message was delivered to the durable
  subscribers, exactly once apart from copies flagged ``redelivered``;
* RSS growth of every node from minute 1 (the first sample at or after min(60 s, half the
  run)) to the end, against ``--rss-bound-mb`` (default 50 MB per node);
* the counters of every node and every client role.

Every child process is stopped by its PID in a ``finally`` block (SIGTERM/SIGINT and the
overall deadline included); each child also exits on its own if its parent goes away or its
deadline passes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # helpers: machine info, process start/stop, CPU accounting
from _common import end_on_signals, snapshot_sources
from soak_report import print_summary
from soak_run import DRAIN_TIMEOUT_S, SETUP_S, Soak

log = bn.log


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument(
        "--peak", type=float, default=90_000.0, help="peak rate the load is a fraction of (msg/s)"
    )
    ap.add_argument("--fraction", type=float, default=0.5, help="fraction of --peak to publish")
    ap.add_argument(
        "--rate",
        type=float,
        default=None,
        help="non-persistent msg/s on A (default: fraction x peak)",
    )
    ap.add_argument("--publishers", type=int, default=1)
    ap.add_argument("--subscribers", type=int, default=2)
    ap.add_argument("--churn-s", type=float, default=4.0)
    ap.add_argument("--persistent-rate", type=float, default=500.0)
    ap.add_argument(
        "--persistent-node",
        choices=("A", "B", "C"),
        default="A",
        help="node the persistent publisher uses (A: store-and-forward to C)",
    )
    ap.add_argument(
        "--persistent-threads",
        type=int,
        default=8,
        help="threads sharing the persistent publisher's client, each blocking in "
        "publish(confirm=True)",
    )
    ap.add_argument("--credit", type=int, default=100)
    ap.add_argument("--durable-restart-s", type=float, default=20.0)
    ap.add_argument("--durable-away-s", type=float, default=3.0)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--rss-bound-mb", type=float, default=50.0)
    ap.add_argument(
        "--profile-node",
        choices=("A", "B", "C"),
        default=None,
        help="run that node's thread under cProfile (slower) and print the profile",
    )
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    ap.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import zbroker from the checkout instead of a copy taken at the start",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.rate is None:
        args.rate = args.peak * args.fraction
    if not args.no_snapshot:
        snapshot_sources()
    run_deadline = int(args.minutes * 60 + SETUP_S + DRAIN_TIMEOUT_S)
    end_on_signals(run_deadline, "soak")
    info = bn.machine_info()
    info["sources"] = "checkout" if args.no_snapshot else "copy taken at the start"
    t_begin = time.monotonic()
    soak = Soak(args)
    try:
        result = soak.run()
    finally:
        signal.alarm(0)
        soak.close()
    result.update(
        machine=info,
        args=vars(args),
        elapsed_s=time.monotonic() - t_begin,
        command=" ".join([os.path.basename(sys.executable), *sys.argv]),
    )
    for s in result["samples"]:
        s.pop("ticks", None)
    result["ppub"].pop("state", None)
    result["pass"] = {"persistent": result["persistent"]["ok"], "rss": result["rss"]["ok"]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc}); every child process was stopped")
        sys.exit(130)
