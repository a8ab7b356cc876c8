"""``zbroker simulate --compare``: one topology, direct against topic-host routing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from zbroker.errors import ConfigError
from zbroker.simulate import load_topology
from zbroker.simulate_modes import compare_modes, deep_size, parse_hosts

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

TOPOLOGY = """
[simulation]
seed = 7

[random]
nodes = 30
extra_links = 30
subscriptions = 400
publishes = 40
segments = ["PRICE", "STOCK", "BOND", "IBM"]
"""


def test_hosting_the_whole_tree_cuts_the_entries_of_the_other_nodes(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(TOPOLOGY)
    out = compare_modes(load_topology(path), parse_hosts((">=n000,n015",)), (">",))
    direct, hosted, flood = out["direct"], out["hosted"], out["flood"]
    for mode in (direct, hosted, flood):
        assert mode["deliveries"] == mode["expected"] > 0
        assert mode["duplicates"] == mode["lost"] == 0
    assert direct["expected"] == hosted["expected"]  # the same network, subscriptions, pubs
    assert out["non_host_entries_ratio"] >= 5
    assert hosted["advert_frames"] < direct["advert_frames"]
    assert hosted["mean_hops"] >= direct["mean_hops"]  # the price: the way through a host
    # flooding: no interest beyond each node's own, every message over every link
    assert flood["interest_entries"] < hosted["interest_entries"]
    assert flood["advert_frames"] < hosted["advert_frames"]
    assert flood["message_frames"] > direct["message_frames"]
    argv = ["simulate", str(path), "--compare", "--host", ">=n000,n015", "--flood", ">"]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output
    assert "hosted branches: > on n000, n015" in r.output
    assert "flooded branches (flood column): >" in r.output
    assert "non-host entries, direct / hosted:" in r.output


def test_bad_host_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PATTERN=NODE"):
        parse_hosts(("ORDERS.>",))
    with pytest.raises(ConfigError, match=r"bad\.\.x"):
        parse_hosts(("bad..x=A",))
    path = tmp_path / "t.toml"
    path.write_text(TOPOLOGY)
    with pytest.raises(ConfigError, match="no node 'nope'"):
        compare_modes(load_topology(path), parse_hosts((">=nope",)))
    with pytest.raises(ConfigError, match=r"--flood 'a\.\.b'"):
        compare_modes(load_topology(path), parse_hosts((">=n000",)), ("a..b",))
    with pytest.raises(ConfigError, match="at least one --host"):
        compare_modes(load_topology(path), {})
    r = CliRunner().invoke(cli, ["simulate", str(path), "--host", "x"])
    assert r.exit_code != 0 and "PATTERN=NODE" in r.output


CHAIN = """
[simulation]
seed = 3

[[node]]
id = "A"

[[node]]
id = "B"

[[node]]
id = "C"
subscribe = ["PRICE.>"]

[[link]]
from = "A"
to = "B"

[[link]]
from = "B"
to = "C"

[[publish]]
node = "A"
topic = "PRICE.IBM"
count = 2
"""


def test_convergence_and_memory_of_a_chain_by_hand(tmp_path: Path) -> None:
    """A - B - C, one subscriber on C; the host is on a branch nobody subscribes to, so
    both modes route PRICE.> directly. Convergence after the subscription: C flushes its
    advert (event 1, round 1), B takes it (2) and flushes toward A (3, round 2), A takes it
    (4) and flushes nothing (5: split horizon, no other link)."""
    path = tmp_path / "chain.toml"
    path.write_text(CHAIN)
    out = compare_modes(load_topology(path), parse_hosts(("OTHER.>=A",)))
    for mode in ("direct", "hosted"):
        m = out[mode]
        assert m["convergence_events"] == 5
        assert m["convergence_rounds"] == 2
        assert m["convergence_wall_seconds"] >= 0
        assert m["deliveries"] == m["expected"] == 2
        nodes = 3
        # every node's table is there: a few kilobytes each, more with more entries
        assert 1_000 * nodes < m["table_bytes"] < 20_000 * nodes
        assert m["table_bytes_node_max"] <= m["table_bytes"]
    # the link delays are drawn from the seeded generator: exact virtual times
    assert out["direct"]["convergence_virtual_ms"] == 5.765
    assert out["hosted"]["convergence_virtual_ms"] == 3.315
    # the host key ($ZB.HOST.OTHER.>) is one more entry on each of the three nodes (the
    # host's own counted too), and more bytes
    assert out["hosted"]["interest_entries"] == out["direct"]["interest_entries"] + 3 == 6
    assert out["hosted"]["table_bytes"] > out["direct"]["table_bytes"]


def test_compare_prints_convergence_and_memory_per_mode(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(TOPOLOGY)
    out = compare_modes(load_topology(path), parse_hosts((">=n000,n015",)), (">",))
    direct, hosted, flood = out["direct"], out["hosted"], out["flood"]
    # deterministic for the seed: events and rounds of advertisement after subscribing
    assert (direct["convergence_events"], direct["convergence_rounds"]) == (2_020, 10)
    assert (hosted["convergence_events"], hosted["convergence_rounds"]) == (284, 9)
    assert (direct["convergence_virtual_ms"], hosted["convergence_virtual_ms"]) == (26.891, 27.214)
    # flooding advertises nothing: each subscribe's flush is an event, and no round
    assert (flood["convergence_events"], flood["convergence_rounds"]) == (30, 0)
    assert flood["convergence_virtual_ms"] == 0.0
    # memory follows the entries
    assert direct["table_bytes"] > hosted["table_bytes"] > flood["table_bytes"] > 0
    assert direct["table_bytes_non_host_mean"] > 4 * hosted["table_bytes_non_host_mean"]
    argv = ["simulate", str(path), "--compare", "--host", ">=n000,n015"]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output
    rows = {line[:30].strip(): line[30:].split() for line in r.output.splitlines()}
    assert rows["convergence events"] == ["2,020", "284"]
    assert rows["convergence rounds"] == ["10", "9"]
    assert rows["convergence virtual ms"] == ["26.89", "27.21"]
    assert len(rows["table bytes"]) == 2 and "convergence wall seconds" in rows
    assert "table bytes: deep size (sys.getsizeof of every object reachable" in r.output


def test_deep_size_counts_each_object_once() -> None:
    shared = "x" * 100
    inner = [shared, 12345678901]
    root = (shared, inner, {"k": inner})
    d = root[2]
    want = sum(sys.getsizeof(o) for o in (root, shared, inner, 12345678901, d, "k"))
    assert deep_size(root) == want
    assert deep_size(int) == 0  # classes are the process's, not the data's
