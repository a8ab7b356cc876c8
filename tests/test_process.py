"""zbroker.process: the garbage-collector settings `zbroker start` applies to its process."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from zbroker import Broker, tune_gc, tune_malloc
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


def test_an_embedded_broker_leaves_the_allocator_alone() -> None:
    # (a test process that never called tune_malloc: see the subprocess tests below)
    with Broker(host="127.0.0.1", port=0, discovery=False) as broker:
        assert broker.status()["malloc"] == {"tuned": False}


#: run in a fresh interpreter: allocate 3 blocks of 1 MiB, free them, 200 times; print the
#: minor page faults that took (glibc's own thresholds hand the freed 3 MiB back to the
#: kernel every time, a tuned process keeps them)
_CHURN = """
import resource, sys
from zbroker.process import tune_malloc, malloc_status
tuned = sys.argv[1] == "tuned" and tune_malloc()
def churn():
    blocks = [bytearray(1 << 20) for _ in range(3)]
    for b in blocks:
        b[::4096] = b"x" * len(range(0, len(b), 4096))  # touch every page
    del blocks
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    churn()
print(tuned, malloc_status()["tuned"], resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tune_malloc_keeps_freed_blocks_from_going_back_to_the_kernel() -> None:
    def faults(mode: str) -> tuple[str, str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, check=True
        ).stdout.split()
        return out[0], out[1], int(out[2])

    tuned, tuned_status, tuned_faults = faults("tuned")
    plain, plain_status, plain_faults = faults("plain")
    assert (tuned, tuned_status, plain, plain_status) == ("True", "True", "False", "False")
    # untuned: every round faults the 3 MiB in again (768 pages; 200 rounds > 100,000)
    assert plain_faults > 100_000, plain_faults
    # tuned: the heap keeps them; what is left is the interpreter's own churn
    assert tuned_faults < plain_faults // 20, (tuned_faults, plain_faults)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mmap_threshold": 0}, "mmap_threshold must be"),
        ({"mmap_threshold": (32 << 20) + 1}, "mmap_threshold must be"),
        ({"trim_threshold": -1}, "trim_threshold must be"),
    ],
)
def test_tune_malloc_refuses_thresholds_glibc_would_not_take(
    kwargs: dict[str, int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        tune_malloc(**kwargs)
