"""The ``zbroker start`` command as a real process: it serves and stops cleanly on a
signal (releasing its ports and data directory), exits with an error when its store cannot
write, takes its port from a flag, the environment or a config file (in that order), and
says in one line when a port is taken; ``python -m zbroker`` runs the same command line.
The ``procs`` fixture stops every process by PID. Every address is 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli_runs import HOST, WAIT, assert_one_line_stderr, endpoint
from zbroker import Broker, Client
from zbroker.errors import ZBrokerError

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


def test_security_files_without_security_are_warned_of(
    procs: Any,
    free_port: Callable[[], int],
    wait_ready: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """--clients and --allowlist without --secure were ignored in silence: a user who
    forgot --secure believed the node checked keys and permissions."""
    port = free_port()
    clients = tmp_path / "clients.toml"
    clients.write_text("")
    node = procs.zbroker(
        "start", "--port", str(port), "--data-dir", str(tmp_path / "d"),
        "--clients", str(clients), "--allowlist", str(tmp_path / "none"),
    )  # fmt: skip
    wait_ready(endpoint(port), WAIT, node)
    assert node.wait_stderr("security is off: the allowlist and client permissions", WAIT), (
        node.stderr_text()
    )
