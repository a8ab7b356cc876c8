"""Fault tests of store-and-forward with real processes: chain A - B - C.

Three ``zbroker start`` processes on 127.0.0.1 (B dials A, C dials B; fast heartbeats), a
durable subscriber process on C (pattern ``SAF.>``, name ``saf``, credit 20), and a
publisher in the test process sending persistent messages with confirmation at a steady
rate to A (payload = its number 0..N-1). During the run one fault is injected:

1. the subscriber process is killed (SIGKILL) and started again;
2. B is killed (SIGKILL) and started again;
3. B is stopped (SIGSTOP) for 5 s, cutting both of its links (A and C declare them down),
   then continued;
4. C is killed (SIGKILL) and started again.

Assertions, exact: every message arrives; a message is seen more than once only as a
redelivery flagged ``redelivered`` (the durable contract: a subscriber killed, or whose
node was killed, before its acknowledgement was stored gets it again, flagged), so the
messages not flagged are each seen exactly once and, with flagged repeats of
already-seen messages skipped, the subscriber sees 0..N-1 exactly once in order. After the
run every link queue is empty. Every process is stopped by PID (the ``procs`` fixture).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import link_toml, node_toml
from zbroker import Client

pytestmark = pytest.mark.slow

WAIT = 60.0
RATE = 100.0  # persistent messages per second
N = 1200

SUBSCRIBER = r"""
import json, sys
from zbroker import Client

endpoint = sys.argv[1]

def on_message(msg):
    print(json.dumps({"p": int(msg.payload), "r": msg.redelivered}), flush=True)

client = Client(endpoint, timeout=10.0)
# "ready" before subscribing: a restarted subscriber gets messages at once, and they must
# not come before this line (the route check in the test is what waits for the durable)
print(json.dumps({"ready": True}), flush=True)
client.subscribe("SAF.>", on_message, durable="saf", credit=20)
import threading
threading.Event().wait()
"""


class Chain:
    def __init__(self, procs: Any, tmp_path: Path, free_port: Callable[[], int]) -> None:
        self.procs = procs
        self.tmp = tmp_path
        self.ports = {n: free_port() for n in "ABC"}
        peers = {"A": None, "B": ("ba", "A"), "C": ("cb", "B")}
        self.configs: dict[str, Path] = {}
        for name, peer in peers.items():
            links = "" if peer is None else link_toml(peer[0], self.ports[peer[1]])
            path = tmp_path / f"{name}.toml"
            path.write_text(node_toml(name, self.ports[name], tmp_path / name, links))
            self.configs[name] = path
        self.nodes: dict[str, Any] = {}
        self.script = tmp_path / "saf_sub.py"
        self.script.write_text(SUBSCRIBER)

    def endpoint(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def start(self, name: str, wait_ready: Callable[..., Any]) -> Any:
        proc = self.procs.zbroker("start", "--config", str(self.configs[name]))
        self.nodes[name] = proc
        wait_ready(self.endpoint(name), proc=proc)
        return proc

    def subscriber(self) -> Any:
        proc = self.procs.start([sys.executable, str(self.script), self.endpoint("C")])
        line = proc.readline(WAIT)
        assert line is not None and json.loads(line) == {"ready": True}, proc.stderr_text()
        return proc


def status(ep: str) -> dict[str, Any]:
    with Client(ep, timeout=5.0) as c:
        result: dict[str, Any] = c.status()
        return result


def links_up(ep: str, n: int) -> bool:
    try:
        up: int = sum(ln["state"] == "up" for ln in status(ep)["links"])
        return up == n
    except Exception:
        return False


def has_route(ep: str) -> bool:
    with Client(ep, timeout=5.0) as c:
        return any(r["pattern"] == "SAF.>" and r["origin"] == "C" for r in c.routes())


class Publisher(threading.Thread):
    """Persistent publishes with confirmation to A at a steady rate."""

    def __init__(self, ep: str, n: int) -> None:
        super().__init__(daemon=True)
        self.ep, self.n = ep, n
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(self.ep, timeout=30.0) as c:
                start = time.monotonic()
                for i in range(self.n):
                    delay = start + i / RATE - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    c.publish("SAF.X", str(i).encode(), persistent=True, confirm=True)
                    self.sent = i + 1
        except BaseException as exc:
            self.error = exc


class Seen:
    """Reads a subscriber's lines on a thread."""

    def __init__(self) -> None:
        self.events: list[tuple[int, bool]] = []
        self.lock = threading.Lock()

    def drain(self, proc: Any) -> None:
        """Take the lines that have arrived (waiting up to 50 ms for the first): returns
        while the stream still flows, so a test polling progress acts mid-stream (waiting
        for a pause instead put every fault after the last message)."""
        line = proc.readline(0.05)
        while line is not None:
            e = json.loads(line)
            with self.lock:
                self.events.append((e["p"], e["r"]))
            line = proc.readline(0)

    def has(self, p: int) -> bool:
        with self.lock:
            return any(x == p for x, _ in self.events)


def check_exactly_once(events: list[tuple[int, bool]], n: int) -> None:
    """Flagged repeats skipped, the subscriber saw 0..n-1 once each, in order; every
    repeat is flagged."""
    seen: set[int] = set()
    order: list[int] = []
    for p, redelivered in events:
        if p in seen:
            assert redelivered, f"message {p} delivered twice without the redelivered flag"
            continue
        seen.add(p)
        order.append(p)
    assert order == list(range(n)), (
        f"missing {sorted(set(range(n)) - seen)[:20]}, "
        f"out of order at {[i for i, p in enumerate(order) if p != i][:5]}"
    )


def inject(
    fault: str,
    chain: Chain,
    sub: Any,
    seen: Seen,
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> Any:
    """The fault, mid-stream: the subscriber process killed and started again, B or C
    killed and started again, or B stopped (SIGSTOP) until its links are down for 5 s.
    Returns the subscriber process (a new one if it was killed)."""
    ep = chain.endpoint
    if fault == "subscriber":
        sub.send_signal(signal.SIGKILL)
        sub.wait(WAIT)
        seen.drain(sub)
        sub = chain.subscriber()
    elif fault in ("b_kill", "c_kill"):
        name = "B" if fault == "b_kill" else "C"
        node = chain.nodes[name]
        node.send_signal(signal.SIGKILL)
        node.wait(WAIT)
        peer = "A" if name == "B" else "B"
        assert wait_until(lambda: links_up(ep(peer), 0 if name == "B" else 1), WAIT)
        chain.start(name, wait_ready)
    elif fault == "b_stop":
        node = chain.nodes["B"]
        node.send_signal(signal.SIGSTOP)
        try:
            # A declares its link to B down; C too (its heartbeats go unanswered)
            assert wait_until(lambda: links_up(ep("A"), 0), WAIT)
            cut = time.monotonic()
            assert wait_until(lambda: time.monotonic() - cut >= 5.0, 10.0)
        finally:
            node.send_signal(signal.SIGCONT)
    return sub


def run_fault(
    fault: str,
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> None:
    chain = Chain(procs, tmp_path, free_port)
    for name in "ABC":
        chain.start(name, wait_ready)
    ep = chain.endpoint
    assert wait_until(lambda: links_up(ep("B"), 2) and links_up(ep("C"), 1), WAIT)
    sub = chain.subscriber()
    assert wait_until(lambda: has_route(ep("A")), WAIT)
    seen = Seen()
    pub = Publisher(ep("A"), N)
    pub.start()

    def progress(k: int) -> bool:
        seen.drain(sub)
        return seen.has(k)

    # steady state first: messages flow end to end
    assert wait_until(lambda: progress(N // 4), WAIT), seen.events[-5:]
    sub = inject(fault, chain, sub, seen, wait_ready, wait_until)
    assert wait_until(lambda: progress(N - 1), WAIT * 2), (
        pub.sent,
        pub.error,
        seen.events[-5:],
        status(ep("A"))["forward"],
    )
    pub.join(WAIT)
    assert pub.error is None, pub.error
    assert pub.sent == N
    sub.stop()
    seen.drain(sub)
    check_exactly_once(seen.events, N)
    # nothing is left in any link queue
    for name in "AB":
        assert wait_until(lambda name=name: status(ep(name))["forward"]["held"] == 0, WAIT), status(
            ep(name)
        )["forward"]


@pytest.mark.parametrize("fault", ["subscriber", "b_kill", "b_stop", "c_kill"])
def test_every_message_arrives_once_in_order_through_a_fault(
    fault: str,
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
) -> None:
    run_fault(fault, procs, tmp_path, free_port, wait_ready, wait_until)
