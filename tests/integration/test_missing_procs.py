"""Missing-topic notifications with real ``zbroker`` processes, two tiers of fan-out:
P <- S1 <- S2 (each secondary replicates ``PRICE.>`` from the one before). A handler
client on P; a subscribe on S2 to a topic that does not exist reaches it (node S2), the
handler creates the topic on P and proceeds, and the subscriber gets it once through both
tiers; a cancel raises SubscriptionCancelled on S2; with the handler gone, no handler is
reachable and the request proceeds, counted. Every process is stopped by PID."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import link_toml, node_toml
from zbroker import Client
from zbroker.client.state import MissingTopic
from zbroker.errors import SubscriptionCancelled

from .test_replication_procs import ep

pytestmark = pytest.mark.slow

WAIT = 60.0


def status(port: int) -> dict[str, Any]:
    with Client(ep(port), timeout=5.0) as c:
        result: dict[str, Any] = c.status()
        return result


def test_two_tiers_of_fan_out_reach_the_primary_handler(
    procs: Any, tmp_path: Path, free_port: Callable[[], int], wait_ready: Any
) -> None:
    ports = {n: free_port() for n in ("P", "S1", "S2")}
    up = {"P": None, "S1": "P", "S2": "S1"}
    for name, primary in up.items():
        links = "" if primary is None else link_toml("fan", ports[primary], replicate=["PRICE.>"])
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(node_toml(name, ports[name], tmp_path / name, links))
        wait_ready(ep(ports[name]), WAIT, procs.zbroker("start", "--config", str(cfg)))
    for name in ("S1", "S2"):
        deadline = time.monotonic() + WAIT
        while status(ports[name]).get("replication", {}).get("fan", {}).get("state") != "in sync":
            assert time.monotonic() < deadline, status(ports[name])
            time.sleep(0.1)
    notices: list[MissingTopic] = []
    maker = Client(ep(ports["P"]), timeout=10.0)

    def handler(notice: MissingTopic) -> str:
        notices.append(notice)
        if notice.pattern.endswith("NO"):
            return "cancel"
        maker.set(notice.pattern, "made")
        return "proceed"

    owner = Client(ep(ports["P"]), timeout=10.0)
    owner.on_missing_topic("PRICE.>", handler)
    sub = Client(ep(ports["S2"]), timeout=10.0)
    inbox = Collector()
    sub.subscribe("PRICE.NEW", inbox)
    assert [(n.pattern, n.node, n.branch) for n in notices] == [("PRICE.NEW", "S2", "PRICE.>")]
    assert inbox.wait_for(1)
    time.sleep(0.5)
    assert [(m.topic, m.payload) for m in inbox.snapshot()] == [("PRICE.NEW", "made")]
    with pytest.raises(SubscriptionCancelled):
        sub.subscribe("PRICE.NO", inbox)
    with pytest.raises(SubscriptionCancelled):
        sub.fetch("PRICE.NO")
    owner.close()  # the handler's connection goes: nobody left to ask
    assert sub.fetch("PRICE.GONE") == []
    missing = status(ports["S2"])["state"]["missing"]
    assert (missing["cancelled"], missing["unhandled"]) == (2, 1)
    assert len(notices) == 3
    sub.close()
    maker.close()
