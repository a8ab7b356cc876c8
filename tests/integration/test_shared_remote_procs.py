"""Shared durables across nodes with real processes (``zbroker start`` nodes, ``zbroker
sub`` consumers): a remote consumer SIGKILLed mid-stream, and the home node SIGKILLed and
restarted with a backlog while its consumers are on other nodes. Counts are exact: every
message is processed, and a message is processed more than once only when a copy came
flagged redelivered."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Client

HOST = "127.0.0.1"
WAIT = 40.0
GRACE = 0.5


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


#: a home that stays put (tests of network consumers, not of moves): no redistribution
FIXED_HOME = "[durables]\nredistribution_delay = 86400\n"


def start(
    procs: Any, tmp: Path, node: str, port: int, dials: tuple[int, ...] = (), extra: str = ""
) -> Any:
    config = tmp / f"{node}.toml"
    text = f'[node]\nid = "{node}"\nhost = "{HOST}"\nport = {port}\n'
    text += f'data_dir = "{tmp / node}"\nlog_level = "warning"\n' + extra
    for i, dial in enumerate(dials):
        text += f'[[link]]\nname = "{node}-{i}"\nuri = "{endpoint(dial)}"\n'
        text += "heartbeat_interval = 0.2\nheartbeat_timeout = 1.0\n"
        text += "reconnect_initial_delay = 0.1\nreconnect_max_delay = 0.5\n"
    config.write_text(text)
    return procs.zbroker("start", "--config", str(config), "--no-discovery")


def queue_row(client: Client, name: str) -> dict[str, Any]:
    rows = [r for r in client.status()["queues"] if r.get("name") == name]
    return dict(rows[0]) if rows else {}


def homed(wait_until: Callable[..., bool], clients: list[Client], name: str, home: str) -> None:
    key = "$ZB.DURABLE." + name
    assert wait_until(
        lambda: all(
            any(r["pattern"] == key and r["origin"] == home for r in c.routes()) for c in clients
        ),
        WAIT,
    )


def once_but_flagged(deliveries: list[tuple[Any, bool]], total: int) -> set[Any]:
    """Every payload of ``range(total)`` processed, at most once unflagged; returns the
    payloads that came flagged."""
    assert {p for p, _ in deliveries} == set(range(total))
    plain = Counter(p for p, flagged in deliveries if not flagged)
    assert all(n == 1 for n in plain.values()), [p for p, n in plain.items() if n > 1]
    return {p for p, flagged in deliveries if flagged}


def billing_stored(client: Client) -> int:
    """Messages the durable "billing" stores on the client's node."""
    return int(next(d["stored"] for d in client.status()["durables"] if d["name"] == "billing"))


@pytest.mark.slow
def test_remote_consumer_sigkilled_mid_stream(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    """A ``zbroker sub --durable billing --shared`` process on node B (the durable's home
    is A) is stopped until B holds its credit window (100) unacknowledged, then SIGKILLed:
    B hands those back, the home gives them to the consumer on A, flagged; every message
    is processed, only flagged ones twice."""
    pa, pb = free_port(), free_port()
    a = start(procs, tmp_path, "A", pa)
    wait_ready(endpoint(pa), WAIT, a)
    b = start(procs, tmp_path, "B", pb, (pa,))
    wait_ready(endpoint(pb), WAIT, b)
    total, window = 2000, 50
    survivor = Collector()
    with Client(endpoint(pa), timeout=10.0) as on_a, Client(endpoint(pb), timeout=10.0) as on_b:
        on_a.subscribe("bill.>", survivor, durable="billing", shared=True, credit=window)
        homed(wait_until, [on_b], "billing", "A")
        doomed = procs.zbroker(
            "sub", "bill.>", "--durable", "billing", "--shared", "--json", "-b", endpoint(pb)
        )
        assert doomed.wait_stderr("subscribed to", WAIT), doomed.stderr_text()
        assert wait_until(lambda: queue_row(on_a, "billing").get("members") == {"A": 1, "B": 1})
        for i in range(total):
            on_a.publish("bill.x", i, persistent=True, confirm=i % 200 == 199)
            if i == 600:
                assert wait_until(lambda: len(doomed.stdout_text().splitlines()) > 50, WAIT)
                doomed.send_signal(signal.SIGSTOP)
        assert wait_until(lambda: queue_row(on_b, "billing").get("in_flight") == 100, WAIT), (
            queue_row(on_b, "billing")
        )
        doomed.send_signal(signal.SIGKILL)
        assert doomed.wait(10.0) == -signal.SIGKILL
        killed = [json.loads(x)["payload"] for x in doomed.stdout_text().splitlines() if x]
        assert wait_until(
            lambda: set(killed) | set(survivor.payloads()) == set(range(total)), WAIT
        ), len(set(killed) | set(survivor.payloads()))

        assert wait_until(lambda: billing_stored(on_a) == 0, WAIT)
        time.sleep(GRACE)
        seen = Counter(survivor.payloads())
        assert all(n == 1 for n in seen.values())  # the survivor never got one twice
        flagged = {m.payload for m in survivor.snapshot() if m.redelivered}
        assert set(killed) & set(seen) <= flagged  # what both processed came flagged
        # the 100 B held unacknowledged went to A's consumer, flagged, and A counted them
        assert len(flagged) >= 100
        row = queue_row(on_a, "billing")
        assert row["redelivered"] == len(flagged)
        assert wait_until(lambda: queue_row(on_a, "billing")["members"] == {"A": 1}, WAIT)


@pytest.mark.slow
def test_home_killed_and_restarted_with_a_backlog(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    """The home A holds a backlog of 3,000 persistent messages; consumers on B and C take
    them; A is SIGKILLed mid-stream and restarted: after it returns the consumers get
    everything, each message processed once except copies flagged redelivered (what was
    in flight when A died)."""
    pa, pb, pc = free_port(), free_port(), free_port()
    a = start(procs, tmp_path, "A", pa, extra=FIXED_HOME)  # (the home stays: no move)
    wait_ready(endpoint(pa), WAIT, a)
    b = start(procs, tmp_path, "B", pb, (pa,))
    c = start(procs, tmp_path, "C", pc, (pa,))
    wait_ready(endpoint(pb), WAIT, b)
    wait_ready(endpoint(pc), WAIT, c)
    total = 3000
    lock = threading.Lock()
    deliveries: list[tuple[Any, bool]] = []

    def consume(msg: Any) -> None:
        time.sleep(0.001)  # (a consumer that takes a moment: the backlog lasts)
        with lock:
            deliveries.append((msg.payload, msg.redelivered))

    with Client(endpoint(pa), timeout=10.0) as pub:
        pub.subscribe("bill.>", Collector(), durable="billing", shared=True).unsubscribe()
        for i in range(total):
            pub.publish("bill.x", i, persistent=True, confirm=i % 500 == 499)
    on_b, on_c = Client(endpoint(pb), timeout=10.0), Client(endpoint(pc), timeout=10.0)
    try:
        homed(wait_until, [on_b, on_c], "billing", "A")
        on_b.subscribe("bill.>", consume, durable="billing", shared=True, credit=20)
        on_c.subscribe("bill.>", consume, durable="billing", shared=True, credit=20)
        assert wait_until(lambda: len(deliveries) >= 400, WAIT)
        a.send_signal(signal.SIGKILL)
        assert a.wait(10.0) == -signal.SIGKILL
        got_then = len(deliveries)
        assert got_then < total  # killed mid-stream, with a backlog
        a = start(procs, tmp_path, "A", pa, extra=FIXED_HOME)
        wait_ready(endpoint(pa), WAIT, a)
        assert wait_until(lambda: {p for p, _ in deliveries} == set(range(total)), WAIT), len(
            {p for p, _ in deliveries}
        )
        with Client(endpoint(pa), timeout=10.0) as on_a:
            assert wait_until(lambda: billing_stored(on_a) == 0, WAIT), billing_stored(on_a)
            time.sleep(GRACE)
            flagged = once_but_flagged(list(deliveries), total)
            assert queue_row(on_a, "billing")["redelivered"] == len(flagged)
        # the consumers on both nodes took a share after the restart too
        assert queue_row(on_b, "billing")["delivered"] > 0
        assert queue_row(on_c, "billing")["delivered"] > 0
    finally:
        on_b.close()
        on_c.close()


@pytest.mark.slow
def test_consumer_moves_from_a_to_c_with_a_backlog_processes(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    """The issue's scenario with real processes (chain A - B - C): a ``zbroker sub
    --durable billing --shared`` consumer on A stops; A takes a backlog of 2,000
    persistent messages; the consumer starts again on C: all 2,000 consumed once, none
    left on A: the durable moved to C (one durable, now homed on C)."""
    pa, pb, pc = free_port(), free_port(), free_port()
    a = start(procs, tmp_path, "A", pa)
    wait_ready(endpoint(pa), WAIT, a)
    b = start(procs, tmp_path, "B", pb, (pa,))
    wait_ready(endpoint(pb), WAIT, b)
    c = start(procs, tmp_path, "C", pc, (pb,))
    wait_ready(endpoint(pc), WAIT, c)
    sub = ("sub", "bill.>", "--durable", "billing", "--shared", "--json", "-b")
    first = procs.zbroker(*sub, endpoint(pa))
    assert first.wait_stderr("subscribed to", WAIT), first.stderr_text()
    first.send_signal(signal.SIGTERM)
    first.wait(10.0)
    total = 2000
    with Client(endpoint(pa), timeout=10.0) as on_a, Client(endpoint(pc), timeout=10.0) as on_c:
        assert wait_until(lambda: queue_row(on_a, "billing").get("members") == {"A": 0}, WAIT)
        for i in range(total):
            on_a.publish("bill.x", i, persistent=True, confirm=i % 500 == 499)

        assert billing_stored(on_a) == total
        homed(wait_until, [on_c], "billing", "A")
        moved = procs.zbroker(*sub, endpoint(pc))
        assert moved.wait_stderr("subscribed to", WAIT), moved.stderr_text()

        def got() -> list[dict[str, Any]]:
            return [json.loads(x) for x in moved.stdout_text().splitlines() if x]

        assert wait_until(lambda: len(got()) >= total, WAIT), len(got())
        time.sleep(GRACE)
        payloads = [m["payload"] for m in got()]
        assert sorted(payloads) == list(range(total))  # each once
        assert not any(m.get("redelivered") for m in got())
        # none left on A: after redistribution_delay (1 s) with no consumer of its own,
        # A moved the durable (and what it still held) to C, its consumer's node

        def holds(c: Client) -> bool:
            return any(d["name"] == "billing" for d in c.status()["durables"])

        assert wait_until(lambda: holds(on_c) and not holds(on_a), WAIT)
        assert queue_row(on_c, "billing")["members"] == {"C": 1}
        assert queue_row(on_c, "billing")["stored"] == 0
