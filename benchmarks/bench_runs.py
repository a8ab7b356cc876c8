#!/usr/bin/env python3
"""One link frame as MSGS and as MSGR runs: encode, decode and check, per message.

    .venv/bin/python benchmarks/bench_runs.py                   # 512 messages of 100 B
    .venv/bin/python benchmarks/bench_runs.py --messages 64 --size 1024 --repeat 9

In one process, no sockets. One frame of ``--messages`` messages of ``--size`` bytes, all
of one topic, origin and incarnation, by one path and with no targets (a publisher's
flood as the next node receives it), built twice:

* **MSGS**, the older whole-message form: ``[21, [[topic, payload, fmt, headers, origin,
  inc, seq, ts, path, targets], ...]]``
* **MSGR**, runs (:mod:`zbroker.wire.runs`, built with ``runs_of_msgs``): ``[36, [[topic,
  origin, inc, path, targets, [[payload, fmt, headers, seq, ts], ...]]]]``

and timed as a node handles it, best of ``--repeat`` repeats (``timeit``; the collector
off while timing, as ``timeit`` does):

* **encode**: ``wire.encode_link(op, batch)`` (what ``zbroker.links.flush`` packs a link
  outbox's runs with; MSGS frames were packed the same way)
* **decode**: ``wire.decode_frame(frame)`` (the node's msgpack unpack of a link frame)
* **check**: ``check_msgs`` against ``check_runs`` on a freshly decoded frame, with the
  caches ``Pipeline`` keeps for link frames (``(set(), set(), set())``: checked paths,
  checked targets, valid topics), warm as in a running node. Printed too: ``check_msgs``
  plus ``runs_of_msgs``, which is what ``Pipeline.on_msgs`` does with a MSGS frame.

Printed: ns per message of each, the ratio MSGS / MSGR, the frame sizes, and how many of
zbroker's compiled modules run compiled (``zbroker/_compiled.py``). Like every benchmark
here it measures a copy of the sources (``_common.snapshot_sources``).

Then what a relay does with the MSGR frame, both ways (:mod:`zbroker.wire.splice`):
decoded and packed again (``codec.unpack``, ``encode_link``), against decoded with its
run's entries' bytes kept and sent on as them (``decode_frame``, which keeps them for a
one-run frame of at least ``SPLICE_MIN_ENTRIES`` messages, and the flush's ``_encode_runs``);
and the run's delivery at the next node, as ``Delivery.send_runs`` encodes it: cut at the
delivery bounds (256 messages, 64 KiB) and packed, against whole and spliced.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

from _common import snapshot_sources

TOPIC = "BENCH.DATA"
ORIGIN = "A"
INCARNATION = 1
PATH = ["A"]  # the path as the next node receives it
#: the compiled modules whose code the figures time (zbroker/_compiled.py)
TIMED = ("zbroker.wire.codec", "zbroker.wire.link", "zbroker.wire.runs")
#: frames decoded (untimed) before each timed check repeat: a check works in place
CHECK_FRAMES = 50

Caches = tuple[set[tuple[Any, ...]], set[tuple[Any, ...]], set[str]]


def build_msgs(n: int, size: int) -> list[list[Any]]:
    """``n`` MSGS messages of one topic and origin, payloads of ``size`` bytes."""
    ts0 = time.time()
    return [
        [TOPIC, os.urandom(size), 0, None, ORIGIN, INCARNATION, seq, ts0 + seq / 1e6, [*PATH], None]
        for seq in range(1, n + 1)
    ]


def timed_call(fn: Callable[[], object]) -> Callable[[], float]:
    """One repeat of ``fn`` (timeit's loops: enough calls for 0.2 s, fixed once), as a
    function returning ns per call."""
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    return lambda: timer.timeit(number) / number * 1e9


def timed_check(
    frame: bytes, check: Callable[[list[Any], Any, list[Any]], object], caches: Caches
) -> Callable[[], float]:
    """One repeat of ``check`` on freshly decoded copies of ``frame``, as a function
    returning ns per frame: CHECK_FRAMES copies are decoded first (not timed), then
    checked in place, the collector off as ``timeit`` has it."""
    from zbroker import wire

    def once() -> float:
        batches = [wire.decode_frame(frame)[1] for _ in range(CHECK_FRAMES)]
        errors: list[Any] = []
        enabled = gc.isenabled()
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            for batch in batches:
                check(batch, caches, errors)
            elapsed = time.perf_counter_ns() - t0
        finally:
            if enabled:
                gc.enable()
        if errors:
            raise RuntimeError(f"the check found errors in a good frame: {errors[:3]}")
        return elapsed / CHECK_FRAMES

    return once


def measure(n: int, size: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Per kind of work, (MSGS, MSGR) in ns per message, best of ``repeat``; the repeats
    of every figure alternate, so drift of the machine's load falls on all of them.
    Under "bytes": the frames' sizes."""
    from zbroker import wire

    msgs = build_msgs(n, size)
    runs = wire.runs_of_msgs(msgs)
    assert len(runs) == 1 and wire.held(runs) == n
    ms, mr = wire.encode_link(wire.MSGS, msgs), wire.encode_link(wire.MSGR, runs)
    caches: Caches = (set(), set(), set())  # as Pipeline._link_caches
    # warm the caches (the path and topic checked once), as a node's are after one frame
    wire.check_msgs(wire.decode_frame(ms)[1], caches, [])
    wire.check_runs(wire.decode_frame(mr)[1], caches, [])

    def check_and_runs(batch: list[Any], c: Any, errors: list[Any]) -> None:
        wire.check_msgs(batch, c, errors)
        wire.runs_of_msgs(batch)

    cells: dict[str, tuple[Callable[[], float], Callable[[], float]]] = {
        "encode": (
            timed_call(lambda: wire.encode_link(wire.MSGS, msgs)),
            timed_call(lambda: wire.encode_link(wire.MSGR, runs)),
        ),
        "decode": (
            timed_call(lambda: wire.decode_frame(ms)),
            timed_call(lambda: wire.decode_frame(mr)),
        ),
        "check": (
            timed_check(ms, wire.check_msgs, caches),
            timed_check(mr, wire.check_runs, caches),
        ),
        "check + runs_of_msgs": (
            timed_check(ms, check_and_runs, caches),
            timed_check(mr, wire.check_runs, caches),  # (MSGR needs no conversion)
        ),
    }
    best = {name: [float("inf"), float("inf")] for name in cells}
    for _ in range(repeat):
        for name, pair in cells.items():
            for i, once in enumerate(pair):
                best[name][i] = min(best[name][i], once())
    result = {name: (s / n, r / n) for name, (s, r) in best.items()}
    result["bytes"] = (float(len(ms)), float(len(mr)))
    return result


def report(result: dict[str, tuple[float, float]], n: int, size: int, repeat: int) -> None:
    """The table: ns per message, MSGS against MSGR, and the ratio."""
    size_s, size_r = result.pop("bytes")
    print(
        f"one frame of {n} messages of {size} B, one topic/origin/path "
        f"(MSGS {size_s:,.0f} bytes, MSGR {size_r:,.0f} bytes); "
        f"ns per message, best of {repeat}"
    )
    print(f"{'':<22}{'MSGS':>10}{'MSGR':>10}{'MSGS/MSGR':>11}")
    total = [0.0, 0.0]
    for name, (s, r) in result.items():
        print(f"{name:<22}{s:>10.1f}{r:>10.1f}{s / r:>10.2f}x")
        if name != "check + runs_of_msgs":
            total[0] += s
            total[1] += r
    print(f"{'decode+check+encode':<22}{total[0]:>10.1f}{total[1]:>10.1f}", end="")
    print(f"{total[0] / total[1]:>10.2f}x")
    print("(MSGS's 'check + runs_of_msgs' row is what a node does with a MSGS frame;")
    print(" MSGR's repeats its check: a MSGR frame needs no conversion)")


def measure_splice(n: int, size: int, repeat: int) -> dict[str, tuple[float, float]] | None:
    """A relay's decode and send-on of the MSGR frame, (packed again, spliced) in ns per
    message, best of ``repeat``; None if the frame is one the decode takes whole."""
    from zbroker import wire
    from zbroker.links.flush import _encode_runs
    from zbroker.wire.codec import unpack

    frame = wire.encode_link(wire.MSGR, wire.runs_of_msgs(build_msgs(n, size)))
    kept = wire.decode_frame(frame)
    if len(kept[1][0]) != 7:
        return None
    whole = unpack(frame)
    assert _encode_runs(kept[1]) == frame == wire.encode_link(wire.MSGR, whole[1])
    # the delivery of the run at the next node: cut at the delivery bounds and packed,
    # or (its bytes came with it) whole and spliced
    plain, carried = ([[*r[:3], r[5], *r[6:]]] for r in (whole[1][0], kept[1][0]))
    assert _delivered(carried) == [wire.packb(plain)]  # (one frame, as packing gives it)
    cells = {
        "decode": (
            timed_call(lambda: unpack(frame)),
            timed_call(lambda: wire.decode_frame(frame)),
        ),
        "send on (encode)": (
            timed_call(lambda: wire.encode_link(wire.MSGR, whole[1])),
            timed_call(lambda: _encode_runs(kept[1])),
        ),
        "deliver (encode)": (
            timed_call(lambda: _delivered(plain)),
            timed_call(lambda: _delivered(carried)),
        ),
    }
    best = {name: [float("inf"), float("inf")] for name in cells}
    for _ in range(repeat):
        for name, pair in cells.items():
            for i, once in enumerate(pair):
                best[name][i] = min(best[name][i], once())
    return {name: (a / n, b / n) for name, (a, b) in best.items()}


def _delivered(runs: list[list[Any]]) -> list[bytes]:
    """The bodies of the delivery frames of ``runs`` as ``Delivery.send_runs`` makes
    them (without the pattern and trailer): cut into frames, each spliced or packed."""
    from zbroker.node.delivery import _run_body, _run_cuts

    return [b"".join(_run_body(frame)) for frame, _ in _run_cuts(runs)]


def report_splice(result: dict[str, tuple[float, float]] | None) -> None:
    if result is None:
        print("\na relay's MSGR frame: fewer than SPLICE_MIN_ENTRIES messages, packed again")
        return
    print("\na relay's MSGR frame, ns per message: packed again against spliced (wire/splice.py)")
    print(f"{'':<22}{'packed':>10}{'spliced':>10}{'ratio':>11}")
    for name, (a, b) in result.items():
        print(f"{name:<22}{a:>10.1f}{b:>10.1f}{a / b:>10.2f}x")
    relay = [v for name, v in result.items() if name != "deliver (encode)"]
    a, b = (sum(v[i] for v in relay) for i in (0, 1))
    print(f"{'decode + send on':<22}{a:>10.1f}{b:>10.1f}{a / b:>10.2f}x")
    print("(deliver: the run to a subscriber at the next node, cut at the delivery bounds")
    print(" and packed, or whole and spliced; not in the sum)")


def machine_line() -> str:
    """Sources, compiled modules, Python, the load: what the figures were measured on."""
    import bench_node as bn
    import msgpack

    from zbroker import _compiled

    state = bn.compiled_state()
    python = sys.executable.replace(os.getcwd() + os.sep, "")
    loaded = _compiled.loaded()
    timed = ", ".join(f"{m} {'compiled' if loaded[m] else 'NOT compiled'}" for m in TIMED)
    line = (
        f"sources {bn.source_digest()}, {state}, {python} {sys.version.split()[0]}, "
        f"msgpack {'.'.join(map(str, msgpack.version))}, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\ntimed here: {timed}"
    )
    not_compiled = [m for m, done in loaded.items() if not done]
    if not_compiled:  # (a source edited since the last build runs as Python)
        line += f"\nnot compiled: {', '.join(not_compiled)}"
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--messages", type=int, default=512, help="messages in the frame")
    ap.add_argument("--size", type=int, default=100, help="payload bytes per message")
    ap.add_argument("--repeat", type=int, default=7, help="repeats per figure; the best counts")
    args = ap.parse_args(argv)
    if args.messages < 1 or args.size < 0 or args.repeat < 1:
        ap.error("--messages and --repeat must be positive, --size not negative")
    snapshot_sources()
    print(machine_line())
    result = measure(args.messages, args.size, args.repeat)
    report(result, args.messages, args.size, args.repeat)
    report_splice(measure_splice(args.messages, args.size, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
