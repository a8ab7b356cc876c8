"""A slow callback is the subscriber's business: it neither fails its node over nor loses
messages without counting them (issue 18, item 6)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from zbroker import Broker, Client, Message

#: more frames than the client thread reads in one go (1,024 before the fix), so a
#: failover in the middle leaves frames queued
STREAM = 1500


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_a_slow_callback_keeps_its_node_and_counts_every_loss(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    caplog: pytest.LogCaptureFixture,
) -> None:
    node = broker_factory(broker_id="SLOW")
    # the client's default heartbeat (0.5 s, dead after 1.5 s without an answer)
    sub = client_factory(node.endpoint)
    got: list[int] = []
    lock = threading.Lock()

    def slow(m: Message) -> None:
        time.sleep(0.005)  # the stream takes ~7 s to consume: far past 1.5 s
        with lock:
            got.append(int(m.payload))

    sub.subscribe("S.>", slow)
    pub = client_factory(node.endpoint)
    caplog.set_level(logging.INFO, logger="zbroker.client")
    for i in range(STREAM):
        pub.publish("S.X", b"%d" % i)
        time.sleep(0.001)  # paced: a delivery frame per message, so many frames queue

    # drained: what came, came; a drop at the end of a stream is seen on the next message
    def settled() -> bool:
        n = len(got)
        time.sleep(0.5)
        return len(got) == n

    assert _wait(settled, 30.0)
    pub.publish("S.X", b"%d" % STREAM)
    assert _wait(lambda: bool(got) and got[-1] == STREAM, 10.0), got[-5:]
    lost = [r.getMessage() for r in caplog.records if "lost node" in r.getMessage()]
    assert lost == []  # no false "node lost": the node answered every ping
    assert len(got) == len(set(got))
    assert len(got) + sub.missed == STREAM + 1, (len(got), sub.missed)
    assert got == sorted(got)

