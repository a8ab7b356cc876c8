"""Where ``bench_peers`` runs its systems: free ports on 127.0.0.1, zbroker's one node or
3-node chain (as ``bench_network`` starts them) and stopping any system's topology by the
PIDs of its processes. A topology is a dict: its processes ("procs"), a stop event or
None ("stop"), (name, PID) per node ("pids"), and where the publisher and the subscriber
connect ("pub_at", "sub_at")."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_network as bnet  # zbroker's chain, as the network benchmark starts it
import bench_node as bn  # stopping multiprocessing children by PID
from chain_run import stop_processes  # by PID: SIGTERM, SIGKILL after 10 s

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _start_zbroker(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    stop = ctx.Event()
    sub_dir = tempfile.mkdtemp(dir=tmp)
    if hops == 1:
        node = bnet._start_node(ctx, sub_dir, stop, "bench-A", (), None)
        return {
            "procs": [node["proc"]],
            "stop": stop,
            "keep": [node],  # its pipe: the node exits when the parent's end is closed
            "pids": [("A", node["pid"])],
            "pub_at": node["endpoint"],
            "sub_at": node["endpoint"],
        }
    nodes, _ = bnet.start_chain(ctx, sub_dir, stop)
    for nd in nodes:  # the status clients are not needed: the harness counts at the clients
        nd.pop("client").close()
    return {
        "procs": [nd["proc"] for nd in nodes],
        "stop": stop,
        "keep": nodes,
        "pids": [(nd["name"].removeprefix("bench-"), nd["pid"]) for nd in nodes],
        "pub_at": nodes[0]["endpoint"],
        "sub_at": nodes[-1]["endpoint"],
    }


def _stop_topology(topo: dict[str, Any]) -> None:
    """Stop every process of a topology by its PID (multiprocessing or subprocess)."""
    if topo.get("stop") is not None:
        topo["stop"].set()
    mp_procs = [p for p in topo["procs"] if isinstance(p, mp.process.BaseProcess)]
    bn._stop_procs(mp_procs)
    stop_processes([p for p in topo["procs"] if isinstance(p, subprocess.Popen)])
