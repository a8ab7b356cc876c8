"""The network benchmark's reference line: the same five-process pipeline as the chain with
a bare Python relay (no decoding, routing or re-encoding) in place of each node.

``bench_network`` re-exports :func:`start_relay_chain` (``bnet.start_relay_chain``);
:func:`relay_hop_main` is a multiprocessing ("spawn") target, so it lives at module level.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # the single-node benchmark: roles and helpers

HOST = bn.HOST


def relay_hop_main(q: Any, stop: Any, tag: str, upstream_port: int | None, idle: int = 0) -> None:
    """One hop of the reference chain: PULL (first hop) or SUB (connected to the previous
    hop's PUB) -> PUB, in one Python loop; no decoding, routing or re-encoding. ``idle``:
    that many bound DEALER sockets polled beside the input, never sent to."""
    bn._guard_child()
    import zmq

    ctx = zmq.Context()
    if upstream_port is None:
        inp = ctx.socket(zmq.PULL)
        inp.setsockopt(zmq.RCVHWM, bn.HWM)
        in_port = inp.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    else:
        inp = ctx.socket(zmq.SUB)
        inp.setsockopt(zmq.RCVHWM, bn.HWM)
        inp.setsockopt(zmq.SUBSCRIBE, b"")
        inp.connect(f"tcp://{HOST}:{upstream_port}")
        in_port = upstream_port
    out = ctx.socket(zmq.PUB)
    out.setsockopt(zmq.SNDHWM, bn.HWM)
    for sock in (inp, out):
        sock.setsockopt(zmq.LINGER, 0)
    out_port = out.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    others = tuple(ctx.socket(zmq.DEALER) for _ in range(idle))
    for sock in others:
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind_to_random_port(f"tcp://{HOST}", 20000, 60000)
    q.put((tag, {"in_port": in_port, "out_port": out_port}))
    bn.drain_loop(inp, out.send, stop, 200, others)
    for sock in (inp, out, *others):
        sock.close()
    ctx.term()


def start_relay_chain(ctx: Any, stop: Any, hops: int = 3, idle: int = 0) -> dict[str, Any]:
    """``hops`` relays in a line (each SUB to the previous one's PUB): the first one's
    PULL port, the last one's PUB port, their processes and PIDs in order. ``idle``: the
    idle sockets each relay polls beside its input (:func:`relay_hop_main`)."""
    q = ctx.Queue()
    inbox = bn._Inbox(q)
    procs: list[Any] = []
    upstream: int | None = None
    first_in = 0
    for i in range(hops):
        procs.append(bn._start(ctx, relay_hop_main, q, stop, f"hop{i}", upstream, idle))
        info = inbox.get(f"hop{i}", 30)
        if i == 0:
            first_in = info["in_port"]
        upstream = info["out_port"]
    assert upstream is not None
    pids = [p.pid for p in procs]
    return {"in_port": first_in, "out_port": upstream, "pid": pids[0], "pids": pids, "procs": procs}
