"""The randomized fault test of issue 18, small: a 5-node mesh under faults (SIGKILL and
restart, SIGSTOP/SIGCONT, a cut of one link between two running nodes through a TCP relay,
publisher failover, a slow durable subscriber) with persistent
publishers, durable subscribers and a live stream; the history is checked by
``benchmarks/fault_mesh.py`` (its docstring lists the checks; its long run is in
docs/performance.md). Every process is stopped by PID (the ``procs`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fault_mesh import NODES, run

from tests.processes import ZBROKER_SCRIPT

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", [8, 13])  # each: a link cut, a SIGKILL and a SIGSTOP
def test_a_mesh_under_random_faults_loses_and_doubles_nothing(
    seed: int,
    procs: Any,
    tmp_path: Path,
    free_port: Callable[[], int],
    wait_until: Callable[..., bool],
) -> None:
    ports = {name: free_port() for name in NODES}
    report = run(
        procs.start, tmp_path, ports, wait_until,
        zbroker=str(ZBROKER_SCRIPT), seconds=25.0, faults=3, seed=seed,
    )  # fmt: skip
    print(report)
    assert report.problems == []
    assert report.confirmed == {"P1": 1000, "P2": 1000}  # 25 s at 40 msg/s each
    assert report.delivered == {"d4": 2000, "d5": 2000}
    assert report.live_sent > 0 and report.live_received > 0
