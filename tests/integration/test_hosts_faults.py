"""A topic host killed (SIGKILL) under a persistent stream, with real processes.

Four ``zbroker start`` processes on 127.0.0.1: the publisher's node P, two hosts H and K
of ``SAF.>`` (each dials P), and the subscriber's node C (dials both hosts), fast
heartbeats; a durable subscriber process on C; a publisher in the test process sending
persistent messages with confirmation at a steady rate to P. P sends the stream to one
host (the hash picks it); that host is killed with SIGKILL, the stream goes on through
the other host, and the killed host is started again, which hands on what it had taken.
Assertions, exact: every message arrives, a repeat only as a flagged redelivery, and the
stream kept flowing through the other host while the first was down. Every process is
stopped by PID (the ``procs`` fixture).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import link_toml, node_toml
from zbroker import Client
from zbroker.routing.hosts import choose

from .test_forward_faults import SUBSCRIBER, WAIT, Publisher, Seen, links_up, status

pytestmark = pytest.mark.slow

N = 2000
HOST = '\n[[host]]\npattern = "SAF.>"\n'
DIALS = {"P": (), "H": ("P",), "K": ("P",), "C": ("H", "K")}


def routes(ep: str) -> set[tuple[str, str]]:
    with Client(ep, timeout=5.0) as c:
        return {(r["pattern"], r["origin"]) for r in c.routes()}


def sent_to_c(ep: str) -> int:
    """Persistent messages a host's link queue toward C has sent."""
    return sum(q["sent"] for q in status(ep)["forward"]["queues"] if q["peer"] == "C")


def gaps(seen: set[int]) -> list[tuple[int, int]]:
    """The missing ranges of 0..max(seen), for a failure message."""
    out: list[tuple[int, int]] = []
    for i in range(max(seen, default=0)):
        if i not in seen:
            if out and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
    return out


def after_restart(
    pub: Publisher, seen: set[int], eps: dict[str, str], host: Any, killed: Any
) -> str:
    """What a failure after the restart shows: what is missing, every node's forward
    status (their queues and what they hold), its durables and counters (C's durable
    feeds the subscriber), and the host's log before it was killed and after."""
    lines = [f"sent {pub.sent}, error {pub.error!r}, missing ranges {gaps(seen | {N})[:20]}"]
    for name, endpoint in eps.items():
        try:
            st = status(endpoint)
            lines.append(f"{name} forward: {st['forward']}")
            lines.append(f"{name} durables: {st.get('durables')}; counters: {st['counters']}")
        except Exception as exc:  # a node that does not answer is itself the finding
            lines.append(f"{name} status failed: {exc!r}")
    lines.append(f"killed host's stderr (tail): {killed.stderr_text()[-4000:]}")
    lines.append(f"restarted host's stderr (tail): {host.stderr_text()[-4000:]}")
    return "\n".join(lines)


def check_once(events: list[tuple[int, bool]], n: int) -> None:
    """Every message 0..n-1 seen; a repeat only flagged redelivered (the order across a
    host's failure is not promised: what the dead host had taken comes when it returns)."""
    seen: set[int] = set()
    for p, redelivered in events:
        if p in seen:
            assert redelivered, f"message {p} delivered twice without the redelivered flag"
        seen.add(p)
    assert seen == set(range(n)), f"missing {sorted(set(range(n)) - seen)[:20]}"


class Nodes:
    """The ``zbroker start`` processes of DIALS, by name; H and K host ``SAF.>``."""

    def __init__(
        self,
        procs: Any,
        tmp_path: Path,
        free_port: Callable[[], int],
        wait_ready: Callable[..., Any],
    ) -> None:
        self.procs = procs
        self.wait_ready = wait_ready
        self.ports = {n: free_port() for n in DIALS}
        self.configs: dict[str, Path] = {}
        self.nodes: dict[str, Any] = {}
        for name, peers in DIALS.items():
            links = "".join(link_toml(f"{name.lower()}{p.lower()}", self.ports[p]) for p in peers)
            text = node_toml(name, self.ports[name], tmp_path / name, links)
            self.configs[name] = tmp_path / f"{name}.toml"
            self.configs[name].write_text(text + (HOST if name in "HK" else ""))

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str) -> None:
        self.nodes[name] = self.procs.zbroker("start", "--config", str(self.configs[name]))
        self.wait_ready(self.ep(name), proc=self.nodes[name])


def test_a_host_killed_under_a_persistent_stream(
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> None:
    net = Nodes(procs, tmp_path, free_port, wait_ready)
    ep, start, nodes = net.ep, net.start, net.nodes
    for name in DIALS:
        start(name)
    assert wait_until(lambda: links_up(ep("P"), 2) and links_up(ep("C"), 2), WAIT)
    script = tmp_path / "sub.py"
    script.write_text(SUBSCRIBER)
    sub = procs.start([sys.executable, str(script), ep("C")])
    assert sub.readline(WAIT) is not None, sub.stderr_text()
    # C's durable interest reaches both hosts, not P; P knows both hosts
    hosts = {("$ZB.HOST.SAF.>", "H"), ("$ZB.HOST.SAF.>", "K")}
    assert wait_until(lambda: ("SAF.>", "C") in routes(ep("H")) & routes(ep("K")), WAIT)
    assert wait_until(lambda: hosts <= routes(ep("P")), WAIT)
    assert ("SAF.>", "C") not in routes(ep("P"))
    first = choose({"H": (1, "", frozenset()), "K": (1, "", frozenset())}, "P")
    other = "K" if first == "H" else "H"
    seen = Seen()
    pub = Publisher(ep("P"), N)
    pub.start()

    def progress(k: int) -> bool:
        seen.drain(sub)
        return len({p for p, _ in seen.events}) >= k

    # kill the chosen host a quarter into the stream (by what was published: the
    # subscriber's progress depends on the machine's load)
    assert wait_until(lambda: pub.sent >= N // 4, WAIT), pub.error
    assert sent_to_c(ep(other)) == 0  # all through the chosen host so far
    killed = nodes[first]
    killed.send_signal(signal.SIGKILL)
    killed.wait(WAIT)
    assert wait_until(lambda: links_up(ep("P"), 1), WAIT)
    # the stream goes on through the other host while the first is down
    assert wait_until(lambda: pub.sent == N, WAIT * 2), pub.error
    assert wait_until(lambda: progress(N) or (N - 1) in {p for p, _ in seen.events}, WAIT), gaps(
        {p for p, _ in seen.events}
    )
    assert sent_to_c(ep(other)) > 0
    time.sleep(0.5)
    start(first)  # hands on what it had taken before it died
    assert wait_until(lambda: progress(N), WAIT * 2), after_restart(
        pub, {p for p, _ in seen.events}, {n: ep(n) for n in DIALS}, nodes[first], killed
    )
    pub.join(WAIT)
    assert pub.error is None, pub.error
    assert pub.sent == N
    sub.stop()
    seen.drain(sub)
    check_once(seen.events, N)
