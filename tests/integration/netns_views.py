"""What the nodes of the netns LAN (:mod:`.netns_lan`) show, and waiting for it: the full
mesh every node's ``peers`` and ``status`` must show once discovery is done, polled from
inside the namespaces; a peer gone from the monitors' views; routes a node has learnt;
the figures a module measures (written to ``/tmp/zbroker_netns_figures.json`` and printed:
run with ``-s``). Waits are bounded polls on conditions, never fixed sleeps."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns_lan import WAIT, Helper, Net, endpoint, v4

FIGURES_FILE = Path("/tmp/zbroker_netns_figures.json")


@pytest.fixture(scope="module")
def figures() -> Iterator[dict[str, Any]]:
    """Measured figures of this module; written to FIGURES_FILE and printed at the end."""
    data: dict[str, Any] = {}
    yield data
    if data:
        out = {
            "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "setup": "zbroker start processes in 3 Linux network namespaces on one bridge "
            "(veth), default link heartbeats (1 s / 3 s), default client heartbeats "
            "(0.5 s / 1.5 s)",
            **data,
        }
        FIGURES_FILE.write_text(json.dumps(out, indent=2) + "\n", "utf-8")
        print(f"\nzbroker netns figures ({FIGURES_FILE}):\n{json.dumps(out, indent=2)}")


def expected_mesh(nodes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What ``peers`` and ``status`` of each node must show once the nodes ({id: endpoint},
    one group) have found each other: one link per pair, dialled by the lower ID."""
    out: dict[str, dict[str, Any]] = {}
    for a in nodes:
        peers: dict[str, Any] = {}
        links: list[tuple[str, str, str, str]] = []
        for b in nodes:
            if a == b:
                continue
            if a < b:
                peers[b] = (("mdns",), "up", nodes[b], (f"mdns-{b}",))
                links.append((f"mdns-{b}", "discovered", b, "up"))
            else:
                peers[b] = (("inbound", "mdns"), "up", nodes[b], (f"mdns-{a}",))
                links.append((f"mdns-{a}", "accepted", b, "up"))
        out[a] = {"peers": peers, "links": sorted(links)}
    return out


def view_of(peers: Any, status: Any) -> dict[str, Any] | None:
    if peers is None or status is None:
        return None
    return {
        "peers": {
            p["id"]: (tuple(p["found_by"]), p["state"], p["endpoint"], tuple(p["links"]))
            for p in peers
        },
        "links": sorted(
            (ln["name"], ln["kind"], ln["peer"], ln["state"]) for ln in status["links"]
        ),
    }


def poll_views(net: Net, where: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """peers + status of every node ({id: (namespace index, endpoint)}), concurrently."""

    def one(job: tuple[str, str]) -> Any:
        node_id, what = job
        i, ep = where[node_id]
        return net.peers(i, ep) if what == "peers" else net.status(i, ep)

    jobs = [(node_id, what) for node_id in where for what in ("peers", "status")]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = dict(zip(jobs, pool.map(one, jobs), strict=True))
    return {node_id: (results[node_id, "peers"], results[node_id, "status"]) for node_id in where}


def wait_mesh(net: Net, where: dict[str, tuple[int, str]], timeout: float = WAIT) -> dict[str, Any]:
    """Poll until every node's peers and links are exactly the expected full mesh; assert
    equality (with the last views in the message) when the time is up. Returns the raw
    (peers, status) per node."""
    expected = expected_mesh({k: ep for k, (_, ep) in where.items()})
    deadline = time.monotonic() + timeout
    while True:
        raw = poll_views(net, where)
        views = {k: view_of(*v) for k, v in raw.items()}
        if views == expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # pacing of the poll only
    assert views == expected
    return raw


def log_time(line: str) -> float:
    """The epoch time of a log line from ``zbroker start`` (asctime, local time, ms)."""
    stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def wait_gone(monitors: dict[str, Helper], peer: str, since: int = 0) -> dict[str, float]:
    """Wait until ``peer`` is in none of the monitored nodes' peers (nor their links);
    the time each one first showed that."""
    out: dict[str, float] = {}
    for node_id, mon in monitors.items():
        ev = mon.wait_for(
            lambda e: (
                e.get("event") == "view"
                and peer not in e["peers"]
                and all(ln[2] != peer for ln in e["links"])
            ),
            start=since,
        )
        out[node_id] = ev["t"]
    return out


def start_mesh(net: Net, group: str, n: int = 3) -> dict[str, tuple[int, str]]:
    for i in range(1, n + 1):
        net.start_node(i, f"n{i}", group)
    return {f"n{i}": (i, endpoint(v4(i))) for i in range(1, n + 1)}


def start_monitors(
    net: Net, where: dict[str, tuple[int, str]], watch: tuple[str, ...]
) -> dict[str, Helper]:
    """Monitors on the nodes ``watch``, each once it shows every other node of ``where``
    as a peer with its link up."""
    mons = {
        node_id: net.helper(where[node_id][0], "monitor", "--broker", where[node_id][1])
        for node_id in watch
    }
    for node_id, mon in mons.items():
        mon.wait_for(partial(_all_up, set(where) - {node_id}))
    return mons


def _all_up(others: set[str], e: dict[str, Any]) -> bool:
    """Is ``e`` a monitor's view showing exactly ``others`` as peers, every one up?"""
    return (
        e.get("event") == "view"
        and set(e["peers"]) == others
        and all(p["state"] == "up" for p in e["peers"].values())
    )


@contextlib.contextmanager
def precondition(what: str) -> Iterator[None]:
    """In an xfail(raises=AssertionError) test: a failing precondition is a real failure,
    not the expected one."""
    try:
        yield
    except AssertionError as exc:
        pytest.fail(f"precondition failed ({what}): {exc}")


def incarnation(stderr: str) -> int:
    """The incarnation a node's start line names ("node n3 (incarnation N, ...")."""
    found = re.search(r"node \S+ \(incarnation (\d+)", stderr)
    assert found is not None, stderr
    return int(found.group(1))


def poll_routes(
    net: Net, i: int, topic: str, done: Callable[[list[dict[str, Any]]], bool], *auth: str
) -> list[dict[str, Any]]:
    """``zbroker routes TOPIC`` of the node in namespace i, polled until ``done`` holds of
    them or WAIT has passed; the last routes."""
    deadline = time.monotonic() + WAIT
    while True:
        routes = net.cli(i, "routes", topic, "--json", "--broker", endpoint(v4(i)), *auth) or []
        if done(routes) or time.monotonic() > deadline:
            return list(routes)
        time.sleep(0.1)
