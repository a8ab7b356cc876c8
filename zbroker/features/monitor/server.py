"""The monitor's HTTP server: its own threads (stdlib ``ThreadingHTTPServer``), reading
only the snapshot the loop publishes (:class:`~.feature.MonitorHub`).

Paths: ``/`` the network map page, ``/metrics`` (Prometheus), ``/healthz``, and JSON
under ``/api/``: ``status``, ``links``, ``routes``, ``peers``, ``queues``, ``durables``
(what ``zbroker status|routes|peers --json`` print, from the same replies) and ``graph``
(the map's nodes and edges).

Connections are kept alive between requests (HTTP/1.1), each in a thread of its own: one
silent for :data:`IDLE_TIMEOUT` is closed (a client that connects and says nothing holds a
thread only that long), at most :data:`MAX_CONNECTIONS` are open at once (one more is
answered 503), and :meth:`MonitorServer.close` closes every one still open, so nothing is
served on them once the node has stopped.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any

from .graph import graph
from .metrics import CONTENT_TYPE, MetricsRenderer
from .snapshot import Snapshot

if TYPE_CHECKING:
    from .feature import MonitorHub

__all__ = ["MonitorServer"]

log = logging.getLogger("zbroker.monitor")

#: seconds a connection may stay silent (between requests, or in one) before it is closed
IDLE_TIMEOUT = 30.0
#: seconds close() waits for the connections' threads to end
CLOSE_WAIT = 2.0
#: connections open at once (a thread each); one more is answered 503 and closed
MAX_CONNECTIONS = 64
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _status_part(key: str) -> Callable[[Snapshot], Any]:
    return lambda snap: snap.doc("status").get(key, [])


#: /api/NAME -> the document, from a snapshot
API: dict[str, Callable[[Snapshot], Any]] = {
    "status": lambda snap: snap.doc("status"),
    "links": _status_part("links"),
    "routes": lambda snap: snap.doc("routes"),
    "peers": lambda snap: snap.doc("peers"),
    # the queues feature's section of the status (queue groups and shared durables)
    "queues": _status_part("queues"),
    "durables": _status_part("durables"),
    "graph": graph,
}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(IDLE_TIMEOUT)  # (read here: a test may shorten it)

    def do_HEAD(self) -> None:
        """GET's status and headers, without the body (health checks that ask so)."""
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            code, ctype, body = self._answer(path)
        except Exception:  # a bug: answer 500, keep serving
            log.exception("monitor: error serving %s", path)
            code, ctype, body = _json(500, {"error": "internal error (logged)"})
        try:
            self._send(code, ctype, body)
        except OSError as exc:  # reset, closed, or too slow to read: nothing to answer
            self.close_connection = True
            log.debug(
                "monitor: %s went away before its answer to %s: %r", self.client_address, path, exc
            )

    def _answer(self, path: str) -> tuple[int, str, bytes]:
        hub = self.server.hub
        if path == "/":
            return 200, "text/html; charset=utf-8", self.server.page
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.server.metrics.render()
        if path == "/healthz":
            healthy, why = hub.health()
            return _json(200 if healthy else 503, {"healthy": healthy, "reason": why})
        if path.startswith("/api/") and path[5:] in API:
            snap = hub.current()
            if snap is None:
                return _json(503, {"error": "the node has published no snapshot yet"})
            return _json(200, API[path[5:]](snap))
        return _json(404, {"error": f"no such path {path!r}", "paths": _paths()})

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("monitor: %s " + format, self.address_string(), *args)


def _json(code: int, body: Any) -> tuple[int, str, bytes]:
    return code, "application/json", json.dumps(body).encode()


def _paths() -> list[str]:
    return ["/", "/metrics", "/healthz", *(f"/api/{name}" for name in API)]


class _Server(ThreadingHTTPServer):
    """Keeps its open connections and their threads, so :meth:`close_connections` can
    end them (the stdlib's server forgets daemon threads and never closes a connection
    that is kept alive)."""

    daemon_threads = True
    hub: MonitorHub
    metrics: MetricsRenderer
    page: bytes

    def __init__(self, address: tuple[str, int], handler: type[_Handler]) -> None:
        self._lock = threading.Lock()
        self._open: dict[socket.socket, threading.Thread] = {}
        self._closing = False
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="zbroker-monitor-conn",
            daemon=True,
        )
        with self._lock:
            closing = self._closing
            busy = len(self._open) >= MAX_CONNECTIONS
            if not (closing or busy):
                self._open[request] = thread
        if busy and not closing:
            try:  # (a fresh socket's buffer takes it at once)
                request.sendall(_BUSY)
            except OSError:
                pass
        if closing or busy:  # accepted as close() began, or one too many
            super().shutdown_request(request)
        else:
            thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # the client went away while we read its request
            log.debug("monitor: connection from %s ended: %r", client_address, exc)
        else:
            log.exception("monitor: error on the connection from %s", client_address)

    def close_connections(self, wait: float) -> None:
        """Close every open connection (a thread waiting for the next request on one
        reads its end) and wait up to ``wait`` seconds for their threads."""
        with self._lock:
            self._closing = True
            conns = list(self._open.items())
        for sock, _ in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed meanwhile
                pass
        deadline = time.monotonic() + wait
        for _, thread in conns:
            thread.join(max(0.0, deadline - time.monotonic()))


class _Server6(_Server):
    address_family = socket.AF_INET6


class MonitorServer:
    """Binds at construction (a taken port fails the node's start), serves in a thread
    from :meth:`start` until :meth:`close`."""

    def __init__(self, host: str, port: int, hub: MonitorHub) -> None:
        cls = _Server6 if ":" in host else _Server
        self._server = cls((host, port), _Handler)
        self._server.hub = hub
        self._server.metrics = MetricsRenderer(hub.current)
        self._server.page = resources.files(__package__).joinpath("map.html").read_bytes()
        self._thread: threading.Thread | None = None
        bound_host, bound_port = self._server.server_address[:2]
        shown = str(bound_host if isinstance(bound_host, str) else bound_host.decode())
        shown = f"[{shown}]" if ":" in shown else shown
        self.url = f"http://{shown}:{bound_port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.25,), name="zbroker-monitor", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5.0)
            self._thread = None
        self._server.close_connections(CLOSE_WAIT)
        self._server.server_close()
