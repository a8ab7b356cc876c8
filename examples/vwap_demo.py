"""The whole Spark pipeline demo in one command: a node, a trade feed, the VWAP job and a
subscriber printing its results.

    python examples/vwap_demo.py                      # local Spark, 60 seconds
    python examples/vwap_demo.py --seconds 120 --output /tmp/vwap
    python examples/vwap_demo.py --master spark://HOST:7077 --host 10.0.0.5

Starts an embedded node that retains ``TRADES.>`` (on 127.0.0.1 unless ``--host`` says
otherwise: a cluster's executors must be able to reach it), publishes live trades into it
(``trades_feed.py``), runs ``spark_vwap.py``'s job on it (windows of 5 s, watermark 2 s),
and prints every ``ANALYTICS.VWAP.<symbol>`` message the job publishes back. Needs the
spark extra (``pip install -e '.[spark]'``) and Java 17.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import spark_vwap
import trades_feed

from zbroker import Broker, Client, Message
from zbroker.config import RetainRule


def show(msg: Message) -> None:
    body = json.loads(msg.raw)
    print(
        f"{body['window_start'][11:19]}-{body['window_end'][11:19]} {body['symbol']:<5} "
        f"trades={body['trades']:<4} volume={body['volume']:<6} vwap={body['vwap']:.3f} "
        f"high={body['high']:.2f} low={body['low']:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--host", default="127.0.0.1", help="address the node binds")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the feed runs")
    parser.add_argument("--rate", type=float, default=200.0, help="trades per second")
    parser.add_argument("--output", type=Path, default=None, help="Parquet directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zbroker-vwap-"))
    output = args.output or work / "vwap"

    with (
        Broker(
            host=args.host, port=0, data_dir=work / "node", retain=(RetainRule("TRADES.>"),)
        ) as broker,
        Client(broker.endpoint) as listener,
    ):
        print(f"node {broker.broker_id} at {broker.endpoint}; Parquet output in {output}")
        listener.subscribe("ANALYTICS.VWAP.>", show)
        spark = spark_vwap.session(args.master, "zbroker-vwap-demo")
        spark.sparkContext.setLogLevel("ERROR")
        aggregates = spark_vwap.vwap_frame(spark, broker.endpoint, "5 seconds", "2 seconds")
        queries = spark_vwap.start(aggregates, broker.endpoint, output, work / "checkpoints")
        feeder = threading.Thread(
            target=trades_feed.run, args=(broker.endpoint, args.rate, args.seconds, 7), daemon=True
        )
        feeder.start()
        try:
            feeder.join()
            # let the last windows close: their watermark moves with the last trades
            for q in queries:
                q.processAllAvailable()
        except KeyboardInterrupt:
            pass
        finally:
            for q in queries:
                q.stop()
            rows = spark.read.parquet(str(output)).count() if output.exists() else 0
            print(f"{rows} window aggregates in {output}")
            spark.stop()


if __name__ == "__main__":
    main()
