"""The retention log across a network (a rule draws messages over a link) and across
restarts: the same data directory keeps the log and its sequence, and every confirmed
message survives a ``zbroker start`` process killed with SIGKILL (marked ``slow``; stopped
by PID through ``procs``)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.retention import (
    GRACE,
    HOST,
    WAIT,
    BrokerFactory,
    ClientFactory,
    WaitUntil,
    store_stats,
    wait_log,
)
from tests.node_configs import FAST_LINK
from zbroker import (
    Broker,
    Client,
)
from zbroker.config import LinkConfig, RetainRule

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
        broker_id="A", links=(LinkConfig(name="ab", uri=f"tcp://{HOST}:{port_b}", **FAST_LINK),)
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
