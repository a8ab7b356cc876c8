"""Writing into the network with Spark (format ``zbroker``): every row reaches subscribers
exactly once, also when Spark retries a failed task and when it replays a micro-batch after
a restart; bad writes fail with a clear message.

Real node, real subscriber client, real local-mode Spark; counts are exact.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Inbox
from zbroker import Broker, Client, wire
from zbroker.config import RetainRule

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
GRACE = 1.0  # seconds granted to a duplicate that must not arrive


def rows_df(spark: Any, n: int, partitions: int) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr(
        "concat('OUT.', CAST(id % 3 AS STRING)) AS topic",
        "CAST(CAST(id AS STRING) AS BINARY) AS payload",
        "map('n', CAST(id AS STRING)) AS headers",
    )


def test_batch_write_delivers_every_row_once(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory
) -> None:
    broker = broker_factory()
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    rows_df(spark, 5000, 4).write.format("zbroker").option("broker", broker.endpoint).mode(
        "append"
    ).save()
    assert inbox.wait_count(5000)
    time.sleep(GRACE)
    got = inbox.snapshot()
    assert len(got) == 5000
    assert sorted(int(m.raw) for m in got) == list(range(5000))
    assert all(
        m.topic == f"OUT.{int(m.raw) % 3}" and m.headers == {"n": m.raw.decode()} for m in got
    )
    staging = client.request(wire.STATUS)["staging"]
    assert (staging["commits"], staging["applied_rows"], staging["tokens"]) == (1, 5000, 0)


@pytest.mark.filterwarnings("ignore:Arrow optimization failed:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:Cannot infer the eval type:UserWarning")
def test_a_task_that_fails_once_is_retried_and_rows_arrive_once(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    broker = broker_factory()
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("OUT.>", inbox)
    marker = str(tmp_path / "failed-once")

    @udf("binary")
    def fail_once(payload: bytes) -> bytes:
        ctx = TaskContext.get()
        assert ctx is not None
        if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and payload == b"5500":
            with open(marker, "w") as f:
                f.write("injected")
            raise RuntimeError("injected task failure (first attempt only)")
        return payload

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        df = rows_df(spark, 12_000, 4).withColumn("payload", fail_once(col("payload")))
        df.write.format("zbroker").option("broker", broker.endpoint).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert Path(marker).exists()  # the first attempt of partition 1 did fail
    assert inbox.wait_count(12_000)
    time.sleep(GRACE)
    counts = Counter(int(m.raw) for m in inbox.snapshot())
    assert len(counts) == 12_000 and set(counts.values()) == {1}
    staging = client.request(wire.STATUS)["staging"]
    # the failed attempt's rows were aborted by the task itself or never staged
    assert (staging["tokens"], staging["rows"], staging["applied_rows"]) == (0, 0, 12_000)
    assert staging["aborted_rows"] in (0, 2000)  # staged before the failure surfaced, or not


def test_a_micro_batch_replayed_after_a_restart_is_published_once(
    spark: Any, broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    broker = broker_factory(retain=(RetainRule("T.>"),))
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("ECHO.>", inbox)
    futures = [
        client.publish(f"T.{i % 2}", str(i).encode(), persistent=True, confirm=False)
        for i in range(1000)
    ]
    for f in futures:
        f.result(30)
    ckpt = tmp_path / "ckpt"

    def run() -> Any:
        q = (
            spark.readStream.format("zbroker")
            .option("broker", broker.endpoint)
            .option("pattern", "T.>")
            .option("startingOffset", "earliest")
            .option("maxRowsPerTrigger", "400")
            .load()
            .selectExpr("concat('ECHO.', topic) AS topic", "payload")
            .writeStream.format("zbroker")
            .option("broker", broker.endpoint)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(180)
        assert q.exception() is None
        return q

    first = run()
    assert [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]] == [400, 400, 200]
    assert inbox.wait_count(1000)
    # a crash after the sink committed batch 2 but before Spark recorded it: on restart
    # Spark runs batch 2 again, with new tasks and new tokens
    (ckpt / "commits" / "2").unlink()
    (ckpt / "commits" / ".2.crc").unlink(missing_ok=True)
    second = run()
    assert [(p["batchId"], p["numInputRows"]) for p in second.recentProgress][:1] == [(2, 200)]
    time.sleep(GRACE)
    counts = Counter(m.raw for m in inbox.snapshot())
    assert len(counts) == 1000 and set(counts.values()) == {1}
    staging = client.request(wire.STATUS)["staging"]
    assert staging["duplicate_commits"] == 1 and staging["applied_rows"] == 1000
    assert staging["aborted_rows"] == 200 and staging["tokens"] == 0


def test_bad_writes_fail_clearly(spark: Any, broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    df = rows_df(spark, 10, 1)
    writer = df.write.format("zbroker").option("broker", broker.endpoint)
    with pytest.raises(Exception, match="mode 'overwrite' is not possible"):
        writer.mode("overwrite").save()
    with pytest.raises(Exception, match="needs a column 'payload' of type binary or string"):
        df.selectExpr("topic", "1 AS payload").write.format("zbroker").option(
            "broker", broker.endpoint
        ).mode("append").save()
    with pytest.raises(Exception, match="cannot contain wildcard"):
        df.selectExpr("'OUT.*' AS topic", "payload").write.format("zbroker").option(
            "broker", broker.endpoint
        ).mode("append").save()
    assert broker.status()["staging"]["tokens"] == 0
