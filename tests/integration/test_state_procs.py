"""Topics with state with real ``zbroker`` processes: the owner killed with SIGKILL keeps
its values; a late ``zbroker sub --json`` two hops from the owner, with a writer running,
prints every current value, the snapshot-complete marker, then every later update once;
the CLI's ``set``, ``fetch``, ``topics`` and ``remove``. Every process is stopped by PID
(the ``procs`` fixture)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.node_configs import link_toml, node_toml
from zbroker import Client

from .test_state import Writer

pytestmark = pytest.mark.slow

WAIT = 60.0


def ep(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


def start_chain(procs: Any, tmp: Path, free_port: Callable[[], int], wait_ready: Any) -> list[int]:
    ports = [free_port() for _ in range(3)]
    for i, name in enumerate("ABC"):
        links = "" if i == 0 else link_toml(f"to{i - 1}", ports[i - 1])
        cfg = tmp / f"{name}.toml"
        cfg.write_text(node_toml(name, ports[i], tmp / name, links))
        wait_ready(ep(ports[i]), WAIT, procs.zbroker("start", "--config", str(cfg)))
    for port, n in zip(ports, (1, 2, 1), strict=True):
        deadline = time.monotonic() + WAIT
        while True:
            with Client(ep(port), timeout=5.0) as c:
                if sum(ln["state"] == "up" for ln in c.status()["links"]) == n:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)
    return ports


def test_kill_9_of_the_owner_keeps_its_values_and_the_cli(
    procs: Any, tmp_path: Path, free_port: Callable[[], int], wait_ready: Any
) -> None:
    port = free_port()
    data = tmp_path / "data"
    node = procs.zbroker("start", "--port", str(port), "--data-dir", str(data))
    wait_ready(ep(port), WAIT, node)
    for topic, value in (("CFG.mode", "fast"), ("CFG.level", "3"), ("CFG.old", "x")):
        rc, _, err = procs.run("set", topic, value, "--broker", ep(port))
        assert rc == 0 and f"set {topic} version" in err, err
    rc, _, err = procs.run("remove", "CFG.old", "--broker", ep(port))
    assert rc == 0 and "removed 1 topic(s)" in err, err
    node.send_signal(signal.SIGKILL)
    node.wait(WAIT)
    node = procs.zbroker("start", "--port", str(port), "--data-dir", str(data))
    wait_ready(ep(port), WAIT, node)
    rc, out, err = procs.run("fetch", "CFG.>", "--json", "--broker", ep(port))
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["topic"], r["payload"], r["initial"]) for r in rows] == [
        ("CFG.level", "3", True),
        ("CFG.mode", "fast", True),
    ]
    rc, out, err = procs.run("topics", "--json", "--broker", ep(port))
    assert rc == 0, err
    listed = [json.loads(line) for line in out.splitlines()]
    assert [(r["topic"], r["size"], r["replica_of"]) for r in listed] == [
        ("CFG.level", 1, None),
        ("CFG.mode", 4, None),
    ]
    rc, out, _ = procs.run("topics", "--broker", ep(port))
    assert rc == 0 and "CFG.mode" in out and "REPLICA OF" in out


def test_late_cli_subscriber_two_hops_away_with_a_writer_running(
    procs: Any, tmp_path: Path, free_port: Callable[[], int], wait_ready: Any
) -> None:
    ports = start_chain(procs, tmp_path, free_port, wait_ready)
    writer = Writer(ep(ports[0]), "PX")
    writer.start()
    try:
        deadline = time.monotonic() + WAIT
        while len(writer.writes) < 50:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sub = procs.zbroker("sub", "PX.>", "--json", "--broker", ep(ports[2]))
        assert sub.wait_stderr("subscribed to PX.>", WAIT), sub.stderr_text()
        n = len(writer.writes)
        while len(writer.writes) < n + 100:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        writer.finish()
    last = {w[0]: w[1] for w in writer.writes}
    lines: list[dict[str, Any]] = []
    while not all(
        any(r.get("topic") == t and r["payload"] == v for r in lines) for t, v in last.items()
    ):
        line = sub.readline(WAIT)
        assert line is not None, sub.stderr_text()
        lines.append(json.loads(line))
    marker = lines.index({"snapshot": "complete", "pattern": "PX.>"})
    initial, live = lines[:marker], lines[marker + 1 :]
    assert len(initial) == 5 and all(r["initial"] for r in initial)
    assert not any(r["initial"] for r in live)
    for topic in last:
        mine = [w for w in writer.writes if w[0] == topic]
        (first,) = [r for r in initial if r["topic"] == topic]
        start = next(i for i, w in enumerate(mine) if w[2] == first["version"])
        seen = [(r["payload"], r["version"]) for r in lines if r.get("topic") == topic]
        assert seen == [(w[1], w[2]) for w in mine[start:]], topic
