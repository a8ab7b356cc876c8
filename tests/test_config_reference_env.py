"""The summary table of ``docs/configuration.md``'s "Environment variables" (the options'
own variables) against the click group: every variable an option declares has a row, no
row names one no option declares, and each row names the right option and the commands
that read it ("every client command": each command with ``--broker``). The per-command
tables are checked by ``test_config_reference.py``."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import click

from tests.test_config_reference import doc_text, named, section, spans, table_rows

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

EVERY_CLIENT = "every client command"


def own_variables() -> dict[str, tuple[set[str], set[str]]]:
    """Each declared variable -> (the commands that read it, its option's names)."""
    found: dict[str, tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for name, command in cli.commands.items():
        for param in command.params:
            if not isinstance(param, click.Option) or not param.envvar:
                continue
            envvars = [param.envvar] if isinstance(param.envvar, str) else param.envvar
            for var in envvars:
                found[var][0].add(name)
                found[var][1].update([*param.opts, *param.secondary_opts])
    return dict(found)


def summary_rows(text: str | None = None) -> dict[str, dict[str, str]]:
    text = doc_text() if text is None else text
    rows = [r for r in table_rows(section(text, "Environment variables")) if "used by" in r]
    return {v: row for row in rows for v in spans(row["variable"])}


def client_commands() -> set[str]:
    return {n for n, c in cli.commands.items() if any(p.name == "broker" for p in c.params)}


def row_errors(rows: dict[str, dict[str, str]]) -> list[str]:
    """The variables whose row names another option or other commands than the code."""
    clients, errors = client_commands(), []
    for var, (commands, options) in own_variables().items():
        row = rows.get(var)
        if row is None:
            errors.append(f"{var}: no row")
            continue
        listed = spans(row["used by"]) | (clients if EVERY_CLIENT in row["used by"] else set())
        # the summary names the long flags (``-b`` is in the command's own table)
        flags = {o for o in options if o.startswith("--")}
        if named({"option": row["option"]}) != flags or listed != commands:
            errors.append(f"{var}: the doc says {row['used by']} / {row['option']}")
    return errors


def test_every_own_variable_has_one_row_and_no_row_is_made_up() -> None:
    assert set(summary_rows()) == set(own_variables())


def test_each_row_names_its_option_and_the_commands_that_read_it() -> None:
    assert client_commands(), "no command takes --broker: 'every client command' means none"
    assert row_errors(summary_rows()) == []


def test_a_wrong_row_is_told() -> None:
    """Can fail: the doc with a command left out of a row, or an option renamed."""
    text = doc_text()
    for good, bad, var in (
        ("| `ZBROKER_PORT` | `start`, `keygen` |", "| `ZBROKER_PORT` | `start` |", "ZBROKER_PORT"),
        ("| `start` | `--log-level` |", "| `start` | `--loglevel` |", "ZBROKER_LOG_LEVEL"),
        ("| `ZBROKER_KEYS` | every client command |", "| `ZBROKER_KEYS` | `sub` |", "ZBROKER_KEYS"),
    ):
        assert text.count(good) == 1, good
        (error,) = row_errors(summary_rows(text.replace(good, bad)))
        assert error.startswith(f"{var}: "), error
