#!/usr/bin/env python3
"""Three parts of a low-rate message's latency, each measured side by side in one run.

    .venv/bin/python benchmarks/latency_parts.py               # 3 rounds, about 5 minutes
    .venv/bin/python benchmarks/latency_parts.py --rounds 5 --seconds 3
    .venv/bin/python benchmarks/latency_parts.py --parts client --rounds 5   # ~2 minutes

``bench_peers.py`` puts zbroker's chain at 2,000 msg/s near 450 µs p50 and the bare pyzmq
relays (the floor: the same processes, no broker code) near 285. This measures three
parts of that difference in ways that let the machine's noise fall on both sides alike:

* **The poll** (``relays``): three bare relays in a line (``bench_network``'s reference
  chain: PULL -> PUB, then SUB -> PUB) at 2,000 msg/s, each relay polling its input
  alone, then also ``--idle`` idle sockets (default 5: a node polls its publish PULL,
  XPUB, control ROUTER, command PAIR and each link's DEALER). ``zmq_poll`` asks each
  socket for its events (a ``getpid`` and a ``poll(2)`` of its mailbox) when it wakes.
  The two chains alternate, round by round.
* **The client** (``client``): one zbroker node (``bench_network._start_node``, every
  feature on) whose deliveries of a paced publisher reach, at once, a ``zbroker.Client``
  subscriber and a bare SUB socket subscribed to the same pattern (a thread reading it,
  as a client's thread does): the same frames, the same moments, two receivers. The
  difference is what the client's receive path costs beyond libzmq's. The node writes
  each message to the two connections one after the other, and the one that subscribed
  first was ahead in every round measured; which subscribes first alternates round by
  round (said on each line).
* **The machine** (``chain``): ``bench_network``'s chain (A -> B -> C, every feature on,
  publisher on A, subscriber on C) at 2,000 msg/s, alternately as it is and with one
  ``SCHED_IDLE`` process per CPU spinning beside it. Such a process runs when no other
  wants the CPU (the scheduler still gives it a slice now and then: the p99 suffers), so
  the CPUs do not halt; on this virtual machine an idle vCPU halts at once and waking it
  is a trip through the host. The p50's difference is what those wake-ups cost.

It measures a copy of the sources (``_common.snapshot_sources``), whose digest it prints.
Per run: p50 / p90 / p99 publish -> receipt (µs), the first ``LEAD_IN`` messages left out
(``bench_node.LATENCY_LEAD_IN`` in the relay and chain runs).
Every process is its own (spawned) and stopped by its PID (``bench_node._stop_procs``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Any

import bench_network as bnet
import bench_node as bn
from _common import snapshot_sources

RATE = 2_000.0
LEAD_IN = 200
MARK = b"\xfe@stamp@"  # starts each payload (not in a topic): its stamp follows
TOPIC = "PARTS.x"


def _stamp(i: int) -> bytes:
    return MARK + time.perf_counter_ns().to_bytes(8, "little") + i.to_bytes(8, "little")


def _latency(frame: bytes, now: int, lats: list[int]) -> bool:
    """Note ``frame``'s latency (if it holds a measured payload); True if it held one."""
    at = frame.find(MARK)
    if at < 0:
        return False
    at += len(MARK)
    if int.from_bytes(frame[at + 8 : at + 16], "little") >= LEAD_IN:
        lats.append(now - int.from_bytes(frame[at : at + 8], "little"))
    return True


def _line(lat: dict[str, Any], lost: int | None = None) -> str:
    """A run's ``bench_node._lat_stats`` in µs on one line (and what it lost, if said)."""
    if not lat["samples"]:
        return "no samples"
    told = "" if lost is None else f", lost {lost}"
    return f"p50 {lat['p50_ms'] * 1e3:4.0f}  p90 {lat['p90_ms'] * 1e3:4.0f}  " + (
        f"p99 {lat['p99_ms'] * 1e3:5.0f} µs ({lat['samples']:,}{told})"
    )


def run_relays(ctx: Any, n: int, idle: int) -> str:
    """One latency run through three bare relays that each poll ``idle`` idle sockets."""
    stop = ctx.Event()
    chain = bnet.start_relay_chain(ctx, stop, 3, idle)
    try:
        res = bn.run_raw(ctx, "latency", n, rate=RATE, relay=chain)
    finally:
        stop.set()
        bn._stop_procs(chain["procs"])
    return _line(res["latency"])


def client_sub(q: Any, endpoint: str, ready: Any, done: Any) -> None:
    """A zbroker Client subscriber: the latency of each delivery, at its callback."""
    bn._guard_child()
    from zbroker import Client

    lats: list[int] = []
    client = Client(endpoint)

    def on_message(msg: Any) -> None:
        if _latency(msg.payload, time.perf_counter_ns(), lats):
            ready.set()

    client.subscribe(TOPIC, on_message)
    done.wait(bn.CHILD_DEADLINE_S - 30)
    time.sleep(0.5)  # the last deliveries
    client.close()
    q.put(("client", lats))


def bare_sub(q: Any, deliver_port: int, ready: Any, done: Any) -> None:
    """A bare SUB on the node's XPUB, read by a thread as a client's thread reads."""
    bn._guard_child()
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{bn.HOST}:{deliver_port}")
    sock.setsockopt(zmq.SUBSCRIBE, TOPIC.encode() + b"\0")  # what a client subscribes
    lats: list[int] = []
    stop = threading.Event()

    def read(frame: bytes) -> None:
        if _latency(frame, time.perf_counter_ns(), lats):
            ready.set()

    reader = threading.Thread(target=bn.drain_loop, args=(sock, read, stop, 100))
    reader.start()
    done.wait(bn.CHILD_DEADLINE_S - 30)
    time.sleep(0.5)
    stop.set()
    reader.join(5)
    sock.close()
    ctx.term()
    q.put(("bare", lats))


def run_client(ctx: Any, n: int, tmp: str, client_first: bool) -> dict[str, str]:
    """One paced run into a node read by a Client and a bare SUB at once, the second
    subscribing once the first receives (``client_first``: the client first). libzmq's
    XPUB writes a message to its subscribers' connections one after the other, so one of
    the two starts ahead; measured, the one that subscribed first (docs/performance.md,
    "The targets judged round by round"). Alternated round by round."""
    stop = ctx.Event()
    node = bnet._start_node(ctx, tmp, stop, f"parts{time.monotonic_ns()}", (), None)
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    readies, done = (ctx.Event(), ctx.Event()), ctx.Event()
    deliver = int(node["ports"]["deliver"])
    starts = [
        lambda: bn._start(ctx, client_sub, q, node["endpoint"], readies[0], done),
        lambda: bn._start(ctx, bare_sub, q, deliver, readies[1], done),
    ]
    order = (0, 1) if client_first else (1, 0)
    procs: list[Any] = []
    try:
        from zbroker import Client

        pub = Client(node["endpoint"])
        try:
            for k in order:  # the second subscribes only once the first receives
                procs.append(starts[k]())
                i = 0
                while not readies[k].is_set():
                    pub.publish(TOPIC, _stamp(0))
                    i += 1
                    if i > 30_000:
                        raise TimeoutError("a subscriber never received a message")
                    time.sleep(0.001)
            time.sleep(0.2)
            t0 = time.perf_counter_ns()
            for i in range(n):
                bn._pace(i, t0, 1e9 / RATE)
                pub.publish(TOPIC, _stamp(i) + bytes(80))
        finally:
            pub.close()
        done.set()
        return {who: _line(bn._lat_stats(inbox.get(who, 60))) for who in ("client", "bare")}
    finally:
        done.set()
        stop.set()
        bn._stop_procs([*procs, node["proc"]])


def spinner(stop: Any) -> None:
    """Keep a CPU from halting without taking it from anyone: spin as SCHED_IDLE."""
    bn._guard_child()
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    while not stop.is_set():
        for _ in range(100_000):
            pass


def run_chain(ctx: Any, nodes: list[dict[str, Any]], n: int, awake: bool) -> str:
    """One latency run through the chain, with every CPU kept awake if ``awake``."""
    stop = ctx.Event()
    cpus = os.cpu_count() or 1
    spinners = [bn._start(ctx, spinner, stop) for _ in range(cpus if awake else 0)]
    try:
        res = bnet.run_chain(ctx, nodes, "latency", n, RATE)
    finally:
        stop.set()
        bn._stop_procs(spinners)
    return _line(res["latency"], res["lost"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="per run, at 2,000 msg/s")
    ap.add_argument("--idle", type=int, default=5, help="idle sockets per relay's poll")
    ap.add_argument(
        "--parts", default="relays,client,chain", help="which parts, comma-separated (all)"
    )
    args = ap.parse_args(argv)
    snapshot_sources()  # (a copy of the sources: what the digest below names is measured)
    n = int(args.seconds * RATE) + LEAD_IN
    ctx = mp.get_context("spawn")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    bn.log(f"{when}, load {load}, sources {bn.source_digest()}; {args.rounds} round(s)")
    bn.log(f"of {n:,} messages at 2,000 msg/s (the first {LEAD_IN} not counted)")
    parts = set(args.parts.split(","))
    if not parts or parts - {"relays", "client", "chain"}:
        ap.error(f"--parts: relays, client or chain, not {args.parts!r}")

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="zb-parts-") as tmp:
        stop = ctx.Event()
        nodes: list[dict[str, Any]] = []
        try:
            nodes = bnet.start_chain(ctx, tmp, stop)[0] if "chain" in parts else []
            for r in range(1, args.rounds + 1):
                _round(ctx, r, n, args.idle, nodes, tmp, parts)
        finally:
            bnet.stop_nodes(nodes, stop)  # (their status clients, then each by its PID)
            bn._stop_procs(bn._PROCS, 5)  # whatever a failed part left running, by PID
    return 0


def _round(
    ctx: Any, r: int, n: int, idle: int, nodes: list[dict[str, Any]], tmp: str, parts: set[str]
) -> None:
    """One round of the parts, each pair in the opposite order of the last round's."""
    for k in ((0, idle) if r % 2 else (idle, 0)) if "relays" in parts else ():
        bn.log(f"round {r} relays, {k} idle sockets per poll: {run_relays(ctx, n, k)}")
    if "client" in parts:
        client_first = r % 2 == 1
        first = "client" if client_first else "bare"
        res = run_client(ctx, n, tmp, client_first)
        for who in ("client", "bare"):
            said = " (subscribed first)" if who == first else ""
            bn.log(f"round {r} one node, {who:6} subscriber: {res[who]}{said}")
    for awake in ((False, True) if r % 2 else (True, False)) if nodes else ():
        what = "CPUs kept awake" if awake else "as it is       "
        bn.log(f"round {r} chain, {what}: {run_chain(ctx, nodes, n, awake)}")


if __name__ == "__main__":
    sys.exit(main())
