"""Retention bounds with the reject-new overflow policy: a full rule refuses persistent
publishes with a clear error, does not retain non-persistent ones, and counts both."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zbroker import Broker, Client, ConfigError, RequestError, load_config
from zbroker.config import NodeConfig, RetainRule
from zbroker.store import Store


def test_store_reject_new_keeps_the_oldest(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3", (RetainRule("A.>", max_msgs=3, overflow="reject-new"),))
    seqs = [
        store.retain("A.>", "A.X", b"%d" % i, 0, None, "n", 1, i, time.time()) for i in range(5)
    ]
    store.commit()
    assert seqs == [1, 2, 3, None, None]
    assert store.dropped == {"reject_new": 2}
    assert [r[2] for r in store.read(1, None, 10)] == [b"0", b"1", b"2"]
    store.close()
    # the held counts survive a reopen: still full
    again = Store(tmp_path / "s.sqlite3", (RetainRule("A.>", max_msgs=3, overflow="reject-new"),))
    assert again.rejects("A.>", 1) is True
    assert again.stats()["rules"][0]["held_msgs"] == 3
    again.close()


def test_store_reject_new_by_bytes(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3", (RetainRule("B.>", max_bytes=30, overflow="reject-new"),))
    # each row counts topic + payload: 3 + 10 = 13 bytes
    got = [store.retain("B.>", "B.X", b"x" * 10, 0, None, "n", 1, i, time.time()) for i in range(3)]
    assert got == [1, 2, None]
    store.commit()
    assert store.stats()["rules"][0]["held_bytes"] == 26
    store.close()


def test_persistent_publish_to_a_full_rule_is_refused(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    b = broker_factory(retain=(RetainRule("T.>", max_msgs=4, overflow="reject-new"),))
    c = client_factory(b.endpoint)
    got: list[Any] = []
    c.subscribe("T.>", got.append)
    assert [c.publish("T.A", b"%d" % i, confirm=True)["retained_seq"] for i in range(4)] == [
        1,
        2,
        3,
        4,
    ]
    with pytest.raises(RequestError, match=r"retention rule 'T.>' is full .*reject-new"):
        c.publish("T.A", b"refused", confirm=True)
    c.publish("T.A", b"live-only")  # non-persistent: delivered live, not retained
    deadline = time.monotonic() + 5
    while len(got) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    # the refused one was not published at all; the non-persistent one was
    assert [m.payload for m in got] == [b"0", b"1", b"2", b"3", b"live-only"]
    assert [m.payload for m in c.read("T.>")] == [b"0", b"1", b"2", b"3"]
    status = b.status()
    assert status["counters"]["dropped"]["rejected_persistent"] == 1
    assert status["store"]["dropped"] == {"reject_new": 1}


def test_overflow_policy_from_toml_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    path.write_text('[[retain]]\npattern = "A.>"\nmax_msgs = 2\noverflow = "reject-new"\n')
    assert load_config(path).retain == (RetainRule("A.>", max_msgs=2, overflow="reject-new"),)
    path.write_text('[[retain]]\npattern = "A.>"\noverflow = "drop-newest"\n')
    with pytest.raises(ConfigError, match=r"n.toml: retain #1: overflow 'drop-newest' is not"):
        load_config(path)
    with pytest.raises(ConfigError, match="overflow"):
        NodeConfig(retain=(RetainRule("A.>", overflow="keep-all"),))


def test_durable_max_bytes_and_max_age_drop_oldest(
    broker_factory: Callable[..., Broker], client_factory: Callable[..., Client]
) -> None:
    b = broker_factory()
    pub = client_factory(b.endpoint)
    c = client_factory(b.endpoint)
    # 100 bytes: each message counts topic + payload = 3 + 17 = 20 bytes, so 5 fit
    c.subscribe("D.>", lambda m: None, durable="bytes", max_bytes=100).unsubscribe()
    c.subscribe("E.>", lambda m: None, durable="aged", max_age=0.5).unsubscribe()
    for i in range(8):
        pub.publish("D.X", b"%017d" % i)
    pub.publish("E.X", b"old")
    time.sleep(0.7)
    pub.publish("E.X", b"new")  # its commit expires the old one
    deadline = time.monotonic() + 5
    want = {"bytes": (5, 3), "aged": (1, 1)}
    while time.monotonic() < deadline:
        got = {d["name"]: (d["stored"], d["dropped"]) for d in b.status()["durables"]}
        if got == want:
            break
        time.sleep(0.05)
    assert got == want
    received: list[bytes] = []
    client_factory(b.endpoint).subscribe(
        "D.>", lambda m: received.append(m.payload), durable="bytes"
    )
    deadline = time.monotonic() + 5
    while len(received) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert received == [b"%017d" % i for i in range(3, 8)]  # the newest that fit
    dropped = b.status()["store"]["dropped"]
    assert dropped["durable_max_bytes"] == 3 and dropped["durable_max_age"] == 1
