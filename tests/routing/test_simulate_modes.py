"""``zbroker simulate --compare``: one topology, direct against topic-host routing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from zbroker.cli.main import cli

from zbroker.errors import ConfigError
from zbroker.simulate import load_topology
from zbroker.simulate_modes import compare_modes, parse_hosts

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
