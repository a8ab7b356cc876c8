"""The traffic through ``fault_mesh.py``'s mesh: the persistent publishers (each with
two nodes' addresses to fail over between, retrying a publish that failed), the durable
subscriber script (one process per durable, a line per delivery), and the live pair (a
non-persistent publisher on N2, a subscriber on N5 that counts gap notices)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from mesh_nodes import Mesh

DURABLE = r"""
import json, sys, time
from zbroker import Client
endpoint, name, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
def on_message(msg):
    body = json.loads(msg.payload)
    print(json.dumps({"p": body["p"], "i": body["i"], "r": msg.redelivered}), flush=True)
    if delay:
        time.sleep(delay)
client = Client(endpoint, timeout=30.0)
client.subscribe("F.>", on_message, durable=name, credit=50)
print(json.dumps({"ready": True}), flush=True)
import threading
threading.Event().wait()
"""


class PersistentPublisher(threading.Thread):
    def __init__(self, pub: str, address: str, n: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.pub, self.address, self.n, self.rate = pub, address, n, rate
        self.confirmed: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        from zbroker import Client

        try:
            with Client(self.address, timeout=10.0, publish_timeout=60.0) as c:
                start = time.monotonic()
                for i in range(self.n):
                    time.sleep(max(0.0, start + i / self.rate - time.monotonic()))
                    body = json.dumps({"p": self.pub, "i": i}).encode()
                    for _ in range(20):  # the same message again: its retry (idempotent)
                        try:
                            c.publish(f"F.{self.pub}", body, persistent=True, confirm=True)
                        except Exception:
                            time.sleep(0.5)
                            continue
                        self.confirmed.add(i)
                        break
                    else:
                        raise RuntimeError(f"message {i} not confirmed after 20 tries")
        except BaseException as exc:
            self.error = exc


class Live:
    """Non-persistent publisher on N2 and live subscriber on N5."""

    def __init__(self, mesh: Mesh, rate: float) -> None:
        from zbroker import Client

        self.sub_client = Client(mesh.ep("N5"), timeout=10.0)
        self.received = 0
        self.gaps = 0
        self.sent = 0
        self._lock = threading.Lock()
        handle = self.sub_client.subscribe("L.>", self._on_msg)
        handle.on_gap = self._on_gap
        self._mesh, self._rate = mesh, rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _on_msg(self, msg: Any) -> None:
        with self._lock:
            self.received += 1

    def _on_gap(self, gap: Any) -> None:
        with self._lock:
            self.gaps += 1

    def _publish(self) -> None:
        from zbroker import Client

        with Client(self._mesh.ep("N2"), timeout=10.0) as c:
            start = time.monotonic()
            while not self.stop.is_set():
                time.sleep(max(0.0, start + self.sent / self._rate - time.monotonic()))
                try:
                    c.publish("L.X", b"x")
                except Exception:
                    continue  # the node is down: not sent, not counted
                self.sent += 1
