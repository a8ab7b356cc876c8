"""The raw pyzmq roles of the benchmarks, each run in its own process: the publisher (PUB,
or PUSH into a relay), the subscriber, and the Python relay (PULL -> PUB) that is the
reference for what one Python hop costs with no per-message work; and ``drain_loop``, the
receive loop the bare relays share."""

from __future__ import annotations

import time
from typing import Any

import zmq
from bn_child import _guard_child, _latency_payload, _pace
from bn_settings import CHILD_DEADLINE_S, HOST, HWM, IDLE_END_S, LATENCY_LEAD_IN, PAYLOAD_SIZE


def raw_pub(
    q: Any,
    sub_ready: Any,
    started: Any,
    sub_done: Any,
    mode: str,
    n: int,
    rate: float,
    relay_port: int | None,
) -> None:
    """PUB bound on a free port (direct), or PUSH connected to the relay's PULL."""
    _guard_child()
    ctx = zmq.Context()
    if relay_port is None:
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, HWM)
        port = sock.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
        q.put(("port", port))
    else:
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.connect(f"tcp://{HOST}:{relay_port}")
    sock.setsockopt(zmq.LINGER, 1000)
    end = time.monotonic() + 30
    while not sub_ready.wait(0.001):  # slow joiner: short frames until the SUB sees one
        sock.send(b"W")
        if time.monotonic() > end:
            q.put(("pub", {"error": "subscriber never joined"}))
            return
    time.sleep(0.2)  # let the warm-up frames drain
    send = sock.send
    started.set()
    cpu0 = time.process_time()
    t0 = time.perf_counter_ns()
    if mode == "flood":
        payload = b"M" * PAYLOAD_SIZE
        for _ in range(n):
            send(payload)
    else:  # latency: paced, timestamp in the payload
        interval = 1e9 / rate
        for i in range(n):
            _pace(i, t0, interval)
            send(_latency_payload(i, PAYLOAD_SIZE))
    t1 = time.perf_counter_ns()
    cpu1 = time.process_time()
    q.put(("pub", {"sent": n, "t_start": t0, "t_end": t1, "cpu_s": cpu1 - cpu0}))
    sub_done.wait(60)
    sock.close()
    ctx.term()


def raw_sub(
    q: Any, port: int, sub_ready: Any, pub_done: Any, sub_done: Any, mode: str, n: int
) -> None:
    _guard_child()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(f"tcp://{HOST}:{port}")
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.recv()  # a warm-up frame: the subscription is in place
    sub_ready.set()
    sock.setsockopt(zmq.RCVTIMEO, int(IDLE_END_S * 1000))
    recv = sock.recv
    perf = time.perf_counter_ns
    size = PAYLOAD_SIZE
    count = 0
    t_last = 0
    lats: list[int] = []
    cpu0 = time.process_time()
    deadline = time.monotonic() + CHILD_DEADLINE_S - 30
    while count < n:
        try:
            if mode == "flood":
                while count < n:
                    m = recv()
                    if len(m) != size:
                        continue
                    count += 1
                    if not count & 255:
                        t_last = perf()
                t_last = perf()
            else:
                while count < n:
                    m = recv()
                    now = perf()
                    if len(m) != size:
                        continue
                    count += 1
                    t_last = now
                    if int.from_bytes(m[8:16], "little") >= LATENCY_LEAD_IN:
                        lats.append(now - int.from_bytes(m[:8], "little"))
        except zmq.Again:
            if pub_done.is_set() or time.monotonic() > deadline:
                break
    cpu1 = time.process_time()
    sub_done.set()
    q.put(("sub", {"received": count, "t_last": t_last, "cpu_s": cpu1 - cpu0, "lat_ns": lats}))
    sock.close()
    ctx.term()


def drain_loop(sock: Any, handle: Any, stop: Any, poll_ms: int, idle: tuple[Any, ...] = ()) -> None:
    """Until ``stop`` is set: wait for ``sock`` to be readable, then hand each frame it
    holds to ``handle`` (at most 512 per wake-up). The bare relays' loop and the
    reference subscriber's: nothing else per frame. ``idle``: sockets polled beside
    ``sock`` that never get input (``latency_parts.py``: what polling several costs)."""
    recv, noblock, again = sock.recv, zmq.NOBLOCK, zmq.Again
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    for other in idle:
        poller.register(other, zmq.POLLIN)
    while not stop.is_set():
        if not poller.poll(poll_ms):
            continue
        for _ in range(512):
            try:
                frame = recv(noblock)
            except again:
                break
            handle(frame)


def relay_main(q: Any, stop: Any) -> None:
    """Reference forwarder, same topology as a node: PULL -> PUB in one Python loop.

    No decoding, routing or re-encoding: what a Python hop costs with nothing else to do.
    """
    _guard_child()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, HWM)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, HWM)
    for sock in (pull, pub):
        sock.setsockopt(zmq.LINGER, 0)
    in_port = pull.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    out_port = pub.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    q.put(("relay", {"in_port": in_port, "out_port": out_port}))
    drain_loop(pull, pub.send, stop, 200)
    pull.close()
    pub.close()
    ctx.term()
