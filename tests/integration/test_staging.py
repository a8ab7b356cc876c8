"""Integration tests of staged (exactly-once) writes through a real node: rows staged under
a token are published only on commit, all or none, once per ``(writer, batch)`` — also after
the node restarts on the same data directory — and aborted rows never appear.

Subscribers are real clients over ZeroMQ on 127.0.0.1; counts are exact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import Inbox
from zbroker import Broker, Client, RequestError, wire
from zbroker.config import RetainRule
from zbroker.writer import StagedWriter, abort_staged, commit_staged

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.status_text import format_status
else:
    from zbroker.cli.status_text import format_status

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
GRACE = 0.3  # seconds granted to a message that must not arrive


def staged(client: Client, payloads: list[bytes], topic: str = "OUT.A") -> tuple[str, int]:
    w = StagedWriter(client)
    for p in payloads:
        w.add(topic, p, {"n": p.decode()})
    return w.finish()


def test_rows_appear_only_on_commit_exactly_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(retain=(RetainRule("OUT.>"),))
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    payloads = [f"row-{i}".encode() for i in range(4500)]  # three STAGE chunks
    token, n = staged(client, payloads)
    assert n == 4500
    time.sleep(GRACE)
    assert inbox.payloads() == []  # staged is not published
    assert client.request(wire.STATUS)["staging"]["rows"] == 4500

    reply = commit_staged(client, [(token, n)], writer="job-1", batch=0)
    assert reply == {"applied": 4500, "duplicate": False}
    assert inbox.wait_count(4500)
    time.sleep(GRACE)
    assert inbox.payloads() == payloads  # each once, in order
    assert inbox.messages[0].headers == {"n": "row-0"}
    # the same batch committed again (a replay): nothing more is published
    token2, n2 = staged(client, payloads[:10])
    assert commit_staged(client, [(token2, n2)], writer="job-1", batch=0) == {
        "applied": 0,
        "duplicate": True,
    }
    time.sleep(GRACE)
    assert len(inbox.payloads()) == 4500
    log = client.read("OUT.>", 1, None, limit=10_000)
    assert [m.payload for m in log] == payloads  # retained once as well
    status = client.request(wire.STATUS)
    stats = status["staging"]
    assert stats["rows"] == 0 and stats["duplicate_commits"] == 1
    assert stats["applied_rows"] == 4500 and stats["aborted_rows"] == 10
    shown = [ln for ln in format_status(status).splitlines() if ln.startswith("staged writes")]
    assert [ln.split(None, 2)[2] for ln in shown] == [
        "0 tokens waiting (0 rows), 1 commits, 4500 rows published, 1 duplicate commits, "
        "10 rows aborted, 0 expired"
    ]


def test_abort_and_refused_commits_publish_nothing(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory()
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    t1 = staged(client, [b"a", b"b"])
    t2 = staged(client, [b"c"])
    assert abort_staged(client, [t1[0]]) == 2
    # a commit naming an aborted token is refused whole: t2 is not applied either
    with pytest.raises(RequestError, match="not staged here"):
        commit_staged(client, [t1, t2])
    with pytest.raises(RequestError, match="holds 1 rows, the writer sent 5"):
        commit_staged(client, [(t2[0], 5)])
    time.sleep(GRACE)
    assert inbox.payloads() == []
    assert commit_staged(client, [t2]) == {"applied": 1, "duplicate": False}
    assert inbox.wait_count(1)
    # the same tokens sent again (the reply was lost): recognized, not applied twice
    assert commit_staged(client, [t2]) == {"applied": 0, "duplicate": True}
    time.sleep(GRACE)
    assert inbox.payloads() == [b"c"]
    assert broker.status()["counters"]["bad_input"] == 2  # the two refused commits


def test_a_commit_with_a_malformed_group_applies_nothing(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """The group was checked after the rows had been taken: the node published them and
    answered the writer with an error (found by the fuzz test). Now a malformed group
    refuses the commit whole, the rows stay staged, and a good commit publishes them once;
    an abort with a malformed group discards nothing."""
    broker = broker_factory()
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    token, n = staged(client, [b"a", b"b", b"c"])
    for bad_group in (65536, "", ["g"]):
        with pytest.raises(RequestError, match="token must be a string"):
            client.request(wire.STAGE_COMMIT, {"tokens": [[token, n]], "group": bad_group})
        with pytest.raises(RequestError, match="token must be a string"):
            client.request(wire.STAGE_ABORT, {"tokens": [token], "group": bad_group})
    time.sleep(GRACE)
    assert inbox.payloads() == []
    assert client.request(wire.STATUS)["staging"]["rows"] == 3  # still staged
    assert commit_staged(client, [(token, n)]) == {"applied": 3, "duplicate": False}
    assert inbox.wait_count(3)
    time.sleep(GRACE)
    assert inbox.payloads() == [b"a", b"b", b"c"]
    assert broker.status()["counters"]["bad_input"] == 6  # the six refused requests


def test_reject_new_rule_refuses_the_whole_commit(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(retain=(RetainRule("OUT.>", max_msgs=5, overflow="reject-new"),))
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    token = staged(client, [str(i).encode() for i in range(6)])
    with pytest.raises(RequestError, match="cannot take this batch"):
        commit_staged(client, [token], writer="w", batch=1)
    time.sleep(GRACE)
    assert inbox.payloads() == []
    assert client.log_range() == (1, 0)  # nothing retained
    assert abort_staged(client, [token[0]]) == 6  # still staged until aborted
    assert commit_staged(client, [staged(client, [b"x"] * 5)], writer="w", batch=1)["applied"] == 5


def test_batch_record_survives_a_node_restart_and_staged_rows_do_not(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    data = tmp_path / "node"
    broker = broker_factory(data_dir=data, retain=(RetainRule("OUT.>"),))
    port = broker.ports["control"]
    client = client_factory(broker.endpoint)
    assert commit_staged(client, [staged(client, [b"1", b"2"])], writer="w", batch=7) == {
        "applied": 2,
        "duplicate": False,
    }
    pending = staged(client, [b"3"])
    client.close()
    broker.stop()

    broker = broker_factory(data_dir=data, port=port, retain=(RetainRule("OUT.>"),))
    client = client_factory(broker.endpoint)
    # the staged rows lived in the old process: the commit is refused, clearly
    with pytest.raises(RequestError, match="node restarted"):
        commit_staged(client, [pending], writer="w", batch=8)
    # batch 7 was recorded with its rows: a replay of it is recognized after the restart
    assert commit_staged(client, [staged(client, [b"1", b"2"])], writer="w", batch=7) == {
        "applied": 0,
        "duplicate": True,
    }
    assert [m.payload for m in client.read("OUT.>")] == [b"1", b"2"]


@pytest.mark.parametrize("key", [{"writer": "w", "batch": 3}, {}], ids=["batch", "tokens"])
def test_the_same_commit_sent_again_after_a_restart_is_a_duplicate(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path, key: Any
) -> None:
    # the commit was applied, then the node restarted before its reply reached the
    # writer, which sends the very same commit again: it was applied, not refused
    data = tmp_path / "node"
    broker = broker_factory(data_dir=data, retain=(RetainRule("OUT.>"),))
    port = broker.ports["control"]
    client = client_factory(broker.endpoint)
    token = staged(client, [b"1", b"2", b"3"])
    assert commit_staged(client, [token], **key) == {"applied": 3, "duplicate": False}
    client.close()
    broker.stop()

    broker = broker_factory(data_dir=data, port=port, retain=(RetainRule("OUT.>"),))
    client = client_factory(broker.endpoint)
    assert commit_staged(client, [token], **key) == {"applied": 0, "duplicate": True}
    assert [m.payload for m in client.read("OUT.>")] == [b"1", b"2", b"3"]
    # a token never committed is still refused, saying why
    other = {**key, "batch": 4} if key else {}
    with pytest.raises(RequestError, match="is not staged here"):
        commit_staged(client, [("never-staged", 1)], **other)


def test_a_writer_that_staged_nothing_commits_cleanly(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory()
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    empty = StagedWriter(client).finish()  # an empty Spark partition
    assert empty[1] == 0
    full = staged(client, [b"x"])
    assert commit_staged(client, [empty, full], writer="w", batch=0) == {
        "applied": 1,
        "duplicate": False,
    }
    assert inbox.wait_count(1)


def test_publishes_cannot_take_the_room_of_a_commit_being_published(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    # a commit admitted against a reject-new rule goes out in slices over many passes;
    # persistent publishes meanwhile must not take the room of its later slices (they
    # were confirmed, and the commit's rows were then refused by the full rule)
    n = 20_000  # ten slices
    broker = broker_factory(retain=(RetainRule("OUT.>", max_msgs=n + 5, overflow="reject-new"),))
    writer = client_factory(broker.endpoint, timeout=60.0)
    w = StagedWriter(writer)
    for _ in range(n):
        w.add_raw("OUT.A", b"r", 0, None)
    token = w.finish()
    publisher = client_factory(broker.endpoint)
    confirmed: list[dict[str, Any] | str] = []  # (the commit's reply, then each publish)
    refused: list[RequestError] = []
    committing = threading.Thread(target=lambda: confirmed.append(commit_staged(writer, [token])))
    committing.start()
    while committing.is_alive():  # publishing all along the commit
        try:
            publisher.publish("OUT.B", b"p", persistent=True, confirm=True)
            confirmed.append("OUT.B")
        except RequestError as exc:
            assert "reject-new" in str(exc)
            refused.append(exc)
    committing.join()
    assert {"applied": n, "duplicate": False} in confirmed
    assert broker.status()["store"]["dropped"].get("reject_new", 0) == 0
    assert len(writer.read("OUT.A", limit=n + 10)) == n
    assert len(writer.read("OUT.B")) == confirmed.count("OUT.B") <= 5


def test_a_large_commit_is_published_in_slices_while_the_node_serves_others(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(retain=(RetainRule("OUT.>"),))
    writer = client_factory(broker.endpoint, timeout=120.0)
    observer = client_factory(broker.endpoint)
    inbox = Inbox()
    observer.subscribe("OUT.>", inbox)
    n = 150_000
    w = StagedWriter(writer)
    for i in range(n):
        w.add_raw("OUT.A", str(i).encode(), 0, None)
    token = w.finish()
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(commit_staged(writer, [token])))
    t.start()
    seen_applying: list[int] = []
    while t.is_alive():
        # answered mid-commit: the node is not stuck in one pass
        seen_applying.append(observer.request(wire.STATUS)["staging"]["applying_rows"])
    t.join()
    assert result == {"applied": n, "duplicate": False}
    assert any(0 < a < n for a in seen_applying)
    assert inbox.wait_count(n, timeout=60)
    time.sleep(GRACE)
    assert [int(p) for p in inbox.payloads()] == list(range(n))
    assert observer.log_range() == (1, n)


def test_large_rows_are_staged_in_requests_the_node_takes(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """A STAGE request holds rows up to the node's max_frame_bytes (it announces it), not a
    fixed 4 MB: 2,000 rows of 1 KB made a 2 MB request that a default node (1 MiB) counted
    as oversized and never answered, so the writer (and a Spark task) timed out. A row the
    node could take in no request is refused up front."""
    from zbroker import PayloadError

    limit = 64 * 1024
    broker = broker_factory(max_frame_bytes=limit)
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("BIGROW.>", inbox)
    w = StagedWriter(client)
    payloads = [bytes([i % 256]) * (900 + (i * 37) % 600) for i in range(300)]  # ~345 KB
    for i, p in enumerate(payloads):
        w.add("BIGROW.X", p, {"i": i} if i % 3 == 0 else None)
    with pytest.raises(PayloadError, match="over what the node takes in one request"):
        w.add("BIGROW.X", b"x" * limit)
    token, n = w.finish()
    assert n == 300
    assert w._part >= 6  # ~345 KB in requests of under 64 KiB each
    assert commit_staged(client, [(token, n)], writer="big", batch=0) == {
        "applied": 300,
        "duplicate": False,
    }
    assert inbox.wait_count(300)
    time.sleep(GRACE)
    assert inbox.payloads() == payloads
    assert [m.headers for m in inbox.messages[:4]] == [{"i": 0}, {}, {}, {"i": 3}]
    counters = client.request(wire.STATUS)["counters"]
    assert counters["bad_input"] == 0 and counters["dropped"] == {}


def test_a_commit_over_the_nodes_limit_fails_at_once_and_an_abort_still_clears_it(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """A commit names every token of a job in one request; past the node's max_frame_bytes
    the node counted it as oversized and never answered, so the driver waited out its
    timeout and was told the node was unreachable. It now fails at once with the reason,
    publishes nothing, and the abort that follows (no atomicity needed) goes in requests
    that fit, so every staged row is discarded."""
    from zbroker import PayloadError

    broker = broker_factory(max_frame_bytes=4096)
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("MANY.>", inbox)
    tokens = [
        staged(client, [f"t{i}-{j}".encode() for j in range(3)], "MANY.X") for i in range(200)
    ]
    assert client.request(wire.STATUS)["staging"]["rows"] == 600
    t0 = time.monotonic()
    with pytest.raises(PayloadError, match="commit of 200 tokens does not fit") as exc:
        commit_staged(client, tokens, writer="many", batch=0)
    assert time.monotonic() - t0 < client.timeout / 2  # not a timeout
    assert "over the node's limit of 4096 bytes" in str(exc.value)
    assert abort_staged(client, [t for t, _ in tokens]) == 600
    status = client.request(wire.STATUS)
    assert status["staging"]["rows"] == 0
    assert status["counters"]["bad_input"] == 0 and status["counters"]["received"] == 0
    time.sleep(GRACE)
    assert inbox.payloads() == []
    # a commit that fits still works on the same node and client
    token, n = staged(client, [b"after"], "MANY.X")
    assert commit_staged(client, [(token, n)], writer="many", batch=1)["applied"] == 1
    assert inbox.wait_count(1) and inbox.payloads() == [b"after"]


def test_any_request_over_the_nodes_limit_fails_at_once(
    broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(max_frame_bytes=4096)
    client = client_factory(broker.endpoint)
    from zbroker import PayloadError

    with pytest.raises(PayloadError, match="over the node's limit of 4096 bytes"):
        client.request(wire.STAGE_ABORT, {"tokens": ["x" * 40] * 200})
    assert client.request(wire.STATUS)["counters"]["bad_input"] == 0
