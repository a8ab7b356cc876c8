"""Embed a broker node in a Python program, subscribe and publish through it.

    python examples/embed.py

Binds only on 127.0.0.1 (free ports, temporary data directory).
"""

from __future__ import annotations

import threading

from zbroker import Broker, Client, Message


def main() -> None:
    done = threading.Event()
    received: list[Message] = []

    def on_price(msg: Message) -> None:
        received.append(msg)
        print(f"{msg.pattern:<16} {msg.topic:<24} {msg.payload!r} ({msg.payload_type}) id={msg.id}")
        if len(received) == 4:
            done.set()

    with Broker(port=0) as broker, Client(broker.endpoint) as client:
        print(f"node {broker.broker_id} at {broker.endpoint}")
        client.subscribe("PRICE.STOCK.>", on_price)
        client.subscribe("PRICE.*.NYSE.*", on_price)  # overlaps: one copy per subscription
        client.publish("PRICE.STOCK.NYSE.IBM", b"101.50", headers={"currency": "USD"})
        client.publish("PRICE.STOCK.LSE.VOD", {"bid": 71.2, "ask": 71.3})
        client.publish("PRICE.BOND.NYSE.T10", b"99.1")
        done.wait(5)
        print(broker.status()["counters"])


if __name__ == "__main__":
    main()
