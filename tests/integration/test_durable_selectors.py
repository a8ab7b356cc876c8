"""Durable subscriptions with a selector: in-thread Brokers, real Clients, exact counts.

Only messages the selector accepts are stored; the selector is stored with the durable
(a restart keeps it), a reopen with another selector is refused, shared durables carry
one too, and the durable's interest is advertised with its selector, so a relay sends
over a link only what the selector behind it accepts (link and store-and-forward counters
prove it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from zbroker import Broker, Client, wire
from zbroker.config import LinkConfig
from zbroker.errors import RequestError, SelectorError

WAIT = 20.0
N = 90
EU_BIG = "region = 'EU' AND qty > 10"
EU_BIG_CANON = "((region = 'EU') AND (qty > 10))"

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def headers_of(i: int) -> dict[str, Any]:
    return {"region": ("EU", "US", "APAC")[i % 3], "qty": i}


#: the i of range(N) that EU_BIG accepts
SELECTED = [i for i in range(N) if i % 3 == 0 and i > 10]


def publish_n(client: Client, topic: str = "ORD.x", *, persistent: bool = False) -> None:
    """N messages with headers_of(i), and two no selector here accepts: one without
    headers (UNKNOWN), one whose qty is a string."""
    for i in range(N):
        client.publish(topic, i, headers_of(i), persistent=persistent, confirm=persistent)
    client.publish(topic, b"bare", persistent=persistent, confirm=persistent)
    client.publish(topic, b"odd", {"region": "EU", "qty": "many"}, persistent=persistent)


def durable_row(source: Broker | Client, name: str) -> dict[str, Any]:
    rows = [d for d in source.status()["durables"] if d["name"] == name]
    assert len(rows) == 1, rows
    return dict(rows[0])


def stored_is(source: Broker | Client, name: str, n: int) -> Callable[[], bool]:
    return lambda: durable_row(source, name)["stored"] == n


def test_only_what_the_selector_accepts_is_stored_and_delivered(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    sub = client_factory(broker.endpoint)
    handle = sub.subscribe("ORD.>", lambda m: None, durable="eu", selector=EU_BIG)
    assert handle.selector == EU_BIG_CANON and handle.durable == "eu"
    assert sub.durable_info["eu"]["selector"] == EU_BIG_CANON
    handle.unsubscribe()
    # a plain subscriber of the same pattern on the node: the node's interest is then
    # unselected (it wants everything), and still the durable stores only what it selects
    everything = Collector()
    sub.subscribe("ORD.>", everything)
    pub = client_factory(broker.endpoint)
    publish_n(pub)
    assert everything.wait_for(N + 2, WAIT)
    assert wait_until(stored_is(broker, "eu", len(SELECTED)), WAIT), durable_row(broker, "eu")
    row = durable_row(broker, "eu")
    assert row["selector"] == EU_BIG_CANON and row["dropped"] == 0
    assert broker.status()["counters"]["durable_stored"] == len(SELECTED)
    got = Collector()
    client_factory(broker.endpoint).subscribe("ORD.>", got, durable="eu", selector=EU_BIG)
    assert got.wait_for(len(SELECTED), WAIT)
    pub.publish("ORD.y", b"live", {"region": "EU", "qty": 11})  # attached: live, selected
    pub.publish("ORD.y", b"not", {"region": "EU", "qty": 10})
    pub.publish("ORD.y", b"end", {"region": "EU", "qty": 12})
    assert got.wait_payload(b"end", WAIT)
    assert got.payloads() == [*SELECTED, b"live", b"end"]
    assert not any(got.redelivered())
    assert wait_until(stored_is(broker, "eu", 0), WAIT)


def test_bad_selectors_are_refused_with_the_position(
    broker: Broker, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    with pytest.raises(SelectorError, match="position 23: expected a header name"):
        client.subscribe("A.>", print, durable="bad", selector="region = 'EU' AND qty >")
    # a client that skipped its own check: the node refuses it the same way
    body = {"name": "bad", "pattern": "A.>", "selector": "qty >> 1"}
    with pytest.raises(RequestError) as info:
        client.request(wire.DURABLE_OPEN, body)
    assert "bad selector: selector error at position 5: expected a header name" in str(info.value)
    with pytest.raises(RequestError, match="selector must be a string"):
        client.request(wire.DURABLE_OPEN, {**body, "selector": 5})
    assert broker.status()["durables"] == []  # nothing was created


def test_reopening_with_another_selector_is_refused(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    client.subscribe("ORD.>", print, durable="d1", selector=EU_BIG).unsubscribe()
    with pytest.raises(RequestError) as info:
        client.subscribe("ORD.>", print, durable="d1", selector="qty > 10")
    assert str(info.value).endswith(
        f"durable subscription 'd1' exists with selector {EU_BIG_CANON!r}, not '(qty > 10)': "
        "delete it first (its stored messages go with it) to change the selector"
    )
    with pytest.raises(RequestError, match=r"exists with selector .*, not without one"):
        client.subscribe("ORD.>", print, durable="d1")
    client.subscribe("ORD.>", print, durable="d0").unsubscribe()  # no selector
    with pytest.raises(RequestError, match=r"'d0' exists with no selector, not '\(qty > 1\)'"):
        client.subscribe("ORD.>", print, durable="d0", selector="qty > 1")
    # the same selector in another layout is the same selector
    client.subscribe("ORD.>", print, durable="d1", selector="region='EU'  and qty>10").unsubscribe()
    # what was stored stays through a refused reopen; a delete makes room for a new one
    publish_n(client_factory(broker.endpoint))
    assert wait_until(stored_is(broker, "d1", len(SELECTED)), WAIT)
    assert client.delete_durable("d1") == len(SELECTED)
    got = Collector()
    client.subscribe("ORD.>", got, durable="d1", selector="qty >= 88")
    client_factory(broker.endpoint).publish("ORD.x", 88, {"qty": 88})
    assert got.wait_for(1, WAIT) and got.payloads() == [88]
    assert durable_row(broker, "d1")["selector"] == "(qty >= 88)"


def test_a_restart_keeps_the_selector(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    data = tmp_path / "node"
    first = broker_factory(data_dir=data)
    client_factory(first.endpoint).subscribe(
        "ORD.>", print, durable="eu", selector=EU_BIG
    ).unsubscribe()
    first.stop()
    node = broker_factory(data_dir=data)
    row = durable_row(node, "eu")
    assert (row["selector"], row["stored"]) == (EU_BIG_CANON, 0)
    routes = [r for r in node.call(lambda n: n.engine.interest()) if r["pattern"] == "ORD.>"]
    assert [(r["selectors"], r.get("sticky")) for r in routes] == [([EU_BIG_CANON], True)]
    publish_n(client_factory(node.endpoint))
    assert wait_until(stored_is(node, "eu", len(SELECTED)), WAIT), durable_row(node, "eu")
    client = client_factory(node.endpoint)
    with pytest.raises(RequestError, match="exists with selector"):
        client.subscribe("ORD.>", print, durable="eu", selector="qty > 0")
    got = Collector()
    client.subscribe("ORD.>", got, durable="eu", selector=EU_BIG)
    assert got.wait_for(len(SELECTED), WAIT)
    assert wait_until(stored_is(node, "eu", 0), WAIT)
    assert got.payloads() == SELECTED


def test_a_shared_durable_with_a_selector(
    broker: Broker, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    consumers = [Collector() for _ in range(2)]
    for c in consumers:
        client_factory(broker.endpoint).subscribe(
            "ORD.>", c, durable="pool", shared=True, credit=5, selector=EU_BIG
        )
    with pytest.raises(RequestError, match="exists with selector"):
        client_factory(broker.endpoint).subscribe(
            "ORD.>", print, durable="pool", shared=True, selector="qty > 10"
        )
    publish_n(client_factory(broker.endpoint), persistent=True)
    assert wait_until(lambda: sum(len(c) for c in consumers) >= len(SELECTED), WAIT)
    assert wait_until(stored_is(broker, "pool", 0), WAIT)
    got = [p for c in consumers for p in c.payloads()]
    assert sorted(got) == SELECTED  # each selected message once, to one of the two
    row = durable_row(broker, "pool")
    assert (row["delivered"], row["redelivered"], row["selector"]) == (
        len(SELECTED),
        0,
        EU_BIG_CANON,
    )


def link_to(broker: Broker, peer: str) -> dict[str, Any]:
    (link,) = [ln for ln in broker.status()["links"] if ln["peer"] == peer]
    return dict(link)


def test_a_relay_sends_only_what_the_durable_selects(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    """A (publishers) - B (the durable): the link A -> B carries exactly the selected
    messages, non-persistent and persistent alike; the rest never leave A."""
    port = free_port()
    a = broker_factory(broker_id="A", port=port, data_dir=tmp_path / "A")
    b = broker_factory(
        broker_id="B",
        data_dir=tmp_path / "B",
        links=(LinkConfig(name="ba", uri=f"tcp://127.0.0.1:{port}"),),
    )
    client_factory(b.endpoint).subscribe(
        "ORD.>", print, durable="eu", selector=EU_BIG
    ).unsubscribe()
    pub = client_factory(a.endpoint)
    want = [{"origin": "B", "selectors": [EU_BIG_CANON], "sticky": True}]

    def routes_at_a() -> list[dict[str, Any]]:
        keep = ("origin", "selectors", "sticky")
        return [{k: r[k] for k in keep if k in r} for r in pub.routes("ORD.>")]

    assert wait_until(lambda: routes_at_a() == want, WAIT), pub.routes()
    before = link_to(a, "B")["msgs_out"]
    publish_n(pub)
    assert wait_until(stored_is(b, "eu", len(SELECTED)), WAIT), durable_row(b, "eu")
    assert link_to(a, "B")["msgs_out"] - before == len(SELECTED)
    assert link_to(b, "A")["msgs_in"] == len(SELECTED)
    # persistent: only the selected are stored for the link (store-and-forward)
    queued = a.status()["forward"]["queued"]
    publish_n(pub, "ORD.p", persistent=True)
    assert wait_until(stored_is(b, "eu", 2 * len(SELECTED)), WAIT), durable_row(b, "eu")
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    assert a.status()["forward"]["queued"] - queued == len(SELECTED)
    assert link_to(a, "B")["msgs_out"] - before == 2 * len(SELECTED)  # (PMSGS count too)
    got = Collector()
    client_factory(b.endpoint).subscribe("ORD.>", got, durable="eu", selector=EU_BIG)
    assert got.wait_for(2 * len(SELECTED), WAIT)
    assert got.payloads() == SELECTED + SELECTED
    assert [m.topic for m in got.snapshot()] == ["ORD.x"] * len(SELECTED) + ["ORD.p"] * len(
        SELECTED
    )


@pytest.mark.slow
def test_cli_sub_durable_with_a_selector(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    args = ("sub", "ORD.>", "--durable", "cli", "--selector", EU_BIG, "--json")
    sub = procs.zbroker(*args, "--broker", broker.endpoint, "--count", str(len(SELECTED)))
    assert wait_until(lambda: bool(broker.status()["durables"]) or sub.poll() is not None, WAIT), (
        sub.stderr_text()
    )
    assert durable_row(broker, "cli")["selector"] == EU_BIG_CANON
    publish_n(client_factory(broker.endpoint))
    assert sub.wait(WAIT) == 0, sub.stderr_text()
    lines = [json.loads(line) for line in sub.stdout_text().splitlines()]
    assert [o["payload"] for o in lines] == SELECTED
    assert wait_until(stored_is(broker, "cli", 0), WAIT)
    rc, out, err = procs.run(
        "sub", "ORD.>", "--durable", "cli", "--selector", "qty > 1", "--broker", broker.endpoint,
        "--count", "1", timeout=WAIT,
    )  # fmt: skip
    assert rc != 0 and "exists with selector" in err, (rc, out, err)
