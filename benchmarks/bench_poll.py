"""What idle sockets in a poller cost a thread that wakes once per message.

    .venv/bin/python benchmarks/bench_poll.py            # 2,000 msg/s, 6,000 messages, 1 vs 5

A sender process pushes 150-byte messages to a receiver process at a fixed rate (2,000 msg/s,
the chain latency runs' rate). The receiver polls its PULL socket with ``zmq.Poller``, alone
or with idle PULL sockets beside it (a node's poller holds its publish, deliver, control and
command sockets and its links), and drains it. Printed: the receiver thread's CPU time per
message, for each poller size, alternated so that both see the same machine. libzmq's
``zmq_poll`` checks every socket's mailbox (a ``getpid`` and a ``poll`` system call each)
before it sleeps and again after, so each idle socket costs every wake-up.

Everything binds and connects on 127.0.0.1; both processes are stopped by PID.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Any

import zmq

HOST = "127.0.0.1"


def sender(port: int, n: int, rate: float) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(f"tcp://{HOST}:{port}")
    time.sleep(0.5)
    t0 = time.perf_counter()
    interval = 1.0 / rate
    for i in range(n):
        delay = t0 + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        sock.send(b"x" * 150)
    sock.send(b"END")
    time.sleep(0.5)
    sock.close(linger=0)
    ctx.term()


def receiver(sockets: int, q: Any) -> None:
    ctx = zmq.Context()
    poller = zmq.Poller()
    main = ctx.socket(zmq.PULL)
    port = main.bind_to_random_port(f"tcp://{HOST}")
    poller.register(main, zmq.POLLIN)
    idle = []
    for _ in range(sockets - 1):
        s = ctx.socket(zmq.PULL)
        s.bind_to_random_port(f"tcp://{HOST}")
        poller.register(s, zmq.POLLIN)
        idle.append(s)
    q.put(port)
    got = 0
    t0: float | None = None
    while True:
        if not poller.poll(50):
            continue
        for _ in range(100):
            try:
                msg = main.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if t0 is None:
                t0 = time.thread_time()
            if msg == b"END":
                q.put((time.thread_time() - t0) / max(1, got) * 1e6)
                for s in (main, *idle):
                    s.close(linger=0)
                ctx.term()
                return
            got += 1


def run(ctx: Any, sockets: int, n: int, rate: float) -> float:
    q = ctx.Queue()
    r = ctx.Process(target=receiver, args=(sockets, q), daemon=True)
    r.start()
    s = None
    try:
        port = q.get(timeout=30)
        s = ctx.Process(target=sender, args=(port, n, rate), daemon=True)
        s.start()
        us: float = q.get(timeout=60 + n / rate)
        return us
    finally:
        for p in (s, r):
            if p is not None:
                p.join(5)
                if p.is_alive():
                    p.kill()  # by its PID
                    p.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=2_000.0)
    ap.add_argument("--messages", type=int, default=6_000)
    ap.add_argument("--idle", type=int, default=4, help="idle sockets beside the busy one")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), flush=True)
    for _ in range(args.repeat):
        for n_sockets in (1, 1 + args.idle):
            us = run(ctx, n_sockets, args.messages, args.rate)
            print(
                f"{n_sockets} socket(s) polled: receiver thread {us:.1f} us CPU per message "
                f"({args.messages:,} at {args.rate:,.0f} msg/s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
