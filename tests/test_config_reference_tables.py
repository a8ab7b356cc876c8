"""The "default" and "type" columns of the config-file tables of ``docs/configuration.md``
against what the loader does with a real file. ``test_config_reference.py`` owns which
tables and keys are documented (and the defaults of the keys that are config-dataclass
fields with a plain value); this module owns every row of every table, the entries of
``[security.clients]`` too:

* the default: a file that leaves the key out, read by :func:`zbroker.config.load_config`
  (a clients entry then by :func:`~zbroker.security.permissions.load_clients`), gives the
  value of the cell's first code span (``an embedded node: `false``` where ``zbroker
  start`` decides otherwise); ``required`` means a table without the key is a
  ConfigError, ``—`` (``[security.clients]``) one without any ``—`` key is; a default in
  words ("none: ...", "the data directory") means the loader leaves the value unset
  (None), for the node to resolve when it starts;
* the type: an ``integer`` refuses a float, a ``number`` takes a fraction (neither takes
  ``true``), a ``boolean`` takes ``true`` and ``false`` and refuses ``1``, a
  ``string: `a`, `b``` takes each choice, refuses another and lists every one the code has;
* the range ``LO..HI``: both bounds load, one step outside each (1 for an integer, the
  next float for a number) is a ConfigError, a number beside it (```0` or``) loads, and
  ``above `KEY``` / ``at most `KEY``` hold as written.

Sample values a row needs (a link's name and uri, ...) come from the doc's example file.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.test_config_reference import (
    Row,
    doc_text,
    file_tables,
    named,
    section,
    spans,
    table_rows,
    table_section,
)
from zbroker.config import NodeConfig, default_data_dir, load_config
from zbroker.config import toml as toml_config
from zbroker.config.node import LOG_LEVELS
from zbroker.errors import ConfigError
from zbroker.routing.groups import POLICIES
from zbroker.security.permissions import load_clients
from zbroker.store import OVERFLOW_POLICIES

CLIENTS = "security.clients"
SOURCE = "reference.toml"
#: a valid Z85 public key (the client public key of ZeroMQ RFC 26's example)
Z85_KEY = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"
#: the code's choices of each ``string: `a`, `b``` row
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("node", "log_level"): LOG_LEVELS,
    ("forward", "overflow"): OVERFLOW_POLICIES,
    ("retain", "overflow"): OVERFLOW_POLICIES,
    ("queue", "policy"): POLICIES,
}
REQUIRED = object()  # a documented default of "required" or "—"
_NUMBER = r"\d+(?:\.\d+)?(?:\^\d+)?"
RANGE = re.compile(rf"({_NUMBER})\.\.({_NUMBER})")
RELATION = re.compile(r"(above|at most) `(\w+)`")

Rows = dict[str, Row]
Num = int | float


def doc_tables(text: str) -> dict[str, Rows]:
    """Each config-file table (and ``security.clients``): its key -> its row."""
    out: dict[str, Rows] = {}
    for table in [*sorted(file_tables()), CLIENTS]:
        part = section(text, f"`[{CLIENTS}]`") if table == CLIENTS else table_section(text, table)
        out[table] = {key: row for row in table_rows(part) for key in named(row)}
    return out


def example(text: str) -> dict[str, Any]:
    """The doc's example file: the ``toml`` block of "The config file"."""
    block = re.search(r"```toml\n(.*?)```", section(text, "The config file"), re.DOTALL)
    assert block is not None, "no ```toml example under 'The config file'"
    return tomllib.loads(block.group(1))


TABLES = doc_tables(doc_text())
EXAMPLE = example(doc_text())
ROWS = [(table, key) for table, rows in TABLES.items() for key in rows]


def literal(text: str) -> object:
    """A code span as a value: TOML where it parses (``7100``, ``true``, ``[]``, ``{}``),
    else the text (``info``, ``127.0.0.1``); a list as a tuple, as the code keeps it."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    return tuple(value) if isinstance(value, list) else value


def documented_default(cell: str) -> object:
    if cell.startswith(("required", "—")):
        return REQUIRED
    embedded = cell.partition("an embedded node:")[2]
    found = re.match(r"\s*`([^`]*)`", embedded or cell)
    return literal(found.group(1)) if found else None


def same(doc: object, code: object) -> bool:
    code = tuple(code) if isinstance(code, list) else code
    if isinstance(doc, bool) or isinstance(code, bool):
        return doc is code
    return doc == code


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def is_array(table: str) -> bool:
    reader = toml_config._READERS.get(table)
    return reader is not None and reader[1]


def load(tmp: Path, table: str, entry: Mapping[str, object]) -> NodeConfig:
    """A file of one table (one ``[[table]]``, or ``[security.clients.app]``) holding
    ``entry``, through the loader (and a clients entry through load_clients)."""
    header = f"[[{table}]]" if is_array(table) else f"[{table}]"
    header = f"[{CLIENTS}.app]" if table == CLIENTS else header
    path = tmp / SOURCE
    lines = [header, *(f"{key} = {toml_value(value)}" for key, value in entry.items())]
    path.write_text("\n".join(lines) + "\n", "utf-8")
    config = load_config(path)
    if table == CLIENTS:
        assert isinstance(config.clients, dict)
        load_clients(config.clients, tmp)
    return config


def accepts(tmp: Path, table: str, entry: Mapping[str, object]) -> bool:
    try:
        load(tmp, table, entry)
    except ConfigError:
        return False
    return True


def loaded_value(tmp: Path, table: str, key: str, entry: Mapping[str, object]) -> object:
    """The value ``key`` of ``table`` has once ``entry`` is loaded; where it lands is read
    from the parser (``_SCHEMA``, or what the table's reader returns)."""
    config = load(tmp, table, entry)
    if table == CLIENTS:
        assert isinstance(config.clients, dict)
        return getattr(load_clients(config.clients, tmp)["app"], key)
    if table in toml_config._SCHEMA:
        return getattr(config, toml_config._SCHEMA[table][key])
    reader, array = toml_config._READERS[table]
    if array:  # [[link]], [[retain]], ...: a tuple of objects (of patterns: [[host]])
        (field,) = reader([dict(entry)], SOURCE)
        item = getattr(config, field)[0]
        return item if isinstance(item, str) else getattr(item, key)
    whole = reader({}, SOURCE)
    if whole:  # [monitor], [advisories]: one config object
        (field,) = whole
        return getattr(getattr(config, field), key)
    (field,) = reader({key: EXAMPLE[table][key]}, SOURCE)  # [discovery], [security]
    return getattr(config, field)


def minimal(table: str, rows: Rows) -> dict[str, object]:
    """The keys the table cannot leave out, with the example file's values."""
    if table == CLIENTS:
        return {"key": Z85_KEY}
    sample = EXAMPLE[table]
    sample = sample[0] if isinstance(sample, list) else sample
    return {
        k: sample[k] for k, row in rows.items() if documented_default(row["default"]) is REQUIRED
    }


def default_errors(tmp: Path, table: str, key: str, rows: Rows) -> list[str]:
    """What is wrong with the row's default (nothing: [])."""
    doc = documented_default(rows[key]["default"])
    entry = {k: v for k, v in minimal(table, rows).items() if k != key}
    if doc is REQUIRED:
        if rows[key]["default"].startswith("—"):  # one of the "—" keys is needed
            entry = {k: v for k, v in entry.items() if not rows[k]["default"].startswith("—")}
        if accepts(tmp, table, entry):
            return [f"[{table}] {key}: documented as required, yet a table without it loads"]
        return []
    code = loaded_value(tmp, table, key, entry)
    return [] if same(doc, code) else [f"[{table}] {key}: default {doc!r} in the doc, {code!r}"]


def number(text: str) -> Num:
    base, _, power = text.partition("^")
    if power:  # 2^40
        value: int = int(base) ** int(power)
        return value
    return float(text) if "." in text else int(text)


def doc_range(cell: str) -> tuple[Num, Num] | None:
    found = RANGE.search(cell)
    return None if found is None else (number(found.group(1)), number(found.group(2)))


def kind_of(row: Row) -> str:
    found = re.match(r"\w+", row.get("type", ""))
    return found.group() if found else ""


def bound(row: Row, which: int) -> Num:
    bounds = doc_range(row["type"])
    assert bounds is not None, f"{row}: no range"
    return bounds[which]


def cases(row: Row) -> Iterator[tuple[object, bool]]:
    """(a value, whether the doc says it loads), from the row's type cell."""
    cell, kind, bounds = row.get("type", ""), kind_of(row), doc_range(row.get("type", ""))
    if kind == "boolean":
        yield from ((True, True), (False, True), (1, False))
    if kind in ("integer", "number") and bounds is not None:
        lo, hi = bounds
        yield from ((lo, True), (hi, True), (True, False))  # a switch is no number
        beside = (literal(s) for s in spans(cell))
        yield from ((v, True) for v in beside if type(v) in (int, float))
        if kind == "integer":
            yield from ((lo - 1, False), (hi + 1, False), (float(lo), False))
        else:
            yield math.nextafter(float(lo), -math.inf), False
            yield math.nextafter(float(hi), math.inf), False
            yield math.nextafter(float(lo), math.inf), True  # a fraction
    if cell.startswith("string:") and spans(cell):
        yield from ((choice, True) for choice in sorted(spans(cell)))
        yield "made-up-choice", False


def companions(key: str, rows: Rows) -> dict[str, object]:
    """The keys tied to ``key`` by "above"/"at most", at the end of their range that lets
    every value of ``key``'s range stand."""
    out: dict[str, object] = {}
    for other, row in rows.items():
        for word, target in RELATION.findall(row.get("type", "")):
            if other == key:  # key above target: target at its lowest (at most: highest)
                out[target] = bound(rows[target], 0 if word == "above" else 1)
            elif target == key:  # other above key: other at its highest (at most: lowest)
                out[other] = bound(rows[other], 1 if word == "above" else 0)
    return out


def relation_errors(tmp: Path, table: str, key: str, rows: Rows) -> list[str]:
    """``above `X```: key = X is refused, key just above X loads; ``at most `X```: key = X
    loads, key just above X is refused."""
    errors = []
    for word, target in RELATION.findall(rows[key].get("type", "")):
        low = float(max(bound(rows[key], 0), bound(rows[target], 0)))
        up = math.nextafter(low, math.inf)
        for mine, loads in ((low, word != "above"), (up, word == "above")):
            entry = {**minimal(table, rows), key: mine, target: low}
            if accepts(tmp, table, entry) != loads:
                said = "loads" if loads else "is refused"
                errors.append(f"[{table}] {key} = {mine!r}, {target} = {low!r}: doc: {said}")
    return errors


def type_errors(tmp: Path, table: str, key: str, rows: Rows) -> list[str]:
    """What is wrong with the row's type and range (nothing: [])."""
    row, errors = rows[key], []
    if kind_of(row) in ("integer", "number") and doc_range(row["type"]) is None:
        errors.append(f"[{table}] {key}: a {kind_of(row)} with no LO..HI range")
    for value, loads in cases(row):
        entry = {**minimal(table, rows), **companions(key, rows), key: value}
        if accepts(tmp, table, entry) != loads:
            said = "loads" if loads else "is refused"
            errors.append(f"[{table}] {key} = {value!r}: the doc says it {said}, not so")
    if row.get("type", "").startswith("string:") and spans(row["type"]):
        code = set(CHOICES.get((table, key), ()))
        if spans(row["type"]) != code:
            errors.append(f"[{table}] {key}: choices {sorted(spans(row['type']))}, code {code}")
    return errors + relation_errors(tmp, table, key, rows)


def test_every_table_has_rows_and_a_sample() -> None:
    assert set(TABLES) == set(file_tables()) | {CLIENTS}
    assert all(TABLES.values()), [t for t, rows in TABLES.items() if not rows]
    assert set(EXAMPLE) == set(file_tables()), "the example file should have every table"
    assert len(ROWS) >= 60, f"only {len(ROWS)} rows read"


@pytest.mark.parametrize(("table", "key"), ROWS, ids=[f"{t}.{k}" for t, k in ROWS])
def test_documented_default_is_what_the_loader_gives(tmp_path: Path, table: str, key: str) -> None:
    assert default_errors(tmp_path, table, key, TABLES[table]) == []


@pytest.mark.parametrize(("table", "key"), ROWS, ids=[f"{t}.{k}" for t, k in ROWS])
def test_documented_type_and_range_are_what_the_loader_takes(
    tmp_path: Path, table: str, key: str
) -> None:
    assert type_errors(tmp_path, table, key, TABLES[table]) == []


def test_every_choice_row_has_the_codes_choices() -> None:
    """A ``string: `a`, `b``` row with no entry in CHOICES would not be compared."""
    rows = {(t, k) for t, k in ROWS if TABLES[t][k].get("type", "").startswith("string:")}
    assert {(t, k) for t, k in rows if spans(TABLES[t][k]["type"])} == set(CHOICES)


def test_the_data_dir_in_words_is_the_one_a_node_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[node] data_dir`` unset: a node uses :func:`default_data_dir` (``Broker.start``),
    which the cell spells as ``$XDG_DATA_HOME/zbroker/node-PORT`` and ``~/.local/share``."""
    cell = TABLES["node"]["data_dir"]["default"]
    (template,) = [s for s in spans(cell) if s.startswith("$XDG_DATA_HOME/")]
    (fallback,) = [s for s in spans(cell) if s.startswith("~/")]
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    expected = template.replace("$XDG_DATA_HOME", str(tmp_path)).replace("PORT", "7101")
    assert default_data_dir(7101) == Path(expected)
    monkeypatch.delenv("XDG_DATA_HOME")
    expected = template.replace("$XDG_DATA_HOME", fallback).replace("PORT", "7101")
    assert default_data_dir(7101) == Path(expected).expanduser()


DOCTORED = [
    ("limits", "max_frame_bytes", "default", "`1048577` (1 MiB)"),
    ("retain", "max_age", "default", "`1`"),
    ("discovery", "enabled", "default", "an embedded node: `true`"),
    ("security", "key_dir", "default", "`keys`"),
    ("link", "peer", "default", "required"),
    ("limits", "max_frame_bytes", "type", "integer, 65..1073741824"),
    ("limits", "max_frame_bytes", "type", "integer, 64..1073741825"),
    ("state", "missing_topic_timeout", "type", "number, seconds, 0.01..3599.5"),
    ("link", "ttl", "type", "number, 1..255"),
    ("node", "fsync", "type", "integer, 0..1"),
    ("queue", "policy", "type", "string: `local_first` or `round_robin`"),
    ("link", "heartbeat_timeout", "type", "number, seconds, 0.05..86400"),
    ("link", "reconnect_initial_delay", "type", "number, 0.001..3600, above `reconnect_max_delay`"),
]


@pytest.mark.parametrize(("table", "key", "column", "cell"), DOCTORED)
def test_a_doctored_row_is_told(
    tmp_path: Path, table: str, key: str, column: str, cell: str
) -> None:
    """Can fail: the row as documented passes, the row with a wrong default, bound, type,
    choice or relation does not (a dropped relation shows as a bound refused)."""
    check = default_errors if column == "default" else type_errors
    rows = TABLES[table]
    assert check(tmp_path, table, key, rows) == []
    doctored = {**rows, key: {**rows[key], column: cell}}
    assert check(tmp_path, table, key, doctored) != []
