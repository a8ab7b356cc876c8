"""A lone message's delivery frame: the subscriber's general decode against the one-pass
read of ``zbroker/wire/lone.py``, warm and on an evicted cache, in one process.

At a low rate the client thread wakes to one frame after half a millisecond in which
other processes ran, so the decode runs on a cold cache. This script times one frame's
decode plus its Message, each side alternated, after writing ``--evict`` KiB of memory
(4096: about the machine's L2 and part of its L3) or, warm, nothing, and prints the
median of ``--repeat`` timings per side. No sockets.

    .venv/bin/python benchmarks/bench_lone.py
    .venv/bin/python benchmarks/bench_lone.py --evict 1024 --repeat 2000
"""

from __future__ import annotations

import argparse
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import msgpack

from zbroker import wire
from zbroker.client.messages import Message, messages_from_runs
from zbroker.wire import lone


def _frame(size: int) -> bytes:
    run = ["PRICE.EURUSD", "node-a", 7, [[b"x" * size, 0, None, 12345, time.time()]]]
    packed: bytes = msgpack.packb([run])
    return b"PRICE.>\0" + packed + struct.pack(">Q", 99)


def _general(frame: bytes) -> Any:
    pattern, _, items, _ = wire.decode_delivery_items(frame)
    return messages_from_runs(pattern, items)


def _one_pass(frame: bytes) -> Any:
    got = lone.lone_delivery(frame)
    assert got is not None
    pattern, _, topic, origin, inc, raw, seq, ts = got
    return [Message(topic, raw, "bytes", None, origin, inc, seq, ts, pattern, raw)]


def _time(fn: Callable[[bytes], Any], frame: bytes, evict: bytearray) -> int:
    for i in range(0, len(evict), 64):
        evict[i] = (evict[i] + 1) & 255
    t = time.perf_counter_ns()
    fn(frame)
    return time.perf_counter_ns() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--evict", type=int, default=4096, help="KiB written before each timing")
    ap.add_argument("--repeat", type=int, default=1000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    args = ap.parse_args()
    frame = _frame(args.size)
    assert _general(frame)[0].payload == _one_pass(frame)[0].payload
    print(f"wire/lone.py compiled: {lone.COMPILED}; payload {args.size} B")
    for label, kib in (("warm", 0), (f"evicted {args.evict} KiB", args.evict)):
        evict = bytearray(kib << 10)
        times: dict[str, list[int]] = {"general decode": [], "one-pass read": []}
        for _ in range(args.repeat):
            times["general decode"].append(_time(_general, frame, evict))
            times["one-pass read"].append(_time(_one_pass, frame, evict))
        med = {k: statistics.median(v) / 1000 for k, v in times.items()}
        g, o = med["general decode"], med["one-pass read"]
        print(f"{label:>18}: general decode {g:6.2f} µs, one-pass read {o:6.2f} µs ({o / g:.2f}x)")


if __name__ == "__main__":
    main()
