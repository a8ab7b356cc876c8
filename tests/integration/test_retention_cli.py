"""The retention log from the command line (``zbroker pub --confirm``, ``zbroker replay``,
via CliRunner: one-line errors, usage errors) and in ``status`` (:mod:`.retention`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

from tests.integration.retention import (
    BrokerFactory,
    ClientFactory,
    retaining,
    store_stats,
)
from zbroker import (
    Broker,
)
from zbroker.config import RetainRule

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

# -- CLI ------------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    """Run the CLI in-process. ZBROKER_* variables of the caller's environment are unset."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZBROKER_")}
    return CliRunner().invoke(cli, list(args), env=clean)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """A user error: exit 1, exactly one non-empty line on stderr, no traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_usage_error(result: Result, *needles: str) -> None:
    """A bad option value caught by click: exit 2, an 'Error:' line naming it, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


@pytest.fixture
def cli_node(broker_factory: BrokerFactory, client_factory: ClientFactory) -> Broker:
    """A node retaining T.>, whose log already holds two messages (log seq 1-2)."""
    broker = retaining(broker_factory, RetainRule("T.>"), broker_id="CLI")
    client = client_factory(broker.endpoint)
    client.publish("T.PRE", b"pre0", confirm=True)
    client.publish("T.PRE", b"pre1", confirm=True)
    return broker


def test_cli_pub_confirm_and_replay_json(cli_node: Broker, client_factory: ClientFactory) -> None:
    r = invoke("pub", "T.X", "hello", "--count", "8", "--confirm", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr == "published 8 message(s) to T.X, 8 confirmed stored\n"
    client = client_factory(cli_node.endpoint)
    assert client.log_range() == (1, 10)  # every confirmed message is already in the log

    r = invoke("replay", "T.>", "--json", "--from", "4", "--to", "9", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    inc = cli_node.incarnation
    assert [row["log_seq"] for row in rows] == [4, 5, 6, 7, 8]
    assert [row["id"] for row in rows] == [f"CLI:{inc}:{s}" for s in range(4, 9)]
    assert {
        (row["topic"], row["pattern"], row["payload"], row["payload_encoding"]) for row in rows
    } == {("T.X", "T.>", "hello", "text")}
    assert all(row["headers"] == {} for row in rows)
    assert r.stderr == "5 message(s); log holds 1..10\n"


def test_cli_replay_defaults_and_text(cli_node: Broker) -> None:
    r = invoke("pub", "T.Y", "m", "--count", "3", "--persistent", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stderr == "published 3 message(s) to T.Y, 3 confirmed stored\n"
    r = invoke("replay", "T.>", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "1 T.PRE pre0",
        "2 T.PRE pre1",
        "3 T.Y m",
        "4 T.Y m",
        "5 T.Y m",
    ]
    assert r.stderr == "5 message(s); log holds 1..5\n"
    r = invoke("replay", "T.Y", "--json", "--limit", "2", "--broker", cli_node.endpoint)
    assert [json.loads(line)["log_seq"] for line in r.stdout.splitlines()] == [3, 4]
    r = invoke("replay", "--from", "5", "--broker", cli_node.endpoint)  # pattern defaults to >
    assert r.stdout.splitlines() == ["5 T.Y m"]
    r = invoke("replay", "T.>", "--from", "50", "--broker", cli_node.endpoint)
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert r.stderr == "0 message(s); log holds 1..5\n"


@pytest.mark.parametrize("pattern", ["T..>", "T.>.X", "T.X*"])
def test_cli_replay_bad_pattern_is_one_line_error(cli_node: Broker, pattern: str) -> None:
    assert_one_line_error(invoke("replay", pattern, "--broker", cli_node.endpoint), pattern)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--from", "-1"), "--from"),
        (("--to", "-3"), "--to"),
        (("--from", "x"), "--from"),
        (("--limit", "0"), "--limit"),
    ],
    ids=["neg-from", "neg-to", "nonint-from", "zero-limit"],
)
def test_cli_replay_bad_option_values(cli_node: Broker, args: tuple[str, ...], needle: str) -> None:
    assert_usage_error(invoke("replay", "T.>", *args, "--broker", cli_node.endpoint), needle)


def test_cli_replay_inverted_range_is_a_usage_error(cli_node: Broker) -> None:
    # (it exited 1, as an unreachable node does; a mistake in the options is a usage error)
    r = invoke("replay", "T.>", "--from", "9", "--to", "4", "--broker", cli_node.endpoint)
    assert_usage_error(r, "--from 9 is after --to 4")


@pytest.mark.parametrize(
    ("topic", "needle"), [("$ZB.X", "reserved"), ("A..B", "A..B"), ("A.*", "A.*")]
)
def test_cli_pub_confirm_bad_topic_is_one_line_error(
    cli_node: Broker, client_factory: ClientFactory, topic: str, needle: str
) -> None:
    assert_one_line_error(
        invoke("pub", topic, "m", "--confirm", "--broker", cli_node.endpoint), needle
    )
    assert client_factory(cli_node.endpoint).log_range() == (1, 2)


# -- status --------------------------------------------------------------------------------------


def test_status_store_fields(
    broker_factory: BrokerFactory, client_factory: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "status-node"
    broker = retaining(
        broker_factory,
        RetainRule("S.>", max_msgs=3),
        RetainRule("S.BIG.*", max_bytes=20),
        data_dir=data_dir,
    )
    client = client_factory(broker.endpoint)
    empty = store_stats(broker)
    keys = ("path", "first_seq", "last_seq", "retained_rows", "dropped", "rules")
    assert [(r["overflow"], r["held_msgs"], r["held_bytes"]) for r in empty["rules"]] == [
        ("drop-oldest", 0, 0),
        ("drop-oldest", 0, 0),
    ]
    empty["rules"] = [
        {k: r[k] for k in ("pattern", "max_msgs", "max_bytes", "max_age")} for r in empty["rules"]
    ]
    assert {k: empty[k] for k in keys} == {
        "path": str(data_dir / "store.sqlite3"),
        "first_seq": 1,
        "last_seq": 0,
        "retained_rows": 0,
        "dropped": {},
        "rules": [
            {"pattern": "S.>", "max_msgs": 3, "max_bytes": 0, "max_age": 0.0},
            {"pattern": "S.BIG.*", "max_msgs": 0, "max_bytes": 20, "max_age": 0.0},
        ],
    }
    for i in range(5):
        client.publish("S.X", b"%d" % i, confirm=True)  # log seq 1-5; 1-2 dropped
    client.publish("S.BIG.A", b"x" * 8, confirm=True)  # seq 6: 7 + 8 = 15 bytes
    client.publish("S.BIG.A", b"x" * 8, confirm=True)  # seq 7: 30 > 20, drops seq 6
    stats = store_stats(broker)
    assert stats["first_seq"] == 3
    assert stats["last_seq"] == 7
    assert stats["retained_rows"] == 4  # 3, 4, 5 and 7
    assert stats["dropped"] == {"max_bytes": 1, "max_msgs": 2}
    assert client.status()["store"] == stats  # the same over the wire
    assert [m.log_seq for m in client.read()] == [3, 4, 5, 7]
    assert client.log_range() == (3, 7)
