"""A simulated trade feed: publishes trades on ``TRADES.<exchange>.<symbol>``.

    python examples/trades_feed.py --broker tcp://127.0.0.1:7100 --rate 200 --seconds 60

Each payload is a msgpack map ``{"price": float, "qty": int, "ts": float}``; ``ts`` is the
trade's event time (seconds since the epoch), which the Spark job windows on. Prices follow
a random walk per symbol. Messages are published persistent (stored by the node before
it confirms) in confirmed batches, so nothing the feed reports as sent is lost.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from zbroker import Client

EXCHANGES = ("NYSE", "NASDAQ", "LSE")
SYMBOLS = ("IBM", "AAPL", "MSFT", "VOD")


@dataclass(frozen=True)
class Trade:
    exchange: str
    symbol: str
    price: float
    qty: int
    ts: float

    @property
    def topic(self) -> str:
        return f"TRADES.{self.exchange}.{self.symbol}"

    def payload(self) -> dict[str, float | int]:
        return {"price": self.price, "qty": self.qty, "ts": self.ts}


def random_trades(
    seed: int = 7, start: float | None = None, rate: float = 100.0
) -> Iterator[Trade]:
    """An endless stream of plausible trades, ``rate`` per second of event time."""
    rng = random.Random(seed)
    prices = {s: rng.uniform(50, 300) for s in SYMBOLS}
    ts = time.time() if start is None else start
    while True:
        symbol = rng.choice(SYMBOLS)
        prices[symbol] = max(1.0, prices[symbol] * (1 + rng.gauss(0, 0.001)))
        ts += rng.expovariate(rate)
        yield Trade(
            rng.choice(EXCHANGES), symbol, round(prices[symbol], 2), rng.randint(1, 500), ts
        )


def publish(client: Client, trades: list[Trade]) -> None:
    """Publish persistent trades and wait until the node has stored every one."""
    futures = [client.publish(t.topic, t.payload(), persistent=True, confirm=False) for t in trades]
    for f in futures:
        f.result(30)


def run(broker: str, rate: float, seconds: float, seed: int) -> int:
    """Publish live trades at ``rate`` per second for ``seconds``; returns how many."""
    sent = 0
    trades = random_trades(seed, rate=rate)
    deadline = time.monotonic() + seconds
    with Client(broker) as client:
        while time.monotonic() < deadline:
            tick = time.monotonic()
            batch = [next(trades) for _ in range(max(1, int(rate / 10)))]
            for t in batch:  # event time = now, as a live feed would stamp it
                object.__setattr__(t, "ts", time.time())
            publish(client, batch)
            sent += len(batch)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", default="tcp://127.0.0.1:7100")
    parser.add_argument("--rate", type=float, default=200.0, help="trades per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sent = run(args.broker, args.rate, args.seconds, args.seed)
    print(f"published {sent} trades")


if __name__ == "__main__":
    main()
