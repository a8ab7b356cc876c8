"""Per-publisher order in a mesh when a relay dies (issue 18, item 4): what is promised,
proved on the diamond P - {M1, M2} - D with real processes.

M1 and M2 dial P, D dials both; P's persistent stream to a durable subscriber on D takes
M1 (ties go to the lower neighbour ID). M1 is killed (SIGKILL) or stopped (SIGSTOP)
mid-stream and stays away until P has declared the link down and the stream has gone on
through M2, then comes back. Messages P had queued toward M1 (in the heartbeat timeout
before P noticed) arrive when M1 is back, after newer ones that took M2 meanwhile. The
promise (README, "Messages that must not be missed"): the stream is not held back while
M1 is away (M2 carries part of it: its link counters say so), every message reaches the
durable exactly once, and the stream is in order along each route it took — the
deliveries split into at most one increasing run per route change plus one, here at most
three (M1, then M2, then M1 again).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fault_mesh import increasing_runs

from tests.integration.test_forward_faults import (
    SUBSCRIBER,
    WAIT,
    Publisher,
    Seen,
    links_up,
    status,
)
from tests.node_configs import link_toml, node_toml
from zbroker import Client

pytestmark = pytest.mark.slow

N = 1200


def test_increasing_runs() -> None:
    assert increasing_runs([]) == 0
    assert increasing_runs([0, 1, 2, 3]) == 1
    assert increasing_runs([0, 3, 4, 1, 2, 5]) == 2
    assert increasing_runs([2, 1, 0]) == 3


class Diamond:
    def __init__(self, procs: Any, tmp_path: Path, free_port: Callable[[], int]) -> None:
        self.procs = procs
        self.ports = {n: free_port() for n in ("P", "M1", "M2", "D")}
        dials = {"P": (), "M1": ("P",), "M2": ("P",), "D": ("M1", "M2")}
        self.configs: dict[str, Path] = {}
        for name, peers in dials.items():
            links = "".join(link_toml(f"{name.lower()}-{p.lower()}", self.ports[p]) for p in peers)
            path = tmp_path / f"{name}.toml"
            path.write_text(node_toml(name, self.ports[name], tmp_path / name, links))
            self.configs[name] = path
        self.nodes: dict[str, Any] = {}

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str, wait_ready: Callable[..., Any]) -> None:
        self.nodes[name] = self.procs.zbroker("start", "--config", str(self.configs[name]))
        wait_ready(self.ep(name), proc=self.nodes[name])

    def start_all(self, wait_ready: Callable[..., Any], wait_until: Callable[..., bool]) -> None:
        """Start the four nodes; return once P and D have both their links up."""
        for name in ("P", "M1", "M2", "D"):
            self.start(name, wait_ready)
        assert wait_until(lambda: links_up(self.ep("P"), 2) and links_up(self.ep("D"), 2), WAIT)


def all_held_sent(net: Diamond) -> bool:
    """Have P, M1 and M2 nothing left in their link queues?"""
    return all(status(net.ep(name))["forward"]["held"] == 0 for name in ("P", "M1", "M2"))


def assert_m2_carried_and_m1_is_back(net: Diamond, held: int) -> None:
    """The stream was not held back for M1: M2 carried part of it, counted on both ends;
    and M1 back: P's link to it is a new accepted link (M1 handshook again), which carried
    what had waited in P's queue toward M1 (``held``), its counters on the live link."""
    assert link(net.ep("P"), "m2-p")["msgs_out"] > 0
    assert link(net.ep("M2"), "d-m2")["msgs_out"] > 0
    assert link(net.ep("D"), "d-m2")["msgs_in"] > 0
    assert link(net.ep("P"), "m1-p")["state"] == "up"
    if held:
        assert link(net.ep("P"), "m1-p")["msgs_out"] > 0


def first_deliveries(seen: Seen) -> list[int]:
    """Each message's first delivery, in order; a repeat must carry the redelivered flag."""
    firsts: list[int] = []
    for p, redelivered in seen.events:
        if p in firsts:
            assert redelivered, f"message {p} delivered twice without the redelivered flag"
            continue
        firsts.append(p)
    return firsts


def has_route(ep: str) -> bool:
    with Client(ep, timeout=5.0) as c:
        return any(r["pattern"] == "SAF.>" and r["origin"] == "D" for r in c.routes())


def link(ep: str, name: str) -> dict[str, Any]:
    """The status of link ``name`` (an accepted link is a new one after each handshake,
    with its own counters)."""
    links: list[dict[str, Any]] = [ln for ln in status(ep)["links"] if ln["name"] == name]
    (found,) = links
    return found


def queued_toward(ep: str, peer: str) -> int:
    """Messages in the node's link queue toward ``peer`` (not yet acknowledged)."""
    return sum(q["queued"] for q in status(ep)["forward"]["queues"] if q["peer"] == peer)


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_relay_dying_in_a_mesh_keeps_exactly_once_and_order_per_route(
    fault: str,
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> None:
    net = Diamond(procs, tmp_path, free_port)
    net.start_all(wait_ready, wait_until)
    script = tmp_path / "sub.py"
    script.write_text(SUBSCRIBER)
    sub = procs.start([sys.executable, str(script), net.ep("D")])
    assert sub.readline(WAIT) is not None, sub.stderr_text()
    assert wait_until(lambda: has_route(net.ep("P")), WAIT)
    seen = Seen()
    pub = Publisher(net.ep("P"), N)
    pub.start()

    def progress(k: int) -> bool:
        seen.drain(sub)
        return seen.has(k)

    # the fault comes mid-stream: a quarter published (and flowing); Seen.drain returns
    # while lines still arrive, so this does not wait for the end of the stream
    assert wait_until(lambda: pub.sent >= N // 4 and progress(0), WAIT), (pub.sent, pub.error)
    m1 = net.nodes["M1"]
    m1.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    if fault == "kill":
        m1.wait(WAIT)
    # M1 stays away until P has declared its link down (a restart within the heartbeat
    # timeout is only a reconnect: nothing reroutes) and the stream has gone on through M2
    assert wait_until(lambda: links_up(net.ep("P"), 1), WAIT)
    held = queued_toward(net.ep("P"), "M1")  # queued toward M1 before P noticed
    assert wait_until(
        lambda: pub.sent >= N // 2 and link(net.ep("D"), "d-m2")["msgs_in"] > 0, WAIT
    ), (pub.sent, pub.error, status(net.ep("P"))["forward"])
    if fault == "kill":
        net.start("M1", wait_ready)
    else:
        m1.send_signal(signal.SIGCONT)

    def all_seen() -> bool:
        seen.drain(sub)
        with seen.lock:
            return len({p for p, _ in seen.events}) == N

    assert wait_until(all_seen, WAIT * 2), (pub.sent, pub.error, len(seen.events))
    pub.join(WAIT)
    assert pub.error is None and pub.sent == N, (pub.sent, pub.error)
    assert wait_until(lambda: all_held_sent(net), WAIT)
    assert_m2_carried_and_m1_is_back(net, held)
    sub.stop()
    seen.drain(sub)
    # exactly once: flagged repeats skipped, each message once
    firsts = first_deliveries(seen)
    assert sorted(firsts) == list(range(N)), sorted(set(range(N)) - set(firsts))[:20]
    # in order along each route: at most one increasing run per route taken
    assert increasing_runs(firsts) <= 3, increasing_runs(firsts)
