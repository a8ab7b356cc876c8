#!/usr/bin/env python3
"""The Spark connector's throughput (issue 6), local mode, 100-byte payloads.

    .venv/bin/python benchmarks/bench_spark.py             # full run (about 2-3 minutes)
    .venv/bin/python benchmarks/bench_spark.py --quick     # smoke run
    .venv/bin/python benchmarks/bench_spark.py --json      # result as JSON on stdout

One node runs as its own ``zbroker start`` process (127.0.0.1, a ``[[retain]]`` rule on
``BENCH.>``). In one run, side by side:

(a) plain Python: ``Client.request(READ)`` pages over the whole retained range (raw rows,
    no Message objects) — the reference for (b); also ``Client.read`` (Message objects).
(b) Spark streaming read of the same range (``readStream.format("zbroker")``, Trigger
    AvailableNow, ``noop`` sink, ``--rows-per-trigger`` (250,000) per micro-batch in
    partitions of ``--rows-per-partition`` (125,000: one per core)): rows/s = N / the sum
    of the micro-batches' trigger execution times (Spark's own processing rate), and also
    N / (query start to termination), which adds the query's start-up (about 1-2 s);
    median of ``--repeat`` after one warm-up query. Target: >= 100,000 rows/s. Ratio b / a.
(c) Spark batch write of N rows (topic, 100-byte payload) through staged tokens into the
    node: rows/s = N / (save() call to return), which includes the node publishing and
    retaining every row on commit. Target: >= 50,000 rows/s.

Spark runs with ``local[2]`` on 127.0.0.1 (UI off). The node is stopped by its PID in a
``finally`` block.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import snapshot_sources

PAYLOAD = b"x" * 100


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def start_node(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    cfg = tmp / "node.toml"
    cfg.write_text(
        f'[node]\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{tmp / "node"}"\n'
        '\n[discovery]\nenabled = false\n\n[[retain]]\npattern = "BENCH.>"\n\n'
        '[[retain]]\npattern = "OUT.>"\n'
    )
    env = dict(os.environ, ZBROKER_DISCOVERY="false")
    return subprocess.Popen(
        [sys.executable, "-m", "zbroker.cli.main", "start", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def fill(endpoint: str, n: int) -> float:
    """Put n retained rows into the node (staged writes); returns seconds taken."""
    from zbroker import Client
    from zbroker.writer import StagedWriter, commit_staged

    t0 = time.perf_counter()
    with Client(endpoint, timeout=60) as client:
        done = 0
        while done < n:
            w = StagedWriter(client)
            for i in range(done, min(n, done + 50_000)):
                w.add_raw(f"BENCH.{i % 10}", PAYLOAD, 0, None)
            token, rows = w.finish()
            commit_staged(client, [(token, rows)])
            done += rows
    return time.perf_counter() - t0


def plain_read(endpoint: str, n: int) -> dict[str, float]:
    from zbroker import Client, wire

    with Client(endpoint, timeout=60) as client:
        t0 = time.perf_counter()
        got, start = 0, 1
        while True:
            reply = client.request(
                wire.READ, {"pattern": "BENCH.>", "start": start, "limit": 20_000}
            )
            got += len(reply["rows"])
            if not reply["rows"] or reply["next"] > reply["last_seq"]:
                break
            start = reply["next"]
        raw_s = time.perf_counter() - t0
        assert got == n, (got, n)
        t0 = time.perf_counter()
        msgs = client.read("BENCH.>", 1, None, limit=n)
        msg_s = time.perf_counter() - t0
        assert len(msgs) == n
    return {"raw_rows_per_s": n / raw_s, "message_rows_per_s": n / msg_s}


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import zbroker.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("zbroker-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    zbroker.spark.register(spark)
    return spark


def spark_read(
    spark: Any, endpoint: str, n: int, rows_per_partition: int, per_trigger: int
) -> tuple[float, float]:
    """(end-to-end rows/s including the query's start, rows/s over its micro-batches)."""
    t0 = time.perf_counter()
    q = (
        spark.readStream.format("zbroker")
        .option("broker", endpoint)
        .option("pattern", "BENCH.>")
        .option("startingOffset", "earliest")
        .option("rowsPerPartition", str(rows_per_partition))
        .option("maxRowsPerTrigger", str(per_trigger))
        .load()
        .writeStream.format("noop")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    assert rows == n, (rows, n)
    batch_ms = sum(p["durationMs"]["triggerExecution"] for p in progress)
    return n / seconds, n / (batch_ms / 1000)


def spark_write(spark: Any, endpoint: str, n: int) -> float:
    df = spark.range(0, n, 1, 2).selectExpr(
        "concat('OUT.', CAST(id % 10 AS STRING)) AS topic",
        f"CAST(repeat('x', {len(PAYLOAD)}) AS BINARY) AS payload",
    )
    df.count()  # plan and JVM warm, outside the timed part
    t0 = time.perf_counter()
    df.write.format("zbroker").option("broker", endpoint).option("timeout", "60").mode(
        "append"
    ).save()
    return n / (time.perf_counter() - t0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    # one partition per core, two micro-batches: the backlog a streaming query catches up on
    parser.add_argument("--rows-per-partition", type=int, default=125_000)
    parser.add_argument("--rows-per-trigger", type=int, default=250_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    return parser


def main() -> int:
    args = _parser().parse_args()
    if args.quick:
        args.rows, args.repeat, args.rows_per_trigger = 100_000, 1, 50_000
        args.rows_per_partition = 25_000
    src = snapshot_sources()
    log = sys.stderr if args.json else sys.stdout
    tmp = Path(tempfile.mkdtemp(prefix="zbroker-bench-spark-"))
    port = 23100 + os.getpid() % 1000 * 3
    node = start_node(tmp, port)
    endpoint = f"tcp://127.0.0.1:{port}"
    result: dict[str, Any] = {"rows": args.rows, "payload_bytes": len(PAYLOAD)}
    try:
        wait_node(node, endpoint)
        print(f"node at {endpoint}; sources {src}; load {loadavg()}", file=log)
        result["fill_s"] = fill(endpoint, args.rows)
        print(f"filled {args.rows} rows in {result['fill_s']:.1f} s", file=log)
        result["plain"] = plain_read(endpoint, args.rows)
        print(
            f"(a) plain Python READ: {result['plain']['raw_rows_per_s']:,.0f} rows/s raw, "
            f"{result['plain']['message_rows_per_s']:,.0f} rows/s as Messages",
            file=log,
        )
        spark_runs(endpoint, args, log, result)
        result["machine"] = {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_end": loadavg(),
        }
        result["date"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    finally:
        node.terminate()
        try:
            node.wait(10)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(5)
    ok = print_summary(result, args.rows, log)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0 if ok else 1


def wait_node(node: subprocess.Popen[bytes], endpoint: str) -> None:
    """Until the node answers (20 s at most); its stderr in the error if it does not."""
    from zbroker import Client

    deadline = time.monotonic() + 20
    while True:
        try:
            Client(endpoint, timeout=1).close()
            break
        except Exception:
            if time.monotonic() > deadline or node.poll() is not None:
                node.kill()
                err = node.stderr.read().decode() if node.stderr else ""
                raise RuntimeError(f"node did not start: {err[-2000:]}") from None


def spark_runs(
    endpoint: str, args: argparse.Namespace, log: TextIO, result: dict[str, Any]
) -> None:
    """(b) the streaming reads after one warm-up query, (c) the batch writes; their
    figures into ``result``."""
    spark = spark_session()
    per_trigger = args.rows_per_trigger
    spark_read(spark, endpoint, args.rows, args.rows_per_partition, per_trigger)  # warm-up
    e2e, steady = [], []
    for _ in range(args.repeat):
        a, b = spark_read(spark, endpoint, args.rows, args.rows_per_partition, per_trigger)
        e2e.append(a)
        steady.append(b)
        print(
            f"(b) Spark streaming read: {b:,.0f} rows/s over its micro-batches, {a:,.0f} "
            f"rows/s from query start (load {loadavg()})",
            file=log,
        )
    writes = []
    for _ in range(args.repeat):
        writes.append(spark_write(spark, endpoint, args.rows))
        print(f"(c) Spark batch write: {writes[-1]:,.0f} rows/s (load {loadavg()})", file=log)
    spark.stop()
    result["spark_read_rows_per_s"] = {
        "best": max(steady),
        "median": statistics.median(steady),
        "from_query_start_median": statistics.median(e2e),
    }
    result["spark_write_rows_per_s"] = {
        "best": max(writes),
        "median": statistics.median(writes),
    }
    result["read_ratio_spark_to_plain"] = (
        statistics.median(steady) / result["plain"]["raw_rows_per_s"]
    )


def print_summary(result: dict[str, Any], rows: int, log: TextIO) -> bool:
    """The summary against the targets; True if both are met."""
    ok_read = result["spark_read_rows_per_s"]["median"] >= 100_000
    ok_write = result["spark_write_rows_per_s"]["median"] >= 50_000
    print("\nsummary", file=log)
    print(
        f"  Spark read  median {result['spark_read_rows_per_s']['median']:>10,.0f} rows/s "
        f"(best {result['spark_read_rows_per_s']['best']:,.0f})  target >= 100,000  "
        f"{'PASS' if ok_read else 'FAIL'}",
        file=log,
    )
    print(
        f"  Spark write median {result['spark_write_rows_per_s']['median']:>10,.0f} rows/s "
        f"(best {result['spark_write_rows_per_s']['best']:,.0f})  target >= 50,000  "
        f"{'PASS' if ok_write else 'FAIL'}",
        file=log,
    )
    print(
        f"  Spark read from query start (incl. its start-up) median "
        f"{result['spark_read_rows_per_s']['from_query_start_median']:,.0f} rows/s",
        file=log,
    )
    print(
        f"  read ratio Spark / plain Python raw READ: {result['read_ratio_spark_to_plain']:.2f}",
        file=log,
    )
    print(f"  {result['date']}, {os.cpu_count()} cores, rows {rows}", file=log)
    return bool(ok_read and ok_write)


if __name__ == "__main__":
    sys.exit(main())
