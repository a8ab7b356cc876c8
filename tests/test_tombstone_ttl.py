"""Tombstone expiry without a node: the ``[state] tombstone_ttl`` option (default, the
minimum and why, the errors), the store's queue of tombstones by the time written (on a
real SQLite file, reopened), and :class:`StateTopics`' bounded batches and listings."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from zbroker.config import LinkConfig, NodeConfig, load_config
from zbroker.config import node as config_node
from zbroker.errors import ConfigError
from zbroker.features.state import feature as state_feature
from zbroker.features.state import replication as state_replication
from zbroker.features.state import topics as state_topics
from zbroker.features.state.topics import StateTopics
from zbroker.store.state import StateRow, StateTable

DAY = 86_400.0


def test_the_default_is_a_day_and_the_minimum_loads(tmp_path: Path) -> None:
    assert NodeConfig().tombstone_ttl == DAY
    assert NodeConfig(tombstone_ttl=300).tombstone_ttl == 300.0  # (an int, kept as a float)
    path = tmp_path / "node.toml"
    path.write_text("[state]\ntombstone_ttl = 3600\n", "utf-8")
    assert load_config(path).tombstone_ttl == 3600.0


def test_a_ttl_below_the_minimum_is_refused_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text("[state]\ntombstone_ttl = 60\n", "utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: state.tombstone_ttl: 60 is below the minimum 300 s: a tombstone must "
        "outlive a replica's resume window and sync, or a removed value could come back "
        "(range 300..315360000)"
    )
    bad: Any
    for bad, said in ((True, "is not a number"), ("1d", "is not a number"), (4e8, "range")):
        with pytest.raises(ConfigError, match=said):
            NodeConfig(tombstone_ttl=bad)
    with pytest.raises(ConfigError, match=r"state\.tombstone_ttl: 0 is below the minimum"):
        NodeConfig().replace(tombstone_ttl=0)


def test_the_minimum_outlasts_what_relies_on_a_tombstone() -> None:
    """The minimum's comment, as figures: a secondary that lost its primary keeps (and
    serves) the older values for the link's heartbeat timeout, the resume window and the
    resume sync (with its retries); the minimum is three times that, whatever those
    constants become."""
    relied = (
        LinkConfig(name="x", uri="tcp://127.0.0.1:1").heartbeat_timeout
        + state_replication.RESUME_WINDOW
        + state_feature.QUERY_TIMEOUT
        + state_replication.RETRY_MAX
    )
    assert 3 * relied <= config_node.TOMBSTONE_TTL_MIN


def tombstone(topic: str, updated: float, version: int = 1) -> StateRow:
    return StateRow(topic, b"", 0, None, version, "A", updated, True)


def value(topic: str, updated: float) -> StateRow:
    return StateRow(topic, b"v", 0, None, 1, "A", updated)


def stored(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as db:
        return sorted(db.execute("SELECT topic, removed FROM state_topics"))


def test_the_table_expires_the_oldest_first_in_the_file_too(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    table = StateTable(db)
    for i, t in enumerate(("T.a", "T.b", "T.c", "T.d")):
        table.put(tombstone(t, 100.0 + i))
    table.put(value("T.v", 50.0))  # a value is never expired, however old
    table.put(tombstone("T.a", 200.0, 2))  # removed again: the newest now
    table.put(value("T.b", 201.0))  # set again: no tombstone left to expire
    table.put(tombstone("T.gone", 99.0))
    table.delete("T.gone")  # (a replica forgotten: not in the queue either)
    table.write()
    assert table.expire(103.0, 10) == ["T.c"]  # (written before 103: T.c at 102)
    assert table.expire(300.0, 1) == ["T.d"]  # (the batch's bound)
    assert sorted(table.rows) == ["T.a", "T.b", "T.v"]
    assert table.write() == 2  # the two deletions
    assert stored(path) == [("T.a", 1), ("T.b", 0), ("T.v", 0)]
    db.close()
    db = sqlite3.connect(path, isolation_level=None)
    again = StateTable(db)  # the removal time came back from the file
    assert again.expire(199.0, 10) == []
    assert again.expire(201.0, 10) == ["T.a"]
    again.write()
    assert stored(path) == [("T.b", 0), ("T.v", 0)]
    db.close()


def test_a_reopened_table_expires_by_the_time_written(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    table = StateTable(db)
    for i in range(6):  # written in an order that is not the time order
        table.put(tombstone(f"T.{i}", 100.0 + (i * 5) % 6))
    table.write()
    db.close()
    db = sqlite3.connect(path, isolation_level=None)
    assert StateTable(db).expire(103.0, 10) == ["T.0", "T.5", "T.4"]  # 100, 101, 102
    db.close()


def test_topics_expire_in_batches_and_stop_listing_what_is_past_the_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state_topics, "EXPIRE_BATCH", 3)
    db = sqlite3.connect(tmp_path / "store.sqlite3", isolation_level=None)
    topics = StateTopics(StateTable(db), "A", tombstone_ttl=1000.0)
    now = time.time()
    for i in range(5):
        topics.table.put(tombstone(f"S.old{i}", now - 2000 + i))
        topics.trie.add(f"S.old{i}")
    for i in range(2):
        topics.set(f"S.new{i}", b"x", 0, None)
        topics.remove(f"S.new{i}")
    topics.set("S.kept", b"k", 0, None)
    values, gone = topics.values("S.>")
    assert [v[0] for v in values] == ["S.kept"]
    assert sorted(g[0] for g in gone) == ["S.new0", "S.new1"]  # (the old ones not listed)
    assert topics.expire(now) == 3 and topics.expiry_due  # a full batch: more may be due
    assert topics.expire(now) == 2 and not topics.expiry_due
    assert topics.expire(now) == 0 and topics.expired == 5
    assert sorted(topics.trie.match("S.>")) == ["S.kept", "S.new0", "S.new1"]
    assert topics.count() == {"owned": 1, "replicas": 0, "tombstones": 2}
    assert topics.expire(now + 1001) == 2 and topics.expired == 7
    assert topics.values("S.>")[1] == [] and topics.count()["tombstones"] == 0
    db.close()
