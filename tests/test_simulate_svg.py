"""``zbroker simulate TOPOLOGY --svg FILE``: the drawing holds every node and link, and
each link's message count is exactly what the simulation sent over it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

TOPOLOGY = """
[simulation]
seed = 3

[[node]]
id = "A"
[[node]]
id = "B"
subscribe = ["PRICE.>"]
[[node]]
id = "C"
subscribe = ["PRICE.IBM"]
[[node]]
id = "D"

[[link]]
from = "A"
to = "B"
[[link]]
from = "B"
to = "C"
[[link]]
from = "C"
to = "D"

[[publish]]
node = "A"
topic = "PRICE.IBM"
count = 10
[[publish]]
node = "A"
topic = "PRICE.MSFT"
count = 5
"""

SVG = "{http://www.w3.org/2000/svg}"


def test_simulate_svg_draws_messages_per_link(tmp_path: Path) -> None:
    topo = tmp_path / "net.toml"
    topo.write_text(TOPOLOGY)
    out = tmp_path / "net.svg"
    result = CliRunner().invoke(cli, ["simulate", str(topo), "--svg", str(out), "--json"])
    assert result.exit_code == 0, result.output
    root = ET.parse(out).getroot()
    nodes = {g.get("data-node", ""): g for g in root.iter(f"{SVG}g") if g.get("data-node")}
    links = {g.get("data-link", ""): g for g in root.iter(f"{SVG}g") if g.get("data-link")}
    assert sorted(nodes) == ["A", "B", "C", "D"]
    assert [nodes[n].get("data-subscriptions") for n in "ABCD"] == ["0", "1", "1", "0"]
    # link names are the simulator's; each carries exactly what was routed over it
    by_ends = {(g.get("data-from"), g.get("data-to")): g for g in links.values()}
    assert sorted(by_ends) == [("A", "B"), ("B", "C"), ("C", "D")]
    assert by_ends[("A", "B")].get("data-messages") == "15"  # both topics reach B
    assert by_ends[("B", "C")].get("data-messages") == "10"  # only PRICE.IBM goes on
    assert by_ends[("C", "D")].get("data-messages") == "0"  # nobody there wants it
    assert "15 publishes" in ET.tostring(root, encoding="unicode")


def test_simulate_svg_unwritable_file_is_a_clear_error(tmp_path: Path) -> None:
    topo = tmp_path / "net.toml"
    topo.write_text(TOPOLOGY)
    result = CliRunner().invoke(cli, ["simulate", str(topo), "--svg", str(tmp_path / "no/x.svg")])
    assert result.exit_code != 0 and "cannot write" in result.output


@pytest.mark.parametrize("mode", [["--compare"], ["--host", "PRICE.>=B"], ["--flood", "PRICE.>"]])
def test_simulate_svg_with_a_comparison_is_a_usage_error(tmp_path: Path, mode: list[str]) -> None:
    # (it was ignored: the comparison ran, exited 0 and no file was written)
    topo, out = tmp_path / "net.toml", tmp_path / "net.svg"
    topo.write_text(TOPOLOGY)
    result = CliRunner().invoke(cli, ["simulate", str(topo), *mode, "--svg", str(out)])
    assert result.exit_code == 2, result.output
    assert "--svg draws one run" in result.output
    assert not out.exists()
