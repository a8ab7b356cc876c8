"""The validation of ``[[retain]]`` rules in config files and keywords: what loads, and
errors that name their file and key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zbroker.config import NodeConfig, RetainRule, load_config
from zbroker.errors import ConfigError

# -- [[retain]] configuration -----------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text, "utf-8")
    return path


def test_config_retain_tables_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[node]
fsync = true

[[retain]]
pattern = "TRADES.>"
max_msgs = 1000
max_bytes = 65536
max_age = 3600

[[retain]]
pattern = "AUDIT.*"
max_age = 1.5
""",
    )
    cfg = load_config(path)
    assert cfg.retain == (
        RetainRule("TRADES.>", max_msgs=1000, max_bytes=65536, max_age=3600.0),
        RetainRule("AUDIT.*", max_msgs=0, max_bytes=0, max_age=1.5),
    )
    assert isinstance(cfg.retain[0].max_age, float)
    assert cfg.fsync is True


def test_config_without_retain(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[node]\nport = 7300\n"))
    assert cfg.retain == ()
    assert cfg.fsync is False


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msg = 5\n',
            ("[[retain]] #1", "unknown key", "max_msg"),
            id="unknown-key",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\n\n[[retain]]\npattern = "B.>"\nlimit = 1\n',
            ("[[retain]] #2", "unknown key", "limit"),
            id="unknown-key-second-table",
        ),
        pytest.param(
            "[[retain]]\nmax_msgs = 5\n",
            ("[[retain]] #1", "missing key", "pattern"),
            id="missing-pattern",
        ),
        pytest.param(
            '[[retain]]\npattern = "A..B"\n',
            ("retain #1", "A..B", "empty segment"),
            id="bad-pattern-empty-segment",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>.B"\n',
            ("retain #1", "A.>.B"),
            id="bad-pattern-inner-gt",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.B*"\n',
            ("retain #1", "A.B*"),
            id="bad-pattern-glued-wildcard",
        ),
        pytest.param(
            "[[retain]]\npattern = 5\n",
            ("retain #1", "pattern must be a string"),
            id="pattern-not-a-string",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\n\n[[retain]]\npattern = "B.>"\n\n'
            '[[retain]]\npattern = "A.>"\n',
            ("retain #3", "'A.>'", "twice"),
            id="duplicate-pattern",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = -1\n',
            ("retain #1", "max_msgs", "-1", "out of range"),
            id="negative-max-msgs",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_bytes = -100\n',
            ("retain #1", "max_bytes", "-100", "out of range"),
            id="negative-max-bytes",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_age = -0.5\n',
            ("retain #1", "max_age", "-0.5", "out of range"),
            id="negative-max-age",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = 1.5\n',
            ("retain #1", "max_msgs", "not an integer"),
            id="float-max-msgs",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_bytes = "10k"\n',
            ("retain #1", "max_bytes", "not an integer"),
            id="string-max-bytes",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_age = "1h"\n',
            ("retain #1", "max_age", "not a number"),
            id="string-max-age",
        ),
        pytest.param(
            '[[retain]]\npattern = "A.>"\nmax_msgs = true\n',
            ("retain #1", "max_msgs", "not an integer"),
            id="bool-max-msgs",
        ),
        pytest.param(
            'retain = "A.>"\n',
            ("[[retain]] tables",),
            id="retain-not-tables",
        ),
        pytest.param(
            'retain = ["A.>"]\n',
            ("[[retain]] #1", "not a table"),
            id="retain-list-of-strings",
        ),
        pytest.param(
            '[node]\nfsync = "yes"\n',
            ("node.fsync",),
            id="fsync-not-bool",
        ),
    ],
)
def test_config_retain_errors_name_file_and_key(
    tmp_path: Path, text: str, needles: tuple[str, ...]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.parametrize(
    ("rules", "needles"),
    [
        ((RetainRule("A..B"),), ("keyword: retain #1", "A..B")),
        ((RetainRule("A.>"), RetainRule("A.>")), ("keyword: retain #2", "twice")),
        ((RetainRule("A.>", max_msgs=-1),), ("keyword: retain #1", "max_msgs")),
        ((RetainRule("A.>", max_bytes=-1),), ("keyword: retain #1", "max_bytes")),
        ((RetainRule("A.>", max_age=-1.0),), ("keyword: retain #1", "max_age")),
        (("A.>",), ("keyword: retain #1", "not a RetainRule")),
    ],
    ids=["bad-pattern", "duplicate", "neg-msgs", "neg-bytes", "neg-age", "not-a-rule"],
)
def test_keyword_retain_errors(rules: tuple[Any, ...], needles: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(retain=rules)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_replace_names_its_source_for_retain_errors() -> None:
    cfg = NodeConfig(retain=(RetainRule("A.>"),))
    with pytest.raises(ConfigError, match=r"^command line: retain #1: .*A\.\.B"):
        cfg.replace(source="command line", retain=(RetainRule("A..B"),))
    assert cfg.replace(fsync=True).fsync is True
    with pytest.raises(ConfigError, match=r"node\.fsync"):
        NodeConfig(fsync=1)  # type: ignore[arg-type]  # (the wrong type tested)
