"""Persistent publishes to a subscription with a selector on another node: only what the
selector accepts is stored and forwarded on the link (the store-and-forward queue counts
prove it), and it arrives exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import LinkConfig

WAIT = 20.0


def test_persistent_messages_are_picked_before_they_are_queued(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    port = free_port()
    a = broker_factory(broker_id="A", port=port, data_dir=tmp_path / "A")
    b = broker_factory(
        broker_id="B",
        data_dir=tmp_path / "B",
        links=(LinkConfig(name="ba", uri=f"tcp://127.0.0.1:{port}"),),
    )
    got = Collector()
    client_factory(b.endpoint).subscribe("P.>", got, selector="qty >= 40")
    pub = client_factory(a.endpoint)
    assert wait_until(
        lambda: any(r.get("selectors") == ["(qty >= 40)"] for r in pub.routes("P.>")), WAIT
    )
    n = 50
    for i in range(n):
        pub.publish("P.x", i, {"qty": i}, persistent=True, confirm=True)
    assert got.wait_for(10, WAIT)
    assert wait_until(lambda: a.status()["forward"]["held"] == 0, WAIT)
    assert a.status()["forward"]["queued"] == 10  # 40..49: nothing else was stored for B
    assert [m.payload for m in got.snapshot()] == list(range(40, 50))
