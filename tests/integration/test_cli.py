"""Integration tests of the ``zbroker`` command line.

In-process tests drive the click group with CliRunner against an in-thread Broker. Tests
marked ``slow`` run the real console script as subprocesses; the ``procs`` fixture stops
every one of them by PID. Every address is 127.0.0.1. ``zbroker start`` itself, as a
process: :mod:`.test_cli_start`; ``zbroker status``: :mod:`.test_cli_status`.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.cli_runs import (
    HOST,
    WAIT,
    assert_one_line_error,
    assert_one_line_stderr,
    endpoint,
    invoke,
)
from zbroker import Broker, Client

JSON_KEYS = {"topic", "pattern", "id", "timestamp", "headers", "payload", "payload_encoding"}

ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


# -- helpers ----------------------------------------------------------------------------------


def received(broker: Broker) -> int:
    value: int = broker.status()["counters"]["received"]
    return value


def patterns_of(broker: Broker) -> set[str]:
    return set(broker.status()["subscriptions"]["patterns"])


# -- pub ---------------------------------------------------------------------------------------


def test_pub_message_with_count_and_headers(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("PUB.>", got)
    result = invoke(
        "pub", "PUB.A", "hello", "--broker", broker.endpoint, "--count", "5",
        "--header", "k=v", "-H", "x=y=z",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "published 5 message(s) to PUB.A" in result.stderr
    assert got.wait_for(5)
    assert [m.payload for m in got.messages] == [b"hello"] * 5
    assert {m.payload_type for m in got.messages} == {"bytes"}
    assert all(m.headers == {"k": "v", "x": "y=z"} for m in got.messages)
    assert received(broker) == 5


def test_pub_reads_stdin_lines(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("STDIN.>", got)
    result = invoke("pub", "STDIN.X", "-", "--broker", broker.endpoint, input="l1\nl2\n\nl3\n")
    assert result.exit_code == 0, result.output
    assert "published 4 message(s) to STDIN.X" in result.stderr
    assert got.wait_for(4)
    assert [m.payload for m in got.messages] == [b"l1", b"l2", b"", b"l3"]
    assert received(broker) == 4


def test_pub_count_limits_the_lines_of_stdin(broker: Broker, client_factory: ClientFactory) -> None:
    # (--count was ignored with '-': every line went, and an endless input never ended)
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("STDIN.>", got)
    lines = "".join(f"l{i}\n" for i in range(10))
    result = invoke("pub", "STDIN.N", "-", "--count", "3", "--broker", broker.endpoint, input=lines)
    assert result.exit_code == 0, result.output
    assert "published 3 message(s) to STDIN.N" in result.stderr
    assert got.wait_for(3)
    assert [m.payload for m in got.messages] == [b"l0", b"l1", b"l2"]
    assert received(broker) == 3


def test_pub_rejects_malformed_header(broker: Broker) -> None:
    result = invoke("pub", "HDR.X", "m", "--broker", broker.endpoint, "-H", "no-equals-sign")
    assert result.exit_code == 2
    assert "no-equals-sign" in result.stderr
    assert "Traceback" not in result.output
    assert received(broker) == 0


def test_pub_typed_headers_are_what_selectors_compare(
    broker: Broker, client_factory: ClientFactory
) -> None:
    # KEY=VALUE is a string, which `qty > 100` never accepts; KEY:=JSON is the value
    client = client_factory(broker.endpoint)
    got, every = Collector(), Collector()
    client.subscribe("SEL.>", got, selector="region = 'EU' AND price * qty >= 1000 AND ok")
    client.subscribe("SEL.>", every)
    for typed in (False, True):
        op = ":=" if typed else "="
        result = invoke(
            "pub", "SEL.A", "m", "--broker", broker.endpoint, "-H", "region=EU",
            "-H", f"price{op}10", "-H", f"qty{op}200", "-H", f"ok{op}true", "-H", 'id:="007"',
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    assert every.wait_for(2)
    assert [m.headers for m in every.messages] == [
        {"region": "EU", "price": "10", "qty": "200", "ok": "true", "id": "007"},
        {"region": "EU", "price": 10, "qty": 200, "ok": True, "id": "007"},
    ]
    assert got.wait_for(1)
    time.sleep(0.3)  # (the string-typed one, had it matched, came first)
    assert [m.headers["qty"] for m in got.messages] == [200]


@pytest.mark.parametrize("bad", ["qty:=2x0", ":=1", "qty:="])
def test_pub_rejects_a_header_that_is_not_json(broker: Broker, bad: str) -> None:
    result = invoke("pub", "HDR.X", "m", "--broker", broker.endpoint, "-H", bad)
    assert result.exit_code == 2, result.output
    assert repr(bad) in result.stderr
    assert "Traceback" not in result.output
    assert received(broker) == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("sub", "J.>", "--queue", "bad name"), "--queue: queue group name: 'bad name' is not"),
        (("sub", "J.>", "--durable", "bad name"), "--durable: durable name: 'bad name' is not"),
    ],
)
def test_a_bad_option_value_is_a_usage_error(
    broker: Broker, args: tuple[str, ...], says: str
) -> None:
    # (these exited 1, as an unreachable node does; the reference says a usage error is 2)
    result = invoke(*args, "--broker", broker.endpoint)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and result.stderr.startswith("Usage: ")
    assert received(broker) == 0


def test_sub_credit_is_for_queue_and_shared_consumers(broker: Broker) -> None:
    result = invoke("sub", "JOBS.>", "--credit", "5", "--broker", broker.endpoint)
    assert result.exit_code == 2
    assert "--credit is for --queue or --shared consumers" in result.stderr
    result = invoke("sub", "JOBS.>", "--queue", "w", "--credit", "0", "-b", broker.endpoint)
    assert result.exit_code == 2 and "Traceback" not in result.output


# -- user errors: one line, non-zero exit --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("pub", "A..B", "x"), "A..B"),
        (("pub", "A.*", "x"), "A.*"),
        (("pub", "$ZB.X", "x"), "$ZB.X"),
        (("sub", "A.>.B"), "A.>.B"),
        (("sub", "OK.>", "A..B"), "A..B"),
    ],
    ids=["empty-segment", "wildcard", "reserved", "bad-pattern", "second-pattern-bad"],
)
def test_bad_topic_is_one_line_error(args: tuple[str, ...], needle: str) -> None:
    result = invoke(*args, "--broker", endpoint(1))  # refused before any connection
    assert_one_line_error(result, needle)


@pytest.mark.parametrize("command", ["status", "pub"])
def test_unreachable_broker_is_one_line_error(command: str, free_port: Callable[[], int]) -> None:
    # (`sub` installs a SIGTERM handler, so it is tested as a subprocess below)
    address = endpoint(free_port())
    args = {"status": ["status"], "pub": ["pub", "U.X", "m"]}[command]
    t0 = time.monotonic()
    result = invoke(*args, "--broker", address, "--timeout", "0.5")
    assert time.monotonic() - t0 < 10.0
    assert_one_line_error(result, address)


@pytest.mark.slow
def test_unreachable_broker_sub_subprocess(procs: Any, free_port: Callable[[], int]) -> None:
    address = endpoint(free_port())
    rc, out, err = procs.run("sub", "U.>", "--broker", address, "--timeout", "0.5", timeout=WAIT)
    assert rc != 0
    assert out == ""
    assert_one_line_stderr(err, address)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "address",
    ["http://127.0.0.1:7100/x", "tcp://[::1:7100", "foo bar"],
    ids=["not-tcp", "ipv6-bracket", "space-in-host"],
)
def test_bad_broker_address_is_one_line_error(address: str) -> None:
    # (an unclosed IPv6 bracket printed a ValueError's traceback; a host ZeroMQ refuses
    # hung the command for ever)
    result = invoke("status", "--broker", address, "--timeout", "0.5")
    assert_one_line_error(result, address)


@pytest.mark.parametrize("value", ["-1", "0"])
def test_timeout_must_be_positive(value: str) -> None:
    # (a negative one reached ZeroMQ as a socket option: a ZMQError's traceback)
    result = invoke("pub", "A.B", "m", "--broker", endpoint(1), "--timeout", value)
    assert result.exit_code == 2, result.output
    assert "--timeout" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("[node]\nprot = 7100\n", ("unknown key", "node.prot")),
        ("[nodes]\nport = 7100\n", ("unknown table", "nodes")),
        ('[node]\nport = "x"\n', ("node.port", "'x'")),
        ("[node]\nport = 70000\n", ("node.port", "70000")),
        ("[node\n", ("not valid TOML",)),
    ],
    ids=["unknown-key", "unknown-table", "wrong-type", "out-of-range", "not-toml"],
)
def test_bad_config_file_is_one_line_error(
    tmp_path: Path, content: str, needles: tuple[str, ...]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(content)
    result = invoke("start", "--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert_one_line_error(result, str(config), *needles)
    assert not (tmp_path / "data").exists()  # refused before touching the data directory


def test_missing_config_file_is_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "missing.toml"
    result = invoke("start", "--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert_one_line_error(result, str(config))


def test_bad_flag_value_is_not_blamed_on_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "good.toml"
    config.write_text('[node]\nhost = "127.0.0.1"\nport = 20000\n')
    result = invoke(
        "start", "--config", str(config), "--port", "70000", "--data-dir", str(tmp_path / "d")
    )
    line = assert_one_line_error(result, "70000", "node.port")
    assert str(config) not in line  # the bad value came from --port, not from the file
    assert line.startswith("Error: command line: "), line
    # a variable's bad value is blamed on the environment, --monitor's too (an audit)
    data = ("--data-dir", str(tmp_path / "d"))
    env = {"ZBROKER_PORT": "-5", "ZBROKER_DATA_DIR": data[1]}
    line = assert_one_line_error(invoke("start", env=env), "-5")
    assert line.startswith("Error: environment (ZBROKER_*): node.port"), line
    line = assert_one_line_error(invoke("start", "--monitor", "nocolon", *data), "nocolon")
    assert line.startswith("Error: command line: monitor.listen"), line


# -- sub (a real subprocess) ---------------------------------------------------------------------


@pytest.mark.slow
def test_pub_and_sub_json(
    broker: Broker, procs: Any, client_factory: ClientFactory, wait_until: WaitUntil
) -> None:
    sub = procs.zbroker("sub", "SUBJ.>", "--broker", broker.endpoint, "--count", "4", "--json")
    assert wait_until(lambda: "SUBJ.>" in patterns_of(broker) or sub.poll() is not None, WAIT)
    assert sub.poll() is None, sub.stderr_text()
    assert sub.wait_stderr("subscribed to SUBJ.>", WAIT), sub.stderr_text()

    # one publisher at a time, each waited for, so the order at the node is known
    r = invoke("pub", "SUBJ.TEXT", "hello", "--broker", broker.endpoint, "-H", "k=v")
    assert r.exit_code == 0, r.output
    assert wait_until(lambda: received(broker) == 1, WAIT)
    binary = b"\xff\x00\x01binary\x80"
    publisher = client_factory(broker.endpoint)
    publisher.publish("SUBJ.BIN", binary)
    assert wait_until(lambda: received(broker) == 2, WAIT)
    publisher.publish("SUBJ.OBJ", {"x": [1, 2], "s": "t"}, headers={"n": 1})
    assert wait_until(lambda: received(broker) == 3, WAIT)
    r = invoke("pub", "SUBJ.LINES", "-", "--broker", broker.endpoint, input="from stdin\n")
    assert r.exit_code == 0, r.output

    assert sub.wait(WAIT) == 0, sub.stderr_text()
    lines = sub.stdout_text().splitlines()
    assert len(lines) == 4, lines
    objs = [json.loads(line) for line in lines]
    for obj in objs:
        assert set(obj) == JSON_KEYS
        assert obj["pattern"] == "SUBJ.>"
        assert re.fullmatch(rf"{re.escape(broker.broker_id)}:{broker.incarnation}:\d+", obj["id"])
        assert isinstance(obj["timestamp"], float)
    text, binmsg, obj, stdin = objs
    assert text["topic"] == "SUBJ.TEXT"
    assert (text["payload"], text["payload_encoding"]) == ("hello", "text")
    assert text["headers"] == {"k": "v"}
    assert binmsg["topic"] == "SUBJ.BIN"
    assert binmsg["payload_encoding"] == "base64"
    assert base64.b64decode(binmsg["payload"]) == binary
    assert binmsg["headers"] == {}
    assert obj["topic"] == "SUBJ.OBJ"
    assert (obj["payload"], obj["payload_encoding"]) == ({"x": [1, 2], "s": "t"}, "msgpack")
    assert obj["headers"] == {"n": 1}
    assert (stdin["topic"], stdin["payload"]) == ("SUBJ.LINES", "from stdin")
    seqs = [int(o["id"].rsplit(":", 1)[1]) for o in objs]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert "Traceback" not in sub.stderr_text()


@pytest.mark.slow
def test_sub_count_stops_after_exactly_n(broker: Broker, procs: Any, wait_until: WaitUntil) -> None:
    sub = procs.zbroker("sub", "CNT.>", "--broker", broker.endpoint, "--count", "3", "--json")
    assert wait_until(lambda: "CNT.>" in patterns_of(broker) or sub.poll() is not None, WAIT)
    r = invoke("pub", "CNT.X", "m", "--broker", broker.endpoint, "--count", "10")
    assert r.exit_code == 0, r.output
    assert sub.wait(WAIT) == 0, sub.stderr_text()
    lines = sub.stdout_text().splitlines()
    assert len(lines) == 3, lines
    assert all(json.loads(line)["topic"] == "CNT.X" for line in lines)
    # the subscriber is gone, and so is its interest
    assert wait_until(lambda: "CNT.>" not in patterns_of(broker), WAIT)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sub_streams_lines_and_stops_on_signal(
    broker: Broker, procs: Any, client_factory: ClientFactory, wait_until: WaitUntil, sig: int
) -> None:
    sub = procs.zbroker("sub", "STREAM.>", "--broker", broker.endpoint, "--json")
    assert wait_until(lambda: "STREAM.>" in patterns_of(broker) or sub.poll() is not None, WAIT)
    assert sub.wait_stderr("subscribed to", WAIT), sub.stderr_text()
    publisher = client_factory(broker.endpoint)
    for i in range(3):
        publisher.publish("STREAM.A", f"m{i}".encode())
        # each line shows up while the process still runs: output is not held in a buffer
        line = sub.readline(WAIT)
        assert line is not None, f"no output line for message {i}"
        assert json.loads(line)["payload"] == f"m{i}"
    t0 = time.monotonic()
    sub.send_signal(sig)
    assert sub.wait(5.0) == 0, sub.stderr_text()
    assert time.monotonic() - t0 < 5.0
    assert "Traceback" not in sub.stderr_text()
    assert wait_until(lambda: "STREAM.>" not in patterns_of(broker), WAIT)


@pytest.mark.slow
@pytest.mark.parametrize("command", [("sub", "WAIT.>"), ("events",)], ids=["sub", "events"])
def test_a_signal_while_the_node_has_not_answered_stops_at_once(
    procs: Any, command: tuple[str, ...]
) -> None:
    """Ctrl-C waited for the connection's --timeout: the constructor held the main
    thread. The "node" is a TCP listener that never answers, so the command is
    certainly connecting (signal handlers on) once it has accepted the connection."""
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen()
        listener.settimeout(WAIT)
        address = endpoint(listener.getsockname()[1])
        proc = procs.zbroker(*command, "--broker", address, "--timeout", "60")
        conn, _ = listener.accept()  # the client is connecting
        conn.close()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0, proc.stderr_text()
    assert time.monotonic() - t0 < 10.0  # (it waited out the 60 s)
    assert "Traceback" not in proc.stderr_text()


@pytest.mark.slow
def test_pub_subprocess_reads_stdin(
    broker: Broker, procs: Any, client_factory: ClientFactory
) -> None:
    client = client_factory(broker.endpoint)
    got = Collector()
    client.subscribe("PIPE.>", got)
    rc, _out, err = procs.run(
        "pub", "PIPE.X", "-", "--broker", broker.endpoint, input="a\nb\nc\n", timeout=WAIT
    )
    assert rc == 0, err
    assert "published 3 message(s) to PIPE.X" in err
    assert got.wait_for(3)
    assert [m.payload for m in got.messages] == [b"a", b"b", b"c"]
