"""``zbroker simulate``: a topology file in, the routing of its nodes' subscriptions and
publishes out (as JSON or text), including the shipped ring topology, link filters and
TTLs; a bad, non-UTF-8 or missing topology file is a one-line error. In-process, with
click's CliRunner; no node runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.cli_runs import assert_one_line_error, invoke

TOPOLOGY = """\
[simulation]
seed = 3
delay_ms = [1, 2]

[[node]]
id = "A"

[[node]]
id = "B"
subscribe = ["S.X"]

[[node]]
id = "C"
subscribe = ["S.>", "S.*"]

[[node]]
id = "D"
subscribe = ["S.>"]

[[link]]
from = "A"
to = "B"

[[link]]
from = "B"
to = "C"

[[link]]
from = "C"
to = "D"

[[link]]
from = "D"
to = "A"

[[publish]]
node = "A"
topic = "S.X"
count = 7

[[publish]]
node = "C"
topic = "S.Y"
count = 3
"""

# A's 7 x S.X reach B (S.X), C (S.> and S.*) and D (S.>): 4 each; C's 3 x S.Y reach C
# twice (S.> and S.*) and D once: 3 each.
EXPECTED_DELIVERIES = 7 * 4 + 3 * 3


def test_simulate_json(tmp_path: Path) -> None:
    topo = tmp_path / "ring.toml"
    topo.write_text(TOPOLOGY)
    result = invoke("simulate", str(topo), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["nodes"] == 4
    assert report["links"] == 4
    assert report["subscriptions"] == 4
    assert report["publishes"] == 10
    assert report["deliveries"] == EXPECTED_DELIVERIES
    assert report["expected"] == EXPECTED_DELIVERIES
    assert report["duplicates"] == 0
    assert report["lost"] == 0
    assert report["non_shortest"] == 0
    assert report["max_hops"] == 2
    # a small network's tables fit in memory the process had: its RSS would not grow (this
    # printed 0 bytes per entry), so its allocations are traced instead
    assert report["memory_method"] == "traced"
    assert report["bytes_per_entry"] > 0
    # deterministic for a seed
    again = json.loads(invoke("simulate", str(topo), "--json").stdout)
    for key in ("deliveries", "advert_frames", "message_frames", "convergence_time"):
        assert again[key] == report[key], key


def test_simulate_text(tmp_path: Path) -> None:
    topo = tmp_path / "ring.toml"
    topo.write_text(TOPOLOGY)
    result = invoke("simulate", str(topo))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"^nodes / links\s+4 / 4$", out, re.M), out
    assert re.search(
        rf"^deliveries / expected\s+{EXPECTED_DELIVERIES} / {EXPECTED_DELIVERIES}$", out, re.M
    ), out
    assert re.search(r"^duplicates delivered\s+0$", out, re.M), out
    assert re.search(r"^messages lost\s+0$", out, re.M), out
    m = re.search(r"^memory per entry\s+(\d+) bytes \(traced allocations / entries\)$", out, re.M)
    assert m is not None and int(m.group(1)) > 0, out


def test_simulate_shipped_ring_topology() -> None:
    """The example the README gives: ``zbroker simulate config/topologies/ring.toml``."""
    topo = Path(__file__).resolve().parents[2] / "config" / "topologies" / "ring.toml"
    if not topo.is_file():
        pytest.skip(f"{topo} is not in this checkout")
    result = invoke("simulate", str(topo), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["deliveries"] == report["expected"] > 0
    assert report["duplicates"] == 0
    assert report["lost"] == 0
    assert report["non_shortest"] == 0


FILTERED_CHAIN = """\
[[node]]
id = "A"
[[node]]
id = "B"
subscribe = ["P.>"]
[[node]]
id = "C"
subscribe = ["P.>"]
[[link]]
from = "A"
to = "B"
include = ["P.KEEP.>"]
[[link]]
from = "B"
to = "C"
ttl = 1
[[publish]]
node = "A"
topic = "P.KEEP.X"
count = 4
[[publish]]
node = "A"
topic = "P.DROP.X"
count = 5
"""


def test_simulate_filters_and_ttl(tmp_path: Path) -> None:
    topo = tmp_path / "chain.toml"
    topo.write_text(FILTERED_CHAIN)
    result = invoke("simulate", str(topo), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # only P.KEEP.X crosses A-B; the ttl of 1 on B-C stops A's messages at B
    assert report["deliveries"] == 4
    assert report["duplicates"] == 0
    assert report["max_hops"] == 1


def test_simulate_expected_honours_filters_and_ttl(tmp_path: Path) -> None:
    topo = tmp_path / "chain.toml"
    topo.write_text(FILTERED_CHAIN)
    report = json.loads(invoke("simulate", str(topo), "--json").stdout)
    assert report["deliveries"] == 4
    assert report["expected"] == 4
    assert report["lost"] == 0


BASE = '[[node]]\nid = "A"\n[[node]]\nid = "B"\nsubscribe = ["X"]\n'
LINK = '[[link]]\nfrom = "A"\nto = "B"\n'


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        pytest.param("[[node]\n", ("not valid TOML",), id="not-toml"),
        pytest.param("[nodes]\nx = 1\n", ("unknown table", "nodes"), id="unknown-table"),
        pytest.param("", ("no nodes",), id="no-nodes"),
        pytest.param(
            BASE + '[[link]]\nfrom = "A"\nto = "Z"\n', ("link #1", "'Z'"), id="undeclared-node"
        ),
        pytest.param(BASE + LINK + "ttl = 0\n", ("link #1", "ttl"), id="bad-ttl"),
        pytest.param(BASE + LINK + "colour = 1\n", ("link #1", "colour"), id="unknown-link-key"),
        pytest.param(BASE + LINK + 'include = ["A..B"]\n', ("A..B",), id="bad-include"),
        pytest.param('[[node]]\nid = "bad id"\n', ("bad id",), id="bad-node-id"),
        pytest.param(BASE + '[[node]]\nid = "C"\nsubscribe = ["A..B"]\n', ("A..B",), id="bad-sub"),
        pytest.param(
            BASE + '[[publish]]\nnode = "Q"\ntopic = "X"\n', ("publish #1", "'Q'"), id="pub-node"
        ),
        pytest.param(BASE + '[[publish]]\nnode = "A"\ntopic = "X.*"\n', ("X.*",), id="pub-topic"),
        # the loader lets these through to a crash (traceback, no one-line error):
        pytest.param(
            "[simulation]\ndelay_ms = 5\n" + BASE,
            ("delay_ms",),
            id="delay-not-a-pair",
        ),
        pytest.param(
            '[simulation]\nseed = "x"\n' + BASE,
            ("seed",),
            id="seed-not-int",
        ),
        pytest.param(
            BASE + '[[publish]]\nnode = "A"\ntopic = "X"\ncount = "x"\n',
            ("count",),
            id="count-not-int",
        ),
        pytest.param(
            BASE + '[[node]]\nid = "A"\n',
            ("'A'",),
            id="duplicate-node",
        ),
        pytest.param(
            "node = 5\n",
            ("node",),
            id="node-not-tables",
        ),
        pytest.param(
            '[random]\nnodes = "x"\n',
            ("nodes",),
            id="random-nodes-not-int",
        ),
        # ...and these are accepted silently instead of refused:
        pytest.param(
            '[[node]]\nid = "A"\nsubscrib = ["X"]\n',
            ("subscrib",),
            id="unknown-node-key",
        ),
        pytest.param(
            BASE + LINK + 'conduit = "false"\n',
            ("conduit",),
            id="conduit-not-bool",
        ),
        pytest.param(
            '[[node]]\nid = "A"\nsubscribe = "AB"\n',
            ("subscribe",),
            id="subscribe-not-a-list",
        ),
        pytest.param(
            BASE + '[[publish]]\nnode = "A"\ntopic = "X"\ncount = -3\n',
            ("count",),
            id="negative-count",
        ),
    ],
)
def test_simulate_bad_topology_is_one_line_error(
    tmp_path: Path, content: str, needles: tuple[str, ...]
) -> None:
    topo = tmp_path / "bad.toml"
    topo.write_text(content)
    result = invoke("simulate", str(topo))
    assert_one_line_error(result, *needles)
    assert result.stdout == ""


def test_simulate_non_utf8_topology_is_one_line_error(tmp_path: Path) -> None:
    topo = tmp_path / "binary.toml"
    topo.write_bytes(b"\xff\xfe[[node]]\n")
    assert_one_line_error(invoke("simulate", str(topo)), str(topo))


def test_simulate_missing_topology_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    result = invoke("simulate", str(missing))
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.output
