"""Advisories without a network: the ``[advisories]`` config, the window limit, the kind
table (every kind documented in docs/advisories.md), and the events command's patterns."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click
import pytest

from zbroker.broker import node_features
from zbroker.config import AdvisoryConfig, NodeConfig, load_config
from zbroker.errors import ConfigError
from zbroker.features.advisories import KINDS, SUMMARY_KINDS, Advisories
from zbroker.features.advisories.kinds import event_fields
from zbroker.features.advisories.limiter import WindowLimit
from zbroker.node import events

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.events import KNOWN_KINDS, event_patterns, format_event_json, format_event_text
else:
    from zbroker.cli.events import KNOWN_KINDS, event_patterns, format_event_json, format_event_text

DOCS = Path(__file__).resolve().parent.parent / "docs" / "advisories.md"


def test_defaults() -> None:
    cfg = NodeConfig().advisories
    assert cfg == AdvisoryConfig()
    assert (cfg.enabled, cfg.sys_interval, cfg.rate_limit, cfg.rate_window) == (
        True,
        10.0,
        100,
        1.0,
    )
    assert any(isinstance(f, Advisories) for f in node_features(NodeConfig()))


def test_toml_table_and_off_switch(tmp_path: Path) -> None:
    path = tmp_path / "n.toml"
    path.write_text("[advisories]\nenabled = false\nsys_interval = 0\nrate_limit = 7\n")
    cfg = load_config(path).advisories
    assert (cfg.enabled, cfg.sys_interval, cfg.rate_limit) == (False, 0, 7)
    assert not any(isinstance(f, Advisories) for f in node_features(load_config(path)))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("enabled = 1", "advisories.enabled must be true or false"),
        ("sys_interval = 0.01", "advisories.sys_interval: 0.01 is out of range"),
        ("sys_interval = 'x'", "advisories.sys_interval: 'x' is not a number"),
        ("sys_interval = false", "advisories.sys_interval: False is not a number"),
        ("rate_limit = 0", "advisories.rate_limit: 0 is out of range"),
        ("rate_limit = 1.5", "advisories.rate_limit: 1.5 is not an integer"),
        ("rate_window = -1", "advisories.rate_window: -1 is out of range"),
        ("summary_interval = 0", "advisories.summary_interval: 0 is out of range"),
        ("colour = 'red'", "unknown key(s) advisories.colour"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(f"[advisories]\n{table}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_keyword_dict() -> None:
    # a table as the keyword: typed for the AdvisoryConfig that __post_init__ makes of it
    cfg = NodeConfig(advisories={"rate_limit": 3})  # type: ignore[arg-type]
    assert cfg.advisories.rate_limit == 3
    with pytest.raises(ConfigError, match="advisories must be a table"):
        NodeConfig(advisories=[1])  # type: ignore[arg-type]  # (the wrong type tested)


def test_window_limit_exact() -> None:
    lim = WindowLimit(3, 1.0)
    assert [lim.allow(0.0) for _ in range(5)] == [True, True, True, False, False]
    assert lim.allow(0.99) is False
    assert [lim.allow(1.0) for _ in range(4)] == [True, True, True, False]


def test_every_event_has_a_kind_and_every_kind_is_documented() -> None:
    classes = {
        obj
        for name in events.__all__
        if (obj := getattr(events, name)) is not events.NodeEvent
        and isinstance(obj, type)
        and issubclass(obj, events.NodeEvent)
    }
    assert classes == set(KINDS)
    doc = DOCS.read_text()
    for cls, kind in KINDS.items():
        section = re.search(rf"^### `{kind}`\n(.*?)(?=^### |\Z)", doc, re.M | re.S)
        assert section is not None, f"{kind} is not documented in {DOCS.name}"
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in section.group(1), f"{kind}.{f.name} undocumented"
    for kind in (*SUMMARY_KINDS, "STATS"):
        assert f"### `{kind}`" in doc


def test_event_fields_are_msgpack_ready() -> None:
    ev = events.SlowSubscriber(patterns=("A.>", "B"), missed=3)
    assert event_fields(ev) == {"patterns": ["A.>", "B"], "missed": 3}


def test_event_patterns() -> None:
    assert event_patterns(()) == ["$ZB.ADVISORY.>"]
    assert event_patterns(("LINK_DOWN", "STATS", "LINK_DOWN")) == [
        "$ZB.ADVISORY.*.LINK_DOWN",
        "$ZB.SYS.*.STATS",
    ]
    with pytest.raises(click.BadParameter):
        event_patterns(("link_down",))
    # a kind no node publishes would wait for ever: refused, naming the kinds there are
    with pytest.raises(click.BadParameter, match=r"'BOGUS' is not a kind: one of .*LINK_DOWN"):
        event_patterns(("BOGUS",))
    documented = set(re.findall(r"^### `?([A-Z_]+)`?", DOCS.read_text(), re.M))
    assert KNOWN_KINDS - {"STATS"} <= documented, KNOWN_KINDS - documented


def test_format_event_text() -> None:
    line = format_event_text(
        "$ZB.ADVISORY.a.LINK_DOWN",
        {"kind": "LINK_DOWN", "broker": "a", "seq": 4, "time": 0.5, "suppressed": 0}
        | {"link": "ab", "peer": "b", "reason": "peer said goodbye"},
    )
    assert line == (
        '1970-01-01T00:00:00.500+00:00 a LINK_DOWN link="ab" peer="b" reason="peer said goodbye"'
    )
    assert "suppressed=2" in format_event_text(
        "$ZB.ADVISORY.a.DROPS", {"kind": "DROPS", "broker": "a", "suppressed": 2}
    )


def test_format_event_json_keeps_a_field_named_topic() -> None:
    """NO_SUBSCRIBER's ``topic`` (the topic nobody wanted) once replaced the advisory's
    topic in ``zbroker events --json``, or the other way round: both are there."""
    body = {"kind": "NO_SUBSCRIBER", "broker": "a", "topic": "NOBODY.HERE", "count": 3}
    got = json.loads(format_event_json("$ZB.ADVISORY.a.NO_SUBSCRIBER", body))
    assert got == {"advisory": "$ZB.ADVISORY.a.NO_SUBSCRIBER", **body}
    down = json.loads(format_event_json("$ZB.ADVISORY.a.LINK_DOWN", {"kind": "LINK_DOWN"}))
    assert down["topic"] == down["advisory"] == "$ZB.ADVISORY.a.LINK_DOWN"
    assert json.loads(format_event_json("$ZB.X", [1])) == {
        "advisory": "$ZB.X", "topic": "$ZB.X", "payload": [1]
    }  # fmt: skip
