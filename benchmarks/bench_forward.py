"""Store-and-forward through the chain A -> B -> C: throughput and recovery after faults.

Three ``zbroker start`` processes on 127.0.0.1 (B dials A, C dials B; heartbeat 0.2 s,
timeout 1 s, redial 0.1-0.5 s), a durable subscription ``saf`` on C.

* **throughput**: one publisher on A sends N persistent messages with a window of
  confirmations outstanding (futures); the durable on C is detached, so the figure is the
  rate at which messages are stored end to end (A's store, A->B link queue, B's store,
  B->C link queue, C's durable queue), measured from the first publish to the moment C's
  durable holds all N (status polled every 20 ms).
* **recovery**: a publisher sends persistent messages with confirmation at a steady rate to
  A; a subscriber process on C prints each message with its arrival time. After 3 s one
  fault is injected: ``subscriber`` (SIGKILL, started again at once), ``b_kill`` (B
  SIGKILL, started again at once), ``b_stop`` (B SIGSTOP for 5 s, then SIGCONT: A and C
  declare their links down), ``c_kill`` (C SIGKILL, started again at once). Figures, from
  the restart (process start, or SIGCONT): time to the first message arriving afterwards,
  and time until every message confirmed before the restart has arrived (the backlog
  drained). Each run also checks exactly-once delivery (flagged redeliveries aside) in
  order, and prints the result.

Usage::

    python benchmarks/bench_forward.py            # both parts
    python benchmarks/bench_forward.py --n 20000 --rate 500 --faults b_kill,c_kill
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import snapshot_sources
from forward_chain import Chain, durable_stored, setup, wait

Events = list[tuple[int, float, bool]]  # (message number, arrival time, redelivered)


def run_throughput(n: int, window: int) -> dict[str, Any]:
    from zbroker import Client

    with tempfile.TemporaryDirectory(prefix="zb-fwd-") as tmp:
        chain = Chain(Path(tmp))
        try:
            setup(chain)
            payload = b"x" * 100
            with Client(chain.ep("A"), timeout=60.0) as pub, Client(chain.ep("C")) as c:
                outstanding: list[Any] = []
                t0 = time.monotonic()
                for _ in range(n):
                    outstanding.append(pub.publish("SAF.X", payload, persistent=True))
                    if len(outstanding) >= window:
                        outstanding.pop(0).result(60)
                for f in outstanding:
                    f.result(60)
                t_confirmed = time.monotonic() - t0
                assert wait(lambda: durable_stored(c) >= n, 300, 0.01)
                t_end = time.monotonic() - t0
                stored = durable_stored(c)
            held = [chain.status(x)["forward"]["held"] for x in "AB"]
            return {
                "n": n,
                "window": window,
                "confirmed_s": t_confirmed,
                "end_to_end_s": t_end,
                "confirm_rate": n / t_confirmed,
                "chain_rate": n / t_end,
                "stored_at_c": stored,
                "held_after": held,
            }
        finally:
            chain.stop_all()


def run_fault(fault: str, rate: float, total_s: float, down: float = 0.0) -> dict[str, Any]:
    from zbroker import Client

    with tempfile.TemporaryDirectory(prefix="zb-fwd-") as tmp:
        chain = Chain(Path(tmp))
        try:
            setup(chain)
            sub, events = chain.subscriber()
            confirmed: list[float] = []  # confirm time per message number
            n = int(rate * total_s)
            errors: list[BaseException] = []

            def publish() -> None:
                try:
                    with Client(chain.ep("A"), timeout=60.0) as c:
                        start = time.monotonic()
                        for i in range(n):
                            d = start + i / rate - time.monotonic()
                            if d > 0:
                                time.sleep(d)
                            c.publish("SAF.X", str(i).encode(), persistent=True, confirm=True)
                            confirmed.append(time.time())
                except BaseException as exc:
                    errors.append(exc)

            th = threading.Thread(target=publish, daemon=True)
            th.start()
            time.sleep(3.0)  # steady state before the fault (a benchmark, not a test)
            t_fault = time.time()
            t_restart, more = _inject(chain, fault, sub, events, down)
            th.join(total_s + 120)
            assert not errors, errors
            backlog = sum(1 for t in confirmed if t <= t_restart)
            lists = [events] if more is events else [events, more]

            def distinct() -> int:
                return len({p for lst in lists for p, _, _ in list(lst)})

            assert wait(lambda: distinct() >= n, 120), distinct()
            res = _recovery(n, confirmed, backlog, lists, more, (t_fault, t_restart))
            return {"fault": fault, "n": n, "rate": rate, **res}
        finally:
            chain.stop_all()


def _inject(
    chain: Chain, fault: str, sub: Any, events: Events, down: float
) -> tuple[float, Events]:
    """The fault, undone; the time of the restart (process start, or SIGCONT) and the list
    the deliveries arrive in from then on."""
    if fault == "subscriber":
        sub.kill()
        sub.wait()
        t_restart = time.time()
        sub, more = chain.subscriber()
    elif fault in ("b_kill", "c_kill"):
        name = "B" if fault == "b_kill" else "C"
        chain.procs[name].kill()
        chain.procs[name].wait()
        if down:
            time.sleep(down)  # the node stays dead this long
        t_restart = time.time()
        chain.start(name)
        more = events
    else:
        chain.procs["B"].send_signal(signal.SIGSTOP)
        time.sleep(5.0)
        t_restart = time.time()
        chain.procs["B"].send_signal(signal.SIGCONT)
        more = events
    return t_restart, more


def _recovery(
    n: int,
    confirmed: list[float],
    backlog: int,
    lists: list[Events],
    more: Events,
    times: tuple[float, float],
) -> dict[str, Any]:
    """The figures of a fault run from the confirmation and arrival times, and the
    exactly-once-in-order check; ``backlog``: the messages confirmed before the restart,
    ``times``: the fault's and the restart's."""
    t_fault, t_restart = times
    everything = [e for lst in lists for e in list(lst)]
    seen: set[int] = set()
    order: list[int] = []
    unflagged_dups = 0
    for p, _, r in everything:
        if p in seen:
            unflagged_dups += 0 if r else 1
            continue
        seen.add(p)
        order.append(p)
    after = [t for _, t, _ in more if t > t_restart]
    first = min(after) - t_restart if after else float("nan")
    arrival: dict[int, float] = {}
    for p, t, _ in everything:
        arrival.setdefault(p, t)
    # delay of each message: arrival minus its confirmation to the publisher
    delay = {p: arrival[p] - confirmed[p] for p in range(n)}
    steady = sorted(delay[p] for p in range(n) if confirmed[p] < t_fault)
    # caught up: the first message confirmed after the restart that arrives
    # within 50 ms of its confirmation, every earlier one having arrived
    caught = float("nan")
    for p in range(backlog, n):
        if delay[p] < 0.05:
            caught = max(arrival[q] for q in range(p + 1)) - t_restart
            break
    drained = max(arrival[p] for p in range(backlog)) - t_restart if backlog else 0.0
    return {
        "backlog_at_restart": backlog,
        "first_after_restart_s": first,
        "backlog_drained_s": max(0.0, drained),
        "outage_s": t_restart - t_fault,
        "caught_up_s": caught,
        "steady_median_delay_ms": 1000 * steady[len(steady) // 2],
        "missed_while_down": sum(1 for t in confirmed if t_fault <= t <= t_restart),
        "exactly_once_in_order": order == list(range(n)) and unflagged_dups == 0,
        "redelivered": sum(1 for _, _, r in everything if r),
        "problems": {
            "missing": sorted(set(range(n)) - seen)[:10],
            "unflagged_duplicates": unflagged_dups,
            "out_of_order_at": [i for i, p in enumerate(order) if p != i][:10],
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=20_000, help="messages for the throughput run")
    ap.add_argument("--window", type=int, default=2_000, help="confirmations outstanding")
    ap.add_argument("--rate", type=float, default=500.0, help="msg/s in the fault runs")
    ap.add_argument("--seconds", type=float, default=12.0, help="length of a fault run")
    ap.add_argument("--faults", default="subscriber,b_kill,b_stop,c_kill")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument(
        "--down", type=float, default=0.0, help="b_kill/c_kill: seconds before the restart"
    )
    args = ap.parse_args(argv)
    src = snapshot_sources()
    print(f"sources: {src}")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"{now}; load average {' '.join(load)}; {os.cpu_count()} CPUs")
    if not args.skip_throughput:
        r = run_throughput(args.n, args.window)
        print(
            f"chain A->B->C, {r['n']} persistent messages of 100 bytes, window {r['window']}: "
            f"confirmed by A at {r['confirm_rate']:,.0f} msg/s; all stored in C's durable "
            f"after {r['end_to_end_s']:.2f} s = {r['chain_rate']:,.0f} msg/s end to end; "
            f"C holds {r['stored_at_c']}; link queues left {r['held_after']}"
        )
    for fault in [f for f in args.faults.split(",") if f]:
        r = run_fault(fault, args.rate, args.seconds, args.down)
        print(
            f"fault {fault}: {r['n']} messages at {r['rate']:.0f} msg/s (steady delay "
            f"{r['steady_median_delay_ms']:.1f} ms median); down {r['outage_s']:.2f} s, "
            f"{r['missed_while_down']} confirmed meanwhile; after the restart: first message "
            f"{r['first_after_restart_s']:.2f} s, all confirmed before it "
            f"{r['backlog_drained_s']:.2f} s, caught up (delay < 50 ms) "
            f"{r['caught_up_s']:.2f} s; exactly once in order: {r['exactly_once_in_order']}; "
            f"redelivered (flagged) {r['redelivered']}"
            + ("" if r["exactly_once_in_order"] else f"; PROBLEMS {r['problems']}")
        )
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
