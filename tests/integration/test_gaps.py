"""Loss on a dying link is counted, and the subscribers downstream are told (issue 18,
item 12).

Four ``zbroker start`` processes on 127.0.0.1 in a chain A - B - C - D (B dials A, C dials
B, D dials C; fast heartbeats). A publisher on A sends non-persistent messages at a steady
rate; subscribers on A, C and D hold ``G.>`` with an ``on_gap`` callback. B is stopped
(SIGSTOP: A keeps writing into a connection nobody reads), then killed (SIGKILL), so the
messages sent meanwhile are lost for certain. Then, exactly:

* A counts them: every message A sent on its link to B (its only link) that C never
  delivered is within ``dropped.link_died`` (what A sent after B's last sign of life);
* the subscriber on A and the one on C (both ends of a dead link) get one notice each,
  naming their own node and peer B; the one on D, downstream of C, gets C's notice,
  passed on as a GAP frame — once; so does ``zbroker sub --json`` there (a ``gap`` line).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import link_toml, node_toml
from zbroker import Client, Gap

pytestmark = pytest.mark.slow

RATE = 500.0
WAIT = 60.0


class Watch:
    """A subscription's messages and gap notices."""

    def __init__(self, client: Client) -> None:
        self.lock = threading.Lock()
        self.messages = 0
        self.gaps: list[Gap] = []
        self.sub = client.subscribe("G.>", self._on_msg)
        self.sub.on_gap = self._on_gap

    def _on_msg(self, msg: Any) -> None:
        with self.lock:
            self.messages += 1

    def _on_gap(self, gap: Gap) -> None:
        with self.lock:
            self.gaps.append(gap)


class Publisher(threading.Thread):
    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        i = 0
        while not self.stop.is_set():
            delay = start + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.client.publish("G.X", b"%d" % i)
            i += 1


def _up_to(client: Client, peer: str) -> bool:
    return any(lk["peer"] == peer and lk["state"] == "up" for lk in client.status()["links"])


def _start_chain(
    procs: Any, tmp_path: Path, ports: dict[str, int], wait_ready: Callable[..., Any]
) -> dict[str, Any]:
    """The node processes of the chain A <- B <- C <- D (each dials the one before)."""
    dials = {"A": None, "B": "A", "C": "B", "D": "C"}
    nodes: dict[str, Any] = {}
    for name, peer in dials.items():
        links = (
            ""
            if peer is None
            else link_toml(f"to-{peer}", ports[peer], reconnect_initial_delay=0.2)
        )
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(node_toml(name, ports[name], tmp_path / name, links))
        nodes[name] = procs.zbroker("start", "--config", str(cfg))
        wait_ready(f"tcp://127.0.0.1:{ports[name]}", proc=nodes[name])
    return nodes


def _assert_cli_told_one_gap(cli_sub: Any) -> None:
    """``zbroker sub --json`` printed its messages and one gap notice, from C's link to B."""
    lines = [json.loads(line) for line in cli_sub.stdout_text().splitlines()]
    gaps = [line for line in lines if "gap" in line]
    assert len(gaps) == 1, gaps
    said = gaps[0]["gap"]
    assert gaps[0]["pattern"] == "G.>" and said.pop("reason")  # (why it died: said, not empty)
    assert said == {"node": "C", "link": "to-B", "peer": "B"}
    assert len(lines) > 200


def test_a_dying_link_counts_its_loss_and_tells_subscribers_downstream(
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
    client_factory: Callable[..., Client],
) -> None:
    ports = {n: free_port() for n in "ABCD"}
    nodes = _start_chain(procs, tmp_path, ports, wait_ready)
    clients = {n: client_factory(f"tcp://127.0.0.1:{ports[n]}", timeout=10.0) for n in "ACD"}
    watch = {n: Watch(clients[n]) for n in "ACD"}
    a = clients["A"]
    # the interest of C and D has reached A
    assert wait_until(lambda: {r["origin"] for r in a.routes()} >= {"A", "C", "D"}, WAIT)

    cli_sub = procs.zbroker("sub", "G.>", "--json", "--broker", f"tcp://127.0.0.1:{ports['D']}")
    assert cli_sub.wait_stderr("subscribed to", WAIT), cli_sub.stderr_text()
    assert wait_until(lambda: len(clients["C"].routes()) >= 3, WAIT)
    pub = Publisher(client_factory(f"tcp://127.0.0.1:{ports['A']}", timeout=10.0))
    pub.start()
    assert wait_until(lambda: watch["D"].messages > 200, WAIT)
    nodes["B"].popen.send_signal(signal.SIGSTOP)
    time.sleep(0.5)  # under the heartbeat timeout: A still sends to B
    nodes["B"].popen.kill()
    assert wait_until(lambda: not _up_to(a, "B"), WAIT)
    assert wait_until(lambda: all(w.gaps for w in watch.values()), WAIT)
    pub.stop.set()
    pub.join(10)
    time.sleep(1.5)  # a second notice, if any were sent, would come now

    for name, node in (("A", "A"), ("C", "C"), ("D", "C")):
        gaps = watch[name].gaps
        assert len(gaps) == 1, (name, gaps)
        assert (gaps[0].node, gaps[0].peer) == (node, "B"), (name, gaps)
        assert watch[name].sub.gaps == 1
    _assert_cli_told_one_gap(cli_sub)
    st = a.status()
    sent = st["counters"]["forwarded"]  # A's only link was to B
    lost = sent - watch["C"].messages
    died = st["counters"]["dropped"].get("link_died", 0)
    # half a second of messages sat unread in B: lost, and every one counted
    assert lost > 0.2 * RATE, (sent, watch["C"].messages)
    assert lost <= died, (lost, died)
    # what was counted beyond the loss was sent within a heartbeat before B stopped
    assert died - lost <= RATE * 0.5, (lost, died)
    assert st["gaps"]["link_deaths"] == 1
    assert clients["D"].status()["gaps"]["received"] == 1
