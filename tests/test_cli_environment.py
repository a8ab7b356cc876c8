"""The ``zbroker`` commands' environment variables (docs/configuration.md, "Environment
variables"): every option reads ``ZBROKER_<COMMAND>_<PARAMNAME>``, and the group's
``--version`` switch reads none, so a ``ZBROKER_VERSION`` set for another purpose (a
deployment's version, say) neither prints the version nor fails every command."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

TOPOLOGY = """
[[node]]
id = "A"
[[node]]
id = "B"
subscribe = ["T.>"]

[[link]]
from = "A"
to = "B"

[[publish]]
node = "A"
topic = "T.X"
count = 3
"""


def _simulate(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    topo = tmp_path / "net.toml"
    topo.write_text(TOPOLOGY)
    result = CliRunner().invoke(cli, ["simulate", str(topo)], env=env)
    return result.exit_code, result.output


def test_an_option_reads_its_automatic_variable(tmp_path: Path) -> None:
    # --json's parameter is as_json: the variable is named after it, not after the flag
    code, out = _simulate(tmp_path, {"ZBROKER_SIMULATE_AS_JSON": "1"})
    assert code == 0, out
    assert isinstance(json.loads(out), dict)
    code, out = _simulate(tmp_path, {})
    assert code == 0, out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


@pytest.mark.parametrize("value", ["true", "1", "4.2"])
def test_zbroker_version_in_the_environment_changes_nothing(tmp_path: Path, value: str) -> None:
    code, out = _simulate(tmp_path, {"ZBROKER_VERSION": value})
    assert code == 0, out
    assert "version" not in out
    assert re.search(r"^deliveries / expected\s+3 / 3$", out, re.M), out
