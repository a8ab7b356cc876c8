"""Two nodes that share one broker ID, each linked to a third node (issue 18, item 11).

The third node sees two links whose peers claim the same ID from different processes
(the handshake's instance mark): it keeps the first, refuses the second, logs an error
naming both links and counts it as a refused handshake (``handshakes_refused_duplicate_id``),
not as a dropped message. The first link does not flap, and what its node publishes
arrives exactly once. Three in-thread Brokers on
127.0.0.1, ports chosen before any starts; the two "dup" nodes have their own data
directories.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

N = 300


class Trio:
    """Node "t" and two nodes "dup" (first, second), linked as ``how`` says."""

    def __init__(
        self, how: str, factory: Callable[..., Broker], port: Callable[[], int], tmp: Path
    ):
        self.ports = {name: port() for name in ("t", "first", "second")}
        self._factory = factory
        self._tmp = tmp
        # dialled by "t" (True) or dialling "t" (False), and under which link name
        self.dialled = {
            "dial-same-name": {"first": (False, "up"), "second": (False, "up")},
            "dial-two-names": {"first": (False, "up1"), "second": (False, "up2")},
            "third-dials": {"first": (True, "t-first"), "second": (True, "t-second")},
            "mixed": {"first": (True, "t-first"), "second": (False, "up")},
        }[how]
        links = [self.link(name, name) for name, (by_t, _) in self.dialled.items() if by_t]
        self.t = self._start("t", "t", links)

    def uri(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def link(self, name: str, to: str) -> LinkConfig:
        return LinkConfig(name=self.dialled[name][1], uri=self.uri(to), **FAST_LINK)

    def start_dup(self, name: str) -> Broker:
        by_t = self.dialled[name][0]
        return self._start(name, "dup", [] if by_t else [self.link(name, "t")])

    def _start(self, name: str, broker_id: str, links: list[LinkConfig]) -> Broker:
        return self._factory(
            broker_id=broker_id,
            port=self.ports[name],
            data_dir=self._tmp / f"data-{name}",
            links=tuple(links),
        )


def _links(broker: Broker) -> list[dict[str, Any]]:
    return list(broker.status()["links"])


def _up(broker: Broker) -> list[str]:
    return sorted(lk["name"] for lk in _links(broker) if lk["state"] == "up")


def _duplicate_refusals(broker: Broker) -> int:
    n: int = broker.status()["counters"]["handshakes_refused_duplicate_id"]
    return n


@pytest.mark.parametrize("how", ["dial-same-name", "dial-two-names", "third-dials", "mixed"])
def test_two_nodes_with_one_id_the_second_is_refused_loudly_and_the_first_works(
    how: str,
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: Callable[..., bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    trio = Trio(how, broker_factory, free_port, tmp_path)
    t = trio.t
    first = trio.start_dup("first")
    assert wait_until(lambda: len(_up(t)) == 1 and len(_up(first)) == 1, 10), _links(t)
    refusals: list[dict[str, Any]] = []
    watch = client_factory(t.endpoint)
    watch.subscribe("$ZB.ADVISORY.*.HANDSHAKE_REFUSED", lambda m: refusals.append(m.payload))
    second = trio.start_dup("second")
    assert wait_until(lambda: _duplicate_refusals(t) >= 1, 10), (_links(t), t.status())

    # said as an error at the third node, naming both links
    said = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and "two nodes use broker ID 'dup'" in r.getMessage()
    ]
    assert said, [r.getMessage() for r in caplog.records]
    first_name, second_name = trio.dialled["first"][1], trio.dialled["second"][1]
    assert f"link {first_name}" in said[0] and f"link {second_name}" in said[0], said[0]
    # the advisory names the link as docs/advisories.md says: NAME dialled, PEER/NAME taken
    assert wait_until(lambda: refusals, 10)
    assert {r["link"] for r in refusals} <= {second_name, f"dup/{second_name}"}, refusals
    # the first node's link does not flap: several heartbeat timeouts later, its first life
    time.sleep(3.0)
    c = t.status()["counters"]
    assert (c["links_up"], c["links_down"]) == (1, 0) and c["handshakes_refused"] >= 1, c
    # each refusal here (the second retries: how often, the clock says) is for the ID
    assert c["handshakes_refused_duplicate_id"] == c["handshakes_refused"], c
    assert "duplicate_broker_id" not in c["dropped"], c["dropped"]
    assert (_up(t), _up(first), _up(second)) == ([first_name], [first_name], [])

    # everything the first node's publisher sends reaches the third node's subscriber
    # once, while the second node's publisher (its message IDs the same) publishes too
    got = Collector()
    sub = client_factory(t.endpoint)
    sub.subscribe("P.>", got)
    pubs = [client_factory(first.endpoint), client_factory(second.endpoint)]
    assert wait_until(lambda: any(r["pattern"] == "P.>" for r in pubs[0].routes()), 10)
    for i in range(N):
        pubs[0].publish("P.first", b"f%d" % i)
        pubs[1].publish("P.second", b"s%d" % i)
    assert wait_until(lambda: len(got) >= N, 10), len(got)
    time.sleep(0.3)
    assert got.payloads() == [b"f%d" % i for i in range(N)]
    st = t.status()
    assert st["counters"]["links_down"] == 0
    assert st["counters"]["duplicates"] == 0
    # the refused side was told why (the second node's dial, or the third node's)
    errors = [lk["last_error"] or "" for lk in [*_links(second), *_links(t)]]
    assert any("two nodes use broker ID 'dup'" in e for e in errors), errors


@pytest.mark.slow
def test_a_restarted_node_is_no_duplicate_of_its_former_process(
    broker_factory: Callable[..., Broker],
    procs: Any,
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: Callable[..., bool],
) -> None:
    """A node killed without a goodbye and started again (a higher incarnation, another
    process mark) while the third node still holds its links up (long heartbeats): its
    new links replace the former process's at once, on both sides; nothing is refused."""
    port = free_port()
    t = broker_factory(
        broker_id="t",
        links=(
            LinkConfig(
                name="t-p",
                uri=f"tcp://127.0.0.1:{port}",
                heartbeat_interval=1.0,
                heartbeat_timeout=30.0,
            ),
        ),
    )
    config = tmp_path / "p.toml"
    config.write_text(
        f'[node]\nid = "p"\nhost = "127.0.0.1"\nport = {port}\n'
        f'data_dir = "{tmp_path / "data-p"}"\nlog_level = "warning"\n'
        f'[[link]]\nname = "p-t"\nuri = "{t.endpoint}"\n'
        "heartbeat_interval = 1.0\nheartbeat_timeout = 30.0\n"
    )

    def up_with(incarnation: int) -> bool:
        """Both links up at t, each to the process of this incarnation."""
        links = t.call(
            lambda node: [(lk.name, lk.state.value, lk.peer_incarnation) for lk in node.links.all()]
        )
        return sorted(links) == [("p-t", "up", incarnation), ("t-p", "up", incarnation)]

    node = procs.zbroker("start", "--config", str(config), "--no-discovery")
    first = wait_ready(f"tcp://127.0.0.1:{port}", 20, node)["incarnation"]
    assert wait_until(lambda: up_with(first), 10), _links(t)
    node.send_signal(signal.SIGKILL)  # no goodbye: t still holds both links up
    assert node.wait(5.0) == -signal.SIGKILL
    again = procs.zbroker("start", "--config", str(config), "--no-discovery")
    second = wait_ready(f"tcp://127.0.0.1:{port}", 20, again)["incarnation"]
    assert second > first
    started = time.monotonic()
    assert wait_until(lambda: up_with(second), 10), _links(t)
    assert time.monotonic() - started < 5.0  # not a heartbeat timeout (30 s)
    counters = t.status()["counters"]
    assert "duplicate_broker_id" not in counters["dropped"]
    assert counters["handshakes_refused"] == counters["handshakes_refused_duplicate_id"] == 0
