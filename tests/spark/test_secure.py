"""The Spark connector against a node with CurveZMQ on: with the client's keys it reads
exactly the retained range its key may subscribe to and writes where it may publish;
without keys, or outside its permissions, it fails with the node's reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Inbox
from tests.integration.secure_nodes import Keys
from zbroker import Broker, Client
from zbroker.config import RetainRule


def test_secure_read_and_write_with_the_clients_keys(
    spark: Any,
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    tmp_path: Path,
) -> None:
    keys = Keys(tmp_path / "keys")
    b = broker_factory(broker_id="b", retain=(RetainRule("X.>"),), **keys.options("b"))
    server_key = keys.node_public("b")
    alice = client_factory(b.endpoint, keys=keys.client("alice"), server_key=server_key)
    inbox = Inbox()
    alice.subscribe("X.OUT", inbox)
    for f in [
        alice.publish("X.IN", str(i).encode(), persistent=True, confirm=False) for i in range(300)
    ]:
        f.result(30)

    def options(fmt: Any, **extra: str) -> Any:
        fmt = fmt.format("zbroker").option("broker", b.endpoint)
        for k, v in extra.items():
            fmt = fmt.option(k, v)
        return fmt

    secure = {"keys": str(keys.client("alice")), "serverKey": server_key}
    rows = options(spark.read, pattern="X.>", **secure).load().collect()
    assert sorted(int(r.payload) for r in rows) == list(range(300))

    out = spark.createDataFrame([(f"w{i}".encode(),) for i in range(50)], "payload binary")
    options(out.write, topic="X.OUT", **secure).mode("append").save()
    assert inbox.wait_count(50)
    time.sleep(0.5)
    assert sorted(m.payload for m in inbox.snapshot()) == sorted(
        f"w{i}".encode() for i in range(50)
    )

    # bob may not read X.> nor publish there; the node says so
    bob = {"keys": str(keys.client("bob")), "serverKey": server_key}
    with pytest.raises(Exception, match=r"client:bob may not subscribe to 'X\.>'"):
        options(spark.read, pattern="X.>", **bob).load().collect()
    with pytest.raises(Exception, match=r"client:bob may not publish to 'X\.OUT'"):
        options(out.write, topic="X.OUT", **bob).mode("append").save()
    with pytest.raises(Exception, match="keys and serverKey go together"):
        options(spark.read, pattern="X.>", keys=str(keys.client("alice"))).load().collect()
    time.sleep(0.3)
    assert len(inbox.snapshot()) == 50
