"""Integration tests of the ``zbroker`` command line.

In-process tests drive the click group with CliRunner against an in-thread Broker. Tests
marked ``slow`` run the real console script (or ``python -m zbroker``) as subprocesses;
the ``procs`` fixture stops every one of them by PID. Every address is 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from zbroker.cli.main import cli

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.errors import ZBrokerError

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait

JSON_KEYS = {"topic", "pattern", "id", "timestamp", "headers", "payload", "payload_encoding"}

ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


# -- helpers ----------------------------------------------------------------------------------


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process. ZBROKER_* variables of the caller's environment are unset."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZBROKER_")}
    clean.update(env or {})
    return CliRunner().invoke(cli, list(args), input=input, env=clean)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """A user error: non-zero exit, exactly one non-empty line on stderr, no traceback."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_one_line_stderr(text: str, *needles: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in text
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def received(broker: Broker) -> int:
    value: int = broker.status()["counters"]["received"]
    return value


def patterns_of(broker: Broker) -> set[str]:
    return set(broker.status()["subscriptions"]["patterns"])


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


# -- status ----------------------------------------------------------------------------------


def test_status_table(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    client.subscribe("TABLE.>", Collector())
    client.publish("TABLE.X", b"x")
    result = invoke("status", "--broker", broker.endpoint)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert broker.broker_id in out
    for name, port in broker.ports.items():
        assert re.search(rf"^{name} endpoint\s+tcp://127\.0\.0\.1:{port}$", out, re.M), out
    assert re.search(rf"^incarnation\s+{broker.incarnation}$", out, re.M), out
    assert re.search(r"^received\s+1$", out, re.M), out
    assert re.search(r"^subscriptions\s+1$", out, re.M), out
    assert "TABLE.>" in out


def test_status_text_lists_a_few_patterns_and_counts_the_rest(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """A node with tens of thousands of subscriptions printed every one of them (40,000
    lines for 40,000) before its links and interest: the text lists the first ones."""
    from zbroker.cli.format import STATUS_PATTERNS_SHOWN

    client = client_factory(broker.endpoint)
    n = STATUS_PATTERNS_SHOWN + 7
    for i in range(n):
        client.subscribe(f"MANY.{i:03d}", Collector())
    out = invoke("status", "--broker", broker.endpoint).stdout
    listed = re.findall(r"^  pattern\s+(\S+)$", out, re.M)
    assert listed == [f"MANY.{i:03d}" for i in range(STATUS_PATTERNS_SHOWN)]
    assert re.search(r"^  \.\.\.\s+7 more \(zbroker status --json lists every one\)$", out, re.M)
    assert re.search(rf"^subscriptions\s+{n}$", out, re.M), out
    js = json.loads(invoke("status", "--broker", broker.endpoint, "--json").stdout)
    assert len(js["subscriptions"]["patterns"]) == n


def test_status_text_shows_unrouted_publishes_and_advisories(
    broker: Broker, client_factory: ClientFactory, wait_until: Callable[..., bool]
) -> None:
    """Two fields the text left to --json: client publishes nobody anywhere wanted, and
    the advisories published or held back."""
    client = client_factory(broker.endpoint)
    for i in range(3):
        client.publish("NOBODY.X", b"%d" % i)
    assert wait_until(lambda: broker.status()["counters"]["unrouted"] == 3, 10)
    out = invoke("status", "--broker", broker.endpoint).stdout
    assert re.search(r"^no subscriber\s+3$", out, re.M), out
    assert re.search(r"^advisories\s+\d+ published, 0 suppressed$", out, re.M), out


def test_status_json(broker: Broker) -> None:
    result = invoke("status", "--broker", broker.endpoint, "--json")
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["broker_id"] == broker.broker_id
    assert status["incarnation"] == broker.incarnation
    assert status["endpoints"]["control"] == broker.endpoint
    assert status["counters"]["received"] == 0
    assert status["subscriptions"] == {"count": 0, "patterns": []}


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


# -- start (a real subprocess) ------------------------------------------------------------------


#: runs argv[2:] with files limited to argv[1] bytes: a write past it fails (EFBIG) as on
#: a full disk (Python ignores SIGXFSZ, and the exec keeps it ignored)
_FILE_LIMIT = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); os.execvp(sys.argv[2], sys.argv[2:])"
)


@pytest.mark.slow
def test_start_exits_with_an_error_when_its_store_cannot_write(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    # the node's loop dies when its store cannot commit (nothing unconfirmed was
    # confirmed); the process must not stay up as if it served
    port = free_port()
    config = tmp_path / "node.toml"
    config.write_text('[[retain]]\npattern = "LOG.>"\n')
    script = str(Path(sys.executable).parent / "zbroker")
    args = ["start", "--config", str(config), "--port", str(port), "--data-dir", "data"]
    node = procs.start([sys.executable, "-c", _FILE_LIMIT, "2000000", script, *args])
    wait_ready(endpoint(port), WAIT, node)
    confirmed = 0
    with Client(endpoint(port), timeout=5.0, publish_timeout=5.0) as client:
        for _ in range(200):  # 200 x 60 KB: far past the 2 MB any file may have
            try:
                client.publish("LOG.A", b"x" * 60_000, persistent=True, confirm=True)
            except ZBrokerError:
                break
            confirmed += 1
    assert 0 < confirmed < 200
    rc = node.wait(WAIT)
    assert rc == 1, node.stderr_text()
    assert "Error: the node's loop failed:" in node.stderr_text()
    assert "zbroker node stopped" in node.stderr_text()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_start_serves_and_stops_cleanly_on_signal(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    tmp_path: Path,
    sig: int,
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    node = procs.zbroker("start", "--port", str(port), "--data-dir", str(data_dir))
    hello = wait_ready(endpoint(port), WAIT, node)
    assert hello["ports"] == {"control": port, "publish": port + 1, "deliver": port + 2}
    assert node.wait_stderr(f"ready at {endpoint(port)}", WAIT), node.stderr_text()

    rc, out, err = procs.run("status", "--broker", endpoint(port), "--json", timeout=WAIT)
    assert rc == 0, err
    status = json.loads(out)
    assert status["broker_id"] == hello["broker_id"]
    assert status["endpoints"] == {
        "control": endpoint(port),
        "publish": endpoint(port + 1),
        "deliver": endpoint(port + 2),
    }

    t0 = time.monotonic()
    node.send_signal(sig)
    rc = node.wait(5.0)
    assert time.monotonic() - t0 < 5.0
    assert rc == 0, node.stderr_text()
    assert "Traceback" not in node.stderr_text()
    assert "stopped" in node.stderr_text()
    # ports and data directory are released: an in-thread node takes both over at once
    with Broker(host=HOST, port=port, data_dir=data_dir) as again:
        assert again.broker_id == hello["broker_id"]
        assert again.incarnation > hello["incarnation"]


# (file, env, flag, config via ZBROKER_CONFIG, expected source)
PRECEDENCE = [
    pytest.param(True, False, False, False, "file", id="file-over-default"),
    pytest.param(True, True, False, False, "env", id="env-over-file"),
    pytest.param(True, False, True, False, "flag", id="flag-over-file"),
    pytest.param(True, True, True, False, "flag", id="flag-over-env-over-file"),
    pytest.param(False, True, False, False, "env", id="env-over-default"),
    pytest.param(False, True, True, False, "flag", id="flag-over-env"),
    pytest.param(True, True, False, True, "env", id="env-over-file-from-ZBROKER_CONFIG"),
    pytest.param(True, False, False, True, "file", id="file-from-ZBROKER_CONFIG"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("use_file", "use_env", "use_flag", "config_env", "winner"), PRECEDENCE)
def test_port_precedence_flag_env_file(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    tmp_path: Path,
    use_file: bool,
    use_env: bool,
    use_flag: bool,
    config_env: bool,
    winner: str,
) -> None:
    """Which port the node binds tells which source won. (The built-in default, 7100, is
    not started here: a fixed well-known port may be taken on a shared machine.)"""
    ports = {"file": free_port(), "env": free_port(), "flag": free_port()}
    args = ["start", "--data-dir", str(tmp_path / "data")]
    extra: dict[str, str] = {}
    if use_file:
        config = tmp_path / "node.toml"
        config.write_text(f'[node]\nhost = "127.0.0.1"\nport = {ports["file"]}\n')
        if config_env:
            extra["ZBROKER_CONFIG"] = str(config)
        else:
            args += ["--config", str(config)]
    if use_env:
        extra["ZBROKER_PORT"] = str(ports["env"])
    if use_flag:
        args += ["--port", str(ports["flag"])]
    node = procs.zbroker(*args, env=procs.env(**extra))
    expected = ports[winner]
    hello = wait_ready(endpoint(expected), WAIT, node)
    assert node.wait_stderr("ready at", WAIT), node.stderr_text()
    assert f"ready at {endpoint(expected)}" in node.stderr_text(), node.stderr_text()
    with Client(endpoint(expected), timeout=10.0) as client:
        status = client.status()
    assert status["broker_id"] == hello["broker_id"]
    assert status["endpoints"]["control"] == endpoint(expected)
    for source, port in ports.items():
        if source != winner:  # the losing sources' ports were never bound
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((HOST, port))
    node.send_signal(signal.SIGTERM)
    assert node.wait(5.0) == 0


@pytest.mark.slow
def test_python_m_zbroker_help(procs: Any) -> None:
    proc = procs.python_m("--help")
    assert proc.wait(WAIT) == 0, proc.stderr_text()
    out = proc.stdout_text()
    assert "Usage:" in out
    for command in ("start", "pub", "sub", "status"):
        assert re.search(rf"^\s+{command}\s", out, re.M), out


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0, 1, 2], ids=["control", "publish", "deliver"])
def test_start_on_port_in_use_is_one_line_error(
    procs: Any, free_port: Callable[[], int], tmp_path: Path, offset: int
) -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind((HOST, port + offset))
        blocker.listen(1)
        rc, _out, err = procs.run(
            "start", "--port", str(port), "--data-dir", str(tmp_path / "data"), timeout=WAIT
        )
    assert rc != 0
    assert_one_line_stderr(err, f"port {port + offset}", "in use")


@pytest.mark.slow
def test_start_on_port_of_running_node_is_one_line_error(
    broker_factory: Callable[..., Broker], procs: Any, free_port: Callable[[], int], tmp_path: Path
) -> None:
    port = free_port()
    running = broker_factory(port=port)
    rc, _out, err = procs.run(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "other"), timeout=WAIT
    )
    assert rc != 0
    assert_one_line_stderr(err, str(port), "in use")
    assert running.status()["broker_id"] == running.broker_id
