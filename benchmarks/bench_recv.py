#!/usr/bin/env python3
"""A frame read off a socket: copied into bytes against read as a view of libzmq's message.

    .venv/bin/python benchmarks/bench_recv.py                  # ~20 s
    .venv/bin/python benchmarks/bench_recv.py --frames 5000

Two PAIR sockets over TCP on 127.0.0.1 in one process; per frame size, frames sent one at
a time and each read when it has come (``poll``), timing only the read: pyzmq's
``recv()`` (a copy into a new ``bytes``) against ``recv(copy=False)`` and the Frame's
buffer (what ``zbroker.wire.reading.FrameReader`` does after a large frame, for a frame
of at least ``VIEW_BYTES``; below that it takes the Frame's bytes, so both are shown).
Printed: µs per read, median of the frames, the two alternated in rounds. The sizes are a
lone message (150 B), a publish batch and a flood's link and delivery frames.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import snapshot_sources

SIZES = (150, 4096, 16384, 32768, 65536, 262144)
WAYS = ("copied", "view", "Frame.bytes")


def _read_us(a: object, b: object, body: bytes, way: str, frames: int) -> list[float]:
    import zmq

    send, poll, recv = a.send, b.poll, b.recv  # type: ignore[attr-defined]
    took = []
    for _ in range(frames):
        send(body)
        poll(1000)
        t0 = time.perf_counter_ns()
        if way == "copied":
            got = recv(zmq.NOBLOCK)
        else:
            msg = recv(zmq.NOBLOCK, copy=False)
            got = msg.buffer if way == "view" else msg.bytes
        took.append((time.perf_counter_ns() - t0) / 1e3)
        del got
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=2000, help="frames per size, way and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (the ways alternate)")
    args = ap.parse_args()
    snapshot_sources()
    import zmq

    from zbroker.wire.reading import VIEW_BYTES

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    print(f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}; VIEW_BYTES {VIEW_BYTES:,}")
    heads = "".join(f"{w + ' us':>16}" for w in WAYS)
    print(f"{'frame bytes':>12}{heads}{'copied/view':>14}")
    try:
        for size in SIZES:
            body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            took: dict[str, list[float]] = {w: [] for w in WAYS}
            for r in range(args.rounds):
                for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                    took[way] += _read_us(a, b, body, way, args.frames)
            med = {w: statistics.median(t) for w, t in took.items()}
            cells = "".join(f"{med[w]:>16.2f}" for w in WAYS)
            print(f"{size:>12,}{cells}{med['copied'] / med['view']:>13.2f}x")
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


if __name__ == "__main__":
    main()
