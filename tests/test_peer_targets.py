"""``benchmarks/peer_targets.py``: issue 19's targets judged round by round on
``bench_peers.py``'s results (runs of the same round paired, not medians)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
KEYS = ("node-100", "node-1024", "chain-100", "chain-1024")


@pytest.fixture
def pt(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import peer_targets as module

    return module


def _run(rate: float, lost: int = 0, p50: float = 0.0, p99: float = 0.0) -> dict[str, Any]:
    return {"rate": rate, "lost": lost, "latency": {"p50_ms": p50 / 1e3, "p99_ms": p99 / 1e3}}


def _results(
    zb: Sequence[float], zen: Sequence[float], lat: Sequence[tuple[float, float, float, float]]
) -> dict[str, Any]:
    """Every throughput row with these rates per round; latency (zb p50, p99, zenoh's)."""
    out: dict[str, Any] = {"zbroker": {}, "zenoh": {}}
    for key in KEYS:
        out["zbroker"][key] = [_run(r) for r in zb]
        out["zenoh"][key] = [_run(r) for r in zen]
    out["zbroker"]["chain-lat"] = [_run(2000, 0, a, b) for a, b, _, _ in lat]
    out["zenoh"]["chain-lat"] = [_run(2000, 0, c, d) for _, _, c, d in lat]
    return out


def test_rounds_needed_is_three_of_five(pt: Any) -> None:
    assert [pt.rounds_needed(n) for n in (1, 2, 3, 4, 5, 10)] == [1, 2, 2, 3, 3, 6]


def test_each_round_is_judged_against_the_same_rounds_peer(pt: Any) -> None:
    # medians would read 1.10x on both sides; round by round zbroker is ahead 3 times
    res = _results(
        [110, 121, 100, 110, 90], [100, 110, 100, 100, 100],
        [(290, 900, 300, 950)] * 3 + [(310, 900, 350, 950), (250, 1100, 300, 1200)],
    )  # fmt: skip
    rows = pt.targets(res)
    assert [label.split(",")[0] for label, _, _ in rows[:4]] == [
        "one node", "one node", "3-node chain", "3-node chain",
    ]  # fmt: skip
    _, ratios, oks = rows[0]
    assert ratios == pytest.approx([1.1, 1.1, 1.0, 1.1, 0.9])
    assert oks == [True, True, False, True, False]
    _, _, p50 = rows[4]  # round 4: ahead of Zenoh but over 300 µs
    assert p50 == [True, True, True, False, True]
    _, _, p99 = rows[5]  # round 5: ahead of Zenoh but over 1 ms
    assert p99 == [True, True, True, True, False]
    assert pt.print_targets(res) is True


def test_a_lost_message_or_a_slower_round_is_not_met(
    pt: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    res = _results([120] * 5, [100] * 5, [(290, 800, 280, 900)] * 5)
    res["zbroker"]["chain-1024"][0]["lost"] = 1
    res["zbroker"]["chain-1024"][1]["lost"] = 3
    res["zbroker"]["chain-1024"][2]["lost"] = 1
    assert pt.print_targets(res) is False
    out = capsys.readouterr().out
    row = "3-node chain, 1 KiB, >= 1.1x, 0 lost  1.20  1.20  1.20  1.20* 1.20*  2 of 5: NOT met"
    assert row in out
    assert "chain p50 <= Zenoh's and <= 300 us" in out and "0 of 5: NOT met" in out
    assert "rows met: 4 of 6" in out


def test_without_zenoh_nothing_is_judged(pt: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert pt.print_targets({"zbroker": {}}) is False
    assert capsys.readouterr().out == ""
