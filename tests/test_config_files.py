"""Unit tests for zbroker.config's files: load_config (a full file, defaults kept, every
error naming the file and the key, unreadable and invalid files), the [forward] table and
the [[link]] tables (URIs, static patterns against the filters, redial delays)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.configs import ID_RULE, write_config
from zbroker.config import NodeConfig, load_config
from zbroker.config import toml as toml_config
from zbroker.const import DEFAULT_MAX_FRAME_BYTES, DEFAULT_PORT
from zbroker.errors import ConfigError

# ---------------------------------------------------------------------------------------
# load_config
# ---------------------------------------------------------------------------------------

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
    path = write_config(tmp_path, FULL.format(data_dir=tmp_path / "data"))
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
    cfg = load_config(write_config(tmp_path, '[node]\ndata_dir = "~/zb-data"\n'))
    assert cfg.data_dir == Path.home() / "zb-data"


def test_load_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = write_config(tmp_path, "# nothing\n")
    cfg = load_config(path)
    assert cfg == NodeConfig()
    assert cfg.source == str(path)


def test_load_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path, "[limits]\nhwm = 7\n"))
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
        ("[node]\nid = 5\n", f"node.id: 5 {ID_RULE}"),
        ("[node]\nid = 'a b'\n", f"node.id: 'a b' {ID_RULE}"),
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
        ("[[host]]\npattern = '$ZB.Q.>'\n", "host.pattern: '$ZB.Q.>' is of the node's own"),
        (
            "[[host]]\npattern = 'A.>'\n[[flood]]\npattern = 'A.>'\n",
            "'A.>' is both a [[host]] and a [[flood]] branch",
        ),
        # (said without the stand-in link the defaults are checked on)
        ("[discovery.link_defaults]\nttl = 0\n", "discovery.link_defaults: ttl: 0 is out of range"),
        ("[node]\nlog_level = 'loud'\n", "node.log_level: 'loud' is not one of debug, info"),
        ("[limits]\nhwm = 1.5\n", "limits.hwm: 1.5 is not an integer"),
        ("[limits]\nhwm = 0\n", "limits.hwm: 0 is out of range (1..10000000)"),
        ("[limits]\nmax_frame_bytes = false\n", "limits.max_frame_bytes: False is not an integer"),
        ("[limits]\nmax_frame_bytes = 1\n", "limits.max_frame_bytes: 1 is out of range"),
    ],
)
def test_load_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_an_unknown_table_error_lists_exactly_the_tables_a_file_may_have(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, "[nodes]\nport = 1\n"))
    match = re.search(r"\(known: (.*)\)$", str(info.value))
    assert match, str(info.value)
    listed = match.group(1).split(", ")
    assert listed == toml_config.known_tables()
    assert "[discovery]" in listed and "[[retain]]" in listed
    for name in listed:  # each one listed is taken: an empty table or array is valid
        empty = f"{name.strip('[]')} = []\n" if name.startswith("[[") else f"{name}\n"
        load_config(write_config(tmp_path, empty))


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
    path = write_config(tmp_path, text)
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
    path = write_config(tmp_path, "[node]\nport = 1\n")
    path.chmod(0)
    try:
        with pytest.raises(ConfigError) as info:
            load_config(path)
    finally:
        path.chmod(0o600)
    assert str(info.value) == f"{path}: cannot read config file: Permission denied"


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
