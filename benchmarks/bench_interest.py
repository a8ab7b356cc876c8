"""Interest changes against a warm match cache: the routing engine directly (issue 18, item 9).

    .venv/bin/python benchmarks/bench_interest.py             # 50,000 changes per phase
    .venv/bin/python benchmarks/bench_interest.py -n 4000     # the issue's first report
    .venv/bin/python benchmarks/bench_interest.py --broker    # also through a Broker

In-process and sans-IO: one :class:`~zbroker.routing.RoutingEngine` (node ``A``) with two
links (to ``B``, which advertises interest in every cached topic, and to ``C``, which
receives A's advertisements), no sockets. Before each phase 5,000 literal topics are
routed, so the engine's match caches (local and remote sublists) and its plan and route
caches are warm. Each phase then applies N interest changes in chunks of
``DRAIN_BATCH`` (what one pass of a node drains from its XPUB), flushing the engine's
advertisements after each chunk as a pass does, and routing the 5,000 topics again
between chunks (not timed) so every chunk meets a warm cache. Phases:

* ``subscribe``   — N LocalSubscribe of distinct patterns (one in ten matches a cached topic)
* ``unsubscribe`` — the N LocalUnsubscribe of them (a client with N subscriptions leaves)
* ``advert``      — N remote entries arriving in ADVERT frames of one chunk each
* ``withdraw``    — the N withdrawals of them

With ``--broker`` it also runs the changes through an in-thread :class:`~zbroker.Broker`
on 127.0.0.1: a raw SUB socket subscribes N patterns on the node's XPUB, then closes (the
XPUB reports N unsubscribes); the node's match cache is warmed with the 5,000 topics
first. Printed: seconds until the engine holds all N patterns, then none, and the longest
round trip of ``Broker.call`` sent every 5 ms meanwhile (how long the loop stalled).

Printed per phase: total seconds for the N changes (target < 2 s) and the longest chunk
(what one pass would spend on them; target < 100 ms). The collector is tuned as
``zbroker start`` tunes it (:func:`zbroker.tune_gc`); a full collection that still falls
into a chunk shows in its time.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Callable

from zbroker import tune_gc
from zbroker.const import DRAIN_BATCH
from zbroker.routing import (
    AdvertIn,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    RoutingEngine,
)

CACHED_TOPICS = 5_000
TARGET_TOTAL_S = 2.0
TARGET_CHUNK_S = 0.1


def topic(k: int) -> str:
    return f"C{k % 100}.{k}.tick"


def pattern(i: int) -> str:
    # one in ten covers a cached topic (and must evict it); the rest share its prefixes
    if i % 10 == 0 and i // 10 < CACHED_TOPICS:
        k = i // 10
        return f"C{k % 100}.{k}.>"
    return f"C{i % 100}.{i}.x{i}.>"


def setup() -> RoutingEngine:
    engine = RoutingEngine("A")
    engine.handle(LinkUp(link="ab", peer="B"))
    engine.handle(LinkUp(link="ac", peer="C"))
    entries = tuple((topic(k), "B", ("B",)) for k in range(CACHED_TOPICS))
    engine.handle(AdvertIn(link="ab", full=True, entries=entries))
    engine.flush()
    return engine


def warm(engine: RoutingEngine) -> None:
    for k in range(CACHED_TOPICS):
        engine.route(topic(k), (), None)
        engine.route(topic(k), ("B",), ("A",))


def phase(
    engine: RoutingEngine, n: int, apply: Callable[[RoutingEngine, range], None]
) -> tuple[float, float]:
    total = 0.0
    longest = 0.0
    for start in range(0, n, DRAIN_BATCH):
        warm(engine)
        t0 = time.perf_counter()
        apply(engine, range(start, min(n, start + DRAIN_BATCH)))
        engine.flush()
        dt = time.perf_counter() - t0
        total += dt
        longest = max(longest, dt)
    return total, longest


def subscribe(engine: RoutingEngine, ids: range) -> None:
    for i in ids:
        engine.handle(LocalSubscribe(pattern=pattern(i)))


def unsubscribe(engine: RoutingEngine, ids: range) -> None:
    for i in ids:
        engine.handle(LocalUnsubscribe(pattern=pattern(i)))


def advert(engine: RoutingEngine, ids: range) -> None:
    entries = tuple((pattern(i), "B", ("B",)) for i in ids)
    engine.handle(AdvertIn(link="ab", full=False, entries=entries))


def withdraw(engine: RoutingEngine, ids: range) -> None:
    entries = tuple((pattern(i), "B", None) for i in ids)
    engine.handle(AdvertIn(link="ab", full=False, entries=entries))


def through_broker(n: int) -> None:
    import zmq

    from zbroker import Broker

    broker = Broker(host="127.0.0.1", port=0, data_dir=tempfile.mkdtemp()).start()
    ctx = zmq.Context()
    try:
        topics = [topic(k) for k in range(CACHED_TOPICS)]
        broker.call(lambda node: [node.engine.local_matches(t) for t in topics])

        def held() -> int:
            count: int = broker.call(lambda node: len(node.engine.local_patterns), timeout=120)
            return count

        trips: list[float] = []
        done = threading.Event()

        def ping() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                broker.call(lambda node: None, timeout=120)
                trips.append(time.perf_counter() - t0)
                time.sleep(0.005)

        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SNDHWM, 0)  # every subscription reaches the node
        sub.connect(f"tcp://127.0.0.1:{broker.ports['deliver']}")
        time.sleep(0.3)
        pinger = threading.Thread(target=ping, daemon=True)
        pinger.start()
        t0 = time.perf_counter()
        for i in range(n):
            sub.setsockopt(zmq.SUBSCRIBE, pattern(i).encode() + b"\0")
        while held() < n:
            time.sleep(0.01)
        t_sub, stall_sub = time.perf_counter() - t0, max(trips)
        trips.clear()
        t0 = time.perf_counter()
        sub.close(linger=0)
        while held() > 0:
            time.sleep(0.01)
        t_unsub, stall_unsub = time.perf_counter() - t0, max(trips)
        done.set()
        pinger.join()
    finally:
        broker.stop()
        ctx.term()
    print(
        f"Broker: {n} subscribes held in {t_sub:.2f} s (longest loop round trip "
        f"{stall_sub * 1000:.0f} ms); a disconnect withdrew them in {t_unsub:.2f} s "
        f"(longest {stall_unsub * 1000:.0f} ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=50_000, help="interest changes per phase")
    parser.add_argument("--broker", action="store_true", help="also through a Broker")
    args = parser.parse_args()
    engine = setup()
    tune_gc()  # as `zbroker start` does: a full collection would otherwise cost a pass
    failed = False
    print(
        f"engine A, {CACHED_TOPICS} cached topics, {args.n} changes per phase, "
        f"chunks of {DRAIN_BATCH}"
    )
    for name, fn in (
        ("subscribe", subscribe),
        ("unsubscribe", unsubscribe),
        ("advert", advert),
        ("withdraw", withdraw),
    ):
        total, longest = phase(engine, args.n, fn)
        ok = total < TARGET_TOTAL_S and longest < TARGET_CHUNK_S
        failed |= not ok
        print(
            f"{name:12s} {args.n} in {total:7.3f} s ({args.n / total:9.0f}/s), "
            f"longest chunk {longest * 1000:7.1f} ms  {'PASS' if ok else 'FAIL'}"
        )
    if args.broker:
        through_broker(args.n)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
