"""A chain of three ``zbroker start`` processes under a publisher, for the tools that look
inside it while it runs (``profile_chain.py``, ``trace_pass.py``, ``threads_chain.py``).

Nodes A; B with ``--peer`` A; C with ``--peer`` B (duplex links, as ``bench_network.py``'s
chain), each with its own data directory, discovery off, free ports on 127.0.0.1. A
subscriber on C (``PROF.>``) and, once a probe published on A has reached it, a
publisher on A flooding ``PROF.x`` (or paced at a rate), each a Python client in its own
process. :func:`run_flood` starts them all, calls what the tool measures after a second
of flood, and stops every process it started by its PID (:func:`stop_processes`), also
when the measurement fails or the tool is interrupted.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from _common import REPO

HOST = "127.0.0.1"
TOPIC = "PROF.x"
PATTERN = "PROF.>"
PAYLOAD = b"M" * 100
NODES = "ABC"
T = TypeVar("T")


# -- the clients (child processes) ----------------------------------------------------------


def flood_publisher(endpoint: str, go: Any, stop: Any, sent: Any, size: int, rate: int) -> None:
    """Publish ``size`` bytes on TOPIC from ``go`` until ``stop``, as fast as it can or
    ``rate`` a second (sleeping in between, as a paced publisher does); ``sent`` counts."""
    import bench_node as bn

    bn._guard_child()
    from zbroker import Client

    with Client(endpoint) as client:
        publish, payload = client.publish, PAYLOAD[:1] * size
        go.wait(60)
        n = 0
        if rate:
            step, due = 1.0 / rate, time.monotonic()
            while not stop.is_set():
                publish(TOPIC, payload)
                n += 1
                sent.value = n
                due += step
                time.sleep(max(0.0, due - time.monotonic()))
            return
        while not stop.is_set():
            for _ in range(1024):
                publish(TOPIC, payload)
            n += 1024
            sent.value = n


def subscriber(endpoint: str, ready: Any, first: Any, stop: Any, got: Any) -> None:
    """Subscribe to PATTERN; ``first`` once a message arrives; ``got`` counts them."""
    import bench_node as bn

    bn._guard_child()
    from zbroker import Client, Message

    n = 0

    def on_message(msg: Message) -> None:
        nonlocal n
        n += 1
        if not n & 1023 or n == 1:
            got.value = n
            first.set()

    with Client(endpoint) as client:
        client.subscribe(PATTERN, on_message)
        ready.set()
        stop.wait(600)


# -- the nodes ------------------------------------------------------------------------------


def zbroker_command() -> str:
    """The ``zbroker`` entry point of this checkout's virtualenv (else the one beside
    the Python running this script)."""
    for candidate in (REPO / ".venv" / "bin" / "zbroker", Path(sys.executable).parent / "zbroker"):
        if candidate.is_file():
            return str(candidate)
    raise SystemExit("no zbroker entry point in .venv/bin (pip install -e . first)")


def start_nodes(tmp: Path, procs: dict[str, subprocess.Popen[bytes]]) -> dict[str, str]:
    """Start A, B (dials A) and C (dials B) into ``procs``; return their endpoints once
    each answers and every link is up."""
    from bench_network import _wait
    from bench_queues import free_ports

    from zbroker import Client

    env = {k: v for k, v in os.environ.items() if not k.startswith("ZBROKER_")}
    env["ZBROKER_DISCOVERY"] = "false"
    ports = dict(zip(NODES, free_ports(len(NODES)), strict=True))
    endpoints = {name: f"tcp://{HOST}:{port}" for name, port in ports.items()}
    zbroker = zbroker_command()
    for i, name in enumerate(NODES):
        cmd = [zbroker, "start", "--id", name, "--host", HOST, "--port", str(ports[name])]
        cmd += ["--data-dir", str(tmp / name), "--log-level", "warning", "--no-discovery"]
        if i:
            cmd += ["--peer", endpoints[NODES[i - 1]]]
        with open(tmp / f"{name}.log", "wb") as log:
            procs[name] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda e=endpoints[name]: _answers(e), 30, f"node {name} answering")
    want = {"A": 1, "B": 2, "C": 1}

    def links_up() -> bool:
        for name, endpoint in endpoints.items():
            with Client(endpoint, timeout=5.0) as c:
                links = c.status()["links"]
            if sum(ln["state"] == "up" for ln in links) != want[name]:
                return False
        return True

    _wait(links_up, 30, "chain links up", step=0.1)
    return endpoints


def _answers(endpoint: str) -> bool:
    from zbroker import BrokerUnreachable, Client

    try:
        with Client(endpoint, timeout=1.0):
            return True
    except BrokerUnreachable:
        return False


def stop_processes(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM each (by its PID), then SIGKILL what is still running after 10 s."""
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(5)


def mapped_copies(pid: int, copy: str) -> int:
    """How many of the snapshot's extension modules process ``pid`` has mapped."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return 0
    return len({ln.split()[-1] for ln in maps.splitlines() if copy in ln and ln.endswith(".so")})


def wait_crossing(endpoint: str, first: Any, timeout: float = 30.0) -> float:
    """Publish probes on A until the subscriber on C has one; return the seconds."""
    from zbroker import Client

    t0 = time.monotonic()
    with Client(endpoint) as client:
        while not first.is_set():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"no message from A reached C within {timeout:g} s")
            client.publish(TOPIC, b"probe")
            first.wait(0.05)
    return time.monotonic() - t0


def run_flood(
    args: argparse.Namespace, tmp: Path, copy: str, during: Callable[[dict[str, int]], T]
) -> tuple[T, float, float, float]:
    """Start the chain and the clients, call ``during(pids)`` after a second of flood
    (the PIDs of nodes A, B, C and of the clients, ``pub`` and ``sub``), stop them all (by
    PID); return what it returned, the msg/s published on A and delivered on C during it,
    and how long it took (s)."""
    import bench_node as bn

    nodes: dict[str, subprocess.Popen[bytes]] = {}
    children: list[Any] = []
    ctx = mp.get_context("spawn")
    ready, first, go, stop = (ctx.Event() for _ in range(4))
    sent, got = ctx.RawValue("q", 0), ctx.RawValue("q", 0)
    try:
        endpoints = start_nodes(tmp, nodes)
        pids = {name: p.pid for name, p in nodes.items()}
        print("nodes: " + ", ".join(f"{n} pid {pids[n]} at {endpoints[n]}" for n in NODES))
        print("B dials A, C dials B; extension modules of the copy mapped per node: ", end="")
        print(", ".join(f"{n} {mapped_copies(pids[n], copy)}" for n in NODES))
        children.append(bn._start(ctx, subscriber, endpoints["C"], ready, first, stop, got))
        if not ready.wait(60):
            raise TimeoutError("the subscriber on C never subscribed")
        print(
            f"a probe published on A reached C after {wait_crossing(endpoints['A'], first):.2f} s"
        )
        children.append(
            bn._start(ctx, flood_publisher, endpoints["A"], go, stop, sent, args.size, args.rate)
        )
        go.set()
        time.sleep(1.0)  # the flood under way
        s0, g0, t0 = sent.value, got.value, time.monotonic()
        result = during({**pids, "sub": children[0].pid, "pub": children[1].pid})
        elapsed = time.monotonic() - t0
        s1, g1 = sent.value, got.value
    finally:
        stop.set()
        bn._stop_procs(children, 5)
        stop_processes(list(nodes.values()))
    return result, (s1 - s0) / elapsed, (g1 - g0) / elapsed, elapsed


def utc() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
