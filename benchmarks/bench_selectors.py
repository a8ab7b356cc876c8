#!/usr/bin/env python3
"""The cost of selectors: throughput with a selector on every subscription vs none, in
one run.

    .venv/bin/python benchmarks/bench_selectors.py            # 3 runs of each mode
    .venv/bin/python benchmarks/bench_selectors.py --quick    # 1 run of each, 50,000 msgs
    .venv/bin/python benchmarks/bench_selectors.py --json     # the result as JSON

One run = two node processes A and B (B dials a duplex link to A), a subscriber process
on B and a publisher process on A (``Client.publish`` of 100-byte payloads with two
headers, ``{"region": "EU", "qty": 5}``, as fast as it can), every socket on 127.0.0.1.
The subscriber holds two subscriptions, ``BENCH.>`` and ``BENCH.*``: in mode ``none``
without selectors, in mode ``selectors`` each with a selector that accepts every message
(``qty >= 0 AND region = 'EU'`` and ``region IN ('EU', 'US') OR qty > 100``), so both
modes deliver the same messages and the difference is the selectors' cost: on A the
route's per-message pick (B's interest is selected), on B the per-message evaluation for
local delivery. Runs alternate none, selectors, none, ... and the medians are compared:

    ratio = selectors delivered msg/s / none delivered msg/s       (target >= 0.85)

Delivered msg/s counts both subscriptions' deliveries over the window from the first
publish to the last delivery. The cost per message is also timed in-process
(``timeit``): one compiled selector evaluated, and one route's per-message pick. The
machine has 2 cores and is shared: the load average at start and end is printed with the
figures. Every child process is stopped by its PID in a ``finally`` block and exits on
its own if its parent goes away.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import snapshot_sources
from bn_child import guard
from bn_procs import _Inbox

HOST = "127.0.0.1"
TOPIC = "BENCH.DATA"
PAYLOAD = b"x" * 100
HEADERS = {"region": "EU", "qty": 5}
PATTERNS = ("BENCH.>", "BENCH.*")
SELECTORS = ("qty >= 0 AND region = 'EU'", "region IN ('EU', 'US') OR qty > 100")
IDLE_END_S = 3.0
CHILD_DEADLINE_S = 300.0
TARGET_RATIO = 0.85
MODES = ("none", "selectors")


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)


def _guard_child() -> None:
    """Exit this child if the parent disappears or the hard deadline passes."""
    guard(CHILD_DEADLINE_S)


def node_main(q: Any, name: str, data_dir: str, peer: str | None, stop: Any) -> None:
    _guard_child()
    from zbroker import Broker
    from zbroker.config import LinkConfig

    links = (LinkConfig(name="ba", uri=peer),) if peer else ()
    broker = Broker(broker_id=name, host=HOST, port=0, data_dir=Path(data_dir), links=links)
    broker.start()
    try:
        q.put((name, broker.endpoint))
        stop.wait(CHILD_DEADLINE_S)
    finally:
        broker.stop()


def sub_main(q: Any, endpoint: str, origin: str, mode: str, n: int) -> None:
    _guard_child()
    from zbroker import Client

    count = 0
    last = 0
    done = threading.Event()
    want = n * len(PATTERNS)

    def on_msg(msg: Any) -> None:
        nonlocal count, last
        count += 1
        last = time.perf_counter_ns()
        if count >= want:
            done.set()

    with Client(endpoint) as client, Client(origin) as at_a:
        for pattern, sel in zip(PATTERNS, SELECTORS, strict=True):
            client.subscribe(pattern, on_msg, selector=sel if mode == "selectors" else None)
        # A knows B's interest (with its selectors) before the publisher starts
        deadline = time.monotonic() + 30
        while len([r for r in at_a.routes() if r["origin"] == "B"]) < len(PATTERNS):
            if time.monotonic() > deadline:
                raise TimeoutError("the interest did not reach A")
            time.sleep(0.02)
        q.put(("sub_ready", True))
        seen = -1
        while not done.wait(IDLE_END_S):
            if count == seen and count > 0:
                break
            seen = count
        q.put(("sub", {"count": count, "last_ns": last, "missed": client.missed}))


def pub_main(q: Any, endpoint: str, n: int) -> None:
    _guard_child()
    from zbroker import Client

    with Client(endpoint, publish_timeout=30.0) as client:
        publish = client.publish
        t0 = time.perf_counter_ns()
        for _ in range(n):
            publish(TOPIC, PAYLOAD, HEADERS)
        q.put(("pub", {"t0_ns": t0, "t1_ns": time.perf_counter_ns()}))


def _stop(procs: list[Any]) -> None:
    for p in procs:
        p.join(10)
    for p in procs:
        if p.is_alive():
            p.terminate()  # by PID
            p.join(3)
        if p.is_alive():
            p.kill()
            p.join(2)


def run_once(ctx: Any, tmp: Path, mode: str, n: int, k: int) -> dict[str, Any]:
    q = ctx.Queue()
    inbox = _Inbox(q)
    stop = ctx.Event()
    procs: list[Any] = []
    try:
        a = ctx.Process(target=node_main, args=(q, "A", str(tmp / f"a-{k}"), None, stop))
        a.start()
        procs.append(a)
        ep_a = inbox.get("A", 30)
        b = ctx.Process(target=node_main, args=(q, "B", str(tmp / f"b-{k}"), ep_a, stop))
        b.start()
        procs.append(b)
        ep_b = inbox.get("B", 30)
        sub = ctx.Process(target=sub_main, args=(q, ep_b, ep_a, mode, n))
        sub.start()
        procs.append(sub)
        inbox.get("sub_ready", 60)
        pub = ctx.Process(target=pub_main, args=(q, ep_a, n))
        pub.start()
        procs.append(pub)
        p = inbox.get("pub", 240)
        s = inbox.get("sub", 240)
    finally:
        stop.set()
        _stop(procs)
    window = max(s["last_ns"] - p["t0_ns"], 1) / 1e9
    return {
        "mode": mode,
        "published": n,
        "delivered": s["count"],
        "lost": n * len(PATTERNS) - s["count"],
        "delivered_per_s": s["count"] / window,
        "publish_per_s": n / max(p["t1_ns"] - p["t0_ns"], 1) * 1e9,
    }


def per_message_us() -> dict[str, float]:
    """Microseconds per call, in this process: each benchmark selector, and a pick."""
    import timeit

    from zbroker.routing.selection import Selective
    from zbroker.selectors import Selector, selector

    sels = [selector(t) for t in SELECTORS]
    out = {}
    n = 200_000

    # a closure per selector (the timed call is the same as a lambda's default argument's,
    # which mypy cannot type)
    def selects(sel: Selector) -> Callable[[], bool | None]:
        return lambda: sel.selects(HEADERS)

    for text, sel in zip(SELECTORS, sels, strict=True):
        out[f"selector {text}"] = timeit.timeit(selects(sel), number=n) / n
    pick = Selective([("l", ("B",), 1)], {"B": tuple(sels)}).pick
    out["route pick (2 selectors behind B)"] = timeit.timeit(lambda: pick(HEADERS), number=n) / n
    return {k: round(v * 1e6, 3) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1 run of each mode, 50,000 messages")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each mode (median counts)")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeat, args.messages = 1, 50_000
    os.environ["ZBROKER_DISCOVERY"] = "false"
    snapshot_sources()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    load_start = os.getloadavg()
    runs = run_all(args.repeat, args.messages)
    med = {
        mode: {
            key: statistics.median(r[key] for r in runs if r["mode"] == mode)
            for key in ("delivered_per_s", "publish_per_s", "lost")
        }
        for mode in MODES
    }
    ratio = med["selectors"]["delivered_per_s"] / med["none"]["delivered_per_s"]
    result = {
        "date": started,
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(),
        "messages": args.messages,
        "repeat": args.repeat,
        "runs": runs,
        "median": med,
        "ratio": round(ratio, 3),
        "per_message_us": per_message_us(),
        "target": TARGET_RATIO,
        "ok": ratio >= TARGET_RATIO,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_result(result, ratio)
    return 0


def run_all(repeat: int, messages: int) -> list[dict[str, Any]]:
    """``repeat`` rounds of every mode in turn, each run logged as it ends."""
    tmp = Path(tempfile.mkdtemp(prefix="zbroker-bench-selectors-"))
    ctx = mp.get_context("spawn")
    runs: list[dict[str, Any]] = []
    try:
        k = 0
        for i in range(repeat):
            for mode in MODES:
                k += 1
                r = run_once(ctx, tmp, mode, messages, k)
                runs.append(r)
                log(
                    f"run {i + 1} {mode:9}: delivered {r['delivered_per_s']:>9,.0f} msg/s, "
                    f"publish {r['publish_per_s']:>9,.0f} msg/s, lost {r['lost']:,}"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return runs


def print_result(result: dict[str, Any], ratio: float) -> None:
    """The medians per mode, the in-process costs and the ratio against the target."""
    print(
        f"Selector cost, publisher on A -> link -> 2 subscriptions on B ({result['date']}, "
        f"loadavg {result['loadavg_start']} -> {result['loadavg_end']}; medians of "
        f"{result['repeat']} runs of {result['messages']:,} messages)"
    )
    for mode in MODES:
        m = result["median"][mode]
        print(
            f"  {mode:9}  delivered {m['delivered_per_s']:>9,.0f} msg/s   publish "
            f"{m['publish_per_s']:>9,.0f} msg/s   lost {m['lost']:,.0f}"
        )
    for what, us in result["per_message_us"].items():
        print(f"  {what}: {us:.3f} us per message")
    verdict = "OK" if result["ok"] else "MISSED"
    print(f"  ratio selectors/none: {ratio:.3f} (target >= {TARGET_RATIO}: {verdict})")


if __name__ == "__main__":
    sys.exit(main())
