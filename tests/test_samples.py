"""The sample configs and topologies shipped in config/ stay valid (the README points at them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zbroker import load_config
from zbroker.simulate import load_topology, run_simulation

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "config").glob("*.toml"))


def test_there_are_samples() -> None:
    names = {p.name for p in CONFIGS}
    assert {
        "node.toml",
        "chain-a.toml",
        "chain-b.toml",
        "chain-c.toml",
        "ring-a.toml",
        "hub.toml",
        "spoke-1.toml",
        "filtered-link.toml",
    } <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_sample_config_loads(path: Path) -> None:
    config = load_config(path)
    assert config.broker_id


def test_filtered_link_sample_has_the_documented_filters() -> None:
    (link,) = load_config(ROOT / "config" / "filtered-link.toml").links
    assert link.include == ("PRICE.STOCK.>", "ALERT.>")  # the static alerts may cross
    assert link.exclude == ("PRICE.STOCK.NYSE.*",)
    assert link.static == ("ALERT.>",)


def test_ring_topology_sample_simulates_without_duplicates_or_loss() -> None:
    report = run_simulation(load_topology(ROOT / "config" / "topologies" / "ring.toml"))
    assert (report.nodes, report.links, report.publishes) == (3, 3, 100)
    assert report.deliveries == report.expected == 100
    assert report.duplicates == 0
    assert report.lost == 0
    assert report.non_shortest == 0
    assert report.frames_per_publish == 1.0  # A reaches C directly, one copy
