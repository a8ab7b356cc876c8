"""``zbroker events`` against real ``zbroker start`` processes: node a (configured by a TOML
file with an ``[advisories]`` table) linked to node b; the events command follows a's
advisories from b, one line each, in JSON and in text."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.processes import Procs
from zbroker import Client

HOST = "127.0.0.1"
WAIT = 20.0


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def _start_pair(
    procs: Procs, free_port: Callable[[], int], wait_ready: Callable[..., Any], tmp_path: Path
) -> tuple[str, str]:
    pa, pb = free_port(), free_port()
    node_b = procs.zbroker(
        "start", "--id", "b", "--port", str(pb), "--data-dir", str(tmp_path / "b")
    )
    config = tmp_path / "a.toml"
    config.write_text(
        f'[node]\nid = "a"\nport = {pa}\n\n'
        "[advisories]\nsys_interval = 0.5\nsummary_interval = 0.2\n\n"
        f'[[link]]\nname = "ab"\nuri = "{endpoint(pb)}"\n'
    )
    node_a = procs.zbroker("start", "--config", str(config), "--data-dir", str(tmp_path / "a"))
    wait_ready(endpoint(pb), WAIT, node_b)
    wait_ready(endpoint(pa), WAIT, node_a)
    return endpoint(pa), endpoint(pb)


def _wait_route(client: Client, pattern: str, origin: str, wait_until: Callable[..., bool]) -> None:
    assert wait_until(
        lambda: any(
            r["pattern"] == pattern and r["origin"] == origin for r in client.routes(pattern)
        ),
        WAIT,
    ), client.routes()


def test_events_json_and_text(
    procs: Procs,
    free_port: Callable[[], int],
    wait_ready: Callable[..., Any],
    wait_until: Callable[..., bool],
    tmp_path: Path,
) -> None:
    a, b = _start_pair(procs, free_port, wait_ready, tmp_path)
    events = procs.zbroker("events", "--broker", b, "--json", "INTEREST_ADDED", "INTEREST_REMOVED")
    assert events.wait_stderr("following $ZB.ADVISORY.*.INTEREST_ADDED", WAIT), events.stderr_text()
    with Client(a, timeout=10) as ca:
        _wait_route(ca, "$ZB.ADVISORY.*.INTEREST_REMOVED", "b", wait_until)
        sub = ca.subscribe("APP.X", lambda m: None)
        sub.unsubscribe()
        lines = [events.readline(WAIT), events.readline(WAIT)]
        assert None not in lines, events.stderr_text()
        got = [json.loads(line or "") for line in lines]
        assert [(e["kind"], e["broker"], e["pattern"], e["source"]) for e in got] == [
            ("INTEREST_ADDED", "a", "APP.X", "clients"),
            ("INTEREST_REMOVED", "a", "APP.X", "clients"),
        ]
        assert got[0]["topic"] == "$ZB.ADVISORY.a.INTEREST_ADDED"
        assert got[1]["seq"] == got[0]["seq"] + 1

    # text, STATS (every 0.5 s by a's [advisories] table), --count ends it
    rc, out, err = procs.run("events", "--broker", b, "-n", "2", "STATS", timeout=WAIT)
    assert rc == 0, err
    stats = out.splitlines()
    assert len(stats) == 2
    for line in stats:
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 [ab] STATS ", line), line
        assert " counters={" in line and " rates={" in line
    assert "Traceback" not in err


def test_events_rejects_a_bad_kind(procs: Procs) -> None:
    rc, _out, err = procs.run("events", "--broker", endpoint(1), "link_down", timeout=WAIT)
    assert rc == 2
    assert "'link_down' is not a kind" in err
