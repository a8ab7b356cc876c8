"""The seed's load-balancing example with real processes: two ``zbroker start`` nodes A and
B, a producer and consumer C1 on A, consumers C2 and C3 on B, every consumer a
``zbroker sub --queue workers`` process. ActiveMQ with conduit subscriptions gives 6-3-3
here; ``round_robin`` (over members, network-wide) gives each a third, ``local_first``
gives everything to C1."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zbroker import Client

HOST = "127.0.0.1"
WAIT = 30.0
N = 3000


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def start(procs: Any, tmp: Path, node: str, port: int, policy: str, dial: int | None) -> Any:
    config = tmp / f"{node}.toml"
    text = f'[node]\nid = "{node}"\nhost = "{HOST}"\nport = {port}\n'
    text += f'data_dir = "{tmp / node}"\nlog_level = "warning"\n'
    text += f'[[queue]]\ngroup = "workers"\npolicy = "{policy}"\n'
    if dial is not None:
        text += f'[[link]]\nname = "to-a"\nuri = "{endpoint(dial)}"\n'
        text += "heartbeat_interval = 0.2\nheartbeat_timeout = 1.0\n"
    config.write_text(text)
    return procs.zbroker("start", "--config", str(config), "--no-discovery")


def lines(proc: Any) -> list[dict[str, Any]]:
    return [json.loads(x) for x in proc.stdout_text().splitlines() if x.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["round_robin", "local_first"])
def test_seed_004_load_balancing(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
    policy: str,
) -> None:
    pa, pb = free_port(), free_port()
    a = start(procs, tmp_path, "A", pa, policy, None)
    b = start(procs, tmp_path, "B", pb, policy, pa)
    wait_ready(endpoint(pa), WAIT, a)
    wait_ready(endpoint(pb), WAIT, b)
    consumers = []
    for port in (pa, pb, pb):
        # local_first spills over while messages wait on A that its member has no credit
        # for: with credit for all of them, it never falls behind, so A's takes all
        credit = ("--credit", str(N)) if port == pa and policy == "local_first" else ()
        c = procs.zbroker(
            "sub", "jobs.>", "--queue", "workers", "--json", "-b", endpoint(port), *credit
        )
        assert c.wait_stderr("subscribed to", WAIT), c.stderr_text()
        consumers.append(c)
    with Client(endpoint(pa), timeout=10.0) as producer:

        def members() -> dict[str, int]:
            rows = [r for r in producer.status()["queues"] if r.get("group") == "workers"]
            return rows[0]["members"] if rows else {}

        assert wait_until(lambda: members() == {"A": 1, "B": 2}, WAIT), members()
        for i in range(N):
            producer.publish("jobs.work", i)

        def counts() -> list[int]:
            return [len(lines(c)) for c in consumers]

        assert wait_until(lambda: sum(counts()) >= N, WAIT), counts()
        time.sleep(0.5)
        got = [m["payload"] for c in consumers for m in lines(c)]
        assert sorted(got) == list(range(N))  # each message once, to one consumer
        c1, c2, c3 = counts()
        if policy == "local_first":
            assert (c1, c2, c3) == (N, 0, 0)
        else:
            third = N / 3
            for n in (c1, c2, c3):
                assert abs(n - third) <= 0.05 * third, (c1, c2, c3)
            assert c1 == N // 3  # A's share is exact: its weight is its one member
    for p in (a, b):
        assert p.poll() is None, p.stderr_text()


@pytest.mark.slow
def test_member_killed_the_others_take_over(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    """A member SIGKILLed is noticed (probe) and leaves the group: what follows goes to
    the member left, each message once (at most once: what was in flight to the killed
    one is lost, and counted)."""
    import signal

    pa = free_port()
    a = start(procs, tmp_path, "A", pa, "local_first", None)
    wait_ready(endpoint(pa), WAIT, a)
    doomed = procs.zbroker("sub", "jobs.>", "--queue", "workers", "--json", "-b", endpoint(pa))
    survivor = procs.zbroker("sub", "jobs.>", "--queue", "workers", "--json", "-b", endpoint(pa))
    for c in (doomed, survivor):
        assert c.wait_stderr("subscribed to", WAIT), c.stderr_text()
    with Client(endpoint(pa), timeout=10.0) as producer:

        def row() -> dict[str, Any]:
            rows = [r for r in producer.status()["queues"] if r.get("group") == "workers"]
            return rows[0] if rows else {}

        assert wait_until(lambda: row().get("members") == {"A": 2}, WAIT)
        for i in range(100):
            producer.publish("jobs.work", i)
        assert wait_until(lambda: len(lines(doomed)) + len(lines(survivor)) >= 100, WAIT)
        doomed.send_signal(signal.SIGKILL)
        assert wait_until(lambda: row().get("members") == {"A": 1}, WAIT), row()
        before = len(lines(survivor))
        for i in range(100, 400):
            producer.publish("jobs.work", i)
        assert wait_until(lambda: len(lines(survivor)) >= before + 300, WAIT)
        time.sleep(0.5)
        got = [m["payload"] for c in (doomed, survivor) for m in lines(c)]
        assert sorted(got) == list(range(400))
        assert row()["delivered"] == 400 and row()["lost"] == 0
