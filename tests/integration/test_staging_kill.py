"""A node killed (SIGKILL) while it publishes a staged commit (issue 18, carried over):
once restarted it publishes the rest of the commit, and the writer's retry of the same
``(writer, batch)`` is answered ``duplicate`` — every row is in the retention log and in a
durable queue exactly once, in order.

The node is a real ``zbroker start`` process; the kill lands in the window honestly: while
the node says it still has rows of the commit to publish, and after some of them are
committed (readable from its retention log).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_ready, wait_until
from zbroker import Client, wire
from zbroker.writer import StagedWriter, commit_staged

pytestmark = pytest.mark.slow

N = 200_000
WAIT = 60.0

NODE = """
[node]
id = "S"
host = "127.0.0.1"
port = {port}
data_dir = "{data}"

[[retain]]
pattern = "OUT.>"
"""


def stage(client: Client) -> tuple[str, int]:
    w = StagedWriter(client)
    for i in range(N):
        w.add_raw("OUT.A", str(i).encode(), 0, None)
    return w.finish()


def logged(client: Client) -> list[int]:
    out: list[int] = []
    while True:
        page = client.read("OUT.>", len(out) + 1, limit=20_000)
        if not page:
            return out
        out.extend(int(m.payload) for m in page)


def applying(client: Client) -> int:
    return int(client.request(wire.STATUS)["staging"]["applying_rows"])


def durable_stored(client: Client) -> int:
    (d,) = [d for d in client.status()["durables"] if d["name"] == "audit"]
    return int(d["stored"])


def test_a_node_killed_mid_commit_publishes_the_commit_exactly_once(
    procs: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = free_port()
    ep = f"tcp://127.0.0.1:{port}"
    config = tmp_path / "s.toml"
    config.write_text(NODE.format(port=port, data=tmp_path / "data"))
    node = procs.zbroker("start", "--config", str(config))
    wait_ready(ep, proc=node)
    observer = Client(ep, timeout=10.0)
    observer.subscribe("OUT.>", lambda m: None, durable="audit").unsubscribe()  # detached
    writer = Client(ep, timeout=15.0)  # its commit dies with the node: bounded wait
    token = stage(writer)
    outcome: list[Any] = []

    def commit() -> None:
        try:
            outcome.append(commit_staged(writer, [token], writer="job", batch=1))
        except Exception as exc:  # the node died under it: the writer's job fails
            outcome.append(exc)

    t = threading.Thread(target=commit, daemon=True)
    t.start()
    # the window: rows of the commit committed (readable), others still to publish
    deadline = time.monotonic() + WAIT
    while not (observer.read("OUT.>", 1, limit=1) and applying(observer) > 0):
        assert not outcome, f"the commit finished before the window was seen: {outcome}"
        assert time.monotonic() < deadline
    node.send_signal(signal.SIGKILL)
    node.wait(10.0)
    observer.close()

    node = procs.zbroker("start", "--config", str(config))
    wait_ready(ep, proc=node)
    with Client(ep, timeout=WAIT) as client:
        assert wait_until(lambda: applying(client) == 0, WAIT)
        # the writer's job failed; it runs again: stages its rows anew and commits the
        # same batch, which the node already has
        again = stage(client)
        assert commit_staged(client, [again], writer="job", batch=1) == {
            "applied": 0,
            "duplicate": True,
        }
        rows = logged(client)
        assert len(rows) == N
        assert rows == list(range(N))
        assert durable_stored(client) == N
    writer.close()
    t.join(WAIT)  # its request failed with the node, or times out
