"""A durable name is one durable in the network (issue 18, item 3), with in-thread nodes:
the refusal follows the home's advertisement, as it comes and goes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import pytest

from zbroker import Broker, Client, RequestError
from zbroker.config import LinkConfig
from zbroker.routing.durable_homes import home_key


class LinkTimers(TypedDict):
    """A link's liveness and redial timers (seconds), as LinkConfig takes them."""

    heartbeat_interval: float
    heartbeat_timeout: float
    reconnect_initial_delay: float


FAST: LinkTimers = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
}


def pair(
    broker_factory: Callable[..., Broker], free_port: Callable[[], int], tmp_path: Path
) -> tuple[Broker, Broker]:
    port_a = free_port()
    a = broker_factory(broker_id="HA", port=port_a, data_dir=tmp_path / "ha")
    link = LinkConfig(name="ba", uri=f"tcp://127.0.0.1:{port_a}", **FAST)
    b = broker_factory(broker_id="HB", data_dir=tmp_path / "hb", links=(link,))
    return a, b


def knows(node: Broker, name: str, home: str | None) -> bool:
    """Does ``node`` route toward ``home`` as the home of durable ``name`` (None: toward
    no other node)?"""
    with Client(node.endpoint, timeout=10.0) as c:
        held = {r["origin"] for r in c.routes() if r["pattern"] == home_key(name)}
    return held - {node.broker_id} == ({home} if home else set())


def opens(c: Client, name: str) -> str | None:
    """Open durable ``name`` and detach; the home it names, None if refused."""
    try:
        sub = c.subscribe("HN.>", lambda m: None, durable=name)
    except RequestError as exc:
        assert f"durable subscription {name!r} lives on node 'HA'" in str(exc)
        return None
    sub.unsubscribe()
    return str(c.durable_info[name]["home"])


def test_the_name_is_refused_while_its_home_lives_and_free_once_deleted(
    broker_factory: Callable[..., Broker],
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: Callable[..., bool],
) -> None:
    a, b = pair(broker_factory, free_port, tmp_path)
    with Client(a.endpoint, timeout=10.0) as on_a, Client(b.endpoint, timeout=10.0) as on_b:
        assert opens(on_a, "hn") == "HA"
        # until B hears of it, B would create its own: wait for the advertisement first
        assert wait_until(lambda: knows(b, "hn", "HA"))
        assert opens(on_b, "hn") is None
        assert opens(on_b, "hn") is None  # (refused each time; nothing created)
        assert b.status()["durables"] == []
        with pytest.raises(RequestError, match="lives on node 'HA'"):
            on_b.delete_durable("hn")  # (deleting it is its home's to do)
        assert on_a.delete_durable("hn") == 0
        # withdrawn with the durable: the name is free, B may create it now
        assert wait_until(lambda: knows(b, "hn", None))
        assert opens(on_b, "hn") == "HB"
        assert [d["name"] for d in b.status()["durables"]] == ["hn"]


def test_a_home_that_is_down_is_unknown_and_a_new_client_creates_another(
    broker_factory: Callable[..., Broker],
    free_port: Callable[[], int],
    tmp_path: Path,
    wait_until: Callable[..., bool],
) -> None:
    """The documented limit: B cannot know a name whose home it does not see."""
    a, b = pair(broker_factory, free_port, tmp_path)
    with Client(a.endpoint, timeout=10.0) as on_a:
        assert opens(on_a, "gone") == "HA"
    assert wait_until(lambda: knows(b, "gone", "HA"))
    a.stop()
    assert wait_until(lambda: knows(b, "gone", None))
    with Client(b.endpoint, timeout=10.0) as on_b:
        assert opens(on_b, "gone") == "HB"
