"""Query answers with a part missing, on in-thread nodes: a fetch whose removals take
many frames."""

from __future__ import annotations

from pathlib import Path

from zbroker.config import LinkConfig

from .test_durable import FAST_LINK
from .test_replication_sync import (
    BrokerFactory,
    ClientFactory,
    counts,
    wait_for,
)


def test_a_fetch_honours_more_removals_than_one_frame_holds(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    """Y holds older values of N topics that X removed: X's answer to Y's fetch carries N
    removals, far more than one frame of the small max_frame_bytes both nodes have; every
    one of them must reach Y, so none of Y's values comes back."""
    n = 400
    small = {"max_frame_bytes": 1024}
    topics = [f"T.{'x' * 180}.{i:04d}" for i in range(n)]
    y = broker_factory(broker_id="Y", data_dir=tmp_path / "Y", **small)
    cy = client_factory(y.endpoint)
    for t in topics:
        cy.set(t, "old")
    cy.close()
    y.stop()
    x = broker_factory(broker_id="X", **small)
    cx = client_factory(x.endpoint)
    for t in topics:
        cx.set(t, "newer")
    assert cx.remove("T.>") == n
    assert counts(x) == (0, 0, n)
    y_link = LinkConfig(name="yx", uri=x.endpoint, **FAST_LINK)
    y = broker_factory(broker_id="Y", data_dir=tmp_path / "Y", links=(y_link,), **small)
    wait_for(lambda: y.status()["links"][0]["state"] == "up", lambda: y.status()["links"])
    cy = client_factory(y.endpoint)
    assert cy.fetch("T.>") == []  # (X's removals are newer than every value here)
    assert cx.fetch("T.>") == []
    assert y.status()["state"]["queries_expired"] == 0  # (every answer came whole)
    assert counts(y) == (n, 0, 0)  # (Y's values stay stored: nothing makes it give up)
