"""Unit tests for zbroker.config: defaults, keyword validation and replace(). Loading
TOML files, with their [forward] and [[link]] tables: ``tests/test_config_files.py``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.configs import ID_RULE, write_config
from zbroker.config import LOG_LEVELS, NodeConfig, default_data_dir, load_config
from zbroker.config import validate_broker_id as validate_id
from zbroker.const import DEFAULT_HOST, DEFAULT_HWM, DEFAULT_MAX_FRAME_BYTES, DEFAULT_PORT
from zbroker.errors import ConfigError, ZBrokerError

# ---------------------------------------------------------------------------------------
# defaults
# ---------------------------------------------------------------------------------------


def test_defaults() -> None:
    cfg = NodeConfig()
    assert cfg.broker_id is None
    assert cfg.host == "127.0.0.1" == DEFAULT_HOST
    assert cfg.port == 7100 == DEFAULT_PORT
    assert cfg.data_dir is None
    assert cfg.log_level == "info"
    assert cfg.max_frame_bytes == 1024 * 1024 == DEFAULT_MAX_FRAME_BYTES
    assert cfg.hwm == 100_000 == DEFAULT_HWM
    assert cfg.source == "keyword"


def test_log_levels() -> None:
    assert LOG_LEVELS == ("debug", "info", "warning", "error", "critical")


def test_config_is_frozen() -> None:
    cfg = NodeConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1  # type: ignore[misc]  # (what the test tries: a frozen field)


def test_source_does_not_take_part_in_equality() -> None:
    assert NodeConfig(port=7200, source="a.toml") == NodeConfig(port=7200)
    assert NodeConfig(port=7200) != NodeConfig(port=7201)


def test_config_error_is_a_zbroker_error() -> None:
    with pytest.raises(ZBrokerError):
        NodeConfig(port=-1)


# ---------------------------------------------------------------------------------------
# keyword construction
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "attr", "value"),
    [
        ({"broker_id": "a"}, "broker_id", "a"),
        ({"broker_id": "0"}, "broker_id", "0"),
        ({"broker_id": "A.b_c-1"}, "broker_id", "A.b_c-1"),
        ({"broker_id": "a" * 64}, "broker_id", "a" * 64),
        ({"host": "0.0.0.0"}, "host", "0.0.0.0"),
        ({"host": "::1"}, "host", "::1"),
        ({"host": "node.example.com"}, "host", "node.example.com"),
        ({"port": 0}, "port", 0),
        ({"port": 65533}, "port", 65533),
        ({"max_frame_bytes": 64}, "max_frame_bytes", 64),
        ({"max_frame_bytes": 1 << 30}, "max_frame_bytes", 1 << 30),
        ({"hwm": 1}, "hwm", 1),
        ({"hwm": 10_000_000}, "hwm", 10_000_000),
        *[({"log_level": lv}, "log_level", lv) for lv in LOG_LEVELS],
    ],
)
def test_valid_keywords(kwargs: dict[str, Any], attr: str, value: object) -> None:
    assert getattr(NodeConfig(**kwargs), attr) == value


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # broker ID
        ({"broker_id": ""}, f"keyword: node.id: '' {ID_RULE}"),
        ({"broker_id": "-a"}, f"keyword: node.id: '-a' {ID_RULE}"),
        ({"broker_id": "_a"}, f"keyword: node.id: '_a' {ID_RULE}"),
        ({"broker_id": "a b"}, f"keyword: node.id: 'a b' {ID_RULE}"),
        ({"broker_id": "a/b"}, f"keyword: node.id: 'a/b' {ID_RULE}"),
        ({"broker_id": "é"}, f"keyword: node.id: 'é' {ID_RULE}"),
        ({"broker_id": "a" * 65}, f"keyword: node.id: '{'a' * 65}' {ID_RULE}"),
        ({"broker_id": 5}, f"keyword: node.id: 5 {ID_RULE}"),
        # host
        ({"host": ""}, "keyword: node.host: '' is not a host name or address"),
        ({"host": "a b"}, "keyword: node.host: 'a b' is not a host name or address"),
        ({"host": "tcp://x"}, "keyword: node.host: 'tcp://x' is not a host name or address"),
        ({"host": 5}, "keyword: node.host: 5 is not a host name or address"),
        ({"host": None}, "keyword: node.host: None is not a host name or address"),
        # port: type, then range
        ({"port": "7100"}, "keyword: node.port: '7100' is not an integer"),
        ({"port": 7100.0}, "keyword: node.port: 7100.0 is not an integer"),
        ({"port": True}, "keyword: node.port: True is not an integer"),
        ({"port": None}, "keyword: node.port: None is not an integer"),
        ({"port": -1}, "keyword: node.port: -1 is out of range (0..65533)"),
        ({"port": 65534}, "keyword: node.port: 65534 is out of range (0..65533)"),
        ({"port": 65535}, "keyword: node.port: 65535 is out of range (0..65533)"),
        ({"port": 70000}, "keyword: node.port: 70000 is out of range (0..65533)"),
        # log level
        (
            {"log_level": "INFO"},
            "keyword: node.log_level: 'INFO' is not one of debug, info, warning, error, critical",
        ),
        (
            {"log_level": "verbose"},
            "keyword: node.log_level: 'verbose' is not one of debug, info, warning, error, "
            "critical",
        ),
        (
            {"log_level": ""},
            "keyword: node.log_level: '' is not one of debug, info, warning, error, critical",
        ),
        (
            {"log_level": 10},
            "keyword: node.log_level: 10 is not one of debug, info, warning, error, critical",
        ),
        # limits
        (
            {"max_frame_bytes": 63},
            "keyword: limits.max_frame_bytes: 63 is out of range (64..1073741824)",
        ),
        (
            {"max_frame_bytes": (1 << 30) + 1},
            "keyword: limits.max_frame_bytes: 1073741825 is out of range (64..1073741824)",
        ),
        ({"max_frame_bytes": "1024"}, "keyword: limits.max_frame_bytes: '1024' is not an integer"),
        ({"max_frame_bytes": 1024.0}, "keyword: limits.max_frame_bytes: 1024.0 is not an integer"),
        ({"max_frame_bytes": True}, "keyword: limits.max_frame_bytes: True is not an integer"),
        ({"hwm": 0}, "keyword: limits.hwm: 0 is out of range (1..10000000)"),
        ({"hwm": -5}, "keyword: limits.hwm: -5 is out of range (1..10000000)"),
        ({"hwm": 10_000_001}, "keyword: limits.hwm: 10000001 is out of range (1..10000000)"),
        ({"hwm": 1.5}, "keyword: limits.hwm: 1.5 is not an integer"),
        ({"hwm": "10"}, "keyword: limits.hwm: '10' is not an integer"),
        ({"hwm": False}, "keyword: limits.hwm: False is not an integer"),
    ],
)
def test_keyword_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(**kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("value", ["alpha\n", "a" * 64 + "\n"])
def test_broker_id_with_trailing_newline_is_refused(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(broker_id=value)
    assert str(info.value) == f"keyword: node.id: {value!r} {ID_RULE}"


def test_error_names_the_given_source() -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(port=-1, source="--port")
    assert str(info.value) == "--port: node.port: -1 is out of range (0..65533)"


def test_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        NodeConfig(prot=7100)  # type: ignore[call-arg]  # (the misspelt keyword tested)


@pytest.mark.parametrize("value", ["/tmp/zb", "relative/dir", Path("/tmp/zb")])
def test_data_dir_becomes_a_path(value: str | Path) -> None:
    cfg = NodeConfig(data_dir=value)  # type: ignore[arg-type]  # (a str, made a Path)
    assert isinstance(cfg.data_dir, Path)
    assert cfg.data_dir == Path(value)


def test_bad_data_dir_keyword_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(data_dir=123)  # type: ignore[arg-type]  # (the wrong type tested)
    assert "node.data_dir" in str(info.value)
    assert "123" in str(info.value)


def test_validate_broker_id_default_label() -> None:
    assert validate_id("alpha") == "alpha"
    with pytest.raises(ConfigError) as info:
        validate_id("a b")
    assert str(info.value) == f"broker ID: 'a b' {ID_RULE}"
    with pytest.raises(ConfigError) as info:
        validate_id(None, "flag --id")
    assert str(info.value) == f"flag --id: None {ID_RULE}"


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir(7100) == tmp_path / "zbroker" / "node-7100"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir(7200) == Path.home() / ".local" / "share" / "zbroker" / "node-7200"
    monkeypatch.setenv("XDG_DATA_HOME", "")  # empty counts as unset
    assert default_data_dir(0) == Path.home() / ".local" / "share" / "zbroker" / "node-0"


# ---------------------------------------------------------------------------------------
# replace()
# ---------------------------------------------------------------------------------------


def test_replace_returns_a_validated_copy() -> None:
    base = NodeConfig(port=7200)
    new = base.replace(port=7300, log_level="debug", broker_id="beta")
    assert (new.port, new.log_level, new.broker_id) == (7300, "debug", "beta")
    assert (base.port, base.log_level, base.broker_id) == (7200, "info", None)
    assert new.hwm == base.hwm


def test_replace_ignores_none() -> None:
    base = NodeConfig(port=7200, broker_id="alpha")
    assert base.replace(port=None, broker_id=None) == base
    assert base.replace() == base


def test_replace_data_dir_becomes_a_path() -> None:
    new = NodeConfig().replace(data_dir="/tmp/zb-x")
    assert new.data_dir == Path("/tmp/zb-x")
    assert isinstance(new.data_dir, Path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": -1}, "keyword: node.port: -1 is out of range (0..65533)"),
        ({"port": "1"}, "keyword: node.port: '1' is not an integer"),
        ({"hwm": 0}, "keyword: limits.hwm: 0 is out of range (1..10000000)"),
        ({"broker_id": "a b"}, f"keyword: node.id: 'a b' {ID_RULE}"),
        (
            {"log_level": "trace"},
            "keyword: node.log_level: 'trace' is not one of debug, info, warning, error, critical",
        ),
    ],
)
def test_replace_validates(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig().replace(**changes)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prot": 1}, "unknown option(s): prot"),
        ({"zeta": 1, "alpha": 2, "port": 7100}, "unknown option(s): alpha, zeta"),
        ({"id": "x"}, "unknown option(s): id"),  # the TOML key, not the field name
    ],
)
def test_replace_rejects_unknown_options(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig().replace(**changes)
    assert str(info.value) == message


def test_replace_error_does_not_blame_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[node]\nport = 7200\n")
    cfg = load_config(path)
    with pytest.raises(ConfigError) as info:
        cfg.replace(port=70000)
    assert "node.port" in str(info.value)
    assert "70000" in str(info.value)
    assert str(path) not in str(info.value)
