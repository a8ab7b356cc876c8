"""What the discovery feature makes of findings, on real nodes, with no multicast: the
zeroconf adapter (``zbroker.discovery.Discovery``) is replaced by a fake that only hands
the node the findings a test writes, as zeroconf's threads would (through ``emit``).

NETWORK SAFETY: nothing here joins mDNS; the fake never touches a network interface.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import zbroker.features.discovery.feature as discovery_feature
from zbroker import Broker
from zbroker.const import PROTOCOL_VERSION


class FakeDiscovery:
    """Stands for the zeroconf adapter: started and stopped by the node, announces
    nothing; ``emit`` is the node's own way in for findings."""

    made: list[FakeDiscovery] = []

    def __init__(self, *, emit: Callable[[dict[str, Any]], None], interfaces: list[str], **_: Any):
        self.emit = emit
        self.interfaces = interfaces
        self.running = False
        self.error: str | None = None
        FakeDiscovery.made.append(self)

    def start(self) -> bool:
        self.running = True
        return True

    def stop(self, timeout: float = 3.0) -> None:
        self.running = False

    def found(self, peer: str, endpoints: list[Any]) -> None:
        self.emit(
            {
                "event": "found",
                "id": peer,
                "group": "default",
                "version": PROTOCOL_VERSION,
                "endpoints": endpoints,
            }
        )


@pytest.fixture
def fake_discovery(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeDiscovery]]:
    FakeDiscovery.made = []
    monkeypatch.setattr(discovery_feature, "Discovery", FakeDiscovery)
    yield FakeDiscovery.made


def _peers(broker: Broker) -> dict[str, dict[str, Any]]:
    status: dict[str, Any] = broker.status()
    return {lk["peer"]: lk for lk in status["links"] if lk.get("peer")}


def test_endpoints_that_cannot_be_dialled_are_ignored_and_said_once(
    fake_discovery: list[FakeDiscovery],
    broker_factory: Callable[..., Broker],
    wait_until: Callable[..., bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer announcing endpoints a link cannot dial is linked over the good one (none:
    not linked); the bad ones are logged once, never raised in the node's loop. (Before,
    the first endpoint went to LinkConfig, whose ConfigError the loop counted as an
    internal error, with a traceback, at each announcement.)"""
    b = broker_factory(broker_id="b")
    a = broker_factory(broker_id="a", discovery=True, interfaces=("127.0.0.1",))
    (fake,) = fake_discovery
    caplog.set_level(logging.WARNING, logger="zbroker.node")
    for _ in range(3):
        fake.found("b", ["tcp://10.0.0.1", 7, "tcp://*:7100", b.endpoint])
        fake.found("c", ["garbage"])
    assert wait_until(lambda: _peers(a).get("b", {}).get("state") == "up", 10)
    fake.found("d", ["tcp://127.0.0.1:1"])  # after the others: they were all handled then
    assert wait_until(lambda: "d" in _peers(a), 10)
    assert "internal_error" not in a.status()["counters"]["dropped"]
    assert set(_peers(a)) == {"b", "d"}  # c: nothing to dial
    said = [r.getMessage() for r in caplog.records if "cannot be dialled" in r.getMessage()]
    assert said == [
        "discovered node b announces endpoints that cannot be dialled: "
        "'tcp://*:7100', 'tcp://10.0.0.1', 7",
        "discovered node c announces endpoints that cannot be dialled: 'garbage'",
    ]


class FakeZeroconf:
    """Stands for zeroconf's Zeroconf and ServiceBrowser: joins nothing, counts its makings."""

    made = 0

    def __init__(self, *_: Any, **__: Any) -> None:
        FakeZeroconf.made += 1

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        pass


def test_a_broker_id_mdns_cannot_carry_turns_discovery_off_before_joining(
    monkeypatch: pytest.MonkeyPatch, broker_factory: Callable[..., Broker]
) -> None:
    """A broker ID may have 64 characters, an mDNS instance name 63 bytes. (Before, the
    adapter joined multicast, then zeroconf's BadTypeInNameException crashed the node's
    loop: the node never served and could not be stopped.)"""
    import zeroconf

    FakeZeroconf.made = 0
    monkeypatch.setattr(zeroconf, "Zeroconf", FakeZeroconf)
    monkeypatch.setattr(zeroconf, "ServiceBrowser", FakeZeroconf)
    b = broker_factory(broker_id="n" * 64, discovery=True, interfaces=("127.0.0.1",))
    status = b.status()["discovery"]
    assert status["enabled"] is False
    assert "at most 63 bytes: give the node a shorter broker ID" in status["error"]
    assert FakeZeroconf.made == 0  # nothing joined


def test_discovery_that_fails_to_start_leaves_the_node_running(
    fake_discovery: list[FakeDiscovery],
    monkeypatch: pytest.MonkeyPatch,
    broker_factory: Callable[..., Broker],
) -> None:
    def fail() -> bool:
        raise RuntimeError("no mDNS today")

    monkeypatch.setattr(FakeDiscovery, "start", lambda self: fail())
    b = broker_factory(broker_id="a", discovery=True, interfaces=("127.0.0.1",))
    status = b.status()["discovery"]
    assert (
        status["error"] == "LAN discovery is off: it failed to start: RuntimeError('no mDNS today')"
    )
    assert b.status()["counters"]["received"] == 0  # (it serves)
