"""Missing-topic notifications on in-thread nodes: proceed (the handler creates the
topic), cancel, timeout, the most specific handler, several handlers, no handler
reachable, across fan-out links (two tiers), not round a cycle of them, not across an
ordinary link, and a link dropping mid-flight."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.cli_runs import invoke
from tests.node_configs import FAST_LINK
from tests.ports import free_port
from zbroker import Broker, Client
from zbroker.client.state import MissingTopic
from zbroker.config import LinkConfig
from zbroker.errors import SubscriptionCancelled

WAIT = 30.0
BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


class Handler:
    """Records its notices; creates the topic and proceeds, or cancels, or waits."""

    def __init__(self, client: Client, answer: str = "proceed", delay: float = 0.0) -> None:
        self.client, self.answer, self.delay = client, answer, delay
        self.notices: list[MissingTopic] = []
        self.release = threading.Event()

    def __call__(self, notice: MissingTopic) -> str:
        self.notices.append(notice)
        if self.delay:
            self.release.wait(self.delay)
        if self.answer == "proceed":
            self.client.set(notice.pattern, "made by " + notice.branch)
        return self.answer


def missing(node: Broker) -> dict[str, Any]:
    m: dict[str, Any] = node.status()["state"]["missing"]
    return m


def wait_for(cond: Callable[[], bool], what: Callable[[], Any]) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def fan(broker_factory: BrokerFactory, tiers: int = 1, **options: Any) -> list[Broker]:
    """P, then secondaries each replicating PRICE.> from the one before."""
    nodes = [broker_factory(broker_id="P", **options)]
    for i in range(tiers):
        link = LinkConfig(name="fan", uri=nodes[-1].endpoint, replicate=("PRICE.>",), **FAST_LINK)
        nodes.append(broker_factory(broker_id=f"S{i + 1}", links=(link,), **options))
    for node in nodes[1:]:
        wait_for(partial(_fan_in_sync, node), partial(_replication, node))
    return nodes


def _replication(node: Broker) -> Any:
    return node.status()["replication"]


def _fan_in_sync(node: Broker) -> bool:
    return bool(_replication(node)["fan"]["state"] == "in sync")


def test_proceed_cancel_and_the_most_specific_handler(
    broker: Broker, client_factory: ClientFactory
) -> None:
    general = Handler(client_factory(broker.endpoint))
    euro = Handler(client_factory(broker.endpoint), answer="cancel")
    client_factory(broker.endpoint).on_missing_topic("PRICE.>", general)
    client_factory(broker.endpoint).on_missing_topic("PRICE.EUR.>", euro)
    c = client_factory(broker.endpoint)
    inbox = Collector()
    c.subscribe("PRICE.USD", inbox)
    # held until the handler answered: it created the topic, which comes once
    assert [(m.topic, m.payload) for m in inbox.snapshot()] == [("PRICE.USD", "made by PRICE.>")]
    time.sleep(0.3)
    assert len(inbox) == 1
    with pytest.raises(SubscriptionCancelled):
        c.subscribe("PRICE.EUR.X", inbox)
    with pytest.raises(SubscriptionCancelled):
        c.fetch("PRICE.EUR.>")
    assert [n.pattern for n in euro.notices] == ["PRICE.EUR.X", "PRICE.EUR.>"]
    assert [(n.pattern, n.node) for n in general.notices] == [("PRICE.USD", broker.broker_id)]
    assert [m.payload for m in c.fetch("PRICE.USD")] == ["made by PRICE.>"]  # exists now
    assert c.fetch("NEWS.>") == []  # no handler for it: nothing asked
    st = missing(broker)
    assert (st["notified"], st["cancelled"], st["unhandled"]) == (3, 2, 0)
    # `zbroker status` lists the branches handled here
    out = invoke("status", "--broker", broker.endpoint).stdout
    assert re.search(r"^missing-topic handlers\s+PRICE\.>, PRICE\.EUR\.>$", out, re.M), out
    line = r"^stateful topics\s+1 owned, 0 replicas, 0 removed \(kept as tombstones; 0 expired\)"
    assert re.search(line, out, re.M), out
    c.publish("PRICE.EUR.X", b"plain")  # the cancelled subscription is not active
    time.sleep(0.3)
    assert len(inbox) == 1


def test_a_handler_that_does_not_answer_in_time_counts_as_proceed(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    node = broker_factory(missing_topic_timeout=0.3)
    slow = Handler(client_factory(node.endpoint), answer="cancel", delay=5.0)
    client_factory(node.endpoint).on_missing_topic(">", slow)
    t0 = time.monotonic()
    assert client_factory(node.endpoint).fetch("SLOW.x") == []
    assert time.monotonic() - t0 < 3.0
    slow.release.set()
    assert missing(node)["timeouts"] == 1


def test_notifications_travel_to_the_primaries_two_tiers(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    p, _, s2 = fan(broker_factory, tiers=2)
    at_p = Handler(client_factory(p.endpoint))
    client_factory(p.endpoint).on_missing_topic("PRICE.>", at_p)
    inbox = Collector()
    client_factory(s2.endpoint).subscribe("PRICE.NEW", inbox)
    assert [(n.pattern, n.node) for n in at_p.notices] == [("PRICE.NEW", "S2")]
    # created on P by the handler: replicated to S1 and S2, delivered once
    assert inbox.wait_for(1)
    time.sleep(0.3)
    assert [(m.topic, m.payload) for m in inbox.snapshot()] == [("PRICE.NEW", "made by PRICE.>")]
    wait_for(lambda: s2.status()["replication"]["fan"]["topics"] == 1, s2.status)
    # a handler on the secondary too: both are asked, any cancel cancels
    on_s2 = Handler(client_factory(s2.endpoint), answer="cancel")
    client_factory(s2.endpoint).on_missing_topic("PRICE.>", on_s2)
    with pytest.raises(SubscriptionCancelled):
        client_factory(s2.endpoint).fetch("PRICE.OTHER")
    assert [n.pattern for n in at_p.notices] == ["PRICE.NEW", "PRICE.OTHER"]
    assert [n.pattern for n in on_s2.notices] == ["PRICE.OTHER"]


def test_replicate_links_in_a_cycle_ask_each_handler_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """Was (an audit): A replicating from B, B from C, C from A passed one fetch's
    MISSING_ASK round the cycle for ever (thousands of notices a second). The ask carries
    the nodes that asked on the way; none of them is asked again."""
    ports = {n: free_port() for n in "ABC"}
    nodes = {}
    for n, primary in (("A", "B"), ("B", "C"), ("C", "A")):
        uri = f"tcp://127.0.0.1:{ports[primary]}"
        link = LinkConfig(name="fan", uri=uri, replicate=("PRICE.>",), **FAST_LINK)
        nodes[n] = broker_factory(broker_id=n, port=ports[n], links=(link,))

    def both_up(node: Broker) -> bool:  # (the link it dials and the one it accepted)
        return [k["state"] for k in node.status()["links"]] == ["up"] * 2

    for node in nodes.values():
        wait_for(partial(both_up, node), node.status)
    at_b = Handler(client_factory(nodes["B"].endpoint), answer="cancel")
    client_factory(nodes["B"].endpoint).on_missing_topic("PRICE.>", at_b)
    with pytest.raises(SubscriptionCancelled):
        client_factory(nodes["A"].endpoint).fetch("PRICE.X")
    time.sleep(0.5)  # (an ask still going round would notify again meanwhile)
    assert [(n.pattern, n.node) for n in at_b.notices] == [("PRICE.X", "A")]
    for node in nodes.values():
        assert missing(node)["waiting"] == 0 and missing(node)["timeouts"] == 0


def test_no_handler_reachable_proceeds_counted(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    _, s = fan(broker_factory)
    assert client_factory(s.endpoint).fetch("PRICE.NONE") == []
    assert missing(s)["unhandled"] == 1


def test_a_handler_on_a_plain_link_s_far_node_is_not_asked(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """Handlers are per node (and its fan-out secondaries): over an ordinary link nobody
    can be asked, so the fetch proceeds at once and nothing is counted on either node."""
    a = broker_factory(broker_id="A", missing_topic_timeout=20.0)
    link = LinkConfig(name="plain", uri=a.endpoint, **FAST_LINK)
    c = broker_factory(broker_id="C", links=(link,), missing_topic_timeout=20.0)
    on_a = Handler(client_factory(a.endpoint))
    client_factory(a.endpoint).on_missing_topic("FX.>", on_a)
    wait_for(lambda: c.status()["counters"]["links_up"] == 1, c.status)
    t0 = time.monotonic()
    assert client_factory(c.endpoint).fetch("FX.EURUSD") == []
    assert time.monotonic() - t0 < 10.0  # not held for the 20 s timeout
    assert on_a.notices == []
    zeros = {"notified": 0, "cancelled": 0, "unhandled": 0, "link_lost": 0, "timeouts": 0}
    for node in (a, c):
        assert {k: missing(node)[k] for k in zeros} == zeros


def test_a_link_dropping_mid_flight_proceeds_counted(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    p, s = fan(broker_factory)
    stuck = Handler(Client(p.endpoint), answer="cancel", delay=WAIT)
    handler_client = Client(p.endpoint)
    handler_client.on_missing_topic("PRICE.>", stuck)
    result: list[Any] = []
    asker = threading.Thread(
        target=lambda: result.append(client_factory(s.endpoint).fetch("PRICE.LOST"))
    )
    asker.start()
    wait_for(lambda: len(stuck.notices) == 1, lambda: stuck.notices)
    p.stop()  # the primary goes: S's link drops while P's handler is asked
    asker.join(WAIT)
    stuck.release.set()
    handler_client.close()
    stuck.client.close()
    assert result == [[]]
    assert missing(s)["link_lost"] == 1


def test_closing_a_client_ends_its_missing_topic_handlers_threads(
    broker: Broker, client_factory: ClientFactory
) -> None:
    handler = Handler(client_factory(broker.endpoint))
    owner = client_factory(broker.endpoint)
    owner.on_missing_topic("PRICE.>", handler)
    client_factory(broker.endpoint).subscribe("PRICE.USD", Collector())
    assert len(handler.notices) == 1  # the pool ran it

    def pool_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("zbroker-missing")]

    assert pool_threads()
    owner.close()
    deadline = time.monotonic() + 10
    while pool_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool_threads() == []
