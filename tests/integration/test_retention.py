"""Integration tests of the retention log: publishes land in it with exact sequences, and
reads by range, pattern, limit, bytes and columns, over pages (:mod:`.retention`). Persistent
publishes: :mod:`.test_retention_persistent`; a network, restarts and SIGKILL:
:mod:`.test_retention_restarts`; the CLI and status: :mod:`.test_retention_cli`.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.cli_runs import invoke
from tests.integration.retention import (
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    log_view,
    retaining,
    store_stats,
    wait_log,
)
from zbroker import (
    Client,
    wire,
)
from zbroker.config import RetainRule

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
    # `zbroker status` shows the rule and the log
    out = invoke("status", "--broker", broker.endpoint).stdout
    assert re.search(r"^LOG\.>\s+8\s+\d+\s+-\s+-\s+-\s+drop-oldest$", out, re.M), out
    assert "  log seqs 1..8, 8 rows" in out, out


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
