"""Integration tests of the retention log and persistent publishes: in-thread Brokers with
``retain`` rules, real Clients over ZeroMQ on 127.0.0.1, the CLI via CliRunner, and (marked
``slow``) a real ``zbroker start`` process killed with SIGKILL and restarted.

Waiting is done on conditions with a bound, never on fixed sleeps. Counts are exact: the log
must hold exactly the messages published, with exactly the sequences expected.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from zbroker.cli.main import cli

from tests.helpers import Collector
from zbroker import (
    Broker,
    Client,
    InvalidTopic,
    Message,
    RequestError,
    ReservedTopic,
    wire,
)
from zbroker.config import LinkConfig, RetainRule

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait
GRACE = 0.3  # seconds: extra time granted to a message that must *not* arrive

FAST: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def retaining(factory: BrokerFactory, *rules: RetainRule, **options: Any) -> Broker:
    options.setdefault("broker_id", "R")
    return factory(retain=rules, **options)


def wait_log(client: Client, last: int, wait_until: WaitUntil, first: int = 1) -> None:
    """Wait until the node's log range is exactly (first, last)."""
    ok = wait_until(lambda: client.log_range() == (first, last), WAIT, 0.02)
    assert ok, client.log_range()


def store_stats(broker: Broker) -> dict[str, Any]:
    stats: dict[str, Any] = broker.status()["store"]
    return stats


def log_view(msgs: list[Message]) -> list[tuple[int | None, str, Any]]:
    return [(m.log_seq, m.topic, m.payload) for m in msgs]


# -- publishes land in the log ---------------------------------------------------------------


def test_plain_and_persistent_publishes_land_in_the_log_with_exact_sequences(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    broker = retaining(broker_factory, RetainRule("LOG.>"))
    client = client_factory(broker.endpoint)
    assert client.log_range() == (1, 0)  # empty: first > last
    for i in range(3):
        client.publish("OTHER.X", i)  # not retained, but numbered by the node: seq 1-3
    for i in range(5):
        client.publish("LOG.A", i)  # node seq 4-8, log seq 1-5
    wait_log(client, 5, wait_until)
    confirms = [client.publish("LOG.B", 100 + i, confirm=True) for i in range(3)]
    inc = broker.incarnation
    assert confirms == [
        {"id": ["R", inc, 9], "retained_seq": 6},
        {"id": ["R", inc, 10], "retained_seq": 7},
        {"id": ["R", inc, 11], "retained_seq": 8},
    ]
    assert client.log_range() == (1, 8)
    msgs = client.read()
    assert log_view(msgs) == [
        (1, "LOG.A", 0),
        (2, "LOG.A", 1),
        (3, "LOG.A", 2),
        (4, "LOG.A", 3),
        (5, "LOG.A", 4),
        (6, "LOG.B", 100),
        (7, "LOG.B", 101),
        (8, "LOG.B", 102),
    ]
    assert [(m.origin, m.incarnation, m.seq) for m in msgs] == [("R", inc, s) for s in range(4, 12)]
    assert all(m.pattern == ">" and m.payload_type == "msgpack" for m in msgs)
    stats = store_stats(broker)
    assert (stats["first_seq"], stats["last_seq"], stats["retained_rows"]) == (1, 8, 8)
    assert broker.status()["counters"]["received"] == 11


def test_read_returns_payload_types_and_headers(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("H.>"))
    client = client_factory(broker.endpoint)
    client.publish("H.RAW", b"\x00\xff", headers={"k": "v"}, confirm=True)
    client.publish("H.OBJ", {"a": [1, 2]}, confirm=True)
    client.publish("H.TEXT", b"plain", confirm=True)
    msgs = client.read("H.>")
    assert [(m.topic, m.payload, m.payload_type, m.headers) for m in msgs] == [
        ("H.RAW", b"\x00\xff", "bytes", {"k": "v"}),
        ("H.OBJ", {"a": [1, 2]}, "msgpack", {}),
        ("H.TEXT", b"plain", "bytes", {}),
    ]
    assert [m.log_seq for m in msgs] == [1, 2, 3]
    assert all(m.pattern == "H.>" for m in msgs)


# -- reading: ranges, patterns, limits ----------------------------------------------------------


@pytest.fixture
def log40(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> Client:
    """A node whose log holds 40 messages: odd log seqs on RD.A, even on RD.B.X; payload
    is the log sequence."""
    broker = retaining(broker_factory, RetainRule("RD.>"))
    client = client_factory(broker.endpoint)
    for i in range(1, 41):
        client.publish("RD.A" if i % 2 else "RD.B.X", i)
    wait_log(client, 40, wait_until)
    return client


def test_read_range_is_half_open(log40: Client) -> None:
    msgs = log40.read(">", 5, 15)
    assert [m.log_seq for m in msgs] == list(range(5, 15))
    assert [m.payload for m in msgs] == list(range(5, 15))
    assert [m.log_seq for m in log40.read(">", 40, 41)] == [40]
    assert [m.log_seq for m in log40.read(">", 38)] == [38, 39, 40]
    assert log40.read(">", 41) == []
    assert log40.read(">", 20, 20) == []
    assert log40.read(">", 20, 10) == []


def test_read_pattern_filter(log40: Client) -> None:
    assert [m.log_seq for m in log40.read("RD.A")] == list(range(1, 41, 2))
    assert [m.log_seq for m in log40.read("RD.B.>")] == list(range(2, 41, 2))
    assert [m.log_seq for m in log40.read("RD.*")] == list(range(1, 41, 2))
    assert [m.log_seq for m in log40.read("*.B.*", 10, 20)] == [10, 12, 14, 16, 18]
    assert log40.read("NOPE.>") == []
    assert all(m.pattern == "RD.B.>" for m in log40.read("RD.B.>"))


def test_read_of_every_topic_leaves_out_retained_advisories(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    # ">" matches no $ZB topic (MQTT's rule for $SYS): a reader allowed ">" must not get
    # the advisories a rule keeps, as a subscriber of ">" does not
    broker = retaining(broker_factory, RetainRule("T.>"), RetainRule("$ZB.ADVISORY.>"))
    client = client_factory(broker.endpoint)
    client.subscribe("X.1", lambda m: None)  # interest added: an advisory
    assert wait_until(lambda: len(client.read("$ZB.ADVISORY.>")) > 0, WAIT, 0.05)
    client.publish("T.A", 1, confirm=True)
    advisories = client.read("$ZB.ADVISORY.>")
    assert advisories and all(m.topic.startswith("$ZB.ADVISORY.") for m in advisories)
    assert [m.topic for m in client.read(">")] == ["T.A"]


def test_read_in_columns_holds_the_same_fields_as_rows(log40: Client) -> None:
    """``columns: true`` (the Spark reader's form): one array per field, same values."""
    body = {"pattern": "RD.A", "start": 5, "end": 20, "limit": 4}
    rows = log40.request(wire.READ, body)
    cols = log40.request(wire.READ, {**body, "columns": True})
    assert "rows" not in cols and "columns" not in rows
    assert [list(c) for c in cols["columns"]] == [list(f) for f in zip(*rows["rows"], strict=True)]
    assert [s for s in cols["columns"][0]] == [5, 7, 9, 11]
    assert (cols["next"], cols["last_seq"]) == (rows["next"], rows["last_seq"]) == (12, 40)
    empty = log40.request(wire.READ, {"pattern": "NOPE", "start": 1, "columns": True})
    assert empty["columns"] == [[]] * 9


def test_a_read_page_is_bounded_by_bytes_too(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """Large payloads: a READ reply stops at about 8 MB (READ_PAGE_BYTES) and says where
    to continue; Client.read pages on and returns every message once."""
    from zbroker.features.retention import READ_PAGE_BYTES

    broker = retaining(broker_factory, RetainRule("BIG.>"))
    client = client_factory(broker.endpoint)
    payload = b"x" * 600_000
    for i in range(20):
        client.publish("BIG.X", payload + str(i).encode(), persistent=True, confirm=True)
    reply = client.request(wire.READ, {"pattern": "BIG.>", "start": 1, "limit": 100})
    per_row = len(payload) + 2 + len("BIG.X")  # payloads end in 1 or 2 digits
    expected = -(-READ_PAGE_BYTES // per_row)  # rows until the bound is reached
    assert len(reply["rows"]) == expected == 14
    assert reply["next"] == expected + 1
    msgs = client.read("BIG.>", 1, None, limit=100)
    assert [m.log_seq for m in msgs] == list(range(1, 21))
    assert [m.payload[len(payload) :] for m in msgs] == [str(i).encode() for i in range(20)]


def test_a_sparse_pattern_is_read_in_bounded_scans(
    log40: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A READ examines at most READ_SCAN_ROWS rows (here 7 of the 40), so a pattern that
    matches little of a long log never holds the node's loop for the whole log: pages may
    hold no rows and still say where to go on; Client.read pages through them."""
    import zbroker.features.retention

    monkeypatch.setattr(zbroker.features.retention, "READ_SCAN_ROWS", 7)
    page = log40.request(wire.READ, {"pattern": "NOPE.>", "start": 1, "limit": 100})
    assert (page["rows"], page["next"], page["last_seq"]) == ([], 8, 40)
    page = log40.request(wire.READ, {"pattern": "RD.A", "start": 8, "limit": 100})
    assert ([r[0] for r in page["rows"]], page["next"]) == ([9, 11, 13], 15)
    last = log40.request(wire.READ, {"pattern": "RD.A", "start": 36, "limit": 100})
    assert ([r[0] for r in last["rows"]], last["next"]) == ([37, 39], 41)
    # the client's read goes on across pages, empty ones included, and stops at the end
    assert [m.log_seq for m in log40.read("RD.A")] == list(range(1, 41, 2))
    assert [m.log_seq for m in log40.read("RD.B.>", 3, 30)] == list(range(4, 30, 2))
    assert log40.read("NOPE.>") == []
    assert [m.log_seq for m in log40.read("RD.A", 1, None, 4)] == [1, 3, 5, 7]


def test_read_limit(log40: Client) -> None:
    assert [m.log_seq for m in log40.read(">", 1, None, 3)] == [1, 2, 3]
    assert [m.log_seq for m in log40.read("RD.B.>", 7, None, 4)] == [8, 10, 12, 14]
    assert [m.log_seq for m in log40.read("RD.A", 1, 10, 100)] == [1, 3, 5, 7, 9]
    # paging by hand: continue after the last log_seq seen
    seen: list[int] = []
    start = 1
    while True:
        page = log40.read("RD.A", start, None, 6)
        if not page:
            break
        seen += [m.log_seq for m in page if m.log_seq is not None]
        start = seen[-1] + 1
    assert seen == list(range(1, 41, 2))


def test_read_pages_internally_over_10000_rows(
    broker_factory: BrokerFactory, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    n = 12_345
    broker = retaining(broker_factory, RetainRule("BIG.>"))
    client = client_factory(broker.endpoint, timeout=30.0)
    for i in range(n):
        client.publish("BIG.E" if i % 2 == 0 else "BIG.O", i)
    wait_log(client, n, wait_until)
    everything = client.read(">", 1, None, 20_000)
    assert len(everything) == n
    assert [m.log_seq for m in everything] == list(range(1, n + 1))
    assert [m.payload for m in everything] == list(range(n))
    # a limit between the page size and the log size
    part = client.read(">", 100, 12_000, 11_000)
    assert [m.log_seq for m in part] == list(range(100, 11_100))
    # a range end inside the second page
    tail = client.read(">", 9_990, 10_020, 100_000)
    assert [m.log_seq for m in tail] == list(range(9_990, 10_020))
    # a filter across pages: evens have odd log seqs
    evens = client.read("BIG.E", 1, None, 6_000)
    assert [m.log_seq for m in evens] == list(range(1, n + 1, 2))[:6_000]
    assert [m.payload for m in evens] == list(range(0, n, 2))[:6_000]
    odds = client.read("BIG.O", 1, None, 100_000)
    assert len(odds) == n // 2
    assert [m.payload for m in odds] == list(range(1, n, 2))


def test_log_range_of_a_node_without_rules(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(broker_id="NORULES")
    client = client_factory(broker.endpoint)
    confirm = client.publish("X.Y", b"m", confirm=True)
    assert confirm == {"id": ["NORULES", broker.incarnation, 1], "retained_seq": None}
    assert client.log_range() == (1, 0)
    assert client.read() == []
    stats = store_stats(broker)
    assert (stats["first_seq"], stats["last_seq"], stats["retained_rows"]) == (1, 0, 0)
    assert stats["rules"] == []


# -- persistent publish ---------------------------------------------------------------------------


def test_persistent_publish_returns_a_future(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("F.>"))
    client = client_factory(broker.endpoint)
    futures = [client.publish("F.X", i, persistent=True) for i in range(20)]
    assert all(isinstance(f, Future) for f in futures)
    results = [f.result(WAIT) for f in futures]
    inc = broker.incarnation
    assert results == [{"id": ["R", inc, i + 1], "retained_seq": i + 1} for i in range(20)]
    # confirm=True alone implies persistent
    assert client.publish("F.Y", b"c", confirm=True) == {"id": ["R", inc, 21], "retained_seq": 21}
    assert client.publish("F.Z", b"p", persistent=True, confirm=True) == {
        "id": ["R", inc, 22],
        "retained_seq": 22,
    }
    assert [m.payload for m in client.read("F.X")] == list(range(20))


def test_persistent_publish_to_unretained_topic_is_confirmed_and_delivered_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("KEEP.>"))
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("U.>", got)
    pub = client_factory(broker.endpoint)
    inc = broker.incarnation
    assert pub.publish("U.X", b"one", confirm=True) == {"id": ["R", inc, 1], "retained_seq": None}
    assert pub.publish("U.END", b"barrier", confirm=True)["retained_seq"] is None
    assert got.wait_topic("U.END")
    time.sleep(GRACE)
    msgs = got.snapshot()
    assert [(m.topic, m.payload, m.seq) for m in msgs] == [
        ("U.X", b"one", 1),
        ("U.END", b"barrier", 2),
    ]
    assert pub.log_range() == (1, 0)
    assert broker.status()["counters"]["delivered"] == 2


def test_persistent_publish_to_retained_topic_is_delivered_live_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule("KEEP.>"))
    sub = client_factory(broker.endpoint)
    got = Collector()
    sub.subscribe("KEEP.>", got)
    pub = client_factory(broker.endpoint)
    for i in range(5):
        assert pub.publish("KEEP.X", i, confirm=True)["retained_seq"] == i + 1
    pub.publish("KEEP.END", b"", confirm=True)
    assert got.wait_topic("KEEP.END")
    time.sleep(GRACE)
    assert [m.payload for m in got.snapshot() if m.topic == "KEEP.X"] == [0, 1, 2, 3, 4]
    assert len(got.snapshot()) == 6
    assert [m.payload for m in pub.read("KEEP.X")] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        ("A..B", InvalidTopic),
        ("A.*", InvalidTopic),
        ("A.>", InvalidTopic),
        ("", InvalidTopic),
        ("$ZB.X", ReservedTopic),
        ("$ZB", ReservedTopic),
    ],
)
@pytest.mark.parametrize("mode", ["confirm", "future"])
def test_persistent_publish_bad_topic_raises_client_side(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    topic: str,
    error: type[Exception],
    mode: str,
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    with pytest.raises(error):
        if mode == "confirm":
            client.publish(topic, b"x", confirm=True)
        else:
            client.publish(topic, b"x", persistent=True)
    # nothing reached the node: the next publish is the node's first
    assert client.publish("OK.X", b"y", confirm=True)["retained_seq"] == 1
    counters = broker.status()["counters"]
    assert (counters["received"], counters["bad_input"]) == (1, 0)


def test_raw_persistent_publish_with_bad_topic_is_refused_by_the_node(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    body = {"topic": "$ZB.X", "payload": b"x", "fmt": 0, "headers": None}
    with pytest.raises(RequestError, match=r"reserved"):
        client.request(wire.PUBLISH, body)
    with pytest.raises(RequestError, match=r"A\.\.B"):
        client.request(wire.PUBLISH, {**body, "topic": "A..B"})
    with pytest.raises(RequestError):
        client.request(wire.PUBLISH, {**body, "topic": "A.B", "payload": "not bytes"})
    assert client.log_range() == (1, 0)
    counters = broker.status()["counters"]
    assert (counters["received"], counters["bad_input"]) == (0, 3)


@pytest.mark.parametrize("fmt", [True, False, 1.0], ids=["true", "false", "float"])
def test_raw_persistent_publish_with_non_int_fmt_is_refused(
    broker_factory: BrokerFactory, client_factory: ClientFactory, fmt: Any
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    body = {"topic": "F.X", "payload": b"\x05", "fmt": fmt, "headers": None}
    with pytest.raises(RequestError):
        client.request(wire.PUBLISH, body)
    assert client.log_range() == (1, 0)


# -- READ errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"pattern": "A..B"}, "A..B"),
        ({"pattern": "A.>.B"}, "A.>.B"),
        ({"pattern": 5}, "pattern"),
        ({"pattern": ">", "start": -1}, "start"),
        ({"pattern": ">", "start": "1"}, "start"),
        ({"pattern": ">", "end": 2.5}, "end"),
        ({"pattern": ">", "limit": 0}, "limit"),
        ({"pattern": ">", "limit": 100_001}, "limit"),
    ],
    ids=[
        "empty-segment",
        "inner-gt",
        "not-a-string",
        "neg-start",
        "str-start",
        "float-end",
        "zero-limit",
        "huge-limit",
    ],
)
def test_read_request_errors(
    broker_factory: BrokerFactory, client_factory: ClientFactory, body: dict[str, Any], needle: str
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    with pytest.raises(RequestError) as info:
        client.request(wire.READ, body)
    assert needle in str(info.value)
    assert broker.running
    assert client.publish("STILL.OK", b"", confirm=True)["retained_seq"] == 1


def test_client_read_validates_the_pattern_first(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = retaining(broker_factory, RetainRule(">"))
    client = client_factory(broker.endpoint)
    for bad in ("A..B", "A.>.B", "", "A.B*"):
        with pytest.raises(InvalidTopic):
            client.read(bad)
    with pytest.raises(RequestError, match="start"):
        client.read(">", -5)


# -- retention across a network ---------------------------------------------------------------


def has_route(broker: Broker, pattern: str, origin: str) -> bool:
    routes: list[dict[str, Any]] = broker.call(lambda node: node.engine.interest())
    return any(r["pattern"] == pattern and r["origin"] == origin for r in routes)


def up_links(broker: Broker) -> set[tuple[str, str]]:
    return {(ln["name"], ln["peer"]) for ln in broker.status()["links"] if ln["state"] == "up"}


def test_retention_rule_draws_messages_across_a_link(
    broker_factory: BrokerFactory,
    client_factory: ClientFactory,
    free_port: Callable[[], int],
    wait_until: WaitUntil,
) -> None:
    port_b = free_port()
    b = broker_factory(broker_id="B", port=port_b, retain=(RetainRule("CH.>"),))
    a = broker_factory(
        broker_id="A", links=(LinkConfig(name="ab", uri=f"tcp://{HOST}:{port_b}", **FAST),)
    )
    assert wait_until(lambda: up_links(a) == {("ab", "B")} and up_links(b) == {("ab", "A")}, WAIT)
    # B has no subscriber: its retention rule alone is the interest A learns about
    assert wait_until(lambda: has_route(a, "CH.>", "B"), WAIT)

    # a client on B that subscribes to the rule's pattern and leaves takes no interest away
    b_client = client_factory(b.endpoint)
    sub = b_client.subscribe("CH.>", lambda m: None)
    sub.unsubscribe()
    b_client.subscribe("SYNC.>", lambda m: None)  # returns once the unsubscribe is handled
    assert "CH.>" in b.status()["subscriptions"]["patterns"]
    assert has_route(a, "CH.>", "B")

    n = 50
    pub = client_factory(a.endpoint)
    for i in range(n):
        pub.publish("OTHER.Y", i)  # no interest anywhere: stays on A
        pub.publish("CH.X", i)
    wait_log(b_client, n, wait_until)
    time.sleep(GRACE)
    assert b_client.log_range() == (1, n)
    msgs = b_client.read()
    assert [m.log_seq for m in msgs] == list(range(1, n + 1))
    assert [(m.topic, m.payload) for m in msgs] == [("CH.X", i) for i in range(n)]
    assert {m.origin for m in msgs} == {"A"}
    assert [m.seq for m in msgs] == list(range(2, 2 * n + 1, 2))  # A's numbering
    assert len({m.id for m in msgs}) == n
    # A keeps nothing: it has no rule
    assert client_factory(a.endpoint).log_range() == (1, 0)
    # a persistent publish on A is confirmed by A (not retained there) and lands in B's log
    confirm = pub.publish("CH.P", b"persist", confirm=True)
    assert confirm == {"id": ["A", a.incarnation, 2 * n + 1], "retained_seq": None}
    wait_log(b_client, n + 1, wait_until)
    last = b_client.read(">", n + 1)
    assert [(m.log_seq, m.topic, m.payload, m.origin) for m in last] == [
        (n + 1, "CH.P", b"persist", "A")
    ]


# -- restart and crash ----------------------------------------------------------------------------


def test_restart_with_same_data_dir_keeps_the_log_and_continues(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "restart-node"
    rules = (RetainRule("RS.>", max_msgs=100),)
    first = broker_factory(broker_id="RS", data_dir=data_dir, retain=rules)
    c1 = client_factory(first.endpoint)
    confirms = [c1.publish("RS.X", i, confirm=True) for i in range(5)]
    assert [c["retained_seq"] for c in confirms] == [1, 2, 3, 4, 5]
    before = c1.read()
    c1.close()
    first.stop()

    second = broker_factory(broker_id="RS", data_dir=data_dir, retain=rules)
    assert second.incarnation > first.incarnation
    c2 = client_factory(second.endpoint)
    assert c2.log_range() == (1, 5)
    after = c2.read()
    assert after == before
    assert [(m.incarnation, m.seq) for m in after] == [(first.incarnation, s) for s in range(1, 6)]
    assert c2.publish("RS.X", 5, confirm=True) == {
        "id": ["RS", second.incarnation, 1],
        "retained_seq": 6,
    }
    assert [m.payload for m in c2.read()] == [0, 1, 2, 3, 4, 5]
    stats = store_stats(second)
    assert (stats["first_seq"], stats["last_seq"], stats["retained_rows"]) == (1, 6, 6)


def test_restart_keeps_the_sequence_after_everything_was_trimmed(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "trimmed-node"
    first = broker_factory(broker_id="TR", data_dir=data_dir, retain=(RetainRule("TR.>"),))
    c1 = client_factory(first.endpoint)
    for i in range(4):
        c1.publish("TR.X", i, confirm=True)
    c1.close()
    first.stop()
    # restarted with a rule so tight that the next commit keeps only the newest row
    second = broker_factory(
        broker_id="TR", data_dir=data_dir, retain=(RetainRule("TR.>", max_msgs=1),)
    )
    c2 = client_factory(second.endpoint)
    assert c2.log_range() == (1, 4)  # bounds apply at the next commit of the rule
    assert c2.publish("TR.X", 4, confirm=True)["retained_seq"] == 5
    assert c2.log_range() == (5, 5)
    assert [(m.log_seq, m.payload) for m in c2.read()] == [(5, 4)]
    assert store_stats(second)["dropped"] == {"max_msgs": 4}


@pytest.mark.slow
def test_every_confirmed_message_survives_kill_9(
    procs: Any, free_port: Callable[[], int], wait_ready: Callable[..., Any], tmp_path: Path
) -> None:
    port = free_port()
    data_dir = tmp_path / "killed-node"
    config = tmp_path / "node.toml"
    config.write_text(
        '[node]\nid = "KILLED"\n\n[[retain]]\npattern = "K.>"\n\n[[retain]]\n'
        'pattern = "AUDIT.*"\nmax_msgs = 1000000\n',
        "utf-8",
    )
    args = ("start", "--config", str(config), "--port", str(port), "--data-dir", str(data_dir))
    endpoint = f"tcp://{HOST}:{port}"

    proc = procs.zbroker(*args)
    first = wait_ready(endpoint, proc=proc)
    n = 300
    client = Client(endpoint, timeout=10.0, publish_timeout=10.0)
    try:
        confirms = []
        for i in range(n):
            topic = "K.X" if i % 3 else "AUDIT.LOG"
            confirms.append(client.publish(topic, i, confirm=True))
        proc.send_signal(signal.SIGKILL)  # right after the last confirmation, by PID
        assert proc.wait(10.0) == -signal.SIGKILL
    finally:
        client.close()
    assert [c["retained_seq"] for c in confirms] == list(range(1, n + 1))
    assert {c["id"][0] for c in confirms} == {"KILLED"}
    assert [c["id"][1:] for c in confirms] == [[first["incarnation"], i + 1] for i in range(n)]

    again = procs.zbroker(*args)
    hello = wait_ready(endpoint, proc=again)
    assert hello["broker_id"] == "KILLED"
    assert hello["incarnation"] > first["incarnation"]
    with Client(endpoint, timeout=10.0) as reader:
        assert reader.log_range() == (1, n)
        msgs = reader.read(">", 1, None, 100_000)
        assert [m.log_seq for m in msgs] == list(range(1, n + 1))
        assert [m.payload for m in msgs] == list(range(n))
        assert [m.topic for m in msgs] == ["K.X" if i % 3 else "AUDIT.LOG" for i in range(n)]
        assert [(m.origin, m.incarnation, m.seq) for m in msgs] == [
            ("KILLED", first["incarnation"], i + 1) for i in range(n)
        ]
        assert len(reader.read("AUDIT.*", 1, None, 100_000)) == len(range(0, n, 3))
        # the sequence continues after the crash
        assert reader.publish("K.X", b"after", confirm=True) == {
            "id": ["KILLED", hello["incarnation"], 1],
            "retained_seq": n + 1,
        }
    again.stop()
    assert again.returncode == 0, again.stderr_text()


# -- CLI ------------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    """Run the CLI in-process. ZBROKER_* variables of the caller's environment are unset."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZBROKER_")}
    return CliRunner().invoke(cli, list(args), env=clean)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """A user error: exit 1, exactly one non-empty line on stderr, no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_usage_error(result: Result, *needles: str) -> None:
    """A bad option value caught by click: exit 2, an 'Error:' line naming it, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


@pytest.fixture
def cli_node(broker_factory: BrokerFactory, client_factory: ClientFactory) -> Broker:
    """A node retaining T.>, whose log already holds two messages (log seq 1-2)."""
    broker = retaining(broker_factory, RetainRule("T.>"), broker_id="CLI")
    client = client_factory(broker.endpoint)
    client.publish("T.PRE", b"pre0", confirm=True)
    client.publish("T.PRE", b"pre1", confirm=True)
    return broker


def test_cli_pub_confirm_and_replay_json(cli_node: Broker, client_factory: ClientFactory) -> None:
    r = invoke("pub", "T.X", "hello", "--count", "8", "--confirm", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr == "published 8 message(s) to T.X, 8 confirmed stored\n"
    client = client_factory(cli_node.endpoint)
    assert client.log_range() == (1, 10)  # every confirmed message is already in the log

    r = invoke("replay", "T.>", "--json", "--from", "4", "--to", "9", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    inc = cli_node.incarnation
    assert [row["log_seq"] for row in rows] == [4, 5, 6, 7, 8]
    assert [row["id"] for row in rows] == [f"CLI:{inc}:{s}" for s in range(4, 9)]
    assert {
        (row["topic"], row["pattern"], row["payload"], row["payload_encoding"]) for row in rows
    } == {("T.X", "T.>", "hello", "text")}
    assert all(row["headers"] == {} for row in rows)
    assert r.stderr == "5 message(s); log holds 1..10\n"


def test_cli_replay_defaults_and_text(cli_node: Broker) -> None:
    r = invoke("pub", "T.Y", "m", "--count", "3", "--persistent", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stderr == "published 3 message(s) to T.Y, 3 confirmed stored\n"
    r = invoke("replay", "T.>", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "1 T.PRE pre0",
        "2 T.PRE pre1",
        "3 T.Y m",
        "4 T.Y m",
        "5 T.Y m",
    ]
    assert r.stderr == "5 message(s); log holds 1..5\n"
    r = invoke("replay", "T.Y", "--json", "--limit", "2", "--broker", cli_node.endpoint)
    assert [json.loads(line)["log_seq"] for line in r.stdout.splitlines()] == [3, 4]
    r = invoke("replay", "--from", "5", "--broker", cli_node.endpoint)  # pattern defaults to >
    assert r.stdout.splitlines() == ["5 T.Y m"]
    r = invoke("replay", "T.>", "--from", "50", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr == "0 message(s); log holds 1..5\n"


@pytest.mark.parametrize("pattern", ["T..>", "T.>.X", "T.X*"])
def test_cli_replay_bad_pattern_is_one_line_error(cli_node: Broker, pattern: str) -> None:
    assert_one_line_error(invoke("replay", pattern, "--broker", cli_node.endpoint), pattern)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--from", "-1"), "--from"),
        (("--to", "-3"), "--to"),
        (("--from", "x"), "--from"),
        (("--limit", "0"), "--limit"),
    ],
    ids=["neg-from", "neg-to", "nonint-from", "zero-limit"],
)
def test_cli_replay_bad_option_values(cli_node: Broker, args: tuple[str, ...], needle: str) -> None:
    assert_usage_error(invoke("replay", "T.>", *args, "--broker", cli_node.endpoint), needle)


def test_cli_replay_inverted_range_is_one_line_error(cli_node: Broker) -> None:
    r = invoke("replay", "T.>", "--from", "9", "--to", "4", "--broker", cli_node.endpoint)
    assert_one_line_error(r, "--from", "--to")


@pytest.mark.parametrize(
    ("topic", "needle"), [("$ZB.X", "reserved"), ("A..B", "A..B"), ("A.*", "A.*")]
)
def test_cli_pub_confirm_bad_topic_is_one_line_error(
    cli_node: Broker, client_factory: ClientFactory, topic: str, needle: str
) -> None:
    assert_one_line_error(
        invoke("pub", topic, "m", "--confirm", "--broker", cli_node.endpoint), needle
    )
    assert client_factory(cli_node.endpoint).log_range() == (1, 2)


# -- status --------------------------------------------------------------------------------------


def test_status_store_fields(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "status-node"
    broker = retaining(
        broker_factory,
        RetainRule("S.>", max_msgs=3),
        RetainRule("S.BIG.*", max_bytes=20),
        data_dir=data_dir,
    )
    client = client_factory(broker.endpoint)
    empty = store_stats(broker)
    keys = ("path", "first_seq", "last_seq", "retained_rows", "dropped", "rules")
    assert [(r["overflow"], r["held_msgs"], r["held_bytes"]) for r in empty["rules"]] == [
        ("drop-oldest", 0, 0),
        ("drop-oldest", 0, 0),
    ]
    empty["rules"] = [
        {k: r[k] for k in ("pattern", "max_msgs", "max_bytes", "max_age")} for r in empty["rules"]
    ]
    assert {k: empty[k] for k in keys} == {
        "path": str(data_dir / "store.sqlite3"),
        "first_seq": 1,
        "last_seq": 0,
        "retained_rows": 0,
        "dropped": {},
        "rules": [
            {"pattern": "S.>", "max_msgs": 3, "max_bytes": 0, "max_age": 0.0},
            {"pattern": "S.BIG.*", "max_msgs": 0, "max_bytes": 20, "max_age": 0.0},
        ],
    }
    for i in range(5):
        client.publish("S.X", b"%d" % i, confirm=True)  # log seq 1-5; 1-2 dropped
    client.publish("S.BIG.A", b"x" * 8, confirm=True)  # seq 6: 7 + 8 = 15 bytes
    client.publish("S.BIG.A", b"x" * 8, confirm=True)  # seq 7: 30 > 20, drops seq 6
    stats = store_stats(broker)
    assert stats["first_seq"] == 3
    assert stats["last_seq"] == 7
    assert stats["retained_rows"] == 4  # 3, 4, 5 and 7
    assert stats["dropped"] == {"max_bytes": 1, "max_msgs": 2}
    assert client.status()["store"] == stats  # the same over the wire
    assert [m.log_seq for m in client.read()] == [3, 4, 5, 7]
    assert client.log_range() == (3, 7)
