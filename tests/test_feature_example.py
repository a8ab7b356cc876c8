"""The worked example of docs/architecture.md ("Adding a capability"), run on a node: the
smallest feature there is — interest, a sink, an op and a status section — works as the
document says, and exactly: every message on its branch counted once, none other."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from zbroker import Broker, Client
from zbroker.config import NodeConfig
from zbroker.node import Feature, Op
from zbroker.node.context import Context

COUNT_OP = 99  # an op number no feature of zbroker uses


class TopicCount(Feature):
    """Counts the messages on topics under ``pattern`` and says how many (op ``op``)."""

    name = "topic-count"
    sink_sources = ("count",)  # interest added under this source feeds sink()

    def __init__(self, pattern: str, op: int) -> None:
        self.pattern, self.op, self.seen = pattern, op, 0

    def attach(self, ctx: Context) -> None:
        self.ctx = ctx
        ctx.add_interest(self.pattern, "count")  # the network brings these topics here

    def sink(self, batch: list[list[Any]]) -> None:
        self.seen += len(batch)  # once per pipeline batch, never per message

    def ops(self) -> Sequence[Op]:
        return (Op(self.op, lambda req: self.ctx.reply(req, self.op, {"seen": self.seen})),)

    def status(self, out: dict[str, Any]) -> None:
        out["topic_count"] = {"pattern": self.pattern, "seen": self.seen}


class CountingBroker(Broker):
    def _features(self, config: NodeConfig) -> list[Feature]:
        return [*super()._features(config), TopicCount("DEMO.>", COUNT_OP)]


def test_the_smallest_feature_counts_its_branch_exactly() -> None:
    with CountingBroker(port=0) as broker, Client(broker.endpoint) as client:
        for i in range(1_000):
            client.publish(f"DEMO.{i % 7}", b"x")
            client.publish("OTHER.X", b"y")
        client.publish("DEMO.END", b"")
        deadline = time.monotonic() + 10
        while client.request(COUNT_OP)["seen"] < 1_001 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # anything counted twice, or off the branch, would show now
        assert client.request(COUNT_OP) == {"seen": 1_001}
        assert broker.status()["topic_count"] == {"pattern": "DEMO.>", "seen": 1_001}
        assert "DEMO.>" in broker.status()["subscriptions"]["patterns"]
