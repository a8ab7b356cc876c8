"""The configuration reference, ``docs/configuration.md``, against the code: every table
and key the config file parser accepts, every command, option and argument of the
``zbroker`` command line (with its environment variables and its plain defaults) and every
option of the Spark data source has a row there, and no row names one the code lacks.

What is checked is read from the code, never copied: the key sets are imported
(``_SCHEMA``, ``LINK_KEYS``, ``MONITOR_KEYS``, ``ADVISORY_KEYS``) or, where a reader keeps
them in its own body, read from its set literals; the command line is the click group
walked through its ``commands`` and ``params``; the Spark options are the names its
option parser reads (from the source, so pyspark need not be installed).

The doc's convention, relied on here: each table, command and option group has a heading
naming it in backticks, and each thing is a row of a Markdown table whose first cell names
it in backticks, with its default in the column headed ``default`` and its variables in
the column headed ``env``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import pytest

from zbroker.config import toml as toml_config
from zbroker.config.advisories import ADVISORY_KEYS, AdvisoryConfig
from zbroker.config.hosts import hosts_from_toml
from zbroker.config.link import LINK_KEYS, LinkConfig
from zbroker.config.monitor import MONITOR_KEYS, MonitorConfig
from zbroker.config.node import NodeConfig
from zbroker.config.queues import queue_rules_from_toml
from zbroker.security.permissions import load_clients

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
SPARK_SOURCES = tuple(ROOT / "zbroker" / "spark" / f for f in ("options.py", "source.py"))
CONNECTION = "Connection options"

Row = dict[str, str]


def doc_text() -> str:
    return DOC.read_text("utf-8")


def section(text: str, title: str) -> str:
    """The text under the first heading that contains ``title``, down to the next heading
    (fenced code is not searched for headings)."""
    out: list[str] = []
    inside = fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = not fenced and re.match(r"#+ ", line) is not None
        if heading and inside:
            break
        if inside:
            out.append(line)
        inside = inside or (heading and title in line)
    assert inside, f"{DOC.name}: no heading with {title!r}"
    return "\n".join(out)


def table_rows(text: str) -> list[Row]:
    """Every row of every Markdown table in ``text``, keyed by its table's header cells."""
    rows: list[Row] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        elif not re.fullmatch(r"[|\-: ]+", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def spans(cell: str) -> set[str]:
    """The code spans of a cell."""
    return set(re.findall(r"`([^`]+)`", cell))


def named(row: Row) -> set[str]:
    """What a row documents: the code spans of its first cell, split at ``/``
    (``--secure/--no-secure`` names both)."""
    return {part for span in spans(next(iter(row.values()), "")) for part in span.split("/")}


def rows_for(text: str, name: str) -> list[Row]:
    return [row for row in table_rows(text) if name in named(row)]


def missing(names: Iterable[str], text: str) -> list[str]:
    """The ``names`` that no table row of ``text`` documents."""
    return sorted(n for n in names if not rows_for(text, n))


def spellings(value: object) -> set[str]:
    """How the doc may write a default: ``true``, ``7100``, ``2.0`` or ``2``, ``info``."""
    if isinstance(value, bool):
        return {str(value).lower()}
    if isinstance(value, float):
        return {repr(value), f"{value:g}"}
    return {str(value)}


def shows_default(row: Row, value: object) -> bool:
    return bool(spellings(value) & spans(row.get("default", "")))


def plain_default(value: object) -> bool:
    """A default the doc must show: a number, a switch or a non-empty string."""
    return isinstance(value, bool | int | float | str) and value != ""


def _literal(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _string(node: ast.expr | None) -> str | None:
    value = _literal(node)
    return value if isinstance(value, str) else None


def set_literals(fn: Callable[..., Any]) -> set[str]:
    """The strings of the set literals in ``fn``'s body: the keys a reader that keeps
    them in its own body accepts."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    sets = [node for node in ast.walk(tree) if isinstance(node, ast.Set)]
    found = {key for node in sets for elt in node.elts if (key := _string(elt)) is not None}
    assert found, f"no set of keys in {fn.__qualname__}: read its keys another way"
    return found


def file_tables() -> dict[str, set[str]]:
    """Each table of the config file and the keys the parser accepts in it."""
    tables = {table: set(keys) for table, keys in toml_config._SCHEMA.items()}
    tables |= {
        "discovery": set_literals(toml_config._discovery_from_toml),
        "security": set_literals(toml_config._security_from_toml),
        "retain": set_literals(toml_config._retain_from_toml),
        "queue": set_literals(queue_rules_from_toml),
        "host": set_literals(hosts_from_toml),
        "flood": set_literals(hosts_from_toml),
        "link": set(LINK_KEYS),
        "monitor": set(MONITOR_KEYS),
        "advisories": set(ADVISORY_KEYS),
    }
    return tables


def field_defaults(cls: Any, keys: Mapping[str, str]) -> dict[str, object]:
    """File key -> the plain default of the dataclass field it sets (others left out)."""
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    return {key: fields[name] for key, name in keys.items() if plain_default(fields[name])}


def file_defaults() -> dict[str, dict[str, object]]:
    """The defaults of the tables whose keys are fields of a config dataclass."""
    out = {t: field_defaults(NodeConfig, keys) for t, keys in toml_config._SCHEMA.items()}
    out["link"] = field_defaults(LinkConfig, {k: k for k in LINK_KEYS})
    out["monitor"] = field_defaults(MonitorConfig, {k: k for k in MONITOR_KEYS})
    out["advisories"] = field_defaults(AdvisoryConfig, {k: k for k in ADVISORY_KEYS})
    return out


def table_section(text: str, table: str) -> str:
    """The section of ``[table]`` or ``[[table]]``."""
    for title in (f"`[[{table}]]`", f"`[{table}]`"):
        if any(re.match(r"#+ .*" + re.escape(title), line) for line in text.splitlines()):
            return section(text, title)
    raise AssertionError(f"{DOC.name}: no heading names [{table}] or [[{table}]]")


def _spark_read(call: ast.Call) -> tuple[str, object] | None:
    """(option, literal default) of ``options.get("x", d)`` or ``f(options, "x", d)``."""
    func, args = call.func, call.args
    if isinstance(func, ast.Attribute) and func.attr == "get" and args:
        owner = func.value
        if (isinstance(owner, ast.Name) and owner.id == "options") or (
            isinstance(owner, ast.Attribute) and owner.attr == "options"
        ):
            name = _string(args[0])
            return None if name is None else (name, _literal(args[1] if len(args) > 1 else None))
    if len(args) > 1 and isinstance(args[0], ast.Name) and args[0].id == "options":
        name = _string(args[1])
        return None if name is None else (name, _literal(args[2] if len(args) > 2 else None))
    return None


def spark_options() -> dict[str, object]:
    """Each option the Spark source reads, with its default where the code writes it as
    a literal (else None); ``for name, default in (("timeout", "10"), ...)`` included."""
    found: dict[str, object] = {}
    for path in SPARK_SOURCES:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            pairs: list[tuple[str, object]] = []
            if isinstance(node, ast.Call) and (read := _spark_read(node)) is not None:
                pairs.append(read)
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
                for elt in node.iter.elts:
                    if isinstance(elt, ast.Tuple) and len(elt.elts) == 2:
                        name, default = (_literal(e) for e in elt.elts)
                        if isinstance(name, str):
                            pairs.append((name, default))
            for name, default in pairs:
                found[name] = default if default is not None else found.get(name)
    return found


def test_the_parser_tables_are_all_collected() -> None:
    """A table given a reader of its own (``_READERS``) and not collected by
    :func:`file_tables` would go unchecked: this fails first."""
    assert set(toml_config._READERS) == set(file_tables()) - set(toml_config._SCHEMA)


@pytest.mark.parametrize("table", sorted(file_tables()))
def test_every_key_of_each_table_is_documented(table: str) -> None:
    text = table_section(doc_text(), table)
    keys = file_tables()[table]
    assert missing(keys, text) == [], f"[{table}] keys missing in {DOC.name}"
    extra = {n for row in table_rows(text) for n in named(row)} - keys
    assert extra == set(), f"[{table}] rows for keys the parser does not accept"


def test_client_permission_keys_are_documented() -> None:
    text = section(doc_text(), "`[security.clients]`")
    assert missing(set_literals(load_clients), text) == []


@pytest.mark.parametrize("table", sorted(file_defaults()))
def test_file_defaults_match_the_code(table: str) -> None:
    text = table_section(doc_text(), table)
    for key, value in file_defaults()[table].items():
        (row,) = rows_for(text, key)
        assert shows_default(row, value), f"[{table}] {key}: default {value!r} not shown"


def command_section(name: str) -> str:
    """The section headed by the command's name alone (``### `zbroker start```)."""
    return section(doc_text(), f"# `zbroker {name}`")


def param_names(param: click.Parameter) -> list[str]:
    if isinstance(param, click.Argument):
        return [param.human_readable_name]
    return [*param.opts, *param.secondary_opts]


def usage(name: str, command: click.Command) -> str:
    ctx = click.Context(command, info_name=name, parent=click.Context(cli, info_name="zbroker"))
    return " ".join(["zbroker", name, *command.collect_usage_pieces(ctx)])


def param_row(name: str, param: click.Parameter) -> tuple[Row, bool]:
    """The row documenting ``param`` of command ``name``, and whether it is the shared one
    of the connection options."""
    label = param_names(param)[0]
    own = rows_for(command_section(name), label)
    if own:
        assert len(own) == 1, f"zbroker {name}: {label} has {len(own)} rows"
        return own[0], False
    shared = rows_for(section(doc_text(), CONNECTION), label)
    assert shared and isinstance(param, click.Option), f"zbroker {name}: {label} undocumented"
    return shared[0], True


def expected_envvars(name: str, param: click.Parameter, shared: bool) -> set[str]:
    """The option's own variable, and the one ``auto_envvar_prefix`` derives from the
    command and parameter names (``<COMMAND>`` in the shared rows)."""
    if not isinstance(param, click.Option) or param.name is None:
        return set()
    own = {param.envvar} if isinstance(param.envvar, str) else set(param.envvar or ())
    command = "<COMMAND>" if shared else name.upper().replace("-", "_")
    return own | {f"ZBROKER_{command}_{param.name.upper()}"}


COMMANDS = sorted(cli.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_and_argument_is_documented(name: str) -> None:
    command = cli.commands[name]
    text = command_section(name)
    assert f"`{usage(name, command)}`" in text, f"zbroker {name}: usage line missing"
    in_shared = False
    for param in command.params:
        row, shared = param_row(name, param)
        in_shared = in_shared or shared
        assert set(param_names(param)) <= named(row), f"zbroker {name}: {param.name} names"
        envvars = expected_envvars(name, param, shared)
        assert spans(row.get("env", "")) == envvars, f"zbroker {name}: {param.name} env"
    if in_shared:
        assert "connection options" in text, f"zbroker {name}: say it takes the connection options"
    documented = {n for row in table_rows(text) for n in named(row)}
    known = {n for param in command.params for n in param_names(param)}
    assert documented <= known, f"zbroker {name}: rows for options it does not have"


@pytest.mark.parametrize("name", COMMANDS)
def test_command_defaults_match_the_code(name: str) -> None:
    for param in cli.commands[name].params:
        # a switch's default is "off"/"on" in the doc; click before 8.3 gives False, later
        # versions an UNSET marker: neither is a value to look for
        is_switch = isinstance(param, click.Option) and param.is_flag
        if plain_default(param.default) and not is_switch:
            row, _ = param_row(name, param)
            assert shows_default(row, param.default), f"zbroker {name}: {param.name} default"


def test_global_options_are_documented() -> None:
    text = section(doc_text(), "Global options")
    help_names = cli.get_help_option_names(click.Context(cli))
    names = {n for param in cli.params for n in param_names(param)} | set(help_names)
    assert missing(names, text) == []


def test_connection_rows_are_options_of_commands() -> None:
    text = section(doc_text(), CONNECTION)
    options = {n for c in cli.commands.values() for p in c.params for n in param_names(p)}
    documented = {n for row in table_rows(text) for n in named(row)}
    assert documented and documented <= options


def test_every_spark_option_is_documented() -> None:
    text = section(doc_text(), "Spark data source options")
    options = spark_options()
    assert len(options) >= 10, f"the option reader found only {sorted(options)}"
    assert missing(options, text) == []
    for name, default in options.items():
        if plain_default(default):
            (row,) = rows_for(text, name)
            assert shows_default(row, default), f"Spark option {name}: default {default!r}"


SAMPLE = """\
### `[sample]`

| key | type | default | meaning |
|---|---|---|---|
| `port` | integer | `7100` | the port |
| `--secure/--no-secure` | switch | off | security |

### next
"""


def test_the_helpers_report_what_is_not_there() -> None:
    text = table_section(SAMPLE, "sample")
    assert missing(["port", "made_up_key", "--no-secure"], text) == ["made_up_key"]
    assert missing(["made_up_key"], table_section(doc_text(), "node")) == ["made_up_key"]
    (row,) = rows_for(text, "port")
    assert shows_default(row, 7100) and not shows_default(row, 7200)
    assert shows_default(row, 7100.0) and not shows_default(row, True)
    with pytest.raises(AssertionError):
        table_section(doc_text(), "made_up_table")
    with pytest.raises(AssertionError):
        command_section("made-up-command")
    fake = click.Option(["--made-up-option"], envvar="ZBROKER_MADE_UP")
    assert expected_envvars("start", fake, shared=False) == {
        "ZBROKER_MADE_UP",
        "ZBROKER_START_MADE_UP_OPTION",
    }
    with pytest.raises(AssertionError):
        param_row("start", fake)
