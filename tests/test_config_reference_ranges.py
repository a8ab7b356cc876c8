"""The bounds in the "type" column of the command-line tables of ``docs/configuration.md``
(``integer ≥ 1``, ``number of seconds, > 0``, ``integer, 1..100000``) against the bounds
click enforces for the option (``click.IntRange`` / ``click.FloatRange``), both ways: a
row that states a bound names an option that refuses what lies outside it, and an
option with a bound has a row that states it. The config-file tables' ranges are
``test_config_reference_tables.py``'s."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import click
import pytest

from tests.test_config_reference import COMMANDS, param_row

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

#: (low, low open, high, high open); None where the side is unbounded
Bounds = tuple[float | None, bool, float | None, bool]

_NUMBER = r"-?\d+(?:\.\d+)?"


def stated_bounds(cell: str) -> Bounds | None:
    """The bounds a type cell states: ``LO..HI``, ``≥ N`` or ``> N``; None if none."""
    if m := re.search(rf"({_NUMBER})\.\.({_NUMBER})", cell):
        return float(m[1]), False, float(m[2]), False
    if m := re.search(rf"≥ ({_NUMBER})", cell):
        return float(m[1]), False, None, False
    if m := re.search(rf"> ({_NUMBER})", cell):
        return float(m[1]), True, None, False
    return None


def enforced_bounds(param: click.Parameter) -> Bounds | None:
    """The bounds click enforces for ``param``; None for a type without them."""
    kind = param.type
    if not isinstance(kind, click.IntRange | click.FloatRange):
        return None

    def side(value: float | None) -> float | None:
        return None if value is None or math.isinf(value) else float(value)

    return side(kind.min), kind.min_open, side(kind.max), kind.max_open


def command_params() -> list[tuple[str, str]]:
    return [
        (name, param.name or "")
        for name in COMMANDS
        for param in cli.commands[name].params
        if isinstance(param, click.Option | click.Argument)
    ]


@pytest.mark.parametrize(("command", "option"), command_params())
def test_the_documented_bounds_are_the_enforced_ones(command: str, option: str) -> None:
    param = next(p for p in cli.commands[command].params if p.name == option)
    row, _ = param_row(command, param)
    stated = stated_bounds(row.get("type", ""))
    assert stated == enforced_bounds(param), (
        f"zbroker {command} {option}: the doc states {stated}, click enforces "
        f"{enforced_bounds(param)} (type cell {row.get('type')!r})"
    )


def test_the_readings_of_a_type_cell() -> None:
    assert stated_bounds("integer, 1..100000") == (1.0, False, 100000.0, False)
    assert stated_bounds("integer ≥ 0") == (0.0, False, None, False)
    assert stated_bounds("number of seconds, > 0") == (0.0, True, None, False)
    assert stated_bounds("integer") is None
    assert enforced_bounds(click.Option(["--n"], type=click.IntRange(1, 5))) == (
        1.0, False, 5.0, False
    )  # fmt: skip
    assert enforced_bounds(click.Option(["--s"], type=click.FloatRange(0, min_open=True))) == (
        0.0, True, None, False
    )  # fmt: skip
    assert enforced_bounds(click.Option(["--t"], type=str)) is None
