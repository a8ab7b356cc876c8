"""The monitor's HTTP connections: a kept-alive connection (a browser's map tab,
Prometheus) does not outlive the node's stop, an idle one is closed after the server's
timeout, and a client that goes away before its answer is not logged as a bug."""

from __future__ import annotations

import http.client
import logging
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import wait_until
from tests.monitor.helpers import FAST_MONITOR, get, monitor_url
from zbroker import Broker
from zbroker.features.monitor import server

BrokerFactory = Callable[..., Broker]
WAIT = 20.0


def _connection(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=WAIT)


def _handlers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("zbroker-monitor-conn")]


def test_a_kept_alive_connection_ends_with_the_node(broker_factory: BrokerFactory) -> None:
    """After stop(), a connection opened before is closed: the stopped node's last
    snapshot is not served on it as if the node were up, and its thread ends."""
    a = broker_factory(monitor=FAST_MONITOR)
    conn = _connection(monitor_url(a))
    conn.request("GET", "/healthz")
    first = conn.getresponse()
    assert first.status == 200 and first.read()
    a.stop()
    answers: list[Any] = []
    for path in ("/metrics", "/api/status"):
        try:
            conn.request("GET", path)
            answers.append(conn.getresponse().status)
        except (OSError, http.client.HTTPException) as exc:  # closed by the server
            answers.append(type(exc).__name__)
        conn.close()
    assert 200 not in answers, answers
    assert wait_until(lambda: not _handlers(), WAIT), _handlers()


def test_an_idle_connection_is_closed_after_the_timeout(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that connects and says nothing (or keeps a connection idle) holds a
    thread only until the timeout."""
    monkeypatch.setattr(server, "IDLE_TIMEOUT", 0.5)
    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT) as silent:
        assert silent.recv(1024) == b""  # closed by the server (not by our timeout)
    assert wait_until(lambda: not _handlers(), WAIT), _handlers()
    assert get(url + "/healthz")[0] == 200


def test_a_client_gone_before_its_answer_is_no_error(
    broker_factory: BrokerFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A scrape that times out or a tab closed mid-request resets the connection before
    the answer is written: said at debug level, no traceback, and the monitor goes on."""
    from zbroker.features.monitor import metrics

    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    rendering, gone = threading.Event(), threading.Event()
    render = metrics.MetricsRenderer.render

    def late(self: metrics.MetricsRenderer) -> bytes:
        rendering.set()
        gone.wait(WAIT)  # the client has reset the connection by now
        return render(self) * 50  # more than a socket buffer: the write meets the reset

    monkeypatch.setattr(metrics.MetricsRenderer, "render", late)
    caplog.set_level(logging.DEBUG, logger="zbroker.monitor")
    sock = socket.create_connection((host, int(port)), timeout=WAIT)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert rendering.wait(WAIT)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, not a goodbye
    gone.set()

    def said() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "zbroker.monitor"]

    # its handler has met the reset: said so (after the fix), or logged an error (before)
    assert wait_until(
        lambda: any("went away" in r.getMessage() or r.levelno >= logging.WARNING for r in said()),
        WAIT,
    ), said()
    assert wait_until(lambda: not _handlers(), WAIT), _handlers()
    errors = [r.getMessage() for r in said() if r.levelno >= logging.WARNING]
    assert errors == [], errors
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setattr(metrics.MetricsRenderer, "render", render)
    assert get(url + "/metrics")[0] == 200


def test_head_answers_as_get_without_the_body(broker_factory: BrokerFactory) -> None:
    """A health check that asks with HEAD (some load balancers and uptime checkers do)
    gets GET's status and headers, no body, on a connection that goes on."""
    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    assert get(url + "/healthz")[0] == 200  # (the node has ticked)
    conn = _connection(url)
    try:
        for path, code in (("/healthz", 200), ("/metrics", 200), ("/api/nothing", 404)):
            conn.request("HEAD", path)
            resp = conn.getresponse()
            assert resp.status == code, (path, resp.status)
            assert int(resp.getheader("Content-Length", "0")) > 0
            assert resp.read() == b""
        conn.request("GET", "/healthz")  # the same connection, after three HEADs
        resp = conn.getresponse()
        assert resp.status == 200 and b"healthy" in resp.read()
    finally:
        conn.close()


def test_connections_over_the_cap_are_turned_away(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each connection holds a thread: past MAX_CONNECTIONS open at once, one more gets
    503 at once (a flood of idle connections does not fill the node's process with
    threads); once they close, requests are served again."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 3, raising=False)
    a = broker_factory(monitor=FAST_MONITOR)
    url = monitor_url(a)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=WAIT) for _ in range(3)]
    try:
        assert wait_until(lambda: len(_handlers()) == 3, WAIT), _handlers()
        try:
            answer: object = get(url + "/healthz")[0]
        except OSError as exc:  # (the 503 may be overtaken by the reset of the close)
            answer = type(exc).__name__
        assert answer != 200, answer
        assert len(_handlers()) == 3
    finally:
        for sock in idle:
            sock.close()
    assert wait_until(lambda: not _handlers(), WAIT), _handlers()
    assert get(url + "/healthz")[0] == 200
