"""Integration tests of the network side of the ``zbroker`` command line: ``routes``, the
links table of ``status``, and ``start --peer`` (``simulate``: :mod:`.test_simulate_cli`).

In-process tests drive the click group with CliRunner against in-thread Brokers linked on
127.0.0.1. Tests marked ``slow`` run the real console script as a subprocess; the ``procs``
fixture stops every one of them by PID. Waiting is done on conditions, never fixed sleeps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.cli_runs import WAIT, assert_one_line_error, endpoint, invoke, table
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


# -- helpers --------------------------------------------------------------------------------------


def links_table(status_text: str) -> list[dict[str, str]]:
    """The links table of ``zbroker status`` output (the block after the summary; the
    link queues of store-and-forward may follow it), as dicts by column."""
    block = status_text.split("\n\n")
    assert len(block) >= 2, f"no links table in:\n{status_text}"
    rows = table(block[1])
    header = [h.strip() for h in rows[0]]
    return [dict(zip(header, row, strict=True)) for row in rows[1:]]


def routes_of(broker: Broker) -> set[tuple[str, str]]:
    return {
        (str(r["pattern"]), str(r["origin"]))
        for r in broker.call(lambda node: node.engine.interest())
    }


def up_links(broker: Broker) -> set[tuple[str, str]]:
    return {(ln["name"], ln["peer"]) for ln in broker.status()["links"] if ln["state"] == "up"}


# -- a linked chain A - B - C with subscriptions on every node ------------------------------------


Chain = tuple[Broker, Broker, Broker]


@pytest.fixture
def chain(
    broker_factory: BrokerFactory,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_until: WaitUntil,
    tmp_path: Path,
) -> Iterator[Chain]:
    """A dials B, B dials C; subscriptions: HERE on A, ROUTE.B on B, ROUTE.> and
    ROUTE.X.* on C; returns once every node's interest table holds all four."""
    pa, pb, pc = free_port(), free_port(), free_port()
    a = broker_factory(
        broker_id="A",
        port=pa,
        data_dir=tmp_path / "A",
        links=(LinkConfig(name="ab", uri=endpoint(pb), **FAST_LINK),),
    )
    b = broker_factory(
        broker_id="B",
        port=pb,
        data_dir=tmp_path / "B",
        links=(LinkConfig(name="bc", uri=endpoint(pc), **FAST_LINK),),
    )
    c = broker_factory(broker_id="C", port=pc, data_dir=tmp_path / "C")
    client_factory(a.endpoint).subscribe("HERE", Collector())
    client_factory(b.endpoint).subscribe("ROUTE.B", Collector())
    sub_c = client_factory(c.endpoint)
    sub_c.subscribe("ROUTE.>", Collector())
    sub_c.subscribe("ROUTE.X.*", Collector())
    want = {("HERE", "A"), ("ROUTE.B", "B"), ("ROUTE.>", "C"), ("ROUTE.X.*", "C")}
    for node in (a, b, c):
        assert wait_until(lambda node=node: routes_of(node) == want, WAIT), routes_of(node)
    yield a, b, c


# -- routes ---------------------------------------------------------------------------------------


def test_routes_table(chain: Chain) -> None:
    a, _, _ = chain
    result = invoke("routes", "--broker", a.endpoint)
    assert result.exit_code == 0, result.output
    assert table(result.stdout) == [
        ["pattern", "origin", "hops", "path", "next hop"],
        ["HERE", "A", "0", "-", "(local)"],
        ["ROUTE.>", "C", "2", "C > B", "ab"],
        ["ROUTE.B", "B", "1", "B", "ab"],
        ["ROUTE.X.*", "C", "2", "C > B", "ab"],
    ]


def test_routes_json(chain: Chain) -> None:
    a, b, _ = chain
    result = invoke("routes", "--broker", a.endpoint, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"pattern": "HERE", "origin": "A", "path": [], "hops": 0, "link": None},
        {"pattern": "ROUTE.>", "origin": "C", "path": ["C", "B"], "hops": 2, "link": "ab"},
        {"pattern": "ROUTE.B", "origin": "B", "path": ["B"], "hops": 1, "link": "ab"},
        {"pattern": "ROUTE.X.*", "origin": "C", "path": ["C", "B"], "hops": 2, "link": "ab"},
    ]
    # the middle node: A's interest arrives over the accepted link, C's over its dialer
    result = invoke("routes", "--broker", b.endpoint, "--json")
    assert result.exit_code == 0, result.output
    by_key = {(r["pattern"], r["origin"]): r for r in json.loads(result.stdout)}
    assert by_key[("HERE", "A")]["link"] == "A/ab"
    assert by_key[("ROUTE.>", "C")]["link"] == "bc"
    assert by_key[("ROUTE.B", "B")]["link"] is None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("ROUTE.X.Y", [("ROUTE.>", "C"), ("ROUTE.X.*", "C")]),
        ("ROUTE.B", [("ROUTE.>", "C"), ("ROUTE.B", "B")]),
        ("ROUTE.*", [("ROUTE.>", "C"), ("ROUTE.B", "B")]),
        ("HERE", [("HERE", "A")]),
        (">", [("HERE", "A"), ("ROUTE.>", "C"), ("ROUTE.B", "B"), ("ROUTE.X.*", "C")]),
        ("NOBODY.>", []),
    ],
)
def test_routes_pattern_filter(chain: Chain, pattern: str, expected: list[tuple[str, str]]) -> None:
    a, _, _ = chain
    result = invoke("routes", pattern, "--broker", a.endpoint, "--json")
    assert result.exit_code == 0, result.output
    assert [(r["pattern"], r["origin"]) for r in json.loads(result.stdout)] == expected
    text = invoke("routes", pattern, "--broker", a.endpoint)
    assert text.exit_code == 0, text.output
    if expected:
        assert [row[:2] for row in table(text.stdout)[1:]] == [list(e) for e in expected]
    else:
        assert text.stdout.strip() == "no routes"


@pytest.mark.parametrize("pattern", ["A..B", "A.>.B", "A*"])
def test_routes_bad_pattern_is_one_line_error(broker: Broker, pattern: str) -> None:
    result = invoke("routes", pattern, "--broker", broker.endpoint)
    assert_one_line_error(result, pattern)
    result = invoke("routes", pattern, "--broker", broker.endpoint, "--json")
    assert_one_line_error(result, pattern)
    assert result.stdout == ""


def test_routes_of_a_lone_node(broker: Broker) -> None:
    result = invoke("routes", "--broker", broker.endpoint)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "no routes"
    result = invoke("routes", "--broker", broker.endpoint, "--json")
    assert json.loads(result.stdout) == []


# -- status: the links table ----------------------------------------------------------------------


def test_status_shows_links_table(chain: Chain) -> None:
    a, b, _ = chain
    result = invoke("status", "--broker", b.endpoint)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"^interest routes\s+4 \(3 remote\)$", out, re.M), out
    assert re.search(r"^interest origins\s+A, B, C$", out, re.M), out
    rows = links_table(out)
    header = table(out.split("\n\n", 1)[1])[0]
    assert header[:5] == ["link", "peer", "kind", "direction", "state"]
    assert {"msgs in", "msgs out", "drops"} <= set(header)
    got = {(r["link"], r["peer"], r["kind"], r["direction"], r["state"]) for r in rows}
    assert got == {("bc", "C", "static", "duplex", "up"), ("ab", "A", "accepted", "duplex", "up")}

    # A's view, and the JSON form agrees with the table
    result = invoke("status", "--broker", a.endpoint)
    assert result.exit_code == 0, result.output
    rows = links_table(result.stdout)
    assert [(r["link"], r["peer"], r["state"]) for r in rows] == [("ab", "B", "up")]
    js = invoke("status", "--broker", a.endpoint, "--json")
    status = json.loads(js.stdout)
    assert [(ln["name"], ln["peer"], ln["state"]) for ln in status["links"]] == [("ab", "B", "up")]
    assert status["links"][0]["uri"] == b.endpoint


def test_status_shows_a_link_that_is_not_up(
    broker_factory: BrokerFactory, free_port: Callable[[], int], wait_until: WaitUntil
) -> None:
    nobody = endpoint(free_port())  # no node there: the link keeps redialling
    a = broker_factory(links=(LinkConfig(name="nowhere", uri=nobody, **FAST_LINK),))
    assert wait_until(lambda: a.status()["links"][0]["state"] != "up", WAIT)
    result = invoke("status", "--broker", a.endpoint)
    assert result.exit_code == 0, result.output
    [row] = links_table(result.stdout)
    assert row["link"] == "nowhere"
    assert row["peer"] == "-"
    assert row["state"] in ("waiting", "handshaking")


def test_status_of_a_node_without_links_has_no_links_table(broker: Broker) -> None:
    result = invoke("status", "--broker", broker.endpoint)
    assert result.exit_code == 0, result.output
    assert "\n\n" not in result.stdout.strip()
    assert not re.search(r"^link\s+peer", result.stdout, re.M)


# -- start --peer (a real subprocess) -------------------------------------------------------------


@pytest.mark.slow
def test_start_peer_links_to_an_in_thread_broker(
    broker_factory: BrokerFactory,
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    client_factory: ClientFactory,
    tmp_path: Path,
) -> None:
    hub = broker_factory(broker_id="HUB")
    port = free_port()
    node = procs.zbroker(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "spoke"), "--id", "SPOKE",
        "--peer", hub.endpoint, "--log-level", "info", "--no-discovery",
    )  # fmt: skip
    wait_ready(endpoint(port), WAIT, node)
    # the hub sees the link from the subprocess...
    assert wait_until(lambda: {p for _, p in up_links(hub)} == {"SPOKE"}, WAIT), (
        hub.status()["links"],
        node.stderr_text(),
    )
    # ...and the subprocess's own status shows it up, with the hub as peer
    result = invoke("status", "--broker", endpoint(port))
    assert result.exit_code == 0, result.output
    [row] = links_table(result.stdout)
    assert (row["peer"], row["kind"], row["direction"], row["state"]) == (
        "HUB",
        "static",
        "duplex",
        "up",
    )
    js = json.loads(invoke("status", "--broker", endpoint(port), "--json").stdout)
    [link] = js["links"]
    assert link["uri"] == hub.endpoint
    assert link["state"] == "up"

    # and messages flow both ways across it
    got_hub, got_spoke = Collector(), Collector()
    client_factory(hub.endpoint).subscribe("TOHUB", got_hub)
    spoke_client = client_factory(endpoint(port))
    spoke_client.subscribe("TOSPOKE", got_spoke)
    assert wait_until(lambda: ("TOSPOKE", "SPOKE") in routes_of(hub), WAIT)
    assert wait_until(
        lambda: ("TOHUB", "HUB") in {(r["pattern"], r["origin"]) for r in spoke_client.routes()},
        WAIT,
    )
    spoke_client.publish("TOHUB", b"x")
    client_factory(hub.endpoint).publish("TOSPOKE", b"y")
    assert wait_until(lambda: len(got_hub.messages) == 1 and len(got_spoke.messages) == 1, WAIT)
    assert node.poll() is None, node.stderr_text()
    assert "Traceback" not in node.stderr_text()


@pytest.mark.slow
def test_start_group_mismatch_is_refused(
    broker_factory: BrokerFactory,
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
) -> None:
    hub = broker_factory(broker_id="HUB", group="blue")
    port = free_port()
    node = procs.zbroker(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "spoke"), "--id", "SPOKE",
        "--group", "green", "--peer", hub.endpoint, "--log-level", "warning", "--no-discovery",
    )  # fmt: skip
    wait_ready(endpoint(port), WAIT, node)
    assert wait_until(lambda: hub.status()["counters"]["handshakes_refused"] >= 1, WAIT)
    assert hub.status()["links"] == []
    js = json.loads(invoke("status", "--broker", endpoint(port), "--json").stdout)
    assert js["group"] == "green"
    [link] = js["links"]
    assert link["state"] != "up"
    assert "blue" in (link["last_error"] or "") or node.wait_stderr("blue", WAIT)
