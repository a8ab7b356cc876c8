"""zbroker.process: the garbage-collector settings `zbroker start` applies to its process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from zbroker import Broker, tune_gc
from zbroker.process import DEFAULT_GC_YOUNG_THRESHOLD, gc_status


@pytest.fixture
def restore_gc() -> Iterator[None]:
    """Put the test process's collector back as it was, whatever the test did."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_tune_gc_freezes_what_exists_and_raises_the_young_threshold(restore_gc: None) -> None:
    _, older, oldest = gc.get_threshold()
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    tune_gc()
    assert gc.get_threshold() == (DEFAULT_GC_YOUNG_THRESHOLD, older, oldest)
    # everything tracked at the call is out of the collector's view (modules, classes...)
    frozen = gc.get_freeze_count()
    assert frozen > 1000
    status = gc_status()
    assert status["threshold"] == [DEFAULT_GC_YOUNG_THRESHOLD, older, oldest]
    # a frozen object freed meanwhile (another test's thread ending) lowers the count, so
    # the status is bracketed by the counts read before and after it, never equal-compared
    assert frozen >= status["frozen"] >= gc.get_freeze_count() > 1000
    assert status["enabled"] is True


def test_tune_gc_still_collects_cycles(restore_gc: None) -> None:
    tune_gc(young_threshold=50)
    before = gc.get_stats()[0]["collections"]

    class Node:
        other: object = None

    for _ in range(200):  # cycles that only the collector can free
        a, b = Node(), Node()
        a.other, b.other = b, a
    assert gc.get_stats()[0]["collections"] > before


@pytest.mark.parametrize("bad", [0, -1])
def test_tune_gc_refuses_a_threshold_below_one(restore_gc: None, bad: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        tune_gc(young_threshold=bad)


def test_an_embedded_broker_leaves_the_collector_alone(restore_gc: None) -> None:
    gc.unfreeze()
    threshold = gc.get_threshold()
    with Broker(host="127.0.0.1", port=0, discovery=False) as broker:
        status = broker.status()["gc"]
    assert gc.get_threshold() == threshold
    assert status["threshold"] == list(threshold)
    assert status["frozen"] == 0
    assert len(status["collections"]) == 3
