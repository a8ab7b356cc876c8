"""The example pipeline (``examples/spark_vwap.py``) on a known set of trades: exactly the
expected per-symbol, per-window aggregates land in Parquet and on ``ANALYTICS.VWAP.<symbol>``
(each window once), and a trade later than the watermark changes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import Inbox
from zbroker import Broker, Client
from zbroker.config import RetainRule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = 1_800_000_000.0  # a multiple of the 10 s window: windows start at T0, T0 + 10, ...


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


feed = load("trades_feed")
job = load("spark_vwap")

# (exchange, symbol, price, qty, seconds after T0)
TRADES = [
    ("NYSE", "IBM", 100.0, 10, 1.0),
    ("NASDAQ", "IBM", 102.0, 30, 4.5),
    ("LSE", "IBM", 99.5, 20, 9.9),
    ("NYSE", "AAPL", 200.0, 5, 2.0),
    ("NASDAQ", "AAPL", 201.0, 15, 7.0),
    ("NYSE", "IBM", 103.0, 40, 12.0),
    ("NASDAQ", "AAPL", 199.0, 10, 15.0),
    ("LSE", "AAPL", 198.5, 10, 19.5),
]
SENTINEL = ("NYSE", "MSFT", 300.0, 1, 100.0)  # moves the watermark past the first windows
LATE = ("NYSE", "IBM", 1.0, 1000, 3.0)  # event time long behind the watermark: dropped


def expected() -> dict[tuple[str, float], dict[str, Any]]:
    out: dict[tuple[str, float], dict[str, Any]] = {}
    for _, symbol, price, qty, dt in TRADES:
        start = T0 + 10 * (dt // 10)
        agg = out.setdefault(
            (symbol, start), {"trades": 0, "volume": 0, "pq": 0.0, "high": price, "low": price}
        )
        agg["trades"] += 1
        agg["volume"] += qty
        agg["pq"] += price * qty
        agg["high"] = max(agg["high"], price)
        agg["low"] = min(agg["low"], price)
    for agg in out.values():
        agg["vwap"] = agg.pop("pq") / agg["volume"]
    return out


def trades(rows: list[tuple[str, str, float, int, float]]) -> list[Any]:
    return [feed.Trade(e, s, p, q, T0 + dt) for e, s, p, q, dt in rows]


def run_job(spark: Any, broker: Broker, tmp_path: Path) -> None:
    aggregates = job.vwap_frame(spark, broker.endpoint, "10 seconds", "5 seconds")
    queries = job.start(
        aggregates, broker.endpoint, tmp_path / "out", tmp_path / "ckpt", available_now=True
    )
    for q in queries:
        q.awaitTermination(180)
        assert q.exception() is None


def test_known_trades_yield_exactly_the_expected_aggregates(
    spark: Any,
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    tmp_path: Path,
) -> None:
    broker = broker_factory(retain=(RetainRule("TRADES.>"),))
    client = client_factory(broker.endpoint)
    inbox = Inbox()
    client.subscribe("ANALYTICS.VWAP.>", inbox)
    feed.publish(client, trades([*TRADES, SENTINEL]))
    run_job(spark, broker, tmp_path)

    want = expected()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = {(r.symbol, r.window_start.replace(tzinfo=UTC).timestamp()): r for r in rows}
    assert set(got) == set(want)  # four closed windows; MSFT's window is still open
    for key, agg in want.items():
        r = got[key]
        assert (r.trades, r.volume, r.high, r.low) == (
            agg["trades"],
            agg["volume"],
            agg["high"],
            agg["low"],
        )
        assert r.vwap == pytest.approx(agg["vwap"], rel=1e-12)

    assert inbox.wait_count(len(want))
    time.sleep(0.5)
    published = {}
    for m in inbox.snapshot():
        body = json.loads(m.raw)
        start = datetime.fromisoformat(body["window_start"]).replace(tzinfo=UTC).timestamp()
        assert m.topic == f"ANALYTICS.VWAP.{body['symbol']}"
        assert (body["symbol"], start) not in published  # each window once
        published[(body["symbol"], start)] = body
    assert set(published) == set(want)
    for key, agg in want.items():
        assert published[key]["trades"] == agg["trades"]
        assert published[key]["volume"] == agg["volume"]
        assert published[key]["vwap"] == pytest.approx(agg["vwap"], rel=1e-12)

    # a trade behind the watermark arrives: Spark drops it, nothing changes or repeats
    feed.publish(client, trades([LATE]))
    run_job(spark, broker, tmp_path)
    assert len(spark.read.parquet(str(tmp_path / "out")).collect()) == len(want)
    time.sleep(0.5)
    assert len(inbox.snapshot()) == len(want)
