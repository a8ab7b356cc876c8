"""A streaming VWAP job on Spark: trades from a zbroker node in, per-symbol aggregates out.

    python examples/spark_vwap.py --broker tcp://127.0.0.1:7100 --output /tmp/vwap
    python examples/spark_vwap.py --master spark://HOST:7077 ...   # the same job on a cluster

Reads ``TRADES.<exchange>.<symbol>`` (msgpack ``{price, qty, ts}``) from the node's retention
log as a stream, windows the trades by their event time ``ts`` (tumbling windows, with a
watermark: trades later than it are dropped, as Spark's event-time semantics say), and per
symbol and window computes count, volume, VWAP (sum(price*qty)/sum(qty)), high and low.
Each closed window is written to Parquet under ``--output`` and published back into the
network on ``ANALYTICS.VWAP.<symbol>`` (a JSON payload) for live subscribers. Both sinks are
exactly-once: the source replays by sequence number, Parquet is Spark's transactional file
sink, and the zbroker sink publishes each micro-batch once.

The node must retain the trades: ``[[retain]] pattern = "TRADES.>"`` (``vwap_demo.py``
starts such a node).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

TRADE_SCHEMA = "price double, qty long, ts double"


def session(master: str, app: str = "zbroker-vwap") -> Any:
    """A SparkSession with the ``zbroker`` format registered. In local mode everything
    listens on 127.0.0.1 only."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import zbroker.spark

    builder = SparkSession.builder.master(master).appName(app)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
        )
    spark = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    zbroker.spark.register(spark)
    return spark


def vwap_frame(
    spark: Any,
    broker: str,
    window: str = "10 seconds",
    watermark: str = "5 seconds",
    starting: str = "earliest",
) -> Any:
    """The aggregated stream: symbol, window_start, window_end, trades, volume, vwap,
    high, low — one row per symbol and closed event-time window."""
    from pyspark.sql import functions as F

    trades = (
        spark.readStream.format("zbroker")
        .option("broker", broker)
        .option("pattern", "TRADES.>")
        .option("startingOffset", starting)
        .option("valueFormat", "msgpack")
        .option("valueSchema", TRADE_SCHEMA)
        .load()
        .where(F.col("price").isNotNull() & F.col("qty").isNotNull() & F.col("ts").isNotNull())
        .select(
            F.split("topic", r"\.").getItem(2).alias("symbol"),
            "price",
            "qty",
            F.timestamp_micros((F.col("ts") * 1_000_000).cast("long")).alias("event_time"),
        )
    )
    return (
        trades.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window), "symbol")
        .agg(
            F.count(F.lit(1)).alias("trades"),
            F.sum("qty").alias("volume"),
            (F.sum(F.col("price") * F.col("qty")) / F.sum("qty")).alias("vwap"),
            F.max("price").alias("high"),
            F.min("price").alias("low"),
        )
        .select(
            "symbol",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "trades",
            "volume",
            "vwap",
            "high",
            "low",
        )
    )


def start(
    aggregates: Any,
    broker: str,
    output: Path,
    checkpoint: Path,
    available_now: bool = False,
) -> list[Any]:
    """Start both sinks (Parquet, and the network on ANALYTICS.VWAP.<symbol>); returns the
    two streaming queries."""
    from pyspark.sql import functions as F

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if available_now else writer

    parquet = trigger(
        aggregates.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint / "parquet"))
    ).start()
    published = trigger(
        aggregates.select(
            F.concat(F.lit("ANALYTICS.VWAP."), F.col("symbol")).alias("topic"),
            F.to_json(
                F.struct(
                    "symbol",
                    "window_start",
                    "window_end",
                    "trades",
                    "volume",
                    "vwap",
                    "high",
                    "low",
                )
            ).alias("payload"),
        )
        .writeStream.format("zbroker")
        .outputMode("append")
        .option("broker", broker)
        .option("checkpointLocation", str(checkpoint / "publish"))
    ).start()
    return [parquet, published]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--broker", default="tcp://127.0.0.1:7100")
    parser.add_argument("--output", type=Path, default=Path("vwap-output"))
    parser.add_argument("--checkpoint", type=Path, default=None, help="default: OUTPUT-checkpoints")
    parser.add_argument("--window", default="10 seconds")
    parser.add_argument("--watermark", default="5 seconds")
    parser.add_argument("--available-now", action="store_true", help="process what is there, stop")
    args = parser.parse_args()
    spark = session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    aggregates = vwap_frame(spark, args.broker, args.window, args.watermark)
    checkpoint = args.checkpoint or args.output.with_name(args.output.name + "-checkpoints")
    queries = start(aggregates, args.broker, args.output, checkpoint, args.available_now)
    try:
        for q in queries:
            q.awaitTermination()
    except KeyboardInterrupt:
        for q in queries:
            q.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
