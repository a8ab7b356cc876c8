"""The chain A -> B -> C that ``bench_forward.py`` measures: three ``zbroker start``
processes on 127.0.0.1 (B dials A, C dials B; heartbeat 0.2 s, timeout 1 s, redial
0.1-0.5 s), a durable subscription ``saf`` on C, and a subscriber process on C that prints
each message with its arrival time. Every process started here is stopped by PID
(:meth:`Chain.stop_all`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SUBSCRIBER = r"""
import json, sys, time, threading
from zbroker import Client
def on_message(msg):
    print(json.dumps([int(msg.payload), time.time(), msg.redelivered]), flush=True)
client = Client(sys.argv[1], timeout=10.0)
print(json.dumps("ready"), flush=True)  # before: messages may come at once on a restart
client.subscribe("SAF.>", on_message, durable="saf", credit=100)
threading.Event().wait()
"""

NODE = """
[node]
id = "{id}"
host = "127.0.0.1"
port = {port}
data_dir = "{data}"
{links}
"""

LINK = """
[[link]]
name = "{name}"
uri = "tcp://127.0.0.1:{port}"
heartbeat_interval = 0.2
heartbeat_timeout = 1.0
reconnect_initial_delay = 0.1
reconnect_max_delay = 0.5
"""


def free_ports(n: int) -> list[int]:
    import random
    import socket

    out: list[int] = []
    rng = random.Random()
    while len(out) < n:
        base = rng.randrange(20000, 32000)
        ok = True
        for p in (base, base + 1, base + 2):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok and all(abs(base - o) > 3 for o in out):
            out.append(base)
    return out


class Chain:
    """Three node processes; every process started here is stopped by PID at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        ports = free_ports(3)
        self.ports = dict(zip("ABC", ports, strict=True))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.others: list[subprocess.Popen[bytes]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ZBROKER_")}
        self.env["ZBROKER_DISCOVERY"] = "false"  # never mDNS outside a test namespace
        peers = {"A": None, "B": ("ba", "A"), "C": ("cb", "B")}
        self.configs: dict[str, Path] = {}
        for name, peer in peers.items():
            links = "" if peer is None else LINK.format(name=peer[0], port=self.ports[peer[1]])
            path = tmp / f"{name}.toml"
            path.write_text(
                NODE.format(id=name, port=self.ports[name], data=tmp / name, links=links)
            )
            self.configs[name] = path

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> None:
        cmd = [sys.executable, "-m", "zbroker", "start", "--config", str(self.configs[name])]
        self.procs[name] = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.wait_ready(name)

    def wait_ready(self, name: str, timeout: float = 30.0) -> None:
        from zbroker import BrokerUnreachable, Client

        deadline = time.monotonic() + timeout
        while True:
            try:
                with Client(self.ep(name), timeout=1.0):
                    return
            except BrokerUnreachable:
                if time.monotonic() > deadline:
                    raise

    def links_up(self, name: str, n: int) -> bool:
        try:
            return bool(sum(ln["state"] == "up" for ln in self.status(name)["links"]) == n)
        except Exception:
            return False

    def status(self, name: str) -> dict[str, Any]:
        from zbroker import Client

        with Client(self.ep(name), timeout=5.0) as c:
            result: dict[str, Any] = c.status()
            return result

    def subscriber(self) -> tuple[subprocess.Popen[bytes], list[tuple[int, float, bool]]]:
        proc = subprocess.Popen(
            [sys.executable, "-c", SUBSCRIBER, self.ep("C")],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.others.append(proc)
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == "ready"
        events: list[tuple[int, float, bool]] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                p, t, r = json.loads(line)
                events.append((p, t, r))

        threading.Thread(target=read, daemon=True).start()
        return proc, events

    def stop_all(self) -> None:
        for p in [*self.others, *self.procs.values()]:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)


def wait(cond: Any, timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def setup(chain: Chain) -> None:
    for name in "ABC":
        chain.start(name)
    assert wait(lambda: chain.links_up("B", 2) and chain.links_up("C", 1), 30)
    from zbroker import Client

    with Client(chain.ep("C"), timeout=10.0) as c:
        c.subscribe("SAF.>", lambda m: None, durable="saf").unsubscribe()
    with Client(chain.ep("A"), timeout=10.0) as a:
        assert wait(lambda: any(r["origin"] == "C" for r in a.routes()), 30)


def durable_stored(client: Any) -> int:
    for d in client.status()["durables"]:
        if d["name"] == "saf":
            return int(d["stored"])
    return 0
