"""The floor beside the peers in ``bench_peers.py``: bare pyzmq relays, no broker.

The same processes as zbroker's topologies with no broker code: each node is
``bnet_relays.relay_hop_main`` (PULL, or SUB of the previous hop, -> PUB: a frame in, the
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

The C relays (``crelays``) are the same line with each hop a C program on libzmq
(``crelay.c``: a blocking ``zmq_msg_recv`` and ``zmq_msg_send``, no Python), built here
with the machine's C compiler against the libzmq pyzmq uses, the clients the same: the
floor of libzmq's threads alone (what a line of libzmq processes costs).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_network as bnet
import bench_node as bn
from chain_run import stop_processes  # by PID: SIGTERM, SIGKILL after 10 s

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


#: the C relay's source, and the binary built from it (once per process)
CRELAY_SOURCE = Path(__file__).resolve().parent / "crelay.c"
_built: dict[str, Any] = {}


def _libzmq() -> Path | None:
    """The libzmq pyzmq loads (its wheel's bundled copy), if one is there to link to."""
    import zmq

    libs = Path(zmq.__file__).resolve().parent.parent / "pyzmq.libs"
    found = sorted(libs.glob("libzmq*.so*"))
    return found[0] if found else None


def build_crelay() -> str:
    """The path of ``crelay`` built from :data:`CRELAY_SOURCE` (cached); raises
    RuntimeError saying why it cannot be built (no C compiler, no libzmq to link)."""
    if "path" in _built:
        return str(_built["path"])
    cc = shutil.which("gcc") or shutil.which("cc")
    lib = _libzmq()
    if cc is None or lib is None:
        raise RuntimeError("no C compiler" if cc is None else "no bundled libzmq in pyzmq.libs")
    _built["dir"] = tmp = tempfile.TemporaryDirectory(prefix="zbroker-crelay-")
    out = Path(tmp.name) / "crelay"
    cmd = [cc, "-O2", "-o", str(out), str(CRELAY_SOURCE), str(lib), f"-Wl,-rpath,{lib.parent}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{cc} failed: {done.stderr.strip()[-300:]}")
    _built["path"] = out
    return str(out)


def start_c(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    """A line of ``hops`` C relays (:func:`build_crelay`), as :func:`start` returns one;
    each a subprocess stopped by its PID (``bench_peers._stop_topology``)."""
    exe = build_crelay()
    procs: list[subprocess.Popen[str]] = []
    first = upstream = ""
    try:
        for i in range(hops):
            p = subprocess.Popen(
                [exe, upstream or "pull", str(bn.HWM)], stdout=subprocess.PIPE, text=True
            )
            procs.append(p)
            assert p.stdout is not None
            ports = p.stdout.readline().split()  # (its bind is done once it prints)
            if len(ports) != 2:
                raise RuntimeError(f"C relay {i + 1} did not start (exit {p.poll()})")
            first, upstream = first or ports[0], ports[1]
    except BaseException:
        stop_processes(procs)
        raise
    return {
        "procs": procs,
        "stop": None,
        "pids": [(f"C{i + 1}", p.pid) for i, p in enumerate(procs)],
        "pub_at": first,
        "sub_at": upstream,
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
