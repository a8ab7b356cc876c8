"""The floor beside the peers in ``bench_peers.py``: bare pyzmq relays, no broker.

The same processes as zbroker's topologies with no broker code: each node is
``bench_network.relay_hop_main`` (PULL, or SUB of the previous hop, -> PUB: a frame in, the
same frame out, in one Python loop), the publisher a PUSH socket sending one frame per
message (``topic SP payload``), the subscriber a SUB socket on the last hop whose thread
runs the callbacks, as a zbroker client's thread does. Nothing batches, routes, numbers
or checks anything: what it measures is what libzmq's threads and a Python loop per
process cost on this machine. At 2,000 msg/s that is the floor of a chain of pyzmq
processes: each hop wakes libzmq's I/O thread of the sender, then the receiver's I/O
thread, then the receiver's Python thread, whatever the Python code does. In a flood its
one frame per message is not a broker's way (zbroker batches): the throughput rows are
shown, not compared. A SUB or PUB over its high-water mark drops, and the harness counts
those as lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import bench_network as bnet
import bench_node as bn

HOST = bn.HOST


def start(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    """A line of ``hops`` relays (``bench_network.start_relay_chain``), as ``bench_peers``'
    starters return a topology: the publisher connects to the first hop's PULL, the
    subscriber to the last hop's PUB."""
    stop = ctx.Event()
    chain = bnet.start_relay_chain(ctx, stop, hops)
    return {
        "procs": chain["procs"],
        "stop": stop,
        "pids": [(f"H{i + 1}", pid) for i, pid in enumerate(chain["pids"])],
        "pub_at": str(chain["in_port"]),
        "sub_at": str(chain["out_port"]),
    }


def client(endpoint: str) -> tuple[Any, Any, Any]:
    """(publish(topic, payload), subscribe(topic, callback(bytes)), close()) on the port
    ``endpoint``: the publisher's PUSH, or the subscriber's SUB and its thread (each made
    at its first use: a process only publishes or only subscribes)."""
    import zmq

    ctx = zmq.Context()
    state: dict[str, Any] = {}
    callbacks: dict[bytes, Callable[[bytes], None]] = {}
    stop = threading.Event()

    def publish(topic: str, payload: bytes) -> None:
        push = state.get("push")
        if push is None:
            push = state["push"] = ctx.socket(zmq.PUSH)
            push.setsockopt(zmq.SNDHWM, bn.HWM)
            push.connect(f"tcp://{HOST}:{endpoint}")
        push.send(topic.encode() + b" " + payload)

    def subscribe(topic: str, cb: Callable[[bytes], None]) -> None:
        key = topic.encode()
        sub = state.get("sub")
        if sub is None:
            sub = state["sub"] = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.RCVHWM, bn.HWM)
            sub.connect(f"tcp://{HOST}:{endpoint}")
        callbacks[key] = cb
        sub.setsockopt(zmq.SUBSCRIBE, key + b" ")
        if "thread" not in state:
            state["thread"] = threading.Thread(target=_deliver, args=(sub,), daemon=True)
            state["thread"].start()

    def _deliver(sub: Any) -> None:
        def one(frame: bytes) -> None:
            key, _, payload = frame.partition(b" ")
            cb = callbacks.get(key)
            if cb is not None:
                cb(payload)

        bn.drain_loop(sub, one, stop, 100)

    def close() -> None:
        stop.set()
        if "thread" in state:
            state["thread"].join(5)
        for name in ("push", "sub"):
            if name in state:
                state[name].close(linger=1000)
        ctx.term()

    return publish, subscribe, close
