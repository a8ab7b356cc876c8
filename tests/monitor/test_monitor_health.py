"""The monitor's /healthz on in-thread nodes and on a hub alone: 503 while the store is
not writable or the node loop stalls (and 200 again after), and a starting loop's first
tick waited for, not taken for a stopped loop."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.monitor.helpers import FAST_MONITOR, get, monitor_url, sample, scrape
from zbroker import Broker
from zbroker.features.monitor import Monitor
from zbroker.features.monitor.feature import MonitorHub
from zbroker.features.monitor.snapshot import Snapshot

BrokerFactory = Callable[..., Broker]
WAIT = 20.0


def _wait(cond: Callable[[], bool], timeout: float = WAIT) -> bool:
    return wait_until(cond, timeout, 0.05)


def test_healthz_503_when_store_not_writable(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "locked"
    a = broker_factory(monitor=FAST_MONITOR, data_dir=data_dir)
    url = monitor_url(a)
    assert get(url + "/healthz") == (200, b'{"healthy": true, "reason": "ok"}')
    unlock = _make_unwritable(data_dir)
    try:

        def unhealthy() -> bool:
            code, body = get(url + "/healthz")
            return code == 503 and b"not writable" in body

        assert _wait(unhealthy)
        assert sample(scrape(url), "zbroker_store_writable") == 0
    finally:
        unlock()
    assert _wait(lambda: get(url + "/healthz")[0] == 200)


def _make_unwritable(path: Path) -> Callable[[], None]:
    """A directory nobody may create files in: immutable for root (which ignores mode
    bits), read-only for anyone else; returns the undo."""
    if os.geteuid() != 0:
        path.chmod(0o500)
        return lambda: path.chmod(0o700)
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root without chattr: cannot make a directory unwritable")
    subprocess.run([chattr, "+i", str(path)], check=True, timeout=10)

    def undo() -> None:
        subprocess.run([chattr, "-i", str(path)], check=True, timeout=10)

    return undo


def test_healthz_503_when_the_loop_stalls(broker_factory: BrokerFactory) -> None:
    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    monitor = a.call(lambda node: next(f for f in node.features if isinstance(f, Monitor)))
    monitor.hub.loop_stall = 0.5
    assert get(url + "/healthz")[0] == 200
    node, cmd = a._node, a._cmd
    assert node is not None and cmd is not None  # (a started broker has both)
    stall = node.submit(lambda node: time.sleep(3.0))
    cmd.send(b"call")
    assert _wait(lambda: get(url + "/healthz")[0] == 503, 2.5)
    code, body = get(url + "/healthz")
    assert code == 503 and b"has not run for" in body
    stall.result(10)
    assert _wait(lambda: get(url + "/healthz")[0] == 200)


def _snapshot_now(store_error: str | None = None) -> Snapshot:
    return Snapshot(time.monotonic(), time.time(), {}, {}, {}, store_error, 0)


def test_healthz_waits_for_a_starting_loops_first_tick() -> None:
    """A node whose loop has not ticked yet (just started, on a busy machine) is starting,
    not stopped: /healthz waits for the first tick's snapshot instead of answering 503."""
    hub = MonitorHub(0.1)
    asked: list[bool] = []

    def first_tick() -> None:
        time.sleep(0.3)
        asked.append(hub.want)  # the waiting reader asked for a snapshot
        hub.beat = time.monotonic()
        hub.publish(_snapshot_now())

    loop = threading.Thread(target=first_tick)
    loop.start()
    try:
        assert hub.health() == (True, "ok")
    finally:
        loop.join()
    assert asked == [True]
    hub.stopped, hub.beat = True, 0.0  # what Monitor.stop does when the loop ends
    started = time.monotonic()
    assert hub.health() == (False, "the node loop is not running")
    assert time.monotonic() - started < 0.5  # a stopped loop is not waited for
