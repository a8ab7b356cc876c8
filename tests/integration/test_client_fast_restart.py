"""A node killed and restarted faster than its clients' heartbeat timeout: the pings a
client sent meanwhile reach the new process, which answers them ``unknown`` until the
client says HELLO again. The client takes that for the restart it is (it joins its queue
groups again, on the same session), not for a connection the node closed."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Client

WAIT = 30.0
ClientFactory = Callable[..., Client]


def test_a_fast_restart_keeps_the_session_and_the_members_rejoin(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="zbroker.client")
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    args = ("start", "--port", str(port), "--data-dir", str(tmp_path / "n"), "--id", "N")
    node = procs.zbroker(*args, "--no-discovery", "--log-level", "warning")
    first = wait_ready(endpoint, WAIT, node)["incarnation"]
    got = Collector()
    member = client_factory(endpoint, heartbeat_interval=0.1, heartbeat_timeout=10.0)
    member.subscribe("jobs.>", got, queue="w")
    node.send_signal(signal.SIGKILL)  # (no LEAVING: the client keeps pinging the port)
    assert node.wait(5.0) == -signal.SIGKILL
    node = procs.zbroker(*args, "--no-discovery", "--log-level", "warning")
    assert wait_ready(endpoint, WAIT, node)["incarnation"] != first
    pub = client_factory(endpoint)

    def member_again() -> bool:  # (published before it joined again, a probe is lost)
        pub.publish("jobs.probe", -1)
        return got.wait_for(1, 0.2)

    assert wait_until(member_again, WAIT)
    assert "node restarted" in caplog.text
    assert "the node had closed this connection" not in caplog.text
    assert "lost node" not in caplog.text
