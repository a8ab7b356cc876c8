"""Unit tests for zbroker.config: defaults, keyword validation, TOML loading, replace()."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from zbroker.config import LOG_LEVELS, NodeConfig, default_data_dir, load_config
from zbroker.config import validate_broker_id as validate_id
from zbroker.const import DEFAULT_HOST, DEFAULT_HWM, DEFAULT_MAX_FRAME_BYTES, DEFAULT_PORT
from zbroker.errors import ConfigError, ZBrokerError

_ID_RULE = (
    "is not a valid broker ID (1-64 characters of letters, digits, '_', '.', '-', "
    "starting with a letter or digit)"
)

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
        cfg.port = 1  # type: ignore[misc]


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
        ({"broker_id": ""}, f"keyword: node.id: '' {_ID_RULE}"),
        ({"broker_id": "-a"}, f"keyword: node.id: '-a' {_ID_RULE}"),
        ({"broker_id": "_a"}, f"keyword: node.id: '_a' {_ID_RULE}"),
        ({"broker_id": "a b"}, f"keyword: node.id: 'a b' {_ID_RULE}"),
        ({"broker_id": "a/b"}, f"keyword: node.id: 'a/b' {_ID_RULE}"),
        ({"broker_id": "é"}, f"keyword: node.id: 'é' {_ID_RULE}"),
        ({"broker_id": "a" * 65}, f"keyword: node.id: '{'a' * 65}' {_ID_RULE}"),
        ({"broker_id": 5}, f"keyword: node.id: 5 {_ID_RULE}"),
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
    assert str(info.value) == f"keyword: node.id: {value!r} {_ID_RULE}"


def test_error_names_the_given_source() -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(port=-1, source="--port")
    assert str(info.value) == "--port: node.port: -1 is out of range (0..65533)"


def test_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        NodeConfig(prot=7100)  # type: ignore[call-arg]


@pytest.mark.parametrize("value", ["/tmp/zb", "relative/dir", Path("/tmp/zb")])
def test_data_dir_becomes_a_path(value: str | Path) -> None:
    cfg = NodeConfig(data_dir=value)  # type: ignore[arg-type]
    assert isinstance(cfg.data_dir, Path)
    assert cfg.data_dir == Path(value)


def test_bad_data_dir_keyword_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        NodeConfig(data_dir=123)  # type: ignore[arg-type]
    assert "node.data_dir" in str(info.value)
    assert "123" in str(info.value)


def test_validate_broker_id_default_label() -> None:
    assert validate_id("alpha") == "alpha"
    with pytest.raises(ConfigError) as info:
        validate_id("a b")
    assert str(info.value) == f"broker id: 'a b' {_ID_RULE}"
    with pytest.raises(ConfigError) as info:
        validate_id(None, "flag --id")
    assert str(info.value) == f"flag --id: None {_ID_RULE}"


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir(7100) == tmp_path / "zbroker" / "node-7100"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir(7200) == Path.home() / ".local" / "share" / "zbroker" / "node-7200"
    monkeypatch.setenv("XDG_DATA_HOME", "")  # empty counts as unset
    assert default_data_dir(0) == Path.home() / ".local" / "share" / "zbroker" / "node-0"


# ---------------------------------------------------------------------------------------
# load_config
# ---------------------------------------------------------------------------------------


def _write(tmp_path: Path, text: str | bytes, name: str = "zbroker.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return path


FULL = """\
# a complete file
[node]
id = "alpha"
host = "0.0.0.0"
port = 7200
data_dir = "{data_dir}"
log_level = "debug"

[limits]
max_frame_bytes = 2048
hwm = 500
"""


def test_load_full_file(tmp_path: Path) -> None:
    path = _write(tmp_path, FULL.format(data_dir=tmp_path / "data"))
    cfg = load_config(path)
    assert cfg.broker_id == "alpha"
    assert cfg.host == "0.0.0.0"
    assert cfg.port == 7200
    assert cfg.data_dir == tmp_path / "data"
    assert isinstance(cfg.data_dir, Path)
    assert cfg.log_level == "debug"
    assert cfg.max_frame_bytes == 2048
    assert cfg.hwm == 500
    assert cfg.source == str(path)
    assert load_config(str(path)) == cfg  # str paths work too


def test_load_expands_user_in_data_dir(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, '[node]\ndata_dir = "~/zb-data"\n'))
    assert cfg.data_dir == Path.home() / "zb-data"


def test_load_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path, "# nothing\n")
    cfg = load_config(path)
    assert cfg == NodeConfig()
    assert cfg.source == str(path)


def test_load_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "[limits]\nhwm = 7\n"))
    assert cfg.hwm == 7
    assert cfg.port == DEFAULT_PORT
    assert cfg.max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[nodes]\nport = 1\n", "unknown table [nodes]"),
        ("[limit]\nhwm = 1\n", "unknown table [limit]"),
        ("port = 7100\n", "unknown table [port]"),
        ("[node]\nprot = 7100\n", "unknown key node.prot (known: "),
        ("[node]\nbroker_id = 'x'\n", "unknown key node.broker_id (known: "),
        ("[limits]\nmax_frame = 1\n", "unknown key limits.max_frame (known: "),
        ("node = 5\n", "node must be a table, not int"),
        ("limits = 'x'\n", "limits must be a table, not str"),
        ("[node]\nport = '7100'\n", "node.port: '7100' is not an integer"),
        ("[node]\nport = 7100.0\n", "node.port: 7100.0 is not an integer"),
        ("[node]\nport = true\n", "node.port: True is not an integer"),
        ("[node]\nport = 70000\n", "node.port: 70000 is out of range (0..65533)"),
        ("[node]\nid = 5\n", f"node.id: 5 {_ID_RULE}"),
        ("[node]\nid = 'a b'\n", f"node.id: 'a b' {_ID_RULE}"),
        ("[node]\nhost = 1\n", "node.host: 1 is not a host name or address"),
        ("[node]\ndata_dir = 5\n", "node.data_dir: 5 is not a path string"),
        ("[node]\ndata_dir = ['a']\n", "node.data_dir: ['a'] is not a path string"),
        ("[node]\ndata_dir = ''\n", "node.data_dir: '' is not a path string"),
        ("[discovery]\ninterfaces = [1]\n", "discovery.interfaces: 1 is not an IPv4 or IPv6"),
        (
            "[discovery.link_defaults]\npeer = 'b'\n",
            "discovery.link_defaults: peer cannot be set",
        ),
        (
            "[discovery.link_defaults]\nreplicate = ['PRICE.>']\n",
            "discovery.link_defaults: replicate cannot be set",
        ),
        ("[node]\nlog_level = 'loud'\n", "node.log_level: 'loud' is not one of debug, info"),
        ("[limits]\nhwm = 1.5\n", "limits.hwm: 1.5 is not an integer"),
        ("[limits]\nhwm = 0\n", "limits.hwm: 0 is out of range (1..10000000)"),
        ("[limits]\nmax_frame_bytes = false\n", "limits.max_frame_bytes: False is not an integer"),
        ("[limits]\nmax_frame_bytes = 1\n", "limits.max_frame_bytes: 1 is out of range"),
    ],
)
def test_load_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "[node\nport = 1\n",  # unclosed table header
        "[node]\nport = \n",  # missing value
        "[node]\nport = 1\nport = 2\n",  # duplicate key
        "[node]\nhost = 'unterminated\n",
        b"[node]\nid = '\xff'\n",  # not UTF-8
    ],
)
def test_invalid_toml(tmp_path: Path, text: str | bytes) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: not valid TOML: ")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read config file: No such file or directory"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)
    assert str(info.value) == f"{tmp_path}: cannot read config file: Is a directory"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read any file"
)
def test_unreadable_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[node]\nport = 1\n")
    path.chmod(0)
    try:
        with pytest.raises(ConfigError) as info:
            load_config(path)
    finally:
        path.chmod(0o600)
    assert str(info.value) == f"{path}: cannot read config file: Permission denied"


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
        ({"broker_id": "a b"}, f"keyword: node.id: 'a b' {_ID_RULE}"),
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
    path = _write(tmp_path, "[node]\nport = 7200\n")
    cfg = load_config(path)
    with pytest.raises(ConfigError) as info:
        cfg.replace(port=70000)
    assert "node.port" in str(info.value)
    assert "70000" in str(info.value)
    assert str(path) not in str(info.value)


def test_forward_table(tmp_path: Path) -> None:
    """[forward]: store-and-forward bounds per link and the sticky-route lifetime."""
    path = tmp_path / "f.toml"
    path.write_text("[forward]\nmax_msgs = 10\nmax_bytes = 0\nsticky_ttl = 60\n")
    cfg = load_config(path)
    assert (cfg.forward_max_msgs, cfg.forward_max_bytes, cfg.sticky_ttl) == (10, 0, 60)
    assert NodeConfig().sticky_ttl == 86_400.0
    path.write_text("[forward]\nsticky_ttl = 0\n")
    with pytest.raises(ConfigError, match=r"forward\.sticky_ttl"):
        load_config(path)
    path.write_text("[forward]\nmax_msgs = -1\n")
    with pytest.raises(ConfigError, match=r"forward\.max_msgs"):
        load_config(path)
    path.write_text("[forward]\nmax_mesages = 1\n")
    with pytest.raises(ConfigError, match="max_mesages"):
        load_config(path)


def test_forward_overflow_policy(tmp_path: Path) -> None:
    """[forward] overflow: drop-oldest (default) or reject-new (back-pressure)."""
    path = tmp_path / "f.toml"
    assert NodeConfig().forward_overflow == "drop-oldest"
    path.write_text('[forward]\noverflow = "reject-new"\n')
    assert load_config(path).forward_overflow == "reject-new"
    path.write_text('[forward]\noverflow = "drop-newest"\n')
    with pytest.raises(ConfigError, match=r"forward\.overflow: 'drop-newest' is not one of"):
        load_config(path)


def test_static_pattern_outside_include_is_an_error_naming_it(tmp_path: Path) -> None:
    """The filters apply to static pushes too, so a static pattern that no include pattern
    overlaps could never cross its link: the node does not start, and says which pattern."""
    path = tmp_path / "l.toml"
    link = '[[link]]\nname = "hq"\nuri = "tcp://127.0.0.1:7100"\ninclude = {inc}\nstatic = {st}\n'
    path.write_text(link.format(inc='["PRICE.STOCK.>"]', st='["ALERT.>"]'))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "link 'hq': static pattern 'ALERT.>' matches none of the include patterns" in str(
        info.value
    )
    assert "add it to include" in str(info.value)
    # within include (or overlapping it), or with no include at all: fine
    for inc, st in (
        ('["PRICE.STOCK.>", "ALERT.>"]', '["ALERT.>"]'),
        ('["ALERT.*.FIRE"]', '["ALERT.>"]'),
        ("[]", '["ALERT.>"]'),
    ):
        path.write_text(link.format(inc=inc, st=st))
        (cfg,) = load_config(path).links
        assert cfg.static == ("ALERT.>",)


@pytest.mark.parametrize(
    "uri",
    [
        "tcp://127.0.0.1",  # no port: once accepted, and the link could never connect
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:70000",
        "tcp://127.0.0.1:x",
        "tcp://*:7100",
        "tcp://:7100",
        "tcp://127.0.0.1:7100/path",
        "127.0.0.1:7100",
        "udp://127.0.0.1:7100",
    ],
)
def test_link_uri_must_be_tcp_host_port(tmp_path: Path, uri: str) -> None:
    path = tmp_path / "l.toml"
    path.write_text(f'[[link]]\nname = "hq"\nuri = "{uri}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"link 'hq': uri {uri!r} is not of the form tcp://HOST:PORT" in str(info.value)


@pytest.mark.parametrize(
    "uri", ["tcp://127.0.0.1:7100", "tcp://[::1]:7100", "tcp://hq.example.com:65535"]
)
def test_link_uri_with_host_and_port_is_taken(tmp_path: Path, uri: str) -> None:
    path = tmp_path / "l.toml"
    path.write_text(f'[[link]]\nname = "hq"\nuri = "{uri}"\n')
    (link,) = load_config(path).links
    assert link.uri == uri


def test_static_pattern_wholly_excluded_is_an_error_naming_both(tmp_path: Path) -> None:
    """A static pattern every topic of which an exclude pattern covers could never cross
    its link either; one the exclude covers only in part is fine."""
    path = tmp_path / "l.toml"
    link = '[[link]]\nname = "hq"\nuri = "tcp://127.0.0.1:7100"\nexclude = {exc}\nstatic = {st}\n'
    for exc, st in (('["ALERT.>"]', '["ALERT.FIRE.>"]'), ('[">"]', '["ALERT.*"]')):
        path.write_text(link.format(exc=exc, st=st))
        with pytest.raises(ConfigError, match=r"link 'hq': static pattern '.*' is wholly excluded"):
            load_config(path)
    path.write_text(link.format(exc='["ALERT.TEST.>"]', st='["ALERT.>"]'))
    (cfg,) = load_config(path).links
    assert cfg.static == ("ALERT.>",)


def test_a_first_redial_delay_above_the_longest_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "l.toml"
    head = '[[link]]\nname = "hq"\nuri = "tcp://127.0.0.1:7100"\n'
    path.write_text(head + "reconnect_initial_delay = 5.0\nreconnect_max_delay = 1.0\n")
    with pytest.raises(ConfigError, match=r"reconnect_initial_delay \(5.0\) exceeds"):
        load_config(path)
    path.write_text(head + "reconnect_initial_delay = 1.0\nreconnect_max_delay = 1.0\n")
    (cfg,) = load_config(path).links
    assert cfg.reconnect_max_delay == 1.0
