"""Reading a node's retention log with Spark (format ``zbroker``), batch and streaming, on a
real node with a real SQLite store and a real local-mode SparkSession.

Counts are exact: a range returns exactly the retained messages of that range; a stream
over several micro-batches sees every sequence once; a query restarted from its checkpoint
continues with no gap and no duplicate; an expired range fails or is skipped as
``failOnDataLoss`` says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from zbroker import Broker, Client
from zbroker.config import RetainRule

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]


def publish_stored(client: Client, n: int, topics: tuple[str, ...], start: int = 0) -> None:
    """Publish n persistent messages (confirmed: stored when this returns)."""
    futures = [
        client.publish(
            topics[i % len(topics)],
            {"price": float(i), "qty": i},
            headers={"i": i},
            persistent=True,
            confirm=False,
        )
        for i in range(start, start + n)
    ]
    for f in futures:
        f.result(30)


def read_df(spark: Any, broker: Broker, **options: Any) -> Any:
    reader = spark.read.format("zbroker").option("broker", broker.endpoint)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def stream_df(spark: Any, broker: Broker, **options: Any) -> Any:
    reader = spark.readStream.format("zbroker").option("broker", broker.endpoint)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def test_batch_read_returns_exactly_the_retained_range(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(retain=(RetainRule("T.>"),))
    client = client_factory(broker.endpoint)
    publish_stored(client, 900, ("T.A", "T.B", "T.C"))
    client.publish("OTHER.X", b"not retained", persistent=True)

    df = read_df(
        spark, broker, pattern="T.B", startingOffset=100, endingOffset=700, rowsPerPartition=97
    )
    assert df.rdd.getNumPartitions() == 7  # 600 sequences in partitions of 97
    rows = sorted(df.collect(), key=lambda r: r.seq)
    expected = [m for m in client.read("T.B", 100, 700, limit=10_000)]
    assert len(rows) == 200 and len(expected) == 200
    for row, msg in zip(rows, expected, strict=True):
        assert row.seq == msg.log_seq
        assert row.topic == "T.B"
        assert (row.origin, row.incarnation, row.origin_seq) == (
            msg.id.origin,
            msg.id.incarnation,
            msg.id.seq,
        )
        assert row.payload == msg.raw
        assert row.headers == {"i": str(msg.headers["i"])}
        assert abs(row.timestamp.timestamp() - msg.timestamp) < 1e-3
    # the whole log by default: 900 retained, the OTHER topic is not in it
    assert read_df(spark, broker).count() == 900


def test_payload_columns_decode_from_msgpack_and_json(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory(retain=(RetainRule("M.>"), RetainRule("J.>")))
    client = client_factory(broker.endpoint)
    client.publish("M.X", {"price": 1.5, "qty": 3, "extra": "ignored"}, persistent=True)
    client.publish("M.X", {"price": 2.5}, persistent=True)  # qty missing: null
    client.publish("M.X", b"\xc1 not msgpack", persistent=True)  # undecodable: nulls
    client.publish("J.X", json.dumps({"price": 7.25, "qty": 2}).encode(), persistent=True)

    m = read_df(
        spark, broker, pattern="M.>", valueFormat="msgpack", valueSchema="price double, qty long"
    )
    assert [(r.price, r.qty) for r in m.orderBy("seq").collect()] == [
        (1.5, 3),
        (2.5, None),
        (None, None),
    ]
    j = read_df(
        spark, broker, pattern="J.>", valueFormat="json", valueSchema="price double, qty long"
    )
    assert [(r.price, r.qty) for r in j.collect()] == [(7.25, 2)]
    assert msgpack.unpackb(m.orderBy("seq").first().payload) == {
        "price": 1.5,
        "qty": 3,
        "extra": "ignored",
    }
    with pytest.raises(Exception, match="valueFormat needs valueSchema"):
        read_df(spark, broker, pattern="M.>", valueFormat="msgpack").collect()


def test_read_options_that_cannot_work_are_refused_naming_the_option(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    """(Before, each of these failed inside Spark: "Schema and number of arrays unequal",
    "invalid literal for int()", an Arrow buffer error, a timeout of nan seconds.)"""
    broker = broker_factory(retain=(RetainRule("M.>"),))
    client_factory(broker.endpoint).publish("M.X", {"price": 1.5}, persistent=True)
    refused = {
        "valueSchema needs valueFormat": {"valueSchema": "price double"},
        "endingOffset: expected latest or a sequence number": {"endingOffset": "earliest"},
        "column 'topic' is named twice": {"valueFormat": "json", "valueSchema": "TOPIC string"},
        "timeout: must be a positive number of seconds": {"timeout": "nan"},
    }
    for message, options in refused.items():
        with pytest.raises(Exception, match=message):
            read_df(spark, broker, pattern="M.>", **options).collect()
    good = read_df(spark, broker, pattern="M.>", valueFormat="msgpack", valueSchema="price double")
    assert [r.price for r in good.collect()] == [1.5]


def test_stream_sees_every_sequence_once_over_several_micro_batches(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    broker = broker_factory(retain=(RetainRule("T.>"),))
    client = client_factory(broker.endpoint)
    publish_stored(client, 1000, ("T.A", "T.B"))
    stream = stream_df(
        spark, broker, pattern="T.>", startingOffset="earliest", maxRowsPerTrigger=250
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("every_seq_once")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    got = spark.sql("SELECT seq FROM every_seq_once").collect()
    assert sorted(r.seq for r in got) == list(range(1, 1001))
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [250, 250, 250, 250]


def test_restart_from_checkpoint_resumes_with_no_gap_and_no_duplicate(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    broker = broker_factory(retain=(RetainRule("T.>"),))
    client = client_factory(broker.endpoint)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run_once() -> None:
        query = (
            stream_df(
                spark, broker, pattern="T.>", startingOffset="earliest", maxRowsPerTrigger=300
            )
            .select("seq", "topic", "payload")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    publish_stored(client, 700, ("T.A",))
    run_once()
    assert spark.read.parquet(str(out)).count() == 700
    publish_stored(client, 500, ("T.B",), start=700)
    run_once()  # a new query on the same checkpoint: starts at 701
    seqs = sorted(r.seq for r in spark.read.parquet(str(out)).select("seq").collect())
    assert seqs == list(range(1, 1201))


def test_expired_range_fails_or_is_skipped_as_failOnDataLoss_says(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    broker = broker_factory(retain=(RetainRule("T.>", max_msgs=100),))
    client = client_factory(broker.endpoint)
    publish_stored(client, 300, ("T.A",))  # sequences 1..200 expired, 201..300 kept

    with pytest.raises(Exception, match=r"sequences 1\.\.200 .* expired"):
        read_df(spark, broker, pattern="T.>", startingOffset=1).collect()
    skipped = read_df(spark, broker, pattern="T.>", startingOffset=1, failOnDataLoss="false")
    assert sorted(r.seq for r in skipped.collect()) == list(range(201, 301))
    # earliest means the oldest still retained: no loss to report
    assert read_df(spark, broker, pattern="T.>").count() == 100

    # a stream that falls behind the log's bounds: it read up to 300, then 250 more
    # arrive and 150 of them push unread ones out
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def run(fail: str) -> Any:
        q = (
            stream_df(spark, broker, pattern="T.>", startingOffset="earliest", failOnDataLoss=fail)
            .select("seq")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        try:
            q.awaitTermination(120)
        except Exception:
            pass  # the failed run: its exception is checked below
        return q

    assert run("true").exception() is None
    assert spark.read.parquet(str(out)).count() == 100  # 201..300
    publish_stored(client, 250, ("T.A",), start=300)  # 301..550; 451..550 kept
    failed = run("true")
    assert failed.exception() is not None
    assert "sequences 301..450" in str(failed.exception())
    assert spark.read.parquet(str(out)).count() == 100  # the failed batch wrote nothing
    resumed = run("false")
    assert resumed.exception() is None
    seqs = sorted(r.seq for r in spark.read.parquet(str(out)).collect())
    assert seqs == list(range(201, 301)) + list(range(451, 551))


def test_a_rule_that_expired_hides_no_row_another_rule_keeps(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """``expired_upto`` is the highest sequence any overlapping rule lost: rows another
    rule keeps below it are read by ``earliest`` (batch and stream) and by
    ``failOnDataLoss=false``. (Before, all three started after it: B's rows were lost.)"""
    broker = broker_factory(retain=(RetainRule("A.>", max_msgs=10), RetainRule("B.>")))
    client = client_factory(broker.endpoint)
    publish_stored(client, 5, ("B.X",))  # 1..5, kept
    publish_stored(client, 50, ("A.X",), start=5)  # 6..55: 6..45 expired, 46..55 kept
    kept = list(range(1, 6)) + list(range(46, 56))

    assert sorted(r.seq for r in read_df(spark, broker).collect()) == kept
    with pytest.raises(Exception, match=r"sequences 1\.\.45 .* expired"):
        read_df(spark, broker, startingOffset=1).collect()  # A's 6..45 are lost
    lenient = read_df(spark, broker, startingOffset=1, failOnDataLoss="false")
    assert sorted(r.seq for r in lenient.collect()) == kept

    # a stream from earliest, in micro-batches below and across what had expired
    ckpt = tmp_path / "ckpt"

    def run() -> list[int]:
        seen: list[int] = []
        query = (
            stream_df(spark, broker, startingOffset="earliest", maxRowsPerTrigger=20)
            .writeStream.foreachBatch(lambda df, _: seen.extend(r.seq for r in df.collect()))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted(seen)

    assert run() == kept  # batches [1, 21), [21, 41), [41, 56)
    # the last batch again after a restart, from the offset Spark logged (41, below 45)
    for done in ("offsets/2", "offsets/.2.crc", "commits/2", "commits/.2.crc"):
        (ckpt / done).unlink(missing_ok=True)
    assert run() == list(range(46, 56))
