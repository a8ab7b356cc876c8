"""Fan-out replication with real ``zbroker`` processes: primary P, secondary S (S dials P
with ``replicate = ["PRICE.>"]``), a subscriber on S. A short cut (S stopped 3 s while a
writer sets values on P) resumes: the subscriber's updates per topic stay in order, none
twice, and end with P's values; a restart of P (SIGKILL, start again: a session that
cannot resume) removes the replicas (the subscriber told) and recreates them. Every
process is stopped by PID (the ``procs`` fixture)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.node_configs import link_toml, node_toml
from zbroker import Client
from zbroker.stateful import REMOVED, SESSION_LOST

from .test_state import Writer

pytestmark = pytest.mark.slow

WAIT = 60.0


def ep(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


class Fan:
    def __init__(self, procs: Any, tmp: Path, free_port: Callable[[], int], wait_ready: Any):
        self.procs, self.wait_ready = procs, wait_ready
        self.ports = {"P": free_port(), "S": free_port()}
        self.cfg = {}
        for name, links in (
            ("P", ""),
            ("S", link_toml("fan", self.ports["P"], replicate=["PRICE.>"])),
        ):
            path = tmp / f"{name}.toml"
            path.write_text(node_toml(name, self.ports[name], tmp / name, links))
            self.cfg[name] = path
        self.proc: dict[str, Any] = {}

    def start(self, name: str) -> None:
        self.proc[name] = self.procs.zbroker("start", "--config", str(self.cfg[name]))
        self.wait_ready(ep(self.ports[name]), WAIT, self.proc[name])

    def replication(self) -> dict[str, Any]:
        try:
            with Client(ep(self.ports["S"]), timeout=3.0) as c:
                rep: dict[str, Any] = c.status()["replication"]["fan"]
                return rep
        except Exception as exc:
            return {"error": str(exc)}

    def wait(self, cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while True:
            rep = self.replication()
            if "error" not in rep and cond(rep):
                return rep
            assert time.monotonic() < deadline, rep
            time.sleep(0.1)


def values(endpoint: str) -> dict[str, Any]:
    with Client(endpoint, timeout=10.0) as c:
        return {m.topic: (m.payload, m.version) for m in c.fetch("PRICE.>")}


def test_a_short_cut_resumes_exactly(
    procs: Any, tmp_path: Path, free_port: Callable[[], int], wait_ready: Any
) -> None:
    fan = Fan(procs, tmp_path, free_port, wait_ready)
    fan.start("P")
    fan.start("S")
    fan.wait(lambda r: r["state"] == "in sync")
    # a subscriber that outlasts the cut (its heartbeats tolerate S stopped for 3 s)
    sub = Client(ep(fan.ports["S"]), timeout=10.0, heartbeat_timeout=15.0)
    inbox = Collector()
    writer = Writer(ep(fan.ports["P"]), "PRICE", k=10)
    writer.start()
    try:
        deadline = time.monotonic() + WAIT
        while len(writer.writes) < 30:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sub.subscribe("PRICE.>", inbox)
        time.sleep(0.5)
        fan.proc["S"].send_signal(signal.SIGSTOP)
        time.sleep(3.0)
        fan.proc["S"].send_signal(signal.SIGCONT)
        rep = fan.wait(lambda r: r["state"] == "in sync" and r["syncs"] >= 2)
        n = len(writer.writes)
        while len(writer.writes) < n + 50:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        writer.finish()
    assert rep["sessions_lost"] == 0
    final = values(ep(fan.ports["P"]))
    assert len(final) == 10
    assert inbox.wait_until(
        lambda ms: all(
            any(m.topic == t and m.version == v[1] for m in ms) for t, v in final.items()
        ),
        WAIT,
    )
    time.sleep(0.5)
    written = {(w[0], w[1], w[2]) for w in writer.writes}
    for topic in final:
        seen = [(m.payload, m.version) for m in inbox.snapshot() if m.topic == topic]
        versions = [v for _, v in seen if v is not None]
        assert len(versions) == len(seen), topic  # every one versioned
        assert versions == sorted(set(versions)), topic  # in order, none twice
        assert all((topic, p, v) in written for p, v in seen)
        assert seen[-1] == final[topic]
    assert values(ep(fan.ports["S"])) == final
    sub.close()


def test_a_primary_restart_removes_and_recreates_the_replicas(
    procs: Any, tmp_path: Path, free_port: Callable[[], int], wait_ready: Any
) -> None:
    fan = Fan(procs, tmp_path, free_port, wait_ready)
    fan.start("P")
    with Client(ep(fan.ports["P"]), timeout=10.0) as cp:
        for i in range(10):
            cp.set(f"PRICE.{i}", i)
    fan.start("S")
    fan.wait(lambda r: r["state"] == "in sync" and r["topics"] == 10)
    sub = Client(ep(fan.ports["S"]), timeout=10.0)
    inbox = Collector()
    sub.subscribe("PRICE.>", inbox)
    assert inbox.wait_for(10)
    fan.proc["P"].send_signal(signal.SIGKILL)
    fan.proc["P"].wait(WAIT)
    fan.wait(lambda r: r["state"] == "down")
    fan.start("P")
    rep = fan.wait(lambda r: r["state"] == "in sync" and r["sessions_lost"] == 1)
    assert rep["topics"] == 10
    assert inbox.wait_for(30)
    time.sleep(0.5)
    msgs = inbox.snapshot()
    assert len(msgs) == 30
    lost, back = msgs[10:20], msgs[20:]
    assert all(m.removed and m.headers[REMOVED] == SESSION_LOST for m in lost)
    assert sorted(m.topic for m in lost) == sorted(f"PRICE.{i}" for i in range(10))
    assert {m.topic: m.payload for m in back} == {f"PRICE.{i}": i for i in range(10)}
    assert values(ep(fan.ports["S"])) == values(ep(fan.ports["P"]))
    sub.close()


def test_zbroker_start_refuses_overlapping_branches_naming_both(
    procs: Any, tmp_path: Path, free_port: Callable[[], int]
) -> None:
    cfg = tmp_path / "s.toml"
    links = link_toml("fan", free_port(), replicate=["PRICE.>"]) + link_toml(
        "fan2", free_port(), replicate=["PRICE.EUR.*"]
    )
    cfg.write_text(node_toml("S", free_port(), tmp_path / "S", links))
    rc, _, err = procs.run("start", "--config", str(cfg), timeout=WAIT)
    assert rc != 0
    assert "'fan2' replicates 'PRICE.EUR.*'" in err and "'PRICE.>' replicated by link 'fan'" in err
